"""The interventions ``Model.patch``, ``steer``, ``ablate_heads`` and ``ablate_neurons`` build on the one hook
mechanism: each function here checks its arguments and returns ``[(hook_name, fn), ...]``; the Model attaches
them with ``model.hooks(...)`` for the length of a ``with`` block. Patching experiments compose the same lists.

Hook functions never modify their input in place (they return a modified clone), so other hooks on the same
point and the captured clean activations stay intact. Values are moved to each hook's device (device maps).
"""

from __future__ import annotations

from typing import Sequence

import torch

from .inputs import check_pos

MODES = ("zero", "mean")


def position_index(pos, n: int):
    """None -> every position (a slice); an int or a list of ints -> checked indices (negative from the end)."""
    if pos is None:
        return slice(None)
    if isinstance(pos, (list, tuple)):
        if not pos:
            raise ValueError("empty list of positions; pass None for every position")
        return [check_pos(p, n) for p in pos]
    return check_pos(pos, n)


def patch(model, layer: int, point: str, pos, value) -> list:
    """Replace the residual at ``blocks.{layer}.hook_resid_{point}``, at ``pos``, by ``value`` (a tensor
    broadcast to [batch, positions, d_model]) or by ``value(resid_at_pos)``."""
    layer, point = model.check_layer(layer), model.check_point(point)
    if not callable(value):
        value = model.check_vector(value, what="patch value")

    def replace(t, hook):
        idx = (slice(None), position_index(pos, t.shape[1]))
        new = value(t[idx]) if callable(value) else value.to(t.device, t.dtype)
        out = t.clone()
        out[idx] = new
        return out

    return [(f"blocks.{layer}.hook_resid_{point}", replace)]


def steer(model, vector, layer: int, *, scale: float = 1.0, point: str = "pre", pos=None) -> list:
    """Add ``scale * vector`` ([d_model]) to the residual at (layer, point), at ``pos``."""
    layer, point = model.check_layer(layer), model.check_point(point)
    vec = model.check_vector(vector, what="steering vector")
    if vec.ndim != 1:
        raise ValueError(f"steering vector must be 1-D [d_model={model.d_model}], got shape {tuple(vec.shape)}")

    def add(t, hook):
        idx = (slice(None), position_index(pos, t.shape[1]))
        out = t.clone()
        out[idx] += (scale * vec).to(t.device, t.dtype)
        return out

    return [(f"blocks.{layer}.hook_resid_{point}", add)]


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"ablation mode {mode!r} not known; allowed: 'zero', 'mean'")


def _mean_of(model, name: str, mean_over) -> torch.Tensor:
    acts = model.cache(mean_over, [name])[name]
    return acts.reshape(-1, *acts.shape[2:]).mean(0)  # over batch and positions


def ablate_heads(model, heads: Sequence[tuple[int, int]], mode: str = "zero", mean_over=None) -> list:
    """Zero- or mean-ablate heads' outputs on ``attn.hook_z`` [batch, pos, head, d_head]. ``mean``: a head's z
    becomes its mean over batch and positions of ``mean_over``, or of the current input if that is None."""
    _check_mode(mode)
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(model.check_layer(layer), []).append(model.check_head(head))
    if not by_layer:
        raise ValueError("no heads given; pass [(layer, head), ...]")
    pairs = []
    for layer, hs in sorted(by_layer.items()):
        name = f"blocks.{layer}.attn.hook_z"
        ref = _mean_of(model, name, mean_over) if (mode == "mean" and mean_over is not None) else None
        pairs.append((name, _head_ablation(hs, mode, ref)))
    return pairs


def _head_ablation(heads: list[int], mode: str, ref: torch.Tensor | None):
    def ablate(t, hook):  # t: [batch, pos, head, d_head]
        out = t.clone()
        if mode == "zero":
            out[:, :, heads] = 0
        else:
            m = ref if ref is not None else t.reshape(-1, *t.shape[2:]).mean(0)
            out[:, :, heads] = m[heads].to(t.device, t.dtype)
        return out
    return ablate


def ablate_neurons(model, layer: int, neurons, mode: str = "zero", mean_over=None, values=None) -> list:
    """Zero- or mean-ablate MLP neurons on ``mlp.hook_post`` (the vector multiplying the down projection). A mean
    is taken over ``mean_over`` (text/tokens), over the current input when None, or given as ``values`` (one
    precomputed mean per neuron, e.g. a corpus scan's)."""
    _check_mode(mode)
    layer = model.check_layer(layer)
    idx = model.check_neurons(layer, neurons)
    name = f"blocks.{layer}.mlp.hook_post"
    if values is not None:
        if mode != "mean" or mean_over is not None:
            raise ValueError(f"values= are the means a mean ablation writes: use mode='mean' without mean_over "
                             f"(got mode={mode!r}, mean_over={'given' if mean_over is not None else None})")
        ref = torch.as_tensor(values, dtype=torch.float32).reshape(-1)
        if ref.numel() != len(idx) or not bool(torch.isfinite(ref).all()):
            raise ValueError(f"values: one finite number per ablated neuron needed ({len(idx)}), got "
                             f"{ref.numel()} ({ref.tolist()[:4]}...)")
    else:
        ref = _mean_of(model, name, mean_over)[idx] if (mode == "mean" and mean_over is not None) else None

    def ablate(t, hook):
        out = t.clone()
        if mode == "zero":
            out[..., idx] = 0
        else:
            m = ref if ref is not None else t[..., idx].reshape(-1, len(idx)).mean(0)
            out[..., idx] = m.to(t.device, t.dtype)
        return out

    return [(name, ablate)]
