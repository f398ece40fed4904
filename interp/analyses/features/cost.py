"""What a training run of :mod:`.train` costs: its FLOP floor per token and the seconds it should take here.
``settings`` below is a :class:`.train.TrainSettings` (not imported: train imports this module)."""

from __future__ import annotations

import time

import torch


def estimate_seconds(model, sites: dict, settings) -> float:
    """Seconds the run should take here: its FLOP floor (:func:`train_flops_per_token`) at the rate one plain
    forward of a [1, ctx] row reaches on this machine now (timed: about a second; the trainer runs at ~0.95 of
    its floor, ``benchmarks/bench_features.py``)."""
    toks = torch.randint(0, min(model.d_vocab, 1000), (1, settings.ctx), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.forward(toks[:, :16])
        t = time.perf_counter()
        model.forward(toks)
        seconds = time.perf_counter() - t
    rate = forward_flops_per_token(model, model.n_layers, settings.ctx) * settings.ctx / seconds
    return settings.tokens * train_flops_per_token(model, sites, settings) / rate


def train_flops_per_token(model, sites: dict, settings) -> float:
    """The FLOP floor per counted token: the model's forward to the last site plus, per dictionary, encoder
    forward and weight gradient (4 d W), skip forward and gradient (4 d²) and the decoder's k rows (6 k d)."""
    last = max(s.layer if s.layer is not None else model.n_layers - 1 for s in sites.values())
    d = model.d_model
    per = 4 * d * settings.width + (4 * d * d if settings.skip else 0) + 6 * settings.k * d
    return forward_flops_per_token(model, last + 1, settings.ctx) + len(sites) * per


def forward_flops_per_token(model, n_blocks: int, ctx: int) -> float:
    """Matrix-product FLOPs per token of blocks 0..n_blocks-1 at context ``ctx`` (attention over ctx/2 keys on
    average; gated MLP: three d x d_mlp products)."""
    c = model.cfg
    d, dq = c.d_model, c.n_heads * c.d_head
    dkv = (getattr(c, "n_key_value_heads", None) or c.n_heads) * c.d_head
    per_layer = 2 * d * (2 * dq + 2 * dkv) + 6 * d * c.d_mlp + 2 * 2 * (ctx / 2) * dq
    return n_blocks * per_layer
