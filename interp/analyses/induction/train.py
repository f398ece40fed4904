"""Reproduce the induction-head phase change from scratch on a CPU.

A 2-layer attention-only transformer (:class:`interp.analyses.induction.AttnOnlyTransformer`) is
trained on synthetic sequences: [BOS] + uniform random tokens in which one segment
of random length (10..30) is copied to a random later offset. Only an induction
mechanism (previous-token head in layer 0, K-composed with a head in layer 1) can
predict the copied tokens; because length and offsets are random, a 1-layer model
cannot predict them by position alone. Natural text does not produce induction
heads within a CPU budget; published small replications use such synthetic data.

What the run shows (default config, seeds 0-4): the loss on the repeat-predictable
positions sits near the uniform level ln(63) ~ 4.14 for ~1,000 steps, then falls from
~3.9 to ~1.25 nats within 200 steps either side of the transition (step 1,115 ± 73),
while the best layer-1 induction score jumps from ~0.07 to 0.64-0.76 and a layer-0
previous-token head forms (~0.07 -> ~0.63). The 1-layer control trained identically
shows no such drop: its repeat loss creeps down to ~3.6 (it learns to favour tokens
already in the context, which costs it on the other positions) and its induction
score stays ~0.06. The demonstration (2-layer + control) takes ~50 s of CPU time.

Everything is seeded: the weights come from `seed`, the training batches from a
torch.Generator seeded with `seed`, the evaluation batch from `seed + 10_000`, and the
number of torch threads is set explicitly (float reductions depend on it).

The induction and previous-token scores in the log are computed through interp.Model
with the same code that scores pretrained models (interp.analyses.induction.heads.induction_scores).
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from ...core.inputs import check_int
from ...core.model import Model
from ...core.progress import bar, emit
from ...core.results import Result, jsonable, new_figure, save_fig
from .heads import induction_scores
from .toy import AttnOnlyTransformer, ToyConfig


@dataclass
class TrainConfig:
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    d_vocab: int = 64  # token 0 is BOS; 63 ordinary tokens
    n_ctx: int = 64
    seg_min: int = 10  # copied segment length, uniform in [seg_min, seg_max]
    seg_max: int = 30
    batch_size: int = 32
    steps: int = 2000
    lr: float = 3e-3
    weight_decay: float = 0.01
    betas: tuple = (0.9, 0.98)
    log_every: int = 50
    eval_batch: int = 256  # fixed held-out batch for the logged losses
    score_seq_len: int = 25  # [BOS] + R + R detection input for the logged scores
    score_batch: int = 16
    seed: int = 0
    # One thread by default: then a run is bit-identical on any machine, whatever its core count,
    # and it is not slowed by oversubscription when the cores are shared.
    threads: int = 1

    def __post_init__(self):
        for name in ("n_layers", "d_model", "n_heads", "d_vocab", "n_ctx", "batch_size", "steps",
                     "log_every", "eval_batch", "score_batch", "threads"):
            check_int(name, getattr(self, name), 1)
        most = (self.n_ctx - 1) // 2
        if not 2 <= self.seg_min <= self.seg_max <= most:
            raise ValueError(f"segment lengths seg_min={self.seg_min}, seg_max={self.seg_max}: allowed "
                             f"2 <= seg_min <= seg_max <= {most} (two copies must fit n_ctx - 1 = {self.n_ctx - 1})")
        if not 2 <= self.score_seq_len <= most:
            raise ValueError(f"score_seq_len={self.score_seq_len} out of range: allowed 2..{most}")
        if self.d_vocab < 3:
            raise ValueError(f"d_vocab={self.d_vocab} out of range: allowed >= 3 (BOS + 2 tokens)")

    def model_config(self) -> ToyConfig:
        return ToyConfig(n_layers=self.n_layers, d_model=self.d_model, n_heads=self.n_heads,
                         d_vocab=self.d_vocab, n_ctx=self.n_ctx)


# ----------------------------------------------------------------------------- data

def repeat_batch(cfg: TrainConfig, batch: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """[BOS] + random tokens 1..d_vocab-1 with one segment of length L ~ U[seg_min, seg_max]
    starting at s copied to a later start d (s + L <= d, d + L <= n_ctx).
    Returns tokens [batch, n_ctx] and repeat_mask [batch, n_ctx - 1]: True where the *target*
    (the next token) is predictable from the earlier copy, i.e. targets d+1 .. d+L-1."""
    n = cfg.n_ctx
    tokens = torch.randint(1, cfg.d_vocab, (batch, n), generator=gen)
    tokens[:, 0] = ToyConfig.bos_token_id  # every sequence starts with BOS, like the detection input
    length = torch.randint(cfg.seg_min, cfg.seg_max + 1, (batch,), generator=gen)
    # s uniform in [1, n - 2L], then d uniform in [s + L, n - L]: both copies fit, never overlap.
    src = 1 + (torch.rand(batch, generator=gen) * (n - 2 * length)).long()
    dst = src + length + (torch.rand(batch, generator=gen) * (n - src - 2 * length + 1)).long()
    pos = torch.arange(n)[None]
    in_copy = (pos >= dst[:, None]) & (pos < (dst + length)[:, None])
    source_pos = torch.where(in_copy, pos - dst[:, None] + src[:, None], pos)
    tokens = tokens.gather(1, source_pos)
    target = pos[:, 1:]  # target position of each prediction
    mask = (target > dst[:, None]) & (target < (dst + length)[:, None])
    return tokens, mask


# ----------------------------------------------------------------------------- training

@contextmanager
def torch_threads(n: int):
    """Run with exactly n intra-op threads (results depend on it), then restore."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def token_losses(model: AttnOnlyTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy per prediction: [batch, n_ctx - 1]."""
    logits = model(tokens)
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1), reduction="none"
    ).view(tokens.shape[0], -1)


@torch.no_grad()
def split_losses(model, tokens, mask) -> tuple[float, float]:
    """(loss on repeat-predictable targets, loss on every other target)."""
    losses = token_losses(model, tokens)
    return float(losses[mask].mean()), float(losses[~mask].mean())


def log_row(step: int, seconds: float, train_loss: float, wrapped, eval_data, cfg: TrainConfig) -> dict:
    """One log line: losses on the fixed eval batch, best scores through interp.Model."""
    repeat_loss, other_loss = split_losses(wrapped.module, *eval_data)
    scores = induction_scores(wrapped, seq_len=cfg.score_seq_len, batch=cfg.score_batch, seed=cfg.seed)
    ind, prev = scores["induction"][-1], scores["previous_token"][0]  # last layer, first layer
    return {"step": step, "seconds": seconds, "train_loss": train_loss, "repeat_loss": repeat_loss,
            "other_loss": other_loss, "induction_score": float(ind.max()), "induction_head": int(ind.argmax()),
            "prev_token_score": float(prev.max()), "prev_token_head": int(prev.argmax())}


def train(cfg: TrainConfig, *, verbose: bool = False, progress: bool = False) -> TrainingRun:
    """Train from scratch and log every cfg.log_every steps. Deterministic for a given cfg.
    progress: a bar on stderr (latest logged repeat loss and induction score); verbose: each log row on stderr."""
    t0, c0 = time.perf_counter(), time.process_time()
    with torch_threads(cfg.threads):
        torch.manual_seed(cfg.seed)  # nothing draws from it, but keep any stray use reproducible
        model = AttnOnlyTransformer(cfg.model_config(), seed=cfg.seed)
        wrapped = Model.from_module(model, name=f"toy-{cfg.n_layers}L-seed{cfg.seed}")
        gen = torch.Generator().manual_seed(cfg.seed)
        eval_data = repeat_batch(cfg, cfg.eval_batch, torch.Generator().manual_seed(cfg.seed + 10_000))
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                betas=tuple(cfg.betas))
        log, train_loss = [], float("nan")
        shown = bar(total=cfg.steps, desc=f"train {cfg.n_layers}L seed {cfg.seed}", enabled=progress, unit="step")
        for step in range(cfg.steps + 1):
            if step % cfg.log_every == 0 or step == cfg.steps:
                model.eval()
                row = log_row(step, time.perf_counter() - t0, train_loss, wrapped, eval_data, cfg)
                log.append(row)
                shown.set_postfix_str(f"repeat loss {row['repeat_loss']:.2f}, induction {row['induction_score']:.2f}",
                                      refresh=False)
                if verbose and progress:
                    shown.write(_fmt_row(row), file=sys.stderr)  # above the bar, which emit would garble
                elif verbose:
                    emit(_fmt_row(row))
            if step == cfg.steps:
                break
            shown.update(1)
            model.train()
            tokens, _ = repeat_batch(cfg, cfg.batch_size, gen)
            loss = token_losses(model, tokens).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            train_loss = loss.item()
        shown.close()
        kcomp = k_composition_check(wrapped, eval_data, cfg) if cfg.n_layers >= 2 else None
    return TrainingRun(cfg=cfg, log=log, model=model, seconds=time.perf_counter() - t0,
                       cpu_seconds=time.process_time() - c0, k_composition=kcomp)


def _fmt_row(row: dict) -> str:
    return (f"step {row['step']:>5}  {row['seconds']:6.1f}s  repeat {row['repeat_loss']:.3f}  other "
            f"{row['other_loss']:.3f}  induction {row['induction_score']:.3f} (H{row['induction_head']})  "
            f"prev-token L0 {row['prev_token_score']:.3f} (H{row['prev_token_head']})")


# ----------------------------------------------------------------------------- K-composition

@torch.no_grad()
def k_composition_check(wrapped, eval_data, cfg: TrainConfig) -> dict:
    """Ablate (zero) the layer-0 previous-token head and see the layer-1 induction behaviour go;
    ablating the layer-0 head with the lowest previous-token score is the control."""
    scores = induction_scores(wrapped, seq_len=cfg.score_seq_len, batch=cfg.score_batch, seed=cfg.seed)
    prev = scores["previous_token"][0]
    prev_head, other_head = int(prev.argmax()), int(prev.argmin())
    out = {"prev_token_head": prev_head, "control_head": other_head,
           "induction_score": float(scores["induction"][-1].max()),
           "repeat_loss": split_losses(wrapped.module, *eval_data)[0]}
    for key, head in (("ablate_prev_token_head", prev_head), ("ablate_control_head", other_head)):
        with wrapped.ablate_heads([(0, head)], mode="zero"):
            s = induction_scores(wrapped, seq_len=cfg.score_seq_len, batch=cfg.score_batch, seed=cfg.seed)
            out[key] = {"induction_score": float(s["induction"][-1].max()),
                        "repeat_loss": split_losses(wrapped.module, *eval_data)[0]}
    return out


# ----------------------------------------------------------------------------- phase change

def transition_step(steps: np.ndarray, repeat_loss: np.ndarray) -> int:
    """The step where the repeat loss falls fastest: the midpoint of the steepest decrease between
    consecutive logs of the repeat loss (measured on the fixed evaluation batch, so it is smooth),
    searched after the first 10% of the run (the first steps only bring the loss from the random
    init down to the uniform level ln(d_vocab - 1))."""
    slope = np.diff(repeat_loss) / np.diff(steps)
    start = max(1, int(np.searchsorted(steps, 0.1 * steps[-1])))
    i = start + int(np.argmin(slope[start:]))
    return int(steps[i] + (steps[i + 1] - steps[i]) // 2)


@dataclass(repr=False)
class TrainingRun(Result):
    """Log and summary of one from-scratch run."""

    cfg: TrainConfig
    log: list
    model: AttnOnlyTransformer
    seconds: float  # wall clock
    cpu_seconds: float = float("nan")  # CPU time of the process (wall clock inflates when cores are shared)
    k_composition: dict | None = None
    window: int = 200  # "before"/"after" = the logged values this many steps either side of the transition

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.log).set_index("step")

    def _column(self, name) -> np.ndarray:
        return np.array([row[name] for row in self.log], dtype=float)

    @property
    def transition_step(self) -> int:
        return transition_step(self._column("step"), self._column("repeat_loss"))

    def _at(self, name: str, step: int) -> float:
        """Logged value at the last logged step <= step (clamped to the run)."""
        steps = self._column("step")
        i = int(np.clip(np.searchsorted(steps, step, side="right") - 1, 0, len(steps) - 1))
        return float(self._column(name)[i])

    def summary_dict(self) -> dict:
        t = self.transition_step
        before, after = self._at("induction_score", t - self.window), self._at("induction_score", t + self.window)
        rep_before, rep_after = self._at("repeat_loss", t - self.window), self._at("repeat_loss", t + self.window)
        final = self.log[-1]
        out = {"layers": self.cfg.n_layers, "seed": self.cfg.seed, "steps": self.cfg.steps,
               "transition_step": t, "window": self.window,
               "induction_score_before": before, "induction_score_after": after,
               "previous_token_score_before": self._at("prev_token_score", t - self.window),
               "previous_token_score_after": self._at("prev_token_score", t + self.window),
               "repeat_loss_before": rep_before, "repeat_loss_after": rep_after,
               "final_repeat_loss": final["repeat_loss"], "final_other_loss": final["other_loss"],
               "final_induction_score": final["induction_score"],
               "final_previous_token_score": final["prev_token_score"],
               "max_induction_score": float(self._column("induction_score").max()),
               "phase_change": bool(before < 0.1 and after > 0.4 and rep_before - rep_after > 1.0),
               "seconds": self.seconds, "cpu_seconds": self.cpu_seconds}
        if self.k_composition is not None:
            out["k_composition"] = self.k_composition
        return out

    def summary(self) -> str:
        s = self.summary_dict()
        verdict = "phase change at step" if s["phase_change"] else "no phase change; steepest repeat-loss drop at step"
        return (f"{self.cfg.n_layers}-layer seed {self.cfg.seed}: {verdict} {s['transition_step']} "
                f"(repeat loss {s['repeat_loss_before']:.2f} -> {s['repeat_loss_after']:.2f}, induction score "
                f"{s['induction_score_before']:.2f} -> {s['induction_score_after']:.2f}, L0 previous-token "
                f"{s['previous_token_score_before']:.2f} -> {s['previous_token_score_after']:.2f}; "
                f"+-{self.window} steps), {self.seconds:.0f} s")

    def to_json(self) -> dict:
        return jsonable({"result": "TrainingRun", "summary": self.summary(), **self.summary_dict(),
                         "config": asdict(self.cfg), "log": self.log})

    def plot(self, *, out=None, control: TrainingRun | None = None):
        """Repeat loss, loss elsewhere, induction and previous-token scores on one step axis,
        the transition marked; the 1-layer control dashed if given."""
        fig = new_figure(figsize=(8, 6), layout="constrained")
        ax_loss, ax_score = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2, sharex=None)
        runs = [(self, "-", f"{self.cfg.n_layers}-layer")]
        if control is not None:
            runs.append((control, "--", f"{control.cfg.n_layers}-layer control"))
        for run, ls, label in runs:
            steps = run._column("step")
            ax_loss.plot(steps, run._column("repeat_loss"), ls, color="C3", label=f"repeat loss ({label})")
            ax_loss.plot(steps, run._column("other_loss"), ls, color="C7", label=f"loss elsewhere ({label})")
            ax_score.plot(steps, run._column("induction_score"), ls, color="C0",
                          label=f"best induction score, last layer ({label})")
            if run.cfg.n_layers >= 2:
                ax_score.plot(steps, run._column("prev_token_score"), ls, color="C2",
                              label=f"best previous-token score, layer 0 ({label})")
        t = self.transition_step
        for ax in (ax_loss, ax_score):
            ax.axvline(t, color="k", ls=":", lw=1)
            ax.legend(fontsize=7)
        ax_loss.set(ylabel="nats", title=f"induction-head phase change (transition at step {t})")
        ax_score.set(xlabel="training step", ylabel="score", ylim=(0, 1))
        ax_score.sharex(ax_loss)
        return save_fig(fig, out)

    def save(self, out_dir, stem: str) -> dict:
        """Checkpoint (safetensors) + log (CSV) under out_dir; returns their paths."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = {"checkpoint": out_dir / f"{stem}.safetensors", "log": out_dir / f"{stem}_log.csv"}
        self.model.save(paths["checkpoint"])
        self.to_frame().to_csv(paths["log"])
        return {k: str(v) for k, v in paths.items()}


# ----------------------------------------------------------------------------- demonstration

@dataclass(repr=False)
class Reproduction(Result):
    """The demonstration: 2-layer run(s) over seeds and the 1-layer control."""

    runs: list  # TrainingRun per seed (2-layer), or the single run when layers == 1
    control: TrainingRun | None
    seconds: float
    cpu_seconds: float = float("nan")
    files: dict = field(default_factory=dict)

    @property
    def main(self) -> TrainingRun:
        return self.runs[0]

    def to_frame(self):
        import pandas as pd

        rows = [{**{k: v for k, v in r.summary_dict().items() if k != "k_composition"}, "control": False}
                for r in self.runs]
        if self.control is not None:
            rows.append({**{k: v for k, v in self.control.summary_dict().items() if k != "k_composition"},
                         "control": True})
        return pd.DataFrame(rows)

    def to_json(self) -> dict:
        """The main run's summary at the top level (the CLI's --json document), the seeds and the control."""
        out = {"result": "Reproduction", "summary": self.summary(), **self.main.summary_dict()}
        out["seconds"] = self.seconds
        out["cpu_seconds"] = self.cpu_seconds
        out["run_seconds"] = self.main.seconds
        if len(self.runs) > 1:
            steps = [r.transition_step for r in self.runs]
            out["seeds"] = [{"seed": r.cfg.seed, "transition_step": r.transition_step,
                             "phase_change": r.summary_dict()["phase_change"],
                             "induction_score_after": r.summary_dict()["induction_score_after"],
                             "seconds": r.seconds} for r in self.runs]
            out["transition_step_mean"] = float(np.mean(steps))
            out["transition_step_std"] = float(np.std(steps))
        if self.control is not None:
            out["control"] = self.control.summary_dict()
        out["config"] = asdict(self.main.cfg)
        out["files"] = self.files
        return jsonable(out)


    def summary(self) -> str:
        lines = [r.summary() for r in self.runs]
        if len(self.runs) > 1:
            steps = [r.transition_step for r in self.runs]
            lines.append(f"transition step over {len(steps)} seeds: {np.mean(steps):.0f} ± {np.std(steps):.0f} "
                         f"(min {min(steps)}, max {max(steps)})")
        if self.control is not None:
            lines.append("control: " + self.control.summary())
        k = self.main.k_composition
        if k:
            lines.append(f"K-composition: zero-ablating the L0 previous-token head H{k['prev_token_head']} takes "
                         f"the layer-1 induction score {k['induction_score']:.2f} -> "
                         f"{k['ablate_prev_token_head']['induction_score']:.2f} and the repeat loss "
                         f"{k['repeat_loss']:.2f} -> {k['ablate_prev_token_head']['repeat_loss']:.2f} "
                         f"(control L0H{k['control_head']}: "
                         f"{k['ablate_control_head']['induction_score']:.2f}, "
                         f"{k['ablate_control_head']['repeat_loss']:.2f})")
        lines.append(f"total {self.seconds:.0f} s wall clock, {self.cpu_seconds:.0f} s CPU")
        return "\n".join(lines)

    def plot(self, *, out=None):
        return self.main.plot(out=out, control=self.control)


def reproduce(out_dir=None, *, layers: int = 2, seeds: int = 1, steps: int | None = None,
              threads: int = 1, workers: int = 1, verbose: bool = False, progress: bool = False,
              **overrides) -> Reproduction:
    """The full demonstration. layers=2: the 2-layer run for seeds 0..seeds-1 plus the 1-layer
    control (seed 0); layers=1: the 1-layer model alone. Saves checkpoints, CSV logs, the plot and
    summary.json under out_dir if given. progress / verbose: see :func:`train` (verbose also prints each run's
    summary on stderr).

    ``workers``: the runs are independent, so with workers > 1 they train in that many fresh (spawned) processes
    at once, each on ``threads`` threads: the same weights and logs bit for bit as one after another (a run's
    numbers depend on its config and thread count only), in about 1/workers of the wall clock when the machine has
    workers x threads cores. A script that calls this with workers > 1 needs the usual ``if __name__ ==
    "__main__":`` guard, as any use of spawned processes does; progress bars are off in the workers."""
    if layers not in (1, 2):
        raise ValueError(f"layers={layers!r} out of range: allowed 1 or 2")
    check_int("seeds", seeds, 1)
    check_int("workers", workers, 1)
    t0, c0 = time.perf_counter(), time.process_time()
    base = TrainConfig(threads=threads, **overrides)
    if steps is not None:
        base = replace(base, steps=steps)
    cfgs = [replace(base, n_layers=layers, seed=seed) for seed in range(seeds if layers == 2 else 1)]
    labels = [""] * len(cfgs)
    if layers == 2:
        cfgs, labels = [*cfgs, replace(base, n_layers=1, seed=0)], [*labels, "control: "]   # the control, last
    trained = _train_all(cfgs, labels, workers, verbose=verbose, progress=progress)
    runs, control = (trained[:-1], trained[-1]) if layers == 2 else (trained, None)
    away = sum(r.cpu_seconds for r in trained) if min(workers, len(cfgs)) > 1 else 0.0  # the workers' CPU time
    result = Reproduction(runs=runs, control=control, seconds=time.perf_counter() - t0,
                          cpu_seconds=time.process_time() - c0 + away)
    if out_dir is not None:
        result.files = save_reproduction(result, out_dir)
    return result


def _train_all(cfgs: list, labels: list, workers: int, *, verbose: bool, progress: bool) -> list:
    """Every config trained, in order; each run's summary emitted, after its label, as it comes in."""
    def told(run, label):
        emit(label + run.summary(), verbose)
        return run

    if min(workers, len(cfgs)) == 1:
        return [told(train(cfg, verbose=verbose, progress=progress), label) for cfg, label in zip(cfgs, labels)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: a fork of a process with running threads (a Jupyter kernel's, torch's pool) can hang
    pool = ProcessPoolExecutor(min(workers, len(cfgs)), mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = [pool.submit(_train_detached, cfg) for cfg in cfgs]
        return [told(_attached(cfg, f.result()), label) for cfg, f, label in zip(cfgs, futures, labels)]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # after an error or Ctrl-C the queued runs do not start


def _train_detached(cfg: TrainConfig) -> dict:
    """One run in a worker process, returned as plain data: the weights as a state dict, not the module."""
    run = train(cfg)
    return {"log": run.log, "state": run.model.state_dict(), "seconds": run.seconds,
            "cpu_seconds": run.cpu_seconds, "k_composition": run.k_composition}


def _attached(cfg: TrainConfig, done: dict) -> TrainingRun:
    model = AttnOnlyTransformer(cfg.model_config(), seed=cfg.seed)
    model.load_state_dict(done["state"])
    return TrainingRun(cfg=cfg, log=done["log"], model=model, seconds=done["seconds"],
                       cpu_seconds=done["cpu_seconds"], k_composition=done["k_composition"])


def save_reproduction(result: Reproduction, out_dir) -> dict:
    out_dir = Path(out_dir)
    files = {}
    for run in result.runs:
        stem = f"{run.cfg.n_layers}L_seed{run.cfg.seed}"
        files[stem] = run.save(out_dir, f"toy_{stem}")
    if result.control is not None:
        files["control"] = result.control.save(out_dir, "toy_1L_control")
    files["plot"] = str(out_dir / "phase_change.png")
    result.plot(out=files["plot"])
    files["summary"] = str(out_dir / "summary.json")
    Path(files["summary"]).write_text(json.dumps(result.to_json() | {"files": files}, indent=2, default=float))
    return files
