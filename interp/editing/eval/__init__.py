"""The evaluation of edits: before and after, one edit or a batch at a time (:mod:`run`: ``evaluate``), its
measurements (:mod:`measure`), its result and failure diagnosis (:mod:`report`), and edits piled one after another
or many at once (:mod:`scale`: ``sequential_edits``). Editors are looked up by name in
:mod:`interp.editing.registry`; nothing here knows one editor from another.
"""
