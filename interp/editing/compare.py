"""One edit, before and after: ``interp.rome.compare(model, edit, record)``, ``compare_completions`` and
``lens_before_after``.

Greedy completions of a few prompts and, on the rewrite, paraphrase and neighbourhood prompts, the probabilities
of the new and the true target (length-normalised, as :func:`interp.editing.eval.measure.fact_probs` scores them),
measured with the edit applied and without it; the edit ends in the state it started in. ``.show()`` puts the
completions side by side and the probabilities before / after prompt by prompt.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

from typing import Sequence

from ..core.generation import sample_text
from ..core.results import Result, new_figure, save_fig
from .base import with_and_without
from .eval.measure import fact_probs, lens_rows
from .eval.report import LensBeforeAfter
from .facts import as_fact
from .registry import spec_of_edit

GROUPS = ("rewrite", "paraphrase", "neighborhood")


@dataclass(repr=False)
class EditComparison(Result):
    """``probs[when][group]``: one ``[p_new, p_true]`` per prompt of ``prompts[group]`` (when: before / after)."""

    editor: str
    subject: str
    target_new: str
    target_true: str
    layer: int
    completions: list  # {"prompt", "before", "after"}
    prompts: dict      # group -> list of prompts
    probs: dict        # "before" | "after" -> group -> [[p_new, p_true], ...]

    def to_frame(self):
        """One row per (group, prompt): P(new) and P(true) before and after."""
        import pandas as pd

        rows = []
        for g in GROUPS:
            for i, p in enumerate(self.prompts.get(g, [])):
                b, a = self.probs["before"][g][i], self.probs["after"][g][i]
                rows.append({"group": g, "prompt": p, "p_new_before": b[0], "p_true_before": b[1],
                             "p_new_after": a[0], "p_true_after": a[1]})
        return pd.DataFrame(rows)

    def wins(self, group: str, when: str) -> tuple[int, int]:
        """(prompts where the edit's intent holds, prompts): P(new) > P(true) on rewrite and paraphrases,
        P(true) > P(new) still on the neighbourhood."""
        pairs = self.probs[when].get(group, [])
        good = sum((n > t) if group != "neighborhood" else (t > n) for n, t in pairs)
        return good, len(pairs)

    def summary(self) -> str:
        parts = []
        for g in GROUPS:
            (b, n), (a, _) = self.wins(g, "before"), self.wins(g, "after")
            if n:
                parts.append(f"{g} {b}/{n} -> {a}/{n}")
        return (f"{self.editor} edit of {self.subject!r}: {self.target_true!r} -> {self.target_new!r} at layer "
                f"{self.layer}; prompts where the intent holds, before -> after: " + ", ".join(parts))

    def to_json(self) -> dict:
        return {**super().to_json(), "editor": self.editor, "subject": self.subject, "target_new": self.target_new,
                "target_true": self.target_true, "layer": self.layer, "completions": self.completions}

    def plot(self, *, out=None):
        """P(new) and P(true) on every prompt, before (light) and after (dark) the edit."""
        f = self.to_frame()
        fig = new_figure(figsize=(max(6.0, 0.55 * len(f) + 2), 4.2))
        ax = fig.add_subplot(1, 1, 1)
        x, w = range(len(f)), 0.2
        for j, (col, color, label) in enumerate((
                ("p_new_before", "#f4a582", f"P({self.target_new.strip()}) before"),
                ("p_new_after", "#b2182b", f"P({self.target_new.strip()}) after"),
                ("p_true_before", "#92c5de", f"P({self.target_true.strip()}) before"),
                ("p_true_after", "#2166ac", f"P({self.target_true.strip()}) after"))):
            ax.bar([i + (j - 1.5) * w for i in x], f[col], w, color=color, label=label)
        ax.set_xticks(list(x), [f"{g[:5]} {i}" for i, g in enumerate(f["group"])], rotation=60, fontsize=7)
        ax.set_ylabel("probability (length-normalised)")
        ax.set_title(f"{self.editor} edit at layer {self.layer}: {self.subject}", fontsize=10)
        ax.legend(fontsize=7)
        return save_fig(fig, out)

    def view(self):
        """Interactive view: completions side by side, then P(new) / P(true) before and after per prompt."""
        from .edit_view import edit_view

        return edit_view(self)


def compare_edit(model, edit_obj, record=None, *, paraphrases=(), neighbours=(), target_true: str | None = None,
                 prompts=None, n_tokens: int = 8) -> EditComparison:
    """Measure ``edit_obj`` (one fact's edit: ROME ``Edit`` or ``FTEdit``) with and without it. ``record`` (a fact record or its
    dict) gives the rewrite, paraphrase and neighbourhood prompts and both targets; without one the rewrite prompt
    and targets come from the edit's request (``target_true`` where the request lacks it, as FT-L's does), with
    ``paraphrases`` / ``neighbours`` given here. ``prompts``: what to complete (default: the rewrite prompt, the
    first paraphrase and the first neighbour)."""
    req = edit_obj.request
    if record is not None:
        fact = as_fact(record)
        rewrite, new, true = fact.text, fact.target_new, fact.target_true
        paraphrases, neighbours = list(fact.paraphrase_prompts), list(fact.neighborhood_prompts)
    else:
        rewrite, new = req["prompt"].replace("{}", req["subject"]), req["target"]
        true = target_true or req.get("target_true")
        paraphrases, neighbours = list(paraphrases), list(neighbours)
    if not true:
        raise ValueError("target_true unknown for this edit; pass target_true=' ...' or a record")
    shown = list(prompts) if prompts is not None else [rewrite] + paraphrases[:1] + neighbours[:1]
    probe = types.SimpleNamespace(text=rewrite, paraphrase_prompts=paraphrases, neighborhood_prompts=neighbours,
                                  target_new=new, target_true=true)

    def measure():
        probs = fact_probs(model, probe)
        return ({g: probs[g].tolist() for g in GROUPS}, sample_text(model, shown, n_tokens, greedy=True))

    (after, texts_after), (before, texts_before) = with_and_without(model, edit_obj, measure)
    spec = spec_of_edit(edit_obj)
    editor = spec.title if spec is not None else type(edit_obj).__name__
    return EditComparison(editor=editor, subject=req["subject"], target_new=new, target_true=true,
                          layer=int(edit_obj.layer),
                          completions=[{"prompt": p, "before": b, "after": a}
                                       for p, b, a in zip(shown, texts_before, texts_after)],
                          prompts={"rewrite": [rewrite], "paraphrase": paraphrases, "neighborhood": neighbours},
                          probs={"before": before, "after": after})


def compare_completions(model, edit_obj, prompts: Sequence[str], *, n_tokens: int = 8):
    """DataFrame: greedy completions of ``prompts`` with the edit applied and without it (any edit with
    ``apply(model)`` and ``revert()``). The edit ends in the state it started in (applied or not)."""
    import pandas as pd

    after, before = with_and_without(model, edit_obj,
                                     lambda: sample_text(model, list(prompts), n_tokens, greedy=True))
    return pd.DataFrame({"prompt": list(prompts), "before": before, "after": after})


def lens_before_after(model, edit_obj, text: str | None = None, target_true: str | None = None) -> LensBeforeAfter:
    """Logit lens of ``text`` (default: the edited prompt) with and without ``edit_obj`` (one fact's edit);
    the edit ends in the state it started in."""
    req = edit_obj.request
    text = text or req["prompt"].replace("{}", req["subject"])
    true = target_true or req.get("target_true")
    if not true:
        raise ValueError("target_true unknown for this edit; pass target_true=' ...'")
    fact = types.SimpleNamespace(text=text, target_new=req["target"], target_true=true)
    after, before = with_and_without(model, edit_obj, lambda: lens_rows(model, fact))
    return LensBeforeAfter(text=text, target_new=req["target"], target_true=true, layer=edit_obj.layer,
                           curves={"before": before["_curves"], "after": after["_curves"]},
                           rows={"before": before["lens_new_row"], "after": after["lens_new_row"]})
