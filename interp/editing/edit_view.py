"""The interactive view of :class:`interp.editing.compare.EditComparison`."""

from __future__ import annotations

from pathlib import Path

from ..core.views import View, rounded

SCRIPT = Path(__file__).with_name("edit_view.js")  # draws the view kind "edit"


def edit_view(res) -> View:
    groups = {g: [{"prompt": p, "before": rounded(res.probs["before"][g][i], 5),
                   "after": rounded(res.probs["after"][g][i], 5)} for i, p in enumerate(ps)]
              for g, ps in res.prompts.items()}
    data = {"title": f"{res.editor} edit: {res.subject}", "summary": res.summary(), "subject": res.subject,
            "target_new": res.target_new, "target_true": res.target_true, "layer": res.layer,
            "completions": res.completions, "groups": groups,
            "wins": {g: {w: list(res.wins(g, w)) for w in ("before", "after")} for g in res.prompts}}
    return View("edit", data["title"], data, script=SCRIPT)
