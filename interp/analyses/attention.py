"""Per-head attention patterns: ``interp.attention(model, text)``.

The patterns are read from ``blocks.{l}.attn.hook_pattern`` only (the softmax the model actually used), for every
layer and head of one forward pass. Per-head statistics summarise each head's habit:

- ``entropy``      — nats of each query's distribution over keys (0 = looks at one token),
- ``first_token``  — weight on position 0 (BOS: the usual "attention sink"),
- ``prev_token``   — weight on the immediately preceding token,
- ``mean_offset``  — expected distance ``query - key`` of the attended token (0 = itself).

All four are averaged over query positions 1..n-1: position 0 can only attend to itself, so including it would
pull every head towards "first token" and zero entropy whatever the head does.

Grouped-query attention: query head ``h`` reads KV head ``h // (n_heads // n_kv_heads)`` (``model.kv_group``),
so the heads of one group share keys and values and differ only in their queries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.results import Result, new_figure, save_fig
from ..core.model import as_int  # noqa: F401  (re-exported: neurons imports it from here)


@dataclass(repr=False)
class AttentionResult(Result):
    patterns: torch.Tensor  # [layer, head, query, key], rows sum to 1, causal
    str_tokens: list[str]
    layers: list[int]  # model layer index of each entry along dim 0
    kv_groups: list[int]  # KV head read by each query head
    n_kv_heads: int
    source: str = ""

    # ------------------------------------------------------------------------------------------ access
    def _row(self, layer: int) -> int:
        layer = as_int(layer)
        if layer not in self.layers:
            raise ValueError(f"layer {layer!r} not in this result; captured layers: "
                             f"{self.layers[0]}..{self.layers[-1]}" if self.layers else "no layers captured")
        return self.layers.index(layer)

    def _head(self, head: int) -> int:
        n, head = self.patterns.shape[1], as_int(head)
        if not isinstance(head, int) or not -n <= head < n:
            raise ValueError(f"head {head!r} out of range: {n} heads per layer, allowed 0..{n - 1}")
        return head % n

    def pattern(self, layer: int, head: int) -> torch.Tensor:
        """[query, key] attention weights of one head."""
        return self.patterns[self._row(layer), self._head(head)]

    # ------------------------------------------------------------------------------------------ statistics
    def stats(self):
        """DataFrame, one row per (layer, head): kv_group, entropy, first_token, prev_token, mean_offset."""
        import pandas as pd

        s = head_stats(self.patterns)
        n_heads = self.patterns.shape[1]
        rows = []
        for i, layer in enumerate(self.layers):
            for h in range(n_heads):
                rows.append({"layer": layer, "head": h, "kv_group": self.kv_groups[h],
                             **{k: float(v[i, h]) for k, v in s.items()}})
        return pd.DataFrame(rows).set_index(["layer", "head"])

    def to_frame(self):
        return self.stats()

    def summary(self) -> str:
        n = len(self.str_tokens)
        return (f"attention patterns: {len(self.layers)} layers x {self.patterns.shape[1]} heads "
                f"({self.n_kv_heads} KV heads) over {n} tokens")

    # ------------------------------------------------------------------------------------------ plots
    def plot(self, layer: int, head: int, out=None):
        """Heatmap of one head: queries down, keys across, labelled with the tokens."""
        p = self.pattern(layer, head)
        n = p.shape[0]
        size = min(12.0, 2.5 + 0.32 * n)
        fig = new_figure(figsize=(size + 1.2, size))
        ax = fig.add_subplot(1, 1, 1)
        im = ax.imshow(p.numpy(), cmap="Blues", vmin=0, vmax=1)
        labels = [token_label(t) for t in self.str_tokens]
        if n <= 60:
            ax.set_xticks(range(n), labels, rotation=90, fontsize=8)
            ax.set_yticks(range(n), labels, fontsize=8)
        ax.set_xlabel("key (attended to)")
        ax.set_ylabel("query")
        g = self.kv_groups[self._head(head)]
        ax.set_title(f"layer {layer}, head {self._head(head)} (KV group {g})")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
        return save_fig(fig, out)

    def plot_layer(self, layer: int, out=None):
        """Grid of every head's pattern in one layer."""
        row = self._row(layer)
        n_heads, n = self.patterns.shape[1], self.patterns.shape[2]
        cols = math.ceil(math.sqrt(n_heads))
        rows = math.ceil(n_heads / cols)
        fig = new_figure(figsize=(3.2 * cols, 3.2 * rows))
        labels = [token_label(t) for t in self.str_tokens]
        for h in range(n_heads):
            ax = fig.add_subplot(rows, cols, h + 1)
            ax.imshow(self.patterns[row, h].numpy(), cmap="Blues", vmin=0, vmax=1)
            ax.set_title(f"L{layer}H{h} (kv {self.kv_groups[h]})", fontsize=9)
            if n <= 16:
                ax.set_xticks(range(n), labels, rotation=90, fontsize=6)
                ax.set_yticks(range(n), labels, fontsize=6)
            else:
                ax.set_xticks([])
                ax.set_yticks([])
        fig.suptitle(f"attention patterns, layer {layer}")
        fig.tight_layout()
        return save_fig(fig, out)


def per_query_stats(patterns: torch.Tensor) -> dict[str, torch.Tensor]:
    """The four statistics of every query: patterns [..., query, key] -> {name: [..., query]} (query 0 has no
    previous token: its prev_token is 0)."""
    n = patterns.shape[-1]
    pos = torch.arange(n, dtype=patterns.dtype, device=patterns.device)
    prev = torch.zeros_like(patterns[..., 0])
    prev[..., 1:] = patterns[..., 1:, :].diagonal(offset=0, dim1=-2, dim2=-1)  # query q, key q-1
    return {"entropy": -(patterns * torch.log(patterns.clamp_min(1e-30))).sum(-1),
            "first_token": patterns[..., 0],
            "prev_token": prev,
            "mean_offset": (patterns * (pos[:, None] - pos[None, :])).sum(-1)}


def head_stats(patterns: torch.Tensor) -> dict[str, torch.Tensor]:
    """Statistics of patterns [..., query, key], averaged over queries 1..n-1 -> {name: [...]}."""
    n = patterns.shape[-1]
    if n < 2:
        raise ValueError(f"need at least 2 tokens (BOS + one) for attention statistics, got {n}")
    return {name: v[..., 1:].mean(-1) for name, v in per_query_stats(patterns).items()}


# ---------------------------------------------------------------------------------------------- corpus scan
STAT_NAMES = ("entropy", "first_token", "prev_token", "mean_offset")


def layer_list(model, layers) -> list[int]:
    """``None`` -> every layer; an int -> [it]; a list -> sorted, de-duplicated; each checked by the model."""
    if layers is None:
        return list(range(model.n_layers))
    if isinstance(as_int(layers), int) and not isinstance(layers, bool):
        return [model.check_layer(layers)]
    out = sorted({model.check_layer(layer) for layer in layers})
    if not out:
        raise ValueError(f"no layers given; allowed: 0..{model.n_layers - 1}")
    return out


def head_stat_sums(patterns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sums over real queries of the four :func:`per_query_stats` -> float64 [4, head].

    patterns [batch, head, query, key] of one layer, mask [batch, pos] bool (False = right padding). Query 0
    (BOS) and padded queries are left out; a causal model's real queries never see padded keys."""
    p = patterns.to(torch.float64)
    w = mask.to(p.device, torch.float64).clone()
    w[:, 0] = 0
    return torch.stack([(v * w[:, None, :]).sum((0, 2)) for v in per_query_stats(p).values()])


@dataclass(repr=False)
class HeadStats(Result):
    """Mergeable corpus averages of the per-head statistics (``head_stats``) at every real query after BOS.

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

    @classmethod
    def empty(cls, model, layers) -> HeadStats:
        return cls(torch.zeros(len(layers), len(STAT_NAMES), model.n_heads, dtype=torch.float64), 0, list(layers),
                   [model.kv_group(h) for h in range(model.n_heads)], 0, getattr(model, "source", ""))

    @property
    def means(self) -> torch.Tensor:
        """float64 [layer, 4, head]: the corpus averages."""
        if self.count == 0:
            raise ValueError("head statistics hold no queries yet")
        return self.sums / self.count

    def merge(self, other: HeadStats) -> HeadStats:
        if not isinstance(other, HeadStats):
            raise ValueError(f"can only merge HeadStats, got {type(other).__name__}")  # noqa: TRY004
        if other.layers != self.layers or other.sums.shape != self.sums.shape:
            raise ValueError(f"cannot merge head statistics of layers {other.layers} into layers {self.layers}")
        return HeadStats(self.sums + other.sums, self.count + other.count, self.layers, self.kv_groups,
                         self.docs + other.docs, self.source)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"sums": self.sums.contiguous(), "count": torch.tensor([self.count]), "docs": torch.tensor([self.docs]),
                "layers": torch.tensor(self.layers, dtype=torch.int64),
                "kv_groups": torch.tensor(self.kv_groups, dtype=torch.int64)}

    @classmethod
    def from_state_dict(cls, sd: dict, source: str = "") -> HeadStats:
        missing = [k for k in ("sums", "count", "docs", "layers", "kv_groups") if k not in sd]
        if missing:
            raise ValueError(f"state dict lacks {missing}")
        return cls(sd["sums"].to(torch.float64), int(sd["count"][0]), sd["layers"].tolist(), sd["kv_groups"].tolist(),
                   int(sd["docs"][0]), source)

    def save(self, path) -> None:
        from safetensors.torch import save_file

        save_file(self.state_dict(), str(path), metadata={"source": self.source})

    @classmethod
    def load(cls, path) -> HeadStats:
        from safetensors.torch import load_file

        return cls.from_state_dict(load_file(str(path)))

    def to_frame(self):
        """One row per (layer, head): kv_group and the four corpus averages."""
        import pandas as pd

        m = self.means
        rows = [{"layer": layer, "head": h, "kv_group": self.kv_groups[h],
                 **{name: float(m[i, j, h]) for j, name in enumerate(STAT_NAMES)}}
                for i, layer in enumerate(self.layers) for h in range(m.shape[2])]
        return pd.DataFrame(rows).set_index(["layer", "head"])

    def summary(self) -> str:
        return (f"per-head attention statistics over {self.docs} documents ({self.count:,} queries per head), "
                f"{len(self.layers)} layers x {self.sums.shape[2]} heads")

    def plot(self, out=None):
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

    docs: Docs or strings (default: the first ``n_docs or 200`` Wikipedia summaries). Patterns are reduced inside
    the ``hook_pattern`` hooks, batch by batch, so memory holds one layer's pattern of one batch at a time."""
    from ..core.corpus import documents, token_batches

    docs = documents(docs, n_docs, default=200)
    layers = layer_list(model, layers)
    state = HeadStats.empty(model, layers)
    batch = {}

    def reducer(i):
        def fold(pattern, hook):  # [batch, head, query, key]
            state.sums[i] += head_stat_sums(pattern.detach(), batch["mask"]).cpu()
        return fold

    from tqdm.auto import tqdm

    bar = tqdm(total=len(docs), disable=not progress, desc="head statistics", unit="doc", leave=False)
    hooks = [(f"blocks.{layer}.attn.hook_pattern", reducer(i)) for i, layer in enumerate(layers)]
    try:
        with torch.no_grad(), model.hooks(hooks, description="head_scan"):
            for toks, mask, idx in token_batches(model, docs, max_len=max_len, batch_size=batch_size):
                batch["mask"] = mask
                model.run(toks, stop_at_layer=max(layers) + 1)
                q = mask.clone()
                q[:, 0] = False
                state.count += int(q.sum())
                state.docs += len(idx)
                bar.update(len(idx))
    finally:
        bar.close()
    return state


def token_label(tok: str) -> str:
    """A token as a plot label: visible whitespace, no matplotlib mathtext."""
    return tok.replace("\n", "\\n").replace("\t", "\\t").replace("$", r"\$") or "''"


def attention(model, text, *, layers=None) -> AttentionResult:
    """Attention patterns of every head for one text (or a [pos] / [1, pos] token tensor).

    ``layers``: an int or a list of layers to capture (default: all). Patterns come from
    ``blocks.{l}.attn.hook_pattern`` of a single forward pass."""
    layers = layer_list(model, layers)
    toks = model.to_tokens(text)
    if toks.shape[0] != 1:
        raise ValueError(f"attention() takes one text; got a batch of {toks.shape[0]}")
    if toks.shape[1] < 2:
        raise ValueError(f"need at least 2 tokens (BOS + one) to look at attention, got {toks.shape[1]}")
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in layers]
    cache = model.cache(toks, names)
    patterns = torch.stack([cache[n][0] for n in names])  # [layer, head, q, k]
    return AttentionResult(patterns=patterns, str_tokens=model.to_str_tokens(toks), layers=layers,
                           kv_groups=[model.kv_group(h) for h in range(model.n_heads)],
                           n_kv_heads=model.n_kv_heads, source=getattr(model, "source", ""))


# ---------------------------------------------------------------------------------------------- CLI
def add_cli(subparsers) -> None:
    from ..cli import add_common

    p = subparsers.add_parser("attention", help="attention pattern of one head (and stats of its layer)")
    p.add_argument("text", help="text to analyse (BOS is prepended)")
    p.add_argument("--layer", type=int, required=True, help="layer index")
    p.add_argument("--head", type=int, required=True, help="query head index")
    p.add_argument("--out", default=None, help="save the heatmap as this PNG")
    add_common(p)  # --model, --device, --json
    p.set_defaults(func=cli_attention)


def cli_attention(args, model=None) -> dict:
    """Handler of ``interp attention``; ``model`` lets tests pass a loaded model."""
    if model is None:
        from ..cli import load_model

        model = load_model(args)
    layer, head = model.check_layer(args.layer), model.check_head(args.head)
    res = attention(model, args.text, layers=[layer])
    if args.out:
        res.plot(layer, head, out=args.out)
    p = res.pattern(layer, head)
    stats = res.stats()
    mine = {k: float(v) for k, v in stats.loc[(layer, head)].items() if k != "kv_group"}
    top = [{"query": res.str_tokens[q], "key": res.str_tokens[int(p[q].argmax())], "key_pos": int(p[q].argmax()),
            "weight": float(p[q].max())} for q in range(p.shape[0])]
    lines = [f"layer {layer} head {head} (KV group {res.kv_groups[head]} of {res.n_kv_heads}); "
             + ", ".join(f"{k} {v:.3f}" for k, v in mine.items()),
             "query -> most attended key (weight):"]
    lines += [f"  {q:3d} {t['query']!r:>16} -> {t['key_pos']:3d} {t['key']!r} ({t['weight']:.2f})"
              for q, t in enumerate(top)]
    lines.append(f"layer {layer}, all heads:")
    lines += ["  " + s for s in stats.round(3).to_string().splitlines()]
    if args.out:
        lines.append(f"heatmap saved to {args.out}")
    return {"_text": "\n".join(lines), "layer": layer, "head": head, "kv_group": res.kv_groups[head],
            "tokens": res.str_tokens, "pattern": [[round(float(x), 6) for x in row] for row in p],
            "stats": mine, "most_attended": top,
            "layer_stats": stats.reset_index().to_dict(orient="records"), "out": args.out}
