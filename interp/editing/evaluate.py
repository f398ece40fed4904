"""Evaluate fact edits before and after (CounterFact metrics of the ROME paper) — ROME, FT-L, MEMIT.

    res = interp.rome.evaluate(model, interp.rome.load_records(split="dev")[:10], editor="rome", baseline="ft")
    res.aggregates()      # mean and 95% CI of every metric
    res.to_frame()        # one row per record
    res.plot(out="scores.png")
    interp.rome.evaluate(model, records, editor="memit", batch_size=100)   # mass editing

Per batch of ``batch_size`` records (default 1): measure the unedited model, edit (MEMIT: the batch in one call, or
one call per round of distinct subjects when a subject has several facts, :func:`~.memit_solve.subject_rounds`;
ROME / FT-L: one edit after another, each on top of the previous), measure every record of the batch with the
whole batch applied, revert (in reverse order), and check every written weight bit for bit against its state
before the batch. Scores (paper definitions, each prompt scored by the length-normalized probability
``P = exp(-mean per-token NLL)`` of the target continuation), each in two forms: ``*_score``, the paper's success
form, and ``*_acc``, the strict form (the wanted target's first token is the top-1 next token):

- efficacy: P(target_new) > P(target_true) on the rewrite prompt (acc: target_new is top-1); magnitude
  P(new) - P(true);
- paraphrase: the same, averaged over the paraphrase prompts; ``paraphrase_other`` the same over the record's
  second paraphrase set (``paraphrase_prompts_other``, other forms; NaN when the record has none);
- neighborhood: share of neighbourhood prompts (other subjects whose answer is target_true) where
  P(true) > P(new) still (acc: target_true stays top-1); magnitude P(true) - P(new);
- generation entropy: weighted n-gram entropy (n = 2, 3; weights 2/3, 4/3) of seeded top-5 samples continuing
  the generation prompts — the same samples (seed) before and after, so the drop is paired;
- loss drift: mean next-token NLL on a fixed set of Wikipedia summaries, after vs before, in percent (with a
  batch applied, the batch's drift, on each of its rows);
- logit lens of the rewrite prompt before and after: first layer from which target_new stays the top-1 token.

A record whose efficacy (success form) is false after its edit gets a ``failure`` reason
(:func:`interp.editing.eval_report.diagnose`: "clamp bound", "v* not converged", "key mismatch", "small key",
"edit did not transfer"). Aggregates are means over records with a 95% CI: mean +- 1.96 standard errors, kept
within [0, 100] for scores (Wilson's interval where every record's outcome is 0 or 100;
:func:`interp.editing.eval_report.mean_ci`).
The measurements (:mod:`interp.editing.eval_measure`) run many records per forward, :data:`BEFORE_CHUNK`
records a chunk. Each batch's edits are made, the written matrices kept, the edits reverted (and checked bit
for bit); then the chunk's records unedited and every kept batch of the chunk, for the editor and the
baseline, are measured together, each prompt, sample and lens row under its own batch's matrices
(:func:`interp.core.variants.row_matrices`), and the loss drift with each batch's matrices written in turn.
The numbers are those of measuring each batch with its edits applied, up to float rounding (the rows share
other layers' products); measured one by one, an edited model's sampling cost as much as the edit. A callable
editor (which may write any weight) or a model split over devices is measured with its edits applied instead.
With one record a batch, the edits of a chunk are optimised together, each as it would be alone (FT-L:
:func:`interp.editing.ft.ft_edits`, ROME: :func:`interp.editing.rome.edits_together`; each its own update,
Adam and stop: a step of one edit's few short rows reads every weight for little arithmetic), then applied
one at a time.
"""

from __future__ import annotations

import functools
import math
import time
import types
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..core.generation import sample_text
from ..core.progress import bar
from ..core.variants import written_matrices
from .eval_measure import (DriftStart, drift_set, drift_start, drift_texts, fact_probs, fact_scores,
                           generation_entropies, generation_entropy, lens_rows, measure, measure_probs, ngram_entropy,
                           score_prompts, target_nll, text_nll)
from .eval_report import SCORES, EvalResult, LensBeforeAfter, diagnose
from .facts import Fact, as_fact
from .ft import ft_edit, ft_edits, ft_hparams
from .memit import default_layers, memit_edit
from .memit import hparams_for as memit_hparams_for
from .memit_solve import subject_rounds
from .rome import default_layer, edit, edits_together, hparams_for, key_stats

__all__ = ["DEMO_PROMPTS", "EDITORS", "EvalResult", "LensBeforeAfter", "SCORES", "compare_completions", "diagnose",
           "drift_set", "drift_texts", "evaluate", "fact_probs", "fact_scores", "ft_edit", "generation_entropies",
           "generation_entropy", "lens_before_after", "lens_rows", "measure", "measure_probs", "ngram_entropy",
           "score_prompts", "target_nll", "text_nll", "with_and_without"]

EDITORS = ("rome", "ft", "memit")
BEFORE_CHUNK = 16  # records measured unedited in one batch (one decode of all their generation prompts)
# The showcase's before/after prompts: the rewritten prompt, a paraphrase, a neighbouring landmark (in Paris).
DEMO_PROMPTS = ("The Eiffel Tower is located in the city of",
                "Where is the Eiffel Tower? It stands in the city of",
                "The Louvre is located in the city of")


# ============================================================================================ editors
@dataclass
class Editor:
    """How an evaluation edits: ``one(fact)`` applies one edit (ROME, FT-L, a callable; a batch is edited one
    after another) or ``many(facts)`` one edit of the whole batch (MEMIT). ``layers``: the down projections it
    writes (checked bit for bit after each batch's revert; None: not known, not checked). ``together(facts)``:
    the same edits as ``one`` would make each on the unedited model, made at once and not applied (FT-L)."""
    name: str
    layers: list | None
    hparams: dict
    one: Callable | None = None
    many: Callable | None = None
    together: Callable | None = None


def make_editor(model, editor, layer: int, seed: int = 0, stats=None, hparams: dict | None = None) -> Editor:
    """An :class:`Editor` for "rome", "ft", "memit" or ``fn(model, record) -> applied edit`` (with ``.revert()``).
    ``hparams`` override the editor's defaults; MEMIT's ``layers`` may be among them."""
    hp = dict(hparams or {})
    if callable(editor):
        return Editor(getattr(editor, "__name__", "custom"), None, hp, one=lambda fact: editor(model, fact))
    if editor == "rome":
        full = hparams_for(model, **hp)
        if stats is None:
            stats = key_stats(model, layer, full.mom2_n_tokens, progress=False)
        return Editor("rome", [layer], full.to_dict(),
                      one=lambda fact: edit(model, fact.prompt, fact.subject, fact.target_new, layer, seed=seed,
                                            stats=stats, **hp),
                      together=lambda facts: edits_together(model, [(f.prompt, f.subject, f.target_new) for f in facts],
                                                            layer, seed=seed, stats=stats, **hp))
    if editor == "ft":
        return Editor("ft", [layer], ft_hparams(hp),
                      one=lambda fact: ft_edit(model, fact.prompt, fact.subject, fact.target_new, layer, seed=seed,
                                               **hp),
                      together=lambda facts: ft_edits(model, [(f.prompt, f.subject, f.target_new) for f in facts],
                                                      layer, seed=seed, **hp))
    if editor == "memit":
        layers = hp.pop("layers", None)
        layers = default_layers(model) if layers is None else [model.check_layer(l) for l in layers]
        full = memit_hparams_for(model, **hp)
        return Editor("memit", list(layers), full.to_dict(),
                      many=lambda facts: memit_edit(model, list(facts), layers, seed=seed, stats=stats, **hp))
    raise ValueError(f"editor {editor!r} not known; allowed: {', '.join(repr(e) for e in EDITORS)} or a "
                     "callable(model, record) -> edit")


def edit_diagnostics(handle, index: int | None = None) -> dict:
    """What the failure diagnosis reads from an applied edit (see :mod:`interp.editing.eval_report`): the
    optimisation's final target probability ``opt_p_final``, the optimised change and its bound (``delta_norm``,
    ``clamp``), the key (``key_norm``, ROME's ``key_dot``, ``key_match``), ``relative_update`` and ROME's guard
    ``loss_rise``. ``index``: the
    fact's position in a MEMIT batch. Keys an editor does not report are NaN."""
    nan = float("nan")
    norms = getattr(handle, "norms", None) or {}
    out = dict.fromkeys(("opt_p_final", "delta_norm", "clamp", "key_norm", "key_dot", "key_match"), nan)
    out["relative_update"] = norms.get("relative_update", nan)
    out["loss_rise"] = norms.get("loss_rise", nan)  # ROME's edit guard, when it was on
    info = getattr(handle, "facts_info", None)
    if info and index is not None and index < len(info):  # MEMIT: per fact
        f = info[index]
        last = str(getattr(handle, "layers", [None])[-1])
        out.update(opt_p_final=math.exp(-f["nll_final"]), delta_norm=f.get("delta_norm", nan),
                   clamp=f.get("clamp", nan), key_norm=(f.get("key_norms") or {}).get(last, nan),
                   key_match=f.get("key_match", nan))
        rel = [v.get("relative_update", nan) for v in (norms.get("layers") or {}).values()]
        out["relative_update"] = max(rel) if rel else nan
    elif "nll_final" in norms:  # ROME
        out.update(opt_p_final=math.exp(-norms["nll_final"]), delta_norm=norms.get("delta", nan),
                   clamp=norms.get("clamp", nan), key_norm=norms.get("key", nan), key_dot=norms.get("key_dot", nan),
                   key_match=norms.get("key_match", nan))
    elif "norm_constraint" in (getattr(handle, "hparams", None) or {}) and getattr(handle, "losses", None):  # FT-L
        out.update(opt_p_final=math.exp(-handle.losses[-1]), delta_norm=norms.get("max_abs", nan),
                   clamp=handle.hparams["norm_constraint"])
    return out


def apply_edits(ed: Editor, facts: Sequence[Fact], handles: list, ready: Sequence | None = None) -> list[dict]:
    """Edit ``facts`` (appending every applied edit to ``handles``, so the caller can revert them whatever
    happens); per fact ``{"error": None | text, "edit_seconds", diagnostics...}``. ``ready``: per fact, a call
    that applies its edit made already (``Editor.together``); its time is then its share of the making."""
    if ed.many is not None:  # one edit per round of distinct subjects (usually a single round)
        t0 = time.perf_counter()
        where = {}
        try:
            for group in subject_rounds(facts):
                h = ed.many([facts[i] for i in group])
                handles.append(h)
                where.update({i: (h, j) for j, i in enumerate(group)})
        except (ValueError, FloatingPointError) as e:
            return [{"error": f"{type(e).__name__}: {e}"} for _ in facts]
        dt = (time.perf_counter() - t0) / len(facts)
        return [{"error": None, "edit_seconds": dt, **edit_diagnostics(*where[i])} for i in range(len(facts))]
    out = []
    for i, fact in enumerate(facts):
        t0 = time.perf_counter()
        try:
            h = ed.one(fact) if ready is None else ready[i]()
        except (ValueError, FloatingPointError) as e:
            out.append({"error": f"{type(e).__name__}: {e}"})
            continue
        handles.append(h)
        spent = time.perf_counter() - t0 + (h.timings.get("batch_share_s", 0.0) if ready is not None else 0.0)
        out.append({"error": None, "edit_seconds": spent, **edit_diagnostics(h)})
    return out


def made_together(ed: Editor, facts: Sequence[Fact]) -> list | None:
    """``ed.together(facts)`` (unapplied edits, one per fact), or None when the editor has no such path or the
    batch fails as a whole (then each fact is edited on its own and gets its own error)."""
    if ed.together is None:
        return None
    try:
        return list(ed.together(list(facts)))
    except (ValueError, FloatingPointError):
        return None


# ============================================================================================ evaluation
def evaluate(model, records, editor="rome", *, layer: int | None = None, seed: int = 0, stats=None,
             hparams: dict | None = None, baseline=None, baseline_hparams: dict | None = None,
             generation: bool = True, gen_tokens: int = 40, drift: bool = True, drift_docs: int = 16,
             lens: bool = True, progress: bool = True, batch_size: int = 1, first_index: int = 0) -> EvalResult:
    """Measure each batch of records before the edit, edit, measure after, revert (see the module docstring).

    editor: "rome", "ft" (FT-L), "memit" or ``fn(model, record) -> edit`` (anything with ``.revert()``).
    batch_size: records edited together (MEMIT in one call; the others one after another) and scored with the
        whole batch applied; 1 (default) edits and scores one record at a time.
    baseline: optionally a second editor evaluated on the same records (shares the "before" measurements);
        its result is ``result.baseline``. hparams / baseline_hparams: keyword overrides for the editors (MEMIT:
        ``layers`` too). stats: ROME's key statistics for ``layer`` or MEMIT's ``{layer: stats}``.
    generation / drift / lens: switch off the slower measurements (their columns are then NaN).
    first_index: where ``records[0]`` stands in a larger run split into shards: record ``i``'s generation samples
        are seeded ``seed + first_index + i``, so shards run apart give the per-record numbers of one run (up to
        float rounding: the unedited measurements batch other neighbours).
    """
    t_start = time.perf_counter()
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r}; allowed: an integer >= 1 (records edited together)")
    if isinstance(first_index, bool) or not isinstance(first_index, int) or first_index < 0:
        raise ValueError(f"first_index={first_index!r}; allowed: an integer >= 0 (records[0]'s index in the run)")
    facts = [as_fact(r, where=f"record {i}") for i, r in enumerate(records)]
    if not facts:
        raise ValueError("no records to evaluate; pass a non-empty list (see interp.rome.load_records)")
    for e in (editor, baseline):
        if e is not None and not callable(e) and e not in EDITORS:
            raise ValueError(f"editor {e!r} not known; allowed: {', '.join(repr(x) for x in EDITORS)} or a "
                             "callable(model, record) -> edit")
    layer = default_layer(model) if layer is None else model.check_layer(layer)
    runs = [make_editor(model, editor, layer, seed, stats, hparams)]
    if baseline is not None:
        runs.append(make_editor(model, baseline, layer, seed, None, baseline_hparams))
    texts = drift_set(model, drift_texts(drift_docs)) if drift else None
    loss_pre = text_nll(model, texts) if drift else float("nan")
    opts = {"generation": generation, "gen_tokens": gen_tokens, "lens": lens}
    rows: list[list[dict]] = [[] for _ in runs]
    curves: list[dict] = [{} for _ in runs]
    progress_bar = bar(total=len(facts) * len(runs), desc="evaluate edits", enabled=progress, unit="edit")
    chunk = batch_size * max(1, BEFORE_CHUNK // batch_size)
    # Kept and measured together (see _measure_kept) unless an editor writes unknown weights (a callable) or the
    # model is split over devices; then each batch is measured while its edits are applied.
    kept = len(model.devices) == 1 and all(ed.layers for ed in runs)
    start = None  # the drift texts' forwards up to the lowest written layer, recorded once (kept only)
    for c0 in range(0, len(facts), chunk):
        group = facts[c0:c0 + chunk]
        seeds = [seed + first_index + c0 + j for j in range(len(group))]
        befores = None if kept else measure(model, group, seeds, **opts)  # kept: with the edited (_measure_kept)
        made: list[tuple[int, EditedBatch]] = []
        # independent edits (one record a batch) that an editor can make at once (FT-L) are made so first
        ready = [made_together(ed, group) if kept and batch_size == 1 else None for ed in runs]
        for b0 in range(0, len(group), batch_size):
            part = slice(b0, b0 + batch_size)
            for r, ed in enumerate(runs):
                now = None if ready[r] is None else [functools.partial(e.apply, model) for e in ready[r][part]]
                made.append((r, _edit_batch(model, ed, group[part], None if kept else befores[part], seeds[part],
                                            texts, loss_pre, opts, keep=kept, ready=now, offset=b0)))
                progress_bar.update(len(group[part]))
        if kept:
            if texts is not None and start is None:  # the layers below every written one are the unedited model's
                start = drift_start(model, texts, min(l for ed in runs for l in ed.layers))
            _measure_kept(model, group, seeds, [b for _, b in made], texts, loss_pre, opts, start)
        for r, b in made:
            rows[r] += b.rows
            curves[r].update(b.curves)
    progress_bar.close()
    import pandas as pd

    settings = {"seed": seed, "generation": generation, "gen_tokens": gen_tokens, "drift": drift,
                "drift_docs": drift_docs, "lens": lens, "n_records": len(facts), "batch_size": batch_size,
                "first_index": first_index}
    results = []
    for r, ed in enumerate(runs):
        frame = pd.DataFrame(rows[r]).set_index("case_id")
        frame["failure"] = diagnose(frame)
        layers = ed.layers or [layer]
        results.append(EvalResult(frame=frame, editor=ed.name, layer=max(layers), hparams=ed.hparams,
                                  settings=settings, seconds=time.perf_counter() - t_start, lens_curves=curves[r],
                                  layers=list(layers)))
    if len(results) > 1:
        results[0].baseline = results[1]
    return results[0]


@dataclass
class EditedBatch:
    """One editor's batch: its rows (filled in once measured), the indices of the edits that were made and, when
    kept, the down projections as they were with the whole batch applied (``{layer: matrix}``). ``offset``: where
    the batch starts in its chunk."""
    facts: list
    seeds: list
    rows: list
    ok: list
    offset: int
    matrices: dict | None = None
    pre: list | None = None
    curves: dict = field(default_factory=dict)

    def fill_pre(self, pre: list[dict]) -> None:
        """Write the unedited measurements of the batch's records into their rows."""
        self.pre = list(pre)
        for row, before in zip(self.rows, pre):
            row.update({f"{k}_pre": v for k, v in before.items() if not k.startswith("_")})

    def fill(self, after: list[dict], loss_post: float, loss_pre: float, lens: bool) -> None:
        """Write the after-edit measurements of the edits made into their rows."""
        for j, a in zip(self.ok, after):
            row = self.rows[j]
            row.update({f"{k}_post": v for k, v in a.items() if not k.startswith("_")})
            row["loss_post"] = loss_post
            row["loss_drift"] = 100 * (loss_post - loss_pre) / loss_pre
            if lens:
                self.curves[self.facts[j].case_id] = {"before": self.pre[j]["_curves"], "after": a["_curves"]}


def _edit_batch(model, ed: Editor, batch, pre, seeds, texts, loss_pre, opts, *, keep: bool,
                ready: Sequence | None = None, offset: int = 0) -> EditedBatch:
    """Edit one batch, then keep the edited matrices (``keep``) or measure it as it is, revert, and check every
    written weight bit for bit against its state before. ``pre``: the batch's unedited measurements (None when
    kept: they are measured with the edited ones)."""
    rows = [{"case_id": fact.case_id, "relation": fact.relation, "subject": fact.subject,
             "target_true": fact.target_true, "target_new": fact.target_new, "error": None, "loss_pre": loss_pre}
            for fact in batch]
    saved = {l: model.mlp_out_matrix(l).detach().cpu().clone() for l in ed.layers or []}
    handles: list = []
    after, loss_post, matrices = None, float("nan"), None
    try:
        outcomes = apply_edits(ed, batch, handles, ready)
        ok = [j for j, o in enumerate(outcomes) if o["error"] is None]
        if ok and keep:
            matrices = {l: model.mlp_out_matrix(l).detach().cpu().clone() for l in ed.layers}
        elif ok:
            after = measure(model, [batch[j] for j in ok], [seeds[j] for j in ok], **opts)
            loss_post = text_nll(model, texts) if texts is not None else float("nan")
    finally:
        for h in reversed(handles):
            h.revert()
    changed = [l for l, w in saved.items() if not torch.equal(w, model.mlp_out_matrix(l).detach().cpu())]
    if changed:
        raise RuntimeError(f"revert did not restore layer(s) {changed}' weights bit for bit (cases "
                           f"{[f.case_id for f in batch]})")
    for j, o in enumerate(outcomes):
        rows[j].update(o)
    out = EditedBatch(list(batch), list(seeds), rows, ok, offset, matrices)
    if pre is not None:
        out.fill_pre(pre)
    if after is not None:
        out.fill(after, loss_post, loss_pre, opts["lens"])
    return out


def _measure_kept(model, group, seeds, batches: Sequence[EditedBatch], texts, loss_pre, opts,
                  start: DriftStart | None = None) -> None:
    """Measure a chunk's records unedited and every kept batch after its edits, all in one go: probabilities,
    generation samples and lens rows of every record batched, each row under its own batch's matrices (the
    unedited ones under the model's own; an edited model's decode step reads all weights for 3 rows as for 100:
    measured one by one, sampling cost as much as the edit); the drift with each batch's matrices written in
    turn (the same computation as with its edits applied; with ``start``, from the lowest written layer on)."""
    todo = [b for b in batches if b.ok]
    unedited: dict = {}
    facts = list(group) + [b.facts[j] for b in todo for j in b.ok]
    both = measure(model, facts, list(seeds) + [b.seeds[j] for b in todo for j in b.ok],
                   variants=[unedited] * len(group) + [b.matrices for b in todo for _ in b.ok], **opts)
    befores, afters = both[:len(group)], both[len(group):]
    for b in batches:
        b.fill_pre(befores[b.offset: b.offset + len(b.facts)])
    k = 0
    for b in todo:
        loss_post = float("nan")
        if texts is not None:
            with written_matrices(model, b.matrices):
                loss_post = text_nll(model, texts, start=start)
        b.fill(afters[k:k + len(b.ok)], loss_post, loss_pre, opts["lens"])
        k += len(b.ok)


# ============================================================================================ before / after
def with_and_without(model, edit_obj, measure: Callable):
    """``(measure() with the edit applied, measure() without it)``; the edit ends in the state it started in
    (applied to ``model`` or not). Works with any edit that has ``apply(model)`` and ``revert()``."""
    was_applied = getattr(edit_obj, "applied_model", None) is model
    with model.edited(edit_obj):
        after = measure()
    try:
        before = measure()
    finally:
        if was_applied:
            edit_obj.apply(model)
    return after, before


def compare_completions(model, edit_obj, prompts: Sequence[str], *, n_tokens: int = 8):
    """DataFrame: greedy completions of ``prompts`` with the edit applied and without it (a ROME ``Edit``, an
    FT-L ``FTEdit`` or a ``MemitEdit``). The edit ends in the state it started in (applied or not)."""
    import pandas as pd

    after, before = with_and_without(model, edit_obj,
                                     lambda: sample_text(model, list(prompts), n_tokens, greedy=True))
    return pd.DataFrame({"prompt": list(prompts), "before": before, "after": after})


def lens_before_after(model, edit_obj, text: str | None = None, target_true: str | None = None) -> LensBeforeAfter:
    """Logit lens of ``text`` (default: the edited prompt) with and without ``edit_obj`` (ROME or FT-L);
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
