"""Editing at scale: one edit after another (sequential editing) and many facts at once (mass editing).

    seq = sequential_edits(model, records[:100], "rome", checkpoints=(1, 10, 50, 100))
    seq = sequential_edits(model, records[:100], "rome", ScaleSettings(probe_every=10, generation=False))
    seq.to_frame()          # one row per step: facts edited so far, retention, loss drift, generation entropy
    seq.checkpoint_frame()  # every fact edited so far scored in full (both forms, 95% CI) at each checkpoint
    seq.collapse            # the first step that crossed a threshold (and the edit it applied), or None
    mass = sequential_edits(model, records[:100], "memit", batch_size=100)   # one batch of 100: mass editing

A step applies one edit (ROME, FT-L: ``batch_size`` 1) or one batch (MEMIT: ``batch_size`` facts in one edit) on
top of every earlier one, then measures the model: the Wikipedia loss drift (percent, against the unedited model),
and — every ``probe_every`` steps, at checkpoints and at the end — retention (efficacy in both forms over every
fact edited so far) and the generation entropy of fixed prompts with fixed seeds (the same samples' seeds as on
the unedited model, so the change is paired); between those steps both are NaN. The two grow with the run
(retention) or cost more than the edit (sampling), while the drift is one forward. Each step row also keeps its
edits' diagnostics (``edits``: optimisation convergence, key, relative update, guard rise) and whether each edit
flipped its fact right after its step (``flipped``). At each checkpoint every fact edited so far is scored in full
(:func:`interp.editing.eval.measure.measure_probs`); ``failures()`` then tells the facts failing efficacy that
never flipped from those that were forgotten later. At the end every edit is reverted in reverse order and each
written matrix is checked bit for bit against its unedited state.

Collapse: the first step after which the loss drift exceeds ``max_drift`` percent or the generation entropy has
fallen more than ``max_entropy_drop`` percent below the unedited model's; the edit of that step is named, and
whether it caused the collapse by itself (the step moved the measure by a quarter of the threshold or more) or was
only the last of many small steps (accumulation).

A run of hours can be stopped and continued (``state_dir``): after every step the edited layers' matrices
(safetensors) and the steps so far (JSON) are saved, and a run started again with the same directory, model,
records, editor and settings writes the saved matrices back and goes on from the next step. Edits do not
depend on anything but the weights, so on the same machine the continued run gives the uninterrupted run's numbers.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ...core.progress import bar
from ...core.results import jsonable
from ..defaults import default_layer, defaults_for
from ..drift import drift_set, drift_texts, text_nll
from ..facts import Fact
from ..hparams import Settings, check_count
from ..matrices import restore_matrices
from ..registry import Editor, bind, check_editor
from .measure import fact_scores, generation_entropy, measure_probs, score_prompts
from .report import ALL_SCORES, mean_ci
from .run import apply_edits, as_facts, batch_prompts, settings_with
from .scale_result import ScaleResult
from .scale_state import load_state, matrix_digest, save_state

MAX_DRIFT = 10.0         # percent loss drift on the Wikipedia texts that counts as collapse
MAX_ENTROPY_DROP = 10.0  # percent fall of the generation entropy that counts as collapse
ENTROPY_RECORDS = 5      # the generation prompts of the run's first records are the fixed fluency prompts


@dataclass(frozen=True)
class ScaleSettings(Settings):
    """What a run of edits measures and when (:func:`sequential_edits`).

    batch_size: facts per step (one edit of the batch when the editor makes one of many, as MEMIT; the others
        that many single edits, measured together). checkpoints: step numbers (1-based) after which every fact
        edited so far is scored in full; None: the powers of ten below the last step, and the last.
    seed: the editor's context templates and the fluency samples. generation / gen_tokens / drift: the generation
        entropy (tokens per sample) and the loss drift. score_before: score every fact on the unedited model too.
    max_drift / max_entropy_drop: the collapse thresholds (percent).
    probe_every: measure retention and generation entropy after every this many steps (and at checkpoints and the
        last step); the loss drift, and so collapse by drift, is measured after every step.
    measure_from: the first step measured at all; earlier steps only edit (their rows keep the edits' outcomes
        and diagnostics, NaN measurements). Edits do not depend on measurements, so a run repeated with a later
        ``measure_from`` makes the same edits on the same machine (another CPU's float rounding can differ in the
        7th digit, and 200 edits carry that into the scores): a long run can be re-made cheaply up to where it
        matters. progress: a progress bar (not recorded)."""
    batch_size: int = 1
    checkpoints: tuple | None = None
    seed: int = 0
    generation: bool = True
    gen_tokens: int = 40
    drift: bool = True
    score_before: bool = True
    max_drift: float = MAX_DRIFT
    max_entropy_drop: float = MAX_ENTROPY_DROP
    probe_every: int = 1
    measure_from: int = 1
    progress: bool = True

    KIND = "sequential-editing"
    UNRECORDED = ("progress",)

    @classmethod
    def normalise(cls, overrides: dict) -> dict:
        if overrides.get("checkpoints") is not None and not isinstance(overrides["checkpoints"], (str, bytes)):
            try:
                overrides = {**overrides, "checkpoints": tuple(overrides["checkpoints"])}
            except TypeError:
                pass  # refused by check()
        return overrides

    def check(self) -> None:
        check_count(self, "batch_size", "gen_tokens", "probe_every", "measure_from")
        for name in ("max_drift", "max_entropy_drop"):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and v > 0):
                raise ValueError(f"{name}={v!r}; allowed: a number > 0 (percent)")
        if self.checkpoints is not None and not isinstance(self.checkpoints, tuple):
            raise ValueError(f"checkpoints={self.checkpoints!r}; allowed: None or step numbers")

    def steps(self, n_steps: int) -> list[int]:
        """The checkpoints of a run of ``n_steps`` steps, checked against it (with ``measure_from``)."""
        wanted = self.checkpoints
        if wanted is None:
            wanted = [s for s in (1, 10, 100, 1000) if s < n_steps] + [n_steps]
        for v in wanted:
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= n_steps:
                raise ValueError(f"checkpoints entry {v!r}; allowed: step numbers 1..{n_steps} (steps of this run)")
        if self.measure_from > n_steps:
            raise ValueError(f"measure_from={self.measure_from!r}; allowed: a step number 1..{n_steps}")
        out = sorted(set(wanted))
        if out[0] < self.measure_from:
            raise ValueError(f"checkpoint {out[0]} comes before measure_from={self.measure_from}; allowed: "
                             f"checkpoints >= {self.measure_from}")
        return out


# ============================================================================================ measurements
def retention(model, facts) -> tuple[list[float], list[float]]:
    """Per fact: (P(new) > P(true) on its rewrite prompt, target_new's first token is top-1), as 0/1 floats."""
    prompts = [f.text for f in facts for _ in (0, 1)]
    targets = [t for f in facts for t in (f.target_new, f.target_true)]
    nll, top1 = score_prompts(model, prompts, targets)
    p = torch.exp(-nll).reshape(-1, 2)
    first = top1.reshape(-1, 2)[:, 0]
    success = [float(a > b) for a, b in p.tolist()]
    strict = [float(int(t) == model.target_tokens(f.target_new)[0]) for t, f in zip(first.tolist(), facts)]
    return success, strict


def record_scores(model, facts, edited=None) -> list[dict]:
    """Per fact in ``facts``: every score in both forms (:func:`fact_scores`, fractions); ``edited`` as in
    :func:`~.measure.measure_probs` (per fact, the rewrite prompts its batch edits)."""
    return [fact_scores(m["probs"], m["hits"]) for m in measure_probs(model, facts, edited=edited)]


def aggregate_scores(rows: list[dict]) -> dict:
    """``{metric: mean_ci row}`` in percent over :func:`record_scores` rows."""
    out = {}
    for name in ALL_SCORES:
        for kind in ("score", "acc"):
            key = f"{name}_{kind}"
            out[key] = mean_ci(key, [100 * r[key] for r in rows], bounds=(0, 100))
    return out


def score_all(model, facts) -> dict:
    """Every score of every fact in ``facts`` (both forms), aggregated: ``{metric: mean_ci row}`` in percent."""
    return aggregate_scores(record_scores(model, facts))


class _ModelProbe:
    """The model-level measurements of a step: loss on fixed Wikipedia texts and entropy of fixed samples."""

    def __init__(self, model, prompts: list[str], *, drift: bool, gen_tokens: int, seed: int,
                 baseline: tuple[float, float] | None = None):
        self.model, self.gen_tokens, self.seed = model, gen_tokens, seed
        self.texts = drift_set(model, drift_texts()) if drift else None
        self.prompts = prompts  # [] when generation is off
        # a continued run keeps the unedited model's baseline from its save
        self.loss0, self.entropy0 = baseline if baseline is not None else (self.loss(), self.entropy())

    def loss(self) -> float:
        return text_nll(self.model, self.texts) if self.texts is not None else float("nan")

    def entropy(self) -> float:
        if not self.prompts:
            return float("nan")
        return generation_entropy(self.model, self.prompts, n_tokens=self.gen_tokens, seed=self.seed)[0]

    def __call__(self, generation: bool = True, drift: bool = True) -> dict:
        loss = self.loss() if drift else float("nan")
        ent = self.entropy() if generation else float("nan")
        return {"loss": loss, "loss_drift": 100 * (loss - self.loss0) / self.loss0,
                "generation_entropy": ent, "entropy_drop": 100 * (self.entropy0 - ent) / self.entropy0}


# ============================================================================================ the run
def sequential_edits(model, records, editor="rome", settings: ScaleSettings | None = None, *, layer=None,
                     stats=None, hparams: dict | None = None, state_dir=None, on_checkpoint=None,
                     **options) -> ScaleResult:
    """Edit ``records`` one step after another, each step on top of all earlier ones (see the module docstring).

    editor: a registered editor's name ("rome", "ft", "memit") or ``fn(model, record) -> edit``. settings: a
    :class:`ScaleSettings`; ``options`` are its fields as keywords (``batch_size=100``, ``probe_every=10``), on
    top of ``settings``. hparams: the editor's keyword overrides, on top of the model's sequential defaults
    (:mod:`interp.editing.defaults`: for ROME on the embedded model the edit guard ``max_loss_rise``, by which an
    edit that raises the loss of reference text by more is refused and skipped, and smaller updates; ``hparams``
    wins, e.g. ``max_loss_rise=0``: guard off); the result records what was used (``hparams``, and
    ``settings["sequential_defaults"]``: what the defaults table set).
    on_checkpoint: ``fn(partial_result)`` after each checkpoint (the steps so far), e.g. ``lambda r: r.save(path)``
    so that a run of hours that is stopped keeps its finished part; it must not touch the model.
    state_dir: a directory where the run is saved after every step (see the module docstring); started again with
    it, the run continues after the last saved step (a finished run's save returns its result and edits nothing).
    Editors named by string only (a callable's writes are not known).
    The model ends as it started: every edit is reverted, and the written matrices are checked bit for bit."""
    s = settings_with(ScaleSettings, settings, options)
    facts = as_facts(records)
    check_editor(editor)
    if on_checkpoint is not None and not callable(on_checkpoint):
        raise ValueError(f"on_checkpoint={on_checkpoint!r}; allowed: None or a callable(partial_result)")
    batches = [facts[i:i + s.batch_size] for i in range(0, len(facts), s.batch_size)]
    checkpoints = s.steps(len(batches))
    ed = bind(model, editor, layer=layer, seed=s.seed, stats=stats, hparams=hparams, sequential=True)
    run = _Run(model, facts, ed, s, checkpoints, layer, hparams)
    run.start(state_dir)
    return run.go(batches, on_checkpoint)


class _Run:
    """One run's state: the steps and checkpoints so far, the facts edited, the applied edits and the probe."""

    def __init__(self, model, facts: list[Fact], ed: Editor, s: ScaleSettings, checkpoints: list[int], layer,
                 hparams):
        self.model, self.facts, self.ed, self.s, self.checkpoints = model, facts, ed, s, checkpoints
        self.t_start = time.perf_counter()
        self.saved = {l: model.mlp_out_matrix(l).detach().cpu().clone() for l in ed.layers or []}
        table = defaults_for(model).sequential.get(ed.name, {})
        self.settings = {**s.to_dict(), "n_records": len(facts),
                         "entropy_prompts": [p for f in facts[:ENTROPY_RECORDS] for p in f.generation_prompts]
                         if s.generation else [],
                         "layers": list(ed.layers or [default_layer(model) if layer is None else layer]),
                         "sequential_defaults": {k: v for k, v in table.items() if k not in (hparams or {})}}
        self.handles: list = []
        self.state_dir = self.identity = self.state = None
        self.position = {id(f): i for i, f in enumerate(facts)}

    def start(self, state_dir) -> None:
        """Measure the unedited model, or read where a saved run stopped."""
        s, state = self.s, None
        if state_dir is not None:
            if self.ed.layers is None:
                raise ValueError("state_dir needs an editor named by string ('rome', 'ft', 'memit'): a callable's "
                                 "writes are not known, so its edits cannot be saved")
            self.state_dir = Path(state_dir)
            self.state_dir.mkdir(parents=True, exist_ok=True)
            settings = {k: v for k, v in self.settings.items() if k not in ("score_before", "checkpoints")}
            self.identity = json.loads(json.dumps(jsonable({
                "fingerprint": self.model.fingerprint, "editor": self.ed.name, "hparams": self.ed.hparams,
                "settings": settings, "score_before": s.score_before, "checkpoints": self.checkpoints,
                "case_ids": [f.case_id for f in self.facts], "unedited_matrices": matrix_digest(self.saved)})))
            state = load_state(self.state_dir, self.identity)
        prompts = self.settings["entropy_prompts"]
        if state is None:
            self.probe = _ModelProbe(self.model, prompts, drift=s.drift, gen_tokens=s.gen_tokens, seed=s.seed)
            self.unedited = score_all(self.model, self.facts) if s.score_before else {}
            self.steps, self.marks, self.done, self.first, self.spent, self.resumed_at = [], [], [], 1, 0.0, []
        else:
            doc, self.state = state  # the saved matrices are written in by go(), inside its try
            before = doc["before"]
            self.probe = _ModelProbe(self.model, prompts, drift=s.drift, gen_tokens=s.gen_tokens, seed=s.seed,
                                     baseline=(before["loss"], before["generation_entropy"]))
            self.unedited = before["scores"]
            self.steps, self.marks = doc["steps"], doc["checkpoints"]
            self.done = [self.facts[i] for i in doc["done"]]
            self.first, self.spent = doc["step"] + 1, doc["seconds"]
            self.resumed_at = doc["resumed_at"] + [self.first]
        self.settings["resumed_at"] = self.resumed_at

    def result(self) -> ScaleResult:
        return ScaleResult(editor=self.ed.name, steps=list(self.steps), checkpoints=list(self.marks),
                           settings=dict(self.settings), hparams=self.ed.hparams,
                           before={"loss": self.probe.loss0, "generation_entropy": self.probe.entropy0,
                                   "scores": self.unedited},
                           seconds=self.spent + time.perf_counter() - self.t_start)

    def go(self, batches: list, on_checkpoint) -> ScaleResult:
        """Every step from where the run stands, then every edit reverted and the weights checked bit for bit."""
        model = self.model
        progress_bar = bar(total=len(batches), desc=f"{self.ed.name} steps", enabled=self.s.progress, unit="step",
                           initial=self.first - 1)
        start = self.saved
        try:
            if self.state is not None:  # the saved run's weights: everything is reverted to them, then to `saved`
                restore_matrices(model, self.state)
                start = {l: model.mlp_out_matrix(l).detach().cpu().clone() for l in self.saved}
            for step, batch in enumerate(batches[self.first - 1:], start=self.first):
                self.step(step, batch, len(batches), on_checkpoint)
                progress_bar.update(1)
        finally:
            progress_bar.close()
            for h in reversed(self.handles):
                h.revert()
            changed = [l for l, w in start.items() if not torch.equal(w, model.mlp_out_matrix(l).detach().cpu())]
            restore_matrices(model, self.saved)  # a continued run: the saved run's edits have no handles to revert
        if changed:
            raise RuntimeError(f"reverting the {len(self.handles)} edits did not restore layer(s) {changed} bit for "
                               "bit")
        return self.result()

    def step(self, s: int, batch: list[Fact], n_steps: int, on_checkpoint) -> None:
        """Apply one step's edits on top of the others and measure the model."""
        model, done = self.model, self.done
        t0 = time.perf_counter()
        outcomes = apply_edits(self.ed, batch, self.handles)
        failed = {f.case_id: o["error"] for f, o in zip(batch, outcomes) if o["error"]}
        edit_s = time.perf_counter() - t0
        kept = [f for f in batch if f.case_id not in failed]
        done += kept
        measured = s >= self.s.measure_from
        full = measured and (s % self.s.probe_every == 0 or s in self.checkpoints or s == n_steps)
        success, strict = retention(model, done) if done and full else ([], [])
        # each fact's efficacy right after its own step: a fact failing at the end either never flipped or was
        # flipped and then overwritten by later edits, and only this tells the two apart (the step's facts are
        # the last of `done`; one short forward when retention was not measured)
        first_new = len(done) - len(kept)
        hits = (success[first_new:], strict[first_new:]) if done and full else (
            retention(model, kept) if kept else ([], []))
        own = {f.case_id: (bool(a), bool(b)) for f, a, b in zip(kept, *hits)}
        rate = (lambda hits: 100 * sum(hits) / max(len(hits), 1)) if full else (lambda hits: math.nan)
        self.steps.append({
            "step": s, "n_edited": len(done), "case_ids": [f.case_id for f in batch], "failed": sorted(failed),
            "failed_reasons": [failed[c] for c in sorted(failed)], "edit_seconds": edit_s,
            "retention": rate(success), "retention_acc": rate(strict), **self.probe(generation=full, drift=measured),
            "edits": [{"case_id": f.case_id, "flipped": own[f.case_id][0], "flipped_acc": own[f.case_id][1],
                       **{k: v for k, v in o.items() if k not in ("error", "edit_seconds")}}
                      for f, o in zip(batch, outcomes) if not o["error"]]})
        if s in self.checkpoints:
            # every fact edited so far is rewritten: a neighbour prompt naming one of them should change, and
            # neighborhood_unedited leaves those out (as the evaluation does for a batch)
            rows = record_scores(model, done, [batch_prompts(done)] * len(done)) if done else []
            self.marks.append({"step": s, "n_edited": len(done), "scores": aggregate_scores(rows) if rows else {},
                               "failing": [f.case_id for f, r in zip(done, rows) if r["efficacy_score"] < 1]})
            if on_checkpoint is not None:
                on_checkpoint(self.result())
        if self.state_dir is not None:
            now = self.result()
            save_state(self.state_dir, self.identity, s, {l: model.mlp_out_matrix(l) for l in self.saved}, {
                "steps": self.steps, "checkpoints": self.marks, "done": [self.position[id(f)] for f in done],
                "before": now.before, "seconds": now.seconds, "resumed_at": self.resumed_at})
