"""Per-head attention statistics averaged over a corpus: ``interp.head_scan(model, docs)``.

The four statistics of ``attention.per_query_stats`` (entropy, first_token, prev_token, mean_offset) are summed at
every real query after BOS, inside the ``hook_pattern`` hooks, batch by batch — memory holds one layer's pattern
of one batch at a time, never a cache. :class:`HeadStats` is an ``accumulate.Accumulator``: float64 sums and
counts that ranks reduce by summing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.corpus import documents
from ..core.inputs import layer_list
from ..core.results import Result, new_figure, save_fig
from .accumulate import Accumulator, scan
from .attention import per_query_stats

STAT_NAMES = ("entropy", "first_token", "prev_token", "mean_offset")


def head_stat_sums(patterns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sums over real queries of the four :func:`per_query_stats` -> float64 [4, head].

    patterns [batch, head, query, key] of one layer, mask [batch, pos] bool (False = right padding). Query 0
    (BOS) and padded queries are left out; a causal model's real queries never see padded keys."""
    p = patterns.to(torch.float64)
    w = mask.to(p.device, torch.float64).clone()
    w[:, 0] = 0
    return torch.stack([(v * w[:, None, :]).sum((0, 2)) for v in per_query_stats(p).values()])


@dataclass(repr=False)
class HeadStats(Result, Accumulator):
    """Mergeable corpus averages of the per-head statistics (``attention.head_stats``) at every real query after
    BOS.

    ``sums`` float64 [layer, 4, head] (entropy, first_token, prev_token, mean_offset summed over queries) and
    ``count`` (queries per head). ``merge`` adds both, so corpus shards scanned anywhere — other processes,
    torch.distributed ranks (``python -m interp.dist heads``) — combine to the one-pass result up to float64
    summation order. Every query counts once, so long documents weigh more than short ones."""

    sums: torch.Tensor
    count: int
    layers: list
    kv_groups: list
    docs: int = 0
    source: str = ""

    reduction = "sum"
    summed = ("sums", "count", "docs")

    @classmethod
    def empty(cls, model, layers) -> HeadStats:
        return cls(torch.zeros(len(layers), len(STAT_NAMES), model.n_heads, dtype=torch.float64), 0, list(layers),
                   [model.kv_group(h) for h in range(model.n_heads)], 0, getattr(model, "source", ""))

    @property
    def hook_names(self) -> list[str]:
        return [f"blocks.{layer}.attn.hook_pattern" for layer in self.layers]

    @property
    def means(self) -> torch.Tensor:
        """float64 [layer, 4, head]: the corpus averages."""
        if self.count == 0:
            raise ValueError("head statistics hold no queries yet")
        return self.sums / self.count

    # ------------------------------------------------------------------------------------------ accumulator
    def keep(self, name, pattern, batch):
        # reduced inside the hook, so a batch never holds more than one layer's [batch, head, query, key]
        return head_stat_sums(pattern.detach(), batch.mask).cpu()

    def add(self, batch, acts: dict) -> None:
        for i, name in enumerate(self.hook_names):
            self.sums[i] += acts[name]
        self.count += int(batch.counted.sum())
        self.docs += len(batch.doc_ids)

    def merge(self, other: HeadStats) -> HeadStats:
        if not isinstance(other, HeadStats):
            raise ValueError(f"can only merge HeadStats, got {type(other).__name__}")  # noqa: TRY004
        if other.layers != self.layers or other.sums.shape != self.sums.shape:
            raise ValueError(f"cannot merge head statistics of layers {other.layers} into layers {self.layers}")
        return HeadStats(self.sums + other.sums, self.count + other.count, self.layers, self.kv_groups,
                         self.docs + other.docs, self.source)

    def state_dict(self) -> dict:
        tensors = {"sums": self.sums.contiguous(), "count": torch.tensor([self.count], dtype=torch.int64),
                   "docs": torch.tensor([self.docs], dtype=torch.int64)}
        return {"tensors": tensors, "meta": {"layers": list(self.layers), "kv_groups": list(self.kv_groups),
                                             "source": self.source}}

    @classmethod
    def from_state_dict(cls, state: dict) -> HeadStats:
        t, meta = state["tensors"], state["meta"]
        missing = [k for k in ("sums", "count", "docs") if k not in t] + \
                  [k for k in ("layers", "kv_groups") if k not in meta]
        if missing:
            raise ValueError(f"state lacks {missing}")
        return cls(t["sums"].to(torch.float64), int(t["count"].reshape(-1)[0]), list(meta["layers"]),
                   list(meta["kv_groups"]), int(t["docs"].reshape(-1)[0]), meta.get("source", ""))

    # ------------------------------------------------------------------------------------------ display
    def to_frame(self):
        """One row per (layer, head): kv_group and the four corpus averages."""
        import pandas as pd

        m = self.means
        rows = [{"layer": layer, "head": h, "kv_group": self.kv_groups[h],
                 **{name: float(m[i, j, h]) for j, name in enumerate(STAT_NAMES)}}
                for i, layer in enumerate(self.layers) for h in range(m.shape[2])]
        return pd.DataFrame(rows).set_index(["layer", "head"])

    def to_json(self) -> dict:
        return {**super().to_json(), "docs": self.docs, "queries": self.count, "layers": list(self.layers)}

    def summary(self) -> str:
        return (f"per-head attention statistics over {self.docs} documents ({self.count:,} queries per head), "
                f"{len(self.layers)} layers x {self.sums.shape[2]} heads")

    def plot(self, *, out=None):
        """One heatmap (layer x head) per statistic."""
        fig = new_figure(figsize=(4 * len(STAT_NAMES), 0.18 * len(self.layers) + 2))
        m = self.means.numpy()
        for j, name in enumerate(STAT_NAMES):
            ax = fig.add_subplot(1, len(STAT_NAMES), j + 1)
            im = ax.imshow(m[:, j, :], aspect="auto", cmap="viridis")
            ax.set(title=name, xlabel="head", ylabel="layer")
            ax.set_yticks(range(len(self.layers)), [str(x) for x in self.layers], fontsize=6)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
        fig.suptitle(self.summary(), fontsize=9)
        fig.tight_layout()
        return save_fig(fig, out)


def head_scan(model, docs=None, *, n_docs: int | None = None, layers=None, batch_size: int = 8, max_len: int = 128,
              progress: bool = False) -> HeadStats:
    """Average each head's statistics (entropy, first_token, prev_token, mean_offset) over a corpus.

    docs: Docs or strings (default: the first ``n_docs or 200`` Wikipedia summaries). The forward of each batch
    stops after the last requested layer's pattern."""
    docs = documents(docs, n_docs, default=200)
    state = HeadStats.empty(model, layer_list(model, layers))
    return scan(model, docs, state, batch_size=batch_size, max_len=max_len, progress=progress,
                desc="head statistics")
