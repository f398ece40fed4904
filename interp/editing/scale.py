"""Editing at scale: one edit after another (sequential editing) and many facts at once (mass editing).

    seq = sequential_edits(model, records[:100], "rome", checkpoints=(1, 10, 50, 100))
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
(:func:`interp.editing.eval_measure.measure_probs`); ``failures()`` then tells the facts failing efficacy that
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

import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.progress import bar
from ..core.results import Result, jsonable, new_figure, save_fig
from ..core.variants import restore_matrices
from .base import read_edit_files, write_edit_files
from .eval_measure import (
    drift_set,
    drift_texts,
    fact_scores,
    generation_entropy,
    measure_probs,
    score_prompts,
    text_nll,
)
from .eval_report import ALL_SCORES, mean_ci
from .evaluate import EDITORS, apply_edits, make_editor
from .facts import as_fact
from .rome import SEQUENTIAL_HPARAMS, default_layer

MAX_DRIFT = 10.0         # percent loss drift on the Wikipedia texts that counts as collapse
MAX_ENTROPY_DROP = 10.0  # percent fall of the generation entropy that counts as collapse
SUDDEN_SHARE = 0.25      # a step that moves a measure by this share of its threshold caused the collapse alone
ENTROPY_RECORDS = 5      # the generation prompts of the run's first records are the fixed fluency prompts


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


def record_scores(model, facts) -> list[dict]:
    """Per fact in ``facts``: every score in both forms (:func:`fact_scores`, fractions)."""
    return [fact_scores(m["probs"], m["hits"]) for m in measure_probs(model, facts)]


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


def _check_steps(name: str, values, n_steps: int) -> list[int]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= n_steps:
            raise ValueError(f"{name} entry {v!r}; allowed: step numbers 1..{n_steps} (steps of this run)")
        out.append(v)
    return sorted(set(out))


# ============================================================================================ saved state
STATE_FORMAT = "interp.sequential_edits.state.v1"


def _matrix_digest(matrices: dict) -> str:
    h = hashlib.sha256()
    for layer in sorted(matrices):
        h.update(f"{layer}:".encode())
        h.update(matrices[layer].detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _state_files(state_dir: Path) -> list[tuple[int, Path]]:
    """Saved steps, newest first: ``[(step, stem)]`` for every ``step-NNNNN.json`` in ``state_dir``."""
    out = []
    for p in state_dir.glob("step-*.json"):
        try:
            out.append((int(p.stem.split("-", 1)[1]), p.with_suffix("")))
        except ValueError:
            continue
    return sorted(out, reverse=True)


def save_state(state_dir: Path, run: dict, step: int, matrices: dict, progress: dict) -> None:
    """Save the run after ``step``: ``matrices`` ({layer: tensor}) and ``progress`` (steps, checkpoints, ...) under
    a new name, then drop older saves, so an interrupt at any moment leaves one complete save."""
    older = _state_files(state_dir)
    write_edit_files(state_dir / f"step-{step:05d}", {f"layer.{l}": m for l, m in matrices.items()}, STATE_FORMAT,
                     {"run": run, "step": step, **jsonable(progress)})
    for s, stem in older:
        if s != step:
            for suffix in (".json", ".safetensors"):
                stem.with_name(stem.name + suffix).unlink(missing_ok=True)


def load_state(state_dir: Path, run: dict) -> tuple[dict, dict] | None:
    """``(progress, {layer: matrix})`` of the newest complete save in ``state_dir`` (None: nothing saved yet). A
    save of another run (model, records, editor, settings or unedited matrices differ) is refused, naming what
    differs."""
    problems = []
    for step, stem in _state_files(state_dir):
        try:
            meta, tensors = read_edit_files(stem, STATE_FORMAT, "sequential-editing state")
        except (ValueError, FileNotFoundError) as e:  # a save interrupted while written: an older one is complete
            problems.append(f"step {step}: {e}")
            continue
        differ = sorted(k for k in set(run) | set(meta["run"]) if run.get(k) != meta["run"].get(k))
        if differ:
            raise ValueError(f"state_dir {str(state_dir)!r} holds another run (it differs in {', '.join(differ)}); "
                             "allowed: the directory of this run, an empty one or a new one")
        return _nan_for_null(meta), {int(k.split(".", 1)[1]): v for k, v in tensors.items()}
    if problems:  # saves exist and none is whole: starting over would hide it
        raise ValueError(f"state_dir {str(state_dir)!r} holds no complete save ({'; '.join(problems)}); allowed: "
                         "a directory with a complete save, or an empty one to start the run again")
    return None


# ============================================================================================ the run
def sequential_edits(model, records, editor="rome", *, batch_size: int = 1, checkpoints: Sequence[int] | None = None,
                     layer: int | None = None, seed: int = 0, stats=None, hparams: dict | None = None,
                     generation: bool = True, gen_tokens: int = 40, drift: bool = True, score_before: bool = True,
                     max_drift: float = MAX_DRIFT, max_entropy_drop: float = MAX_ENTROPY_DROP,
                     probe_every: int = 1, measure_from: int = 1, on_checkpoint=None, state_dir=None,
                     progress: bool = True) -> ScaleResult:
    """Edit ``records`` one step after another, each step on top of all earlier ones (see the module docstring).

    editor: "rome", "ft" or "memit" (or ``fn(model, record) -> edit``); batch_size: facts per step (MEMIT: one
    edit of the batch; ROME / FT-L: that many single edits, measured together). checkpoints: step numbers
    (1-based) after which every fact edited so far is scored in full; default the last step and powers of ten.
    hparams: the editor's keyword overrides. ROME gets the model's dev-chosen sequential defaults
    (:data:`interp.editing.rome.SEQUENTIAL_HPARAMS`: the edit guard ``max_loss_rise``, by which an edit that raises
    the loss of reference text by more is refused and skipped, and smaller updates) unless ``hparams`` sets them
    (``max_loss_rise=0``: guard off).
    score_before: also score every fact on the unedited model (``result.before["scores"]``).
    probe_every: measure retention and generation entropy after every this many steps (and at checkpoints and
    the last step); the loss drift, and so collapse by drift, is measured after every step.
    measure_from: the first step measured at all; earlier steps only edit (their rows keep the edits' outcomes
    and diagnostics, NaN measurements). Edits do not depend on measurements, so a run repeated with a later
    ``measure_from`` makes the same edits on the same machine (another CPU's float rounding can differ in the
    7th digit, and 200 edits carry that into the scores): a long run can be re-made cheaply up to where it matters.
    on_checkpoint: ``fn(partial_result)`` after each checkpoint (the steps so far), e.g. ``lambda r: r.save(path)``
    so that a run of hours that is stopped keeps its finished part; it must not touch the model.
    state_dir: a directory where the run is saved after every step (see the module docstring); started again with
    it, the run continues after the last saved step (a finished run's save returns its result and edits nothing).
    Editors named by string only (a callable's writes are not known).
    The model ends as it started: every edit is reverted, and the written matrices are checked bit for bit."""
    facts = [as_fact(r, where=f"record {i}") for i, r in enumerate(records)]
    if not facts:
        raise ValueError("no records to edit; pass a non-empty list (see interp.rome.load_records)")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r}; allowed: an integer >= 1 (facts per step)")
    if not callable(editor) and editor not in EDITORS:
        raise ValueError(f"editor {editor!r} not known; allowed: {', '.join(repr(e) for e in EDITORS)} or a "
                         "callable(model, record) -> edit")
    for name, v in (("max_drift", max_drift), ("max_entropy_drop", max_entropy_drop)):
        if not (isinstance(v, (int, float)) and v > 0):
            raise ValueError(f"{name}={v!r}; allowed: a number > 0 (percent)")
    if isinstance(probe_every, bool) or not isinstance(probe_every, int) or probe_every < 1:
        raise ValueError(f"probe_every={probe_every!r}; allowed: an integer >= 1 (steps between retention and "
                         "entropy measurements)")
    if on_checkpoint is not None and not callable(on_checkpoint):
        raise ValueError(f"on_checkpoint={on_checkpoint!r}; allowed: None or a callable(partial_result)")
    batches = [facts[i:i + batch_size] for i in range(0, len(facts), batch_size)]
    n_steps = len(batches)
    if checkpoints is None:
        checkpoints = [s for s in (1, 10, 100, 1000) if s < n_steps] + [n_steps]
    checkpoints = _check_steps("checkpoints", checkpoints, n_steps)
    if isinstance(measure_from, bool) or not isinstance(measure_from, int) or not 1 <= measure_from <= n_steps:
        raise ValueError(f"measure_from={measure_from!r}; allowed: a step number 1..{n_steps}")
    if checkpoints[0] < measure_from:
        raise ValueError(f"checkpoint {checkpoints[0]} comes before measure_from={measure_from}; allowed: "
                         f"checkpoints >= {measure_from}")
    layer = default_layer(model) if layer is None else model.check_layer(layer)
    if editor == "rome":  # edits harmless alone add up on top of others: guard each one and keep it small
        hparams = {**SEQUENTIAL_HPARAMS.get(model.fingerprint, {}), **(hparams or {})}
    ed = make_editor(model, editor, layer, seed, stats, hparams)
    t_start = time.perf_counter()
    saved = {l: model.mlp_out_matrix(l).detach().cpu().clone() for l in ed.layers or []}
    settings = {"batch_size": batch_size, "seed": seed, "generation": generation, "gen_tokens": gen_tokens,
                "drift": drift, "probe_every": probe_every, "measure_from": measure_from, "max_drift": max_drift,
                "max_entropy_drop": max_entropy_drop, "n_records": len(facts),
                "entropy_prompts": [p for f in facts[:ENTROPY_RECORDS] for p in f.generation_prompts] if generation
                else [], "layers": list(ed.layers or [layer])}
    run, state = None, None
    if state_dir is not None:
        if ed.layers is None:
            raise ValueError("state_dir needs an editor named by string ('rome', 'ft', 'memit'): a callable's "
                             "writes are not known, so its edits cannot be saved")
        state_dir = Path(state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        run = json.loads(json.dumps(jsonable({
            "fingerprint": model.fingerprint, "editor": ed.name, "hparams": ed.hparams, "settings": settings,
            "score_before": score_before, "checkpoints": checkpoints, "case_ids": [f.case_id for f in facts],
            "unedited_matrices": _matrix_digest(saved)})))
        state = load_state(state_dir, run)
    if state is None:
        probe = _ModelProbe(model, settings["entropy_prompts"], drift=drift, gen_tokens=gen_tokens, seed=seed)
        unedited = score_all(model, facts) if score_before else {}
        steps, marks, done, first, spent_before, resumed_at = [], [], [], 1, 0.0, []
    else:
        progress_doc = state[0]  # state[1], the saved matrices, is written in below, inside the try
        before = progress_doc["before"]
        probe = _ModelProbe(model, settings["entropy_prompts"], drift=drift, gen_tokens=gen_tokens, seed=seed,
                            baseline=(before["loss"], before["generation_entropy"]))
        unedited = before["scores"]
        steps, marks = progress_doc["steps"], progress_doc["checkpoints"]
        done = [facts[i] for i in progress_doc["done"]]
        first, spent_before = progress_doc["step"] + 1, progress_doc["seconds"]
        resumed_at = progress_doc["resumed_at"] + [first]
    settings["resumed_at"] = resumed_at
    position = {id(f): i for i, f in enumerate(facts)}
    handles = []

    def result() -> ScaleResult:
        return ScaleResult(editor=ed.name, steps=list(steps), checkpoints=list(marks), settings=dict(settings),
                           hparams=ed.hparams, before={"loss": probe.loss0, "generation_entropy": probe.entropy0,
                                                       "scores": unedited},
                           seconds=spent_before + time.perf_counter() - t_start)

    progress_bar = bar(total=n_steps, desc=f"{ed.name} steps", enabled=progress, unit="step", initial=first - 1)
    start = saved
    try:
        if state is not None:  # the saved run's weights: everything below is reverted to them, then to `saved`
            restore_matrices(model, state[1])
            start = {l: model.mlp_out_matrix(l).detach().cpu().clone() for l in saved}
        for s, batch in enumerate(batches[first - 1:], start=first):
            t0 = time.perf_counter()
            outcomes = apply_edits(ed, batch, handles)
            failed = {f.case_id: o["error"] for f, o in zip(batch, outcomes) if o["error"]}
            edit_s = time.perf_counter() - t0
            kept = [f for f in batch if f.case_id not in failed]
            done += kept
            measured = s >= measure_from
            full = measured and (s % probe_every == 0 or s in checkpoints or s == n_steps)
            success, strict = retention(model, done) if done and full else ([], [])
            # each fact's efficacy right after its own step: a fact failing at the end either never flipped or was
            # flipped and then overwritten by later edits, and only this tells the two apart (the step's facts are
            # the last of `done`; one short forward when retention was not measured)
            first_new = len(done) - len(kept)
            if done and full:
                hits = success[first_new:], strict[first_new:]
            else:
                hits = retention(model, kept) if kept else ([], [])
            own = {f.case_id: (bool(a), bool(b)) for f, a, b in zip(kept, *hits)}
            rate = (lambda hits: 100 * sum(hits) / max(len(hits), 1)) if full else (lambda hits: math.nan)
            row = {"step": s, "n_edited": len(done), "case_ids": [f.case_id for f in batch],
                   "failed": sorted(failed), "failed_reasons": [failed[c] for c in sorted(failed)],
                   "edit_seconds": edit_s, "retention": rate(success), "retention_acc": rate(strict),
                   **probe(generation=full, drift=measured),
                   "edits": [{"case_id": f.case_id, "flipped": own[f.case_id][0], "flipped_acc": own[f.case_id][1],
                              **{k: v for k, v in o.items() if k not in ("error", "edit_seconds")}}
                             for f, o in zip(batch, outcomes) if not o["error"]]}
            steps.append(row)
            if s in checkpoints:
                rows = record_scores(model, done) if done else []
                marks.append({"step": s, "n_edited": len(done), "scores": aggregate_scores(rows) if rows else {},
                              "failing": [f.case_id for f, r in zip(done, rows) if r["efficacy_score"] < 1]})
                if on_checkpoint is not None:
                    on_checkpoint(result())
            if state_dir is not None:
                now = result()
                save_state(state_dir, run, s, {l: model.mlp_out_matrix(l) for l in saved}, {
                    "steps": steps, "checkpoints": marks, "done": [position[id(f)] for f in done],
                    "before": now.before, "seconds": now.seconds, "resumed_at": resumed_at})
            progress_bar.update(1)
    finally:
        progress_bar.close()
        for h in reversed(handles):
            h.revert()
        changed = [l for l, w in start.items() if not torch.equal(w, model.mlp_out_matrix(l).detach().cpu())]
        restore_matrices(model, saved)  # a continued run: the saved run's edits have no handles to revert
    if changed:
        raise RuntimeError(f"reverting the {len(handles)} edits did not restore layer(s) {changed} bit for bit")
    return result()


# ============================================================================================ the result
@dataclass(repr=False)
class ScaleResult(Result):
    """A sequential (or, with one step, mass) editing run: ``steps`` (one dict per step), ``checkpoints`` (full
    scores of every fact edited so far), the unedited model's loss and entropy (``before``), settings."""
    editor: str
    steps: list
    checkpoints: list
    settings: dict
    hparams: dict = field(default_factory=dict)
    before: dict = field(default_factory=dict)
    seconds: float = float("nan")

    @property
    def collapse(self) -> dict | None:
        """The first step whose loss drift or entropy drop crossed its threshold: ``{"step", "n_edited",
        "case_ids" (that step's edits), "reason", "loss_drift", "entropy_drop", "sudden", "increment",
        "since_step"}``; None when none did. ``increment``: how far the measure that crossed moved since its last
        measurement (``since_step``; 0: the unedited model). ``sudden``: True when that step alone moved it by at
        least :data:`SUDDEN_SHARE` of the threshold (its edit caused the collapse); False when the move was smaller
        (the threshold was reached by accumulation, the step's edit is only the last of many); None when a larger
        move spans unmeasured steps (no single edit can be named)."""
        last = {"loss_drift": (0.0, 0), "entropy_drop": (0.0, 0)}  # (value, step) last measured; 0: unedited
        for row in self.steps:
            reasons, moves = [], []
            for key, limit, what in (("loss_drift", self.settings["max_drift"], "loss drift"),
                                     ("entropy_drop", self.settings["max_entropy_drop"], "entropy drop")):
                value = row[key]
                if not math.isfinite(value):  # not measured on this step (probe_every, measure_from)
                    continue
                if value > limit:
                    moves.append((value - last[key][0], limit, last[key][1]))
                    reasons.append(f"{what} {value:.1f}% > {limit}%")
                last[key] = (value, row["step"])
            if reasons:
                increment, limit, since = max(moves, key=lambda m: m[0] / m[1])
                if increment < SUDDEN_SHARE * limit:
                    sudden, how = False, f"reached by accumulation: {increment:+.2f} points since step {since}"
                elif since == row["step"] - 1:
                    sudden, how = True, f"this step alone added {increment:+.2f} points"
                else:  # a jump somewhere in unmeasured steps: no single edit can be named
                    sudden, how = None, (f"{increment:+.2f} points since step {since}, the last measured one: the "
                                         "edits between are not told apart")
                return {"step": row["step"], "n_edited": row["n_edited"], "case_ids": row["case_ids"],
                        "reason": "; ".join(reasons) + f" ({how})", "loss_drift": row["loss_drift"],
                        "entropy_drop": row["entropy_drop"], "sudden": sudden, "increment": increment,
                        "since_step": since}
        return None

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.steps).set_index("step")

    def checkpoint_frame(self):
        """One row per (checkpoint, metric): n_edited, mean, ci_low, ci_high, n (percent)."""
        import pandas as pd

        rows = [{"step": c["step"], "n_edited": c["n_edited"], **v} for c in self.checkpoints
                for v in c["scores"].values()]
        return pd.DataFrame(rows, columns=["step", "n_edited", "metric", "mean", "ci_low", "ci_high", "n"])

    def final_scores(self) -> dict:
        """The last checkpoint's means ``{metric: percent}`` (every fact of the run, with all edits applied)."""
        return {k: v["mean"] for k, v in self.checkpoints[-1]["scores"].items()} if self.checkpoints else {}

    def failures(self):
        """DataFrame, one row per fact failing efficacy (success form) at the last checkpoint: ``case_id``, the
        ``step`` that edited it, ``flipped`` (its efficacy right after that step) and ``why``: "never flipped"
        (the edit did not take) or "forgotten later" (it took, and later edits overwrote it); "not recorded" for a
        run saved before the edits were checked as they were made."""
        import pandas as pd

        made = {e["case_id"]: (r["step"], e.get("flipped")) for r in self.steps for e in r["edits"]}
        failing = self.checkpoints[-1].get("failing", []) if self.checkpoints else []
        rows = []
        for cid in failing:
            step, flipped = made.get(cid, (None, None))
            why = "not recorded" if flipped is None else (
                "forgotten later" if flipped else "never flipped")
            rows.append({"case_id": cid, "step": step, "flipped": flipped, "why": why})
        return pd.DataFrame(rows, columns=["case_id", "step", "flipped", "why"])

    def summary(self) -> str:
        last = self.steps[-1] if self.steps else {}
        bs = self.settings.get("batch_size", 1)
        how = f"{len(self.steps)} step(s) of {bs} fact(s)" if bs > 1 else f"{len(self.steps)} edits one after another"
        s = self.final_scores()
        scores = (f"; all {last.get('n_edited')} facts: ES {s.get('efficacy_score', math.nan):.1f} "
                  f"PS {s.get('paraphrase_score', math.nan):.1f} NS {s.get('neighborhood_score', math.nan):.1f} "
                  f"(strict {s.get('efficacy_acc', math.nan):.1f} / {s.get('paraphrase_acc', math.nan):.1f} / "
                  f"{s.get('neighborhood_acc', math.nan):.1f})") if s else ""
        if s and "failing" in self.checkpoints[-1]:
            why = self.failures()["why"].value_counts()
            scores += (f"; {len(self.checkpoints[-1]['failing'])} failing efficacy (never flipped "
                       f"{why.get('never flipped', 0)}, forgotten later {why.get('forgotten later', 0)})")
        c = self.collapse
        col = (f"collapse at step {c['step']} ({c['n_edited']} facts; {c['reason']})" if c else
               f"no collapse (drift <= {self.settings['max_drift']}%, entropy drop <= "
               f"{self.settings['max_entropy_drop']}%)")
        return (f"{self.editor.upper()}, {how}: retention {last.get('retention', math.nan):.1f}% (strict "
                f"{last.get('retention_acc', math.nan):.1f}%), loss drift {last.get('loss_drift', math.nan):+.2f}%, "
                f"entropy drop {last.get('entropy_drop', math.nan):+.2f}%{scores}; {col}")

    def to_json(self) -> dict:
        return jsonable({"result": type(self).__name__, "summary": self.summary(), "editor": self.editor,
                         "steps": self.steps, "checkpoints": self.checkpoints, "settings": self.settings,
                         "hparams": self.hparams, "before": self.before, "seconds": self.seconds,
                         "collapse": self.collapse})

    def save(self, path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return path

    @classmethod
    def from_json(cls, doc: dict) -> ScaleResult:
        if doc.get("result") != cls.__name__:
            raise ValueError(f"not a {cls.__name__} document (result={doc.get('result')!r})")
        nan = _nan_for_null  # JSON writes NaN as null
        return cls(editor=doc["editor"], steps=nan(doc["steps"]), checkpoints=nan(doc["checkpoints"]),
                   settings=doc["settings"], hparams=doc.get("hparams", {}), before=nan(doc.get("before", {})),
                   seconds=doc.get("seconds", math.nan))

    def plot(self, *, out=None):
        """Retention, loss drift and generation entropy per step; paraphrase / neighbourhood at checkpoints."""
        f = self.to_frame()
        fig = new_figure(figsize=(11, 7))
        axes = fig.subplots(2, 2)
        n = f["n_edited"]
        probed = f.dropna(subset=["retention"])  # probe_every > 1: retention and entropy on some steps only
        ax = axes[0, 0]
        ax.plot(probed["n_edited"], probed["retention"], label="retention (P(new) > P(true))")
        ax.plot(probed["n_edited"], probed["retention_acc"], "--", label="retention, strict (top-1)")
        ax.set(ylabel="% of facts edited so far", ylim=(-2, 102), title="efficacy of every fact so far")
        ax = axes[0, 1]
        cf = self.checkpoint_frame()
        for metric, style in (("paraphrase_score", "o-"), ("paraphrase_acc", "o--"), ("neighborhood_score", "s-"),
                              ("neighborhood_acc", "s--"), ("paraphrase_other_score", "^:")):
            part = cf[cf["metric"] == metric]
            if len(part):
                ax.errorbar(part["n_edited"], part["mean"], yerr=[part["mean"] - part["ci_low"],
                            part["ci_high"] - part["mean"]], fmt=style, capsize=3, label=metric)
        ax.set(ylabel="%", ylim=(-2, 102), title="scores at checkpoints (95% CI)")
        axes[1, 0].plot(n, f["loss_drift"])
        axes[1, 0].axhline(self.settings["max_drift"], color="r", lw=0.8, ls=":")
        axes[1, 0].set(ylabel="Wikipedia loss drift (%)", title="loss drift")
        axes[1, 1].plot(probed["n_edited"], probed["generation_entropy"])
        axes[1, 1].axhline(self.before.get("generation_entropy", math.nan) * (1 - self.settings[
            "max_entropy_drop"] / 100), color="r", lw=0.8, ls=":")
        axes[1, 1].set(ylabel="n-gram entropy", title="generation entropy")
        c = self.collapse
        for ax in axes.flat:
            ax.set_xlabel("facts edited")
            if c:
                ax.axvline(c["n_edited"], color="k", lw=0.8, ls="--")
            if len(n) and n.max() >= 50:
                ax.set_xscale("symlog", linthresh=10)
        for ax in axes[0]:
            ax.legend(fontsize=7)
        fig.suptitle(self.summary()[:150], fontsize=8)
        fig.tight_layout()
        return save_fig(fig, out)


def _nan_for_null(x):
    if isinstance(x, dict):
        return {k: _nan_for_null(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_nan_for_null(v) for v in x]
    return math.nan if x is None else x


def mass_table(results: Sequence[ScaleResult]):
    """DataFrame: one row per (editor, batch size, facts edited) with every final score (percent) and its 95% CI
    (``{score}_ci_low`` / ``_ci_high``: a score's CI need not be symmetric near 0 or 100) — e.g. MEMIT runs of
    one batch of N facts beside ROME / FT-L runs of N edits one after another."""
    import pandas as pd

    rows = []
    for r in results:
        for c in r.checkpoints:
            bs = r.settings.get("batch_size", 1)
            mode = "one batch" if len(r.steps) == 1 and bs > 1 else f"batches of {bs}" if bs > 1 else "one by one"
            row = {"editor": r.editor, "mode": mode, "batch_size": bs, "n_edited": c["n_edited"]}
            for k, v in c["scores"].items():
                row[k], row[f"{k}_ci_low"], row[f"{k}_ci_high"] = v["mean"], v["ci_low"], v["ci_high"]
            rows.append(row)
    return pd.DataFrame(rows)


def plot_mass(results: Sequence[ScaleResult], *, out=None):
    """Efficacy, paraphrase and neighbourhood (success form solid, strict dashed) against facts edited, one
    colour per run."""
    t = mass_table(results)
    fig = new_figure(figsize=(12, 3.8))
    axes = fig.subplots(1, 3)
    for i, ((ed, mode), part) in enumerate(t.groupby(["editor", "mode"], sort=False)):
        label = f"{ed} ({mode})"
        part = part.sort_values("n_edited")
        for ax, m in zip(axes, ("efficacy", "paraphrase", "neighborhood")):
            y = part[f"{m}_score"]
            # clipped at 0: a Wilson bound at 100 can come out a rounding error below a mean of 100
            err = [(y - part[f"{m}_score_ci_low"]).clip(lower=0), (part[f"{m}_score_ci_high"] - y).clip(lower=0)]
            ax.errorbar(part["n_edited"], y, yerr=err, fmt="o-", color=f"C{i}", capsize=2, label=label)
            ax.plot(part["n_edited"], part[f"{m}_acc"], "x--", color=f"C{i}")
    for ax, m in zip(axes, ("efficacy", "paraphrase", "neighborhood")):
        ax.set(xscale="log", xlabel="facts edited", ylabel="%", ylim=(-2, 102), title=f"{m} (solid: success, "
               "dashed: strict)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return save_fig(fig, out)
