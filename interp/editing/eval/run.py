"""Evaluate fact edits before and after (CounterFact metrics of the ROME paper) — ROME, FT-L, MEMIT.

    res = interp.rome.evaluate(model, interp.rome.load_records(split="dev")[:10], editor="rome", baseline="ft")
    interp.rome.evaluate(model, records, "rome", EvalSettings(generation=False), hparams={"kl_factor": 0.1})
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
  P(true) > P(new) still (acc: target_true stays top-1); magnitude P(true) - P(new); ``neighborhood_unedited``
  the same over the neighbourhood prompts whose subject the record's batch does not edit (one record a batch:
  every prompt; NaN when the batch edits every neighbour);
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
(:func:`interp.editing.matrices.row_matrices`), and the loss drift with each batch's matrices written in turn.
The numbers are those of measuring each batch with its edits applied, up to float rounding (the rows share
other layers' products); measured one by one, an edited model's sampling cost as much as the edit. A callable
editor (which may write any weight) or a model split over devices is measured with its edits applied instead.
With one record a batch, the edits of a chunk are optimised together where the editor can (its ``together``
entry point, :mod:`interp.editing.registry`: each its own update, Adam and stop; a step of one edit's few short
rows reads every weight for little arithmetic), then applied one at a time.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ...core.progress import bar
from ..base import DIAGNOSTICS
from ..defaults import default_layer
from ..drift import DriftStart, drift_set, drift_start, drift_texts, text_nll
from ..facts import Fact, as_fact
from ..hparams import Settings, check_count
from ..matrices import written_matrices
from ..memit_solve import subject_rounds
from ..registry import Editor, bind, check_editor
from .measure import measure
from .report import EvalResult, diagnose

BEFORE_CHUNK = 16  # records measured unedited in one batch (one decode of all their generation prompts)
# The showcase's before/after prompts: the rewritten prompt, a paraphrase, a neighbouring landmark (in Paris).
DEMO_PROMPTS = ("The Eiffel Tower is located in the city of",
                "Where is the Eiffel Tower? It stands in the city of",
                "The Louvre is located in the city of")


@dataclass(frozen=True)
class EvalSettings(Settings):
    """What an evaluation measures and how it batches (:func:`evaluate`).

    seed: the editors' context templates, and record ``i``'s generation samples (seeded ``seed + first_index + i``).
    batch_size: records edited together (one edit of the batch when the editor makes one of many, as MEMIT; the
        others one after another) and scored with the whole batch applied; 1 edits and scores one at a time.
    first_index: where ``records[0]`` stands in a larger run split into shards, so that shards run apart give the
        per-record numbers of one run (up to float rounding: the unedited measurements batch other neighbours).
    generation / drift / lens: the slower measurements (off: their columns are NaN); gen_tokens per sample,
    drift_docs Wikipedia summaries for the loss drift. progress: a progress bar (not recorded)."""
    seed: int = 0
    batch_size: int = 1
    first_index: int = 0
    generation: bool = True
    gen_tokens: int = 40
    drift: bool = True
    drift_docs: int = 16
    lens: bool = True
    progress: bool = True

    KIND = "evaluation"
    UNRECORDED = ("progress",)

    def check(self) -> None:
        check_count(self, "batch_size", "gen_tokens", "drift_docs")
        check_count(self, "first_index", minimum=0)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed={self.seed!r}; allowed: an integer")


def settings_with(cls, settings, options: dict):
    """``settings`` (an instance of ``cls`` or None: the defaults) with keyword ``options`` on top."""
    if settings is None:
        return cls.make(**options)
    if not isinstance(settings, cls):
        raise ValueError(f"settings={settings!r}; allowed: None or a {cls.__name__}")
    return settings.replace(**options) if options else settings


def as_facts(records) -> list[Fact]:
    facts = [as_fact(r, where=f"record {i}") for i, r in enumerate(records)]
    if not facts:
        raise ValueError("no records to evaluate; pass a non-empty list (see interp.rome.load_records)")
    return facts


# ============================================================================================ editing a batch
def edit_diagnostics(handle, index: int | None = None) -> dict:
    """The diagnostics an applied edit reports (:meth:`interp.editing.base.WeightEdit.diagnostics`); NaN for an edit
    that reports none (a callable editor's may not)."""
    report = getattr(handle, "diagnostics", None)
    return report(index) if callable(report) else dict.fromkeys(DIAGNOSTICS, float("nan"))


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
def evaluate(model, records, editor="rome", settings: EvalSettings | None = None, *, baseline=None, layer=None,
             stats=None, hparams: dict | None = None, baseline_hparams: dict | None = None, **options) -> EvalResult:
    """Measure each batch of records before the edit, edit, measure after, revert (see the module docstring).

    editor: a registered editor's name ("rome", "ft" for FT-L, "memit") or ``fn(model, record) -> edit``
        (anything with ``.revert()``). settings: an :class:`EvalSettings`; ``options`` are its fields as keywords
        (``batch_size=100``, ``generation=False``), on top of ``settings``.
    baseline: optionally a second editor evaluated on the same records (shares the "before" measurements);
        its result is ``result.baseline``. hparams / baseline_hparams: keyword overrides of each editor's
        hyperparameters (``layers`` among them names the layers to write, as ``layer`` does). layer: the edit layer
        (MEMIT: a list, or the last layer of its range). stats: the editor's key statistics (ROME: for ``layer``;
        MEMIT: ``{layer: stats}``).
    """
    t_start = time.perf_counter()
    s = settings_with(EvalSettings, settings, options)
    facts = as_facts(records)
    for e in (editor, baseline):
        if e is not None:
            check_editor(e)
    runs = [bind(model, editor, layer=layer, seed=s.seed, stats=stats, hparams=hparams)]
    if baseline is not None:
        runs.append(bind(model, baseline, layer=layer, seed=s.seed, hparams=baseline_hparams))
    rows, curves = _run(model, facts, runs, s)
    import pandas as pd

    recorded = {**s.to_dict(), "n_records": len(facts)}
    results = []
    for r, ed in enumerate(runs):
        frame = pd.DataFrame(rows[r]).set_index("case_id")
        frame["failure"] = diagnose(frame)
        layers = ed.layers or [default_layer(model) if layer is None else model.check_layer(layer)]
        results.append(EvalResult(frame=frame, editor=ed.name, layer=max(layers), hparams=ed.hparams,
                                  settings=recorded, seconds=time.perf_counter() - t_start, lens_curves=curves[r],
                                  layers=list(layers)))
    if len(results) > 1:
        results[0].baseline = results[1]
    return results[0]


def _run(model, facts: list, runs: list[Editor], s: EvalSettings) -> tuple[list, list]:
    """Every chunk of records: measured unedited, edited by each editor batch by batch, measured edited. Per
    editor, its rows and lens curves."""
    texts = drift_set(model, drift_texts(s.drift_docs)) if s.drift else None
    loss_pre = text_nll(model, texts) if s.drift else float("nan")
    opts = {"generation": s.generation, "gen_tokens": s.gen_tokens, "lens": s.lens}
    rows: list[list[dict]] = [[] for _ in runs]
    curves: list[dict] = [{} for _ in runs]
    progress_bar = bar(total=len(facts) * len(runs), desc="evaluate edits", enabled=s.progress, unit="edit")
    chunk = s.batch_size * max(1, BEFORE_CHUNK // s.batch_size)
    # Kept and measured together (see _measure_kept) unless an editor writes unknown weights (a callable) or the
    # model is split over devices; then each batch is measured while its edits are applied.
    kept = len(model.devices) == 1 and all(ed.layers for ed in runs)
    start = None  # the drift texts' forwards up to the lowest written layer, recorded once (kept only)
    for c0 in range(0, len(facts), chunk):
        group = facts[c0:c0 + chunk]
        seeds = [s.seed + s.first_index + c0 + j for j in range(len(group))]
        parts = {b: batch_prompts(group[b:b + s.batch_size]) for b in range(0, len(group), s.batch_size)}
        edited = [parts[j - j % s.batch_size] for j in range(len(group))]  # each record's batch's rewrite prompts
        befores = None if kept else measure(model, group, seeds, edited=edited, **opts)  # kept: in _measure_kept
        made: list[tuple[int, EditedBatch]] = []
        # independent edits (one record a batch) that an editor can make at once are made so first
        ready = [made_together(ed, group) if kept and s.batch_size == 1 else None for ed in runs]
        for b0 in range(0, len(group), s.batch_size):
            part = slice(b0, b0 + s.batch_size)
            for r, ed in enumerate(runs):
                now = None if ready[r] is None else [functools.partial(e.apply, model) for e in ready[r][part]]
                made.append((r, _edit_batch(model, ed, group[part], None if kept else befores[part], seeds[part],
                                            texts, loss_pre, opts, keep=kept, ready=now, offset=b0)))
                progress_bar.update(len(group[part]))
        if kept:
            if texts is not None and start is None:  # the layers below every written one are the unedited model's
                start = drift_start(model, texts, min(l for ed in runs for l in ed.layers))
            _measure_kept(model, group, seeds, edited, [b for _, b in made], texts, loss_pre, opts, start)
        for r, b in made:
            rows[r] += b.rows
            curves[r].update(b.curves)
    progress_bar.close()
    return rows, curves


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
            after = measure(model, [batch[j] for j in ok], [seeds[j] for j in ok],
                            edited=[batch_prompts(batch)] * len(ok), **opts)
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


def batch_prompts(batch) -> frozenset:
    """The rewrite prompts of a batch of records: a neighbourhood prompt among them names a subject the batch
    edits (see :func:`interp.editing.eval.measure.fact_groups`)."""
    return frozenset(f.text for f in batch)


def _measure_kept(model, group, seeds, edited, batches: Sequence[EditedBatch], texts, loss_pre, opts,
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
                   variants=[unedited] * len(group) + [b.matrices for b in todo for _ in b.ok],
                   edited=list(edited) + [batch_prompts(b.facts) for b in todo for _ in b.ok], **opts)
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
