"""Layer 2, weight editing: the edit protocol (apply / revert bit for bit / save / load), ROME, MEMIT (many facts
over several layers), FT-L, the before/after evaluation (eval_measure: the measurements; eval_report: the result
and the failure diagnosis), one edit before and after (compare, with its view in edit_view), many edits in a row or at once (scale:
retention, drift, collapse) and the fact records.
Imports core and analyses; ``interp.rome`` and ``interp.memit`` are its public faces.
"""
