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

Sliding-window attention (Gemma's local layers): ``windows[i]`` is how many positions a query of captured layer
``i`` can see (itself included), None for global layers; the patterns are the model's own, so a local layer's
rows are exactly zero beyond its window (visible once the text is longer than the window).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core import arch
from ..core.hooks import capture
from ..core.inputs import as_int, layer_list, one_text
from ..core.results import Result, new_figure, save_fig


@dataclass(repr=False)
class AttentionResult(Result):
    patterns: torch.Tensor  # [layer, head, query, key], rows sum to 1, causal
    str_tokens: list[str]
    layers: list[int]  # model layer index of each entry along dim 0
    kv_groups: list[int]  # KV head read by each query head
    n_kv_heads: int
    source: str = ""
    windows: list | None = None  # per captured layer: attention window (sliding-window layers) or None (global)

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
                window = {"window": self.window(layer)} if self.has_local_layers else {}
                rows.append({"layer": layer, "head": h, "kv_group": self.kv_groups[h], **window,
                             **{k: float(v[i, h]) for k, v in s.items()}})
        return pd.DataFrame(rows).set_index(["layer", "head"])

    def to_frame(self):
        return self.stats()

    @property
    def has_local_layers(self) -> bool:
        return any(w is not None for w in (self.windows or []))

    def window(self, layer: int) -> int | None:
        """Positions a query of ``layer`` can attend to (sliding-window layers), or None (global)."""
        return None if self.windows is None else self.windows[self._row(layer)]

    def summary(self) -> str:
        n = len(self.str_tokens)
        local = [layer for layer in self.layers if self.window(layer) is not None]
        win = (f"; {len(local)} sliding-window layers (window {self.window(local[0])})" if local else "")
        return (f"attention patterns: {len(self.layers)} layers x {self.patterns.shape[1]} heads "
                f"({self.n_kv_heads} KV heads) over {n} tokens{win}")

    def to_json(self) -> dict:
        """The per-head statistics (``rows``) and the patterns themselves, which the table leaves out."""
        return {**super().to_json(), "tokens": self.str_tokens, "layers": self.layers, "kv_groups": self.kv_groups,
                "n_kv_heads": self.n_kv_heads, "windows": self.windows,
                "patterns": self.patterns.double().round(decimals=6).tolist()}

    # ------------------------------------------------------------------------------------------ plots
    def plot(self, layer: int, head: int, *, out=None):
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
        w = self.window(layer)
        kind = "" if w is None else f", local: window {w}"
        ax.set_title(f"layer {layer}, head {self._head(head)} (KV group {g}{kind})")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
        return save_fig(fig, out)

    def plot_layer(self, layer: int, *, out=None):
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

    def view(self, *, layers=None, heads=None, positions=None, max_bytes=None):
        """Interactive view: every head as a thumbnail (layer x head, KV groups marked), a click opens its token
        view. ``layers`` / ``heads`` / ``positions`` narrow it (a long text needs that: the view refuses to embed
        more than ``max_bytes``, 10 MB by default)."""
        from .attention_view import attention_view

        return attention_view(self, layers=layers, heads=heads, positions=positions, stats=head_stats,
                              max_bytes=max_bytes)


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


def token_label(tok: str) -> str:
    """A token as a plot label: visible whitespace (a space as ``␣``, so " the" reads ``␣the``), no matplotlib
    mathtext."""
    return tok.replace("\n", "\\n").replace("\t", "\\t").replace(" ", "\u2423").replace("$", r"\$") or "''"


def attention(model, text, *, layers=None) -> AttentionResult:
    """Attention patterns of every head for one text (or a [pos] / [1, pos] token tensor).

    ``layers``: an int or a list of layers to capture (default: all). Patterns come from
    ``blocks.{l}.attn.hook_pattern`` of a single forward pass."""
    layers = layer_list(model, layers)
    toks = one_text(model, text)
    if toks.shape[1] < 2:
        raise ValueError(f"need at least 2 tokens (BOS + one) to look at attention, got {toks.shape[1]}")
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in layers]
    # Stopped after the last pattern: no later layer and no unembedding runs.
    cache, _ = capture(model, toks, names, keep=lambda n, t: t.detach().to("cpu", torch.float32), stop=True,
                       description="attention")
    patterns = torch.stack([cache[n][0] for n in names])  # [layer, head, q, k]
    return AttentionResult(patterns=patterns, str_tokens=model.to_str_tokens(toks), layers=layers,
                           kv_groups=[model.kv_group(h) for h in range(model.n_heads)],
                           n_kv_heads=model.n_kv_heads, source=getattr(model, "source", ""),
                           windows=[arch.attention_window(model, layer) for layer in layers])
