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
import operator
from dataclasses import dataclass

import torch

from ._results import Result, new_figure, save_fig


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


def as_int(x):
    """numpy / torch integer scalars -> int (as found in DataFrames); anything else is returned unchanged so the
    caller's range check rejects it with its own message."""
    if isinstance(x, bool):
        return x
    try:
        return operator.index(x)
    except TypeError:
        return x


def head_stats(patterns: torch.Tensor) -> dict[str, torch.Tensor]:
    """Statistics of patterns [..., query, key], averaged over queries 1..n-1 -> {name: [...]}."""
    n = patterns.shape[-1]
    if n < 2:
        raise ValueError(f"need at least 2 tokens (BOS + one) for attention statistics, got {n}")
    p = patterns[..., 1:, :]  # queries 1..n-1
    q = torch.arange(1, n, dtype=p.dtype)
    k = torch.arange(n, dtype=p.dtype)
    entropy = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)
    first = p[..., 0]
    prev = p.diagonal(offset=0, dim1=-2, dim2=-1)  # p[q-1 row index] = query q, key q-1
    offset = (p * (q[:, None] - k[None, :])).sum(-1)
    return {"entropy": entropy.mean(-1), "first_token": first.mean(-1), "prev_token": prev.mean(-1),
            "mean_offset": offset.mean(-1)}


def token_label(tok: str) -> str:
    """A token as a plot label: visible whitespace, no matplotlib mathtext."""
    return tok.replace("\n", "\\n").replace("\t", "\\t").replace("$", r"\$") or "''"


def attention(model, text, *, layers=None) -> AttentionResult:
    """Attention patterns of every head for one text (or a [pos] / [1, pos] token tensor).

    ``layers``: an int or a list of layers to capture (default: all). Patterns come from
    ``blocks.{l}.attn.hook_pattern`` of a single forward pass."""
    if layers is None:
        layers = list(range(model.n_layers))
    elif isinstance(as_int(layers), int) and not isinstance(layers, bool):
        layers = [model.check_layer(as_int(layers))]
    else:
        layers = sorted({model.check_layer(as_int(layer)) for layer in layers})
        if not layers:
            raise ValueError(f"no layers given; allowed: 0..{model.n_layers - 1}")
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
    from .cli import add_common

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
        from .cli import load_model

        model = load_model(args)
    layer, head = model.check_layer(as_int(args.layer)), model.check_head(as_int(args.head))
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
