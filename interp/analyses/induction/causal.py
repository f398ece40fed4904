"""The causal check of induction heads: ablate the top heads and compare with random heads of the same layers.

``ablation_check`` mean- (or zero-) ablates the top-k induction heads of a scan and measures the rise of the
repeated-half loss on held-out [BOS] + R + R sequences. The baseline is ``n_random`` seeded draws of k random heads
outside the top set; by default each draw is *layer-matched* (it has as many heads in each layer as the top set),
because heads of different layers differ in how much an ablation costs (an early head feeds every later layer). The
result reports the top set's rise against the spread of the random rises (mean, SD, max, how many SDs above the
mean, and its rank among the draws), not a ratio of means, which explodes when the random mean is near zero.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from ...core.inputs import check_int
from ...core.results import Result, jsonable, new_figure, save_fig
from .heads import (
    InductionScan,
    check_positive,
    half_losses,
    induction_heads,
    per_position_loss,
    repeated_tokens,
)


def repeated_half_loss(model, tokens: torch.Tensor, seq_len: int) -> float:
    """Mean loss on the predictable targets of the second copy (see heads.half_losses)."""
    return half_losses(per_position_loss(model.run(tokens), tokens), seq_len)[1]


def check_heads(model, heads) -> list[tuple[int, int]]:
    """Validate [(layer, head), ...] against the model -> normalized list."""
    heads = [(model.check_layer(layer), model.check_head(head)) for layer, head in heads]
    if not heads:
        raise ValueError("no heads given; pass [(layer, head), ...]")
    return heads


def random_heads(model, k: int, exclude, seed: int, *, like=None) -> list[tuple[int, int]]:
    """k distinct heads not in `exclude`, drawn with a torch.Generator seeded with `seed`.
    like=None: uniformly over all layers. like=[(layer, head), ...] (layer-matched): as many heads in each layer
    as `like` has there (k must equal len(like)), each layer's heads drawn uniformly from its heads outside
    `exclude`. Returned sorted."""
    exclude = set(exclude)
    gen = torch.Generator().manual_seed(seed)
    if like is None:
        pool = [(layer, head) for layer in range(model.n_layers) for head in range(model.n_heads)
                if (layer, head) not in exclude]
        check_positive("k", k, len(pool))
        return sorted(pool[int(i)] for i in torch.randperm(len(pool), generator=gen)[:k])
    counts = Counter(layer for layer, _ in like)
    if k != len(like):
        raise ValueError(f"k={k!r} with layer matching: allowed only len(like) = {len(like)}")
    out = []
    for layer in sorted(counts):
        pool = [(layer, head) for head in range(model.n_heads) if (layer, head) not in exclude]
        if len(pool) < counts[layer]:
            raise ValueError(f"layer {layer} has {len(pool)} heads outside the excluded set, {counts[layer]} "
                             f"needed for a layer-matched draw; allowed: at most {len(pool)} (or match_layers=False)")
        out += [pool[int(i)] for i in torch.randperm(len(pool), generator=gen)[:counts[layer]]]
    return sorted(out)


@dataclass(repr=False)
class AblationCheck(Result):
    """Rise of the repeated-half loss when ablating the top-k induction heads vs k random heads (n_random draws,
    layer-matched unless match_layers is False)."""

    top_heads: list
    mode: str
    baseline_loss: float
    top_loss: float
    random_heads: list  # one list of heads per draw
    random_losses: list
    seq_len: int
    batch: int
    seed: int
    model_name: str
    match_layers: bool = True

    @property
    def k(self) -> int:
        return len(self.top_heads)

    @property
    def top_rise(self) -> float:
        return self.top_loss - self.baseline_loss

    @property
    def random_rises(self) -> list[float]:
        return [x - self.baseline_loss for x in self.random_losses]

    @property
    def random_rise_mean(self) -> float:
        return float(np.mean(self.random_rises))

    @property
    def random_rise_std(self) -> float:
        """Sample SD (ddof 1) of the random rises; NaN for a single draw."""
        rises = self.random_rises
        return float(np.std(rises, ddof=1)) if len(rises) > 1 else float("nan")

    @property
    def random_rise_max(self) -> float:
        return float(np.max(self.random_rises))

    @property
    def sds_above(self) -> float:
        """(top rise - random mean) / random SD."""
        sd = self.random_rise_std
        return float((self.top_rise - self.random_rise_mean) / sd) if sd > 0 else float("nan")

    @property
    def n_random_at_least_top(self) -> int:
        """How many random draws raise the loss at least as much as the top set."""
        return int(sum(r >= self.top_rise for r in self.random_rises))

    @property
    def empirical_p(self) -> float:
        """(1 + draws at least as large) / (1 + draws): the smallest value n draws can give is 1 / (n + 1)."""
        return (1 + self.n_random_at_least_top) / (1 + len(self.random_rises))

    @property
    def ratio(self) -> float:
        """Demoted: top rise / mean random rise (inf if the random mean is <= 0); unstable when that mean is near
        zero, so the summary reports the spread instead. Kept for callers that read it."""
        denom = self.random_rise_mean
        return float(self.top_rise / denom) if denom > 1e-9 else float("inf")

    @property
    def baseline_name(self) -> str:
        return "layer-matched random" if self.match_layers else "random"

    def to_frame(self):
        import pandas as pd

        rows = [{"condition": "none", "heads": "", "loss": self.baseline_loss, "rise": 0.0},
                {"condition": f"top-{self.k}", "heads": _fmt_heads(self.top_heads), "loss": self.top_loss,
                 "rise": self.top_rise}]
        rows += [{"condition": f"random-{self.k} draw {i}", "heads": _fmt_heads(h), "loss": loss,
                  "rise": loss - self.baseline_loss}
                 for i, (h, loss) in enumerate(zip(self.random_heads, self.random_losses))]
        return pd.DataFrame(rows).set_index("condition")

    def to_json(self) -> dict:
        # jsonable: the ratio is inf when random heads do not raise the loss
        return jsonable({
            "result": "AblationCheck", "summary": self.summary(), "k": self.k, "mode": self.mode,
            "match_layers": self.match_layers, "top_heads": [list(h) for h in self.top_heads],
            "baseline_loss": self.baseline_loss, "top_k_loss": self.top_loss, "top_k_rise": self.top_rise,
            "random_k_rises": self.random_rises, "random_k_rise_mean": self.random_rise_mean,
            "random_k_rise_std": self.random_rise_std, "random_k_rise_max": self.random_rise_max,
            "sds_above_random_mean": self.sds_above, "n_random_at_least_top": self.n_random_at_least_top,
            "empirical_p": self.empirical_p, "ratio": self.ratio, "n_random_seeds": len(self.random_losses),
            "random_heads": [[list(h) for h in hs] for hs in self.random_heads], "seq_len": self.seq_len,
            "batch": self.batch, "seed": self.seed, "model": self.model_name})

    def summary(self) -> str:
        n = len(self.random_losses)
        rank = (f"above all {n} draws (empirical p = 1/{n + 1} = {self.empirical_p:.3f})"
                if self.n_random_at_least_top == 0 else
                f"matched or exceeded by {self.n_random_at_least_top} of {n} draws (empirical p = "
                f"{self.empirical_p:.3f})")
        return (f"{self.mode}-ablating the top-{self.k} induction heads raises the repeated-half loss by "
                f"{self.top_rise:+.3f} nats; {n} {self.baseline_name} {self.k}-head sets: mean "
                f"{self.random_rise_mean:+.3f}, SD {self.random_rise_std:.3f}, max {self.random_rise_max:+.3f}; "
                f"the top set is {self.sds_above:.1f} SDs above the random mean, {rank}")

    def plot(self, *, out=None):
        fig = new_figure(figsize=(6.5, 3.5), layout="constrained")
        ax = fig.add_subplot(1, 1, 1)
        labels = [f"top-{self.k}"] + [f"r{i}" for i in range(len(self.random_losses))]
        rises = [self.top_rise] + self.random_rises
        ax.bar(labels, rises, color=["C3"] + ["C0"] * len(self.random_losses))
        ax.axhline(self.random_rise_mean, color="C0", ls="--", lw=0.8, label=f"{self.baseline_name} mean")
        ax.tick_params(axis="x", labelsize=7)
        ax.set(ylabel="rise of repeated-half loss (nats)", title=f"{self.mode}-ablation, {self.model_name}")
        ax.legend(fontsize=8)
        return save_fig(fig, out)


def _fmt_heads(heads) -> str:
    return " ".join(f"L{layer}H{head}" for layer, head in heads)


def ablation_check(model, heads=None, *, k: int = 5, n_random: int = 5, mode: str = "mean",
                   seq_len: int = 50, batch: int = 16, seed: int = 0,
                   scan: InductionScan | None = None, match_layers: bool = True) -> AblationCheck:
    """Ablate `heads` (default: the top-k of `scan`, or of a fresh scan with `seed`) and, for `n_random` draws
    (draw i seeded with seed + i), as many random heads outside that set; measure the repeated-half loss on a
    held-out batch (seed + 1000, so head selection and evaluation use different sequences).
    match_layers (default): each random set has the same number of heads in each layer as `heads`.
    mode "mean" (default) replaces each ablated head's z by its mean over batch and positions of
    the same input; "zero" sets it to 0 (interp.Model.ablate_heads)."""
    if mode not in ("zero", "mean"):
        raise ValueError(f"mode={mode!r} not known; allowed: 'zero', 'mean'")
    if not isinstance(match_layers, bool):
        raise ValueError(f"match_layers={match_layers!r}; allowed: True or False")  # noqa: TRY004
    check_int("n_random", n_random, 1)
    if heads is None:
        check_positive("k", k, model.n_layers * model.n_heads - 1)
        scan = scan or induction_heads(model, seq_len=seq_len, batch=batch, seed=seed, copying=False)
        heads = scan.top_heads(k)
    heads = check_heads(model, heads)
    like = heads if match_layers else None
    rand_sets = [random_heads(model, len(heads), heads, seed=seed + i, like=like) for i in range(n_random)]
    tokens = repeated_tokens(model, seq_len, batch, seed=seed + 1000)
    baseline = repeated_half_loss(model, tokens, seq_len)
    with model.ablate_heads(heads, mode=mode):
        top_loss = repeated_half_loss(model, tokens, seq_len)
    rand_losses = []
    for rand in rand_sets:
        with model.ablate_heads(rand, mode=mode):
            rand_losses.append(repeated_half_loss(model, tokens, seq_len))
    return AblationCheck(top_heads=heads, mode=mode, baseline_loss=baseline, top_loss=top_loss,
                         random_heads=rand_sets, random_losses=rand_losses, seq_len=seq_len, batch=batch,
                         seed=seed, model_name=model.source, match_layers=match_layers)
