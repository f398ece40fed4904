"""GradDrop, the second AtP* fix (Kramár et al. 2024, "AtP*", arXiv 2403.00745, section 3.1.2): the machinery.

A node's direct effect on the metric and its indirect effect through later layers can cancel in the gradient, so
plain AtP reports ~0 for a node whose patch matters (the later path is nonlinear, so the patch does not cancel).
GradDrop takes, for each layer l = 0..L-1, the AtP estimate with the gradient flowing back into layer l's writes to
the residual stream (its attention output and its MLP output) set to zero, everything else — the forward values
included — unchanged: AtP_GD_l(n). The estimate of a node is then, per prompt pair,
``1/(L-1) * sum_l |AtP_GD_l(n)|``, averaged over pairs (the absolute value inside the average over prompt pairs).
Dropping layer l leaves every node of a later layer alone, so those terms equal |AtP(n)|; dropping the node's own
layer removes its only route out for a head or a block output (that term is 0): hence L - 1.

Cost: one forward with gradient and one backward per layer (``retain_graph=True``), not one forward per layer.
The drop is an identity in the forward whose backward multiplies the gradient by a per-layer switch
(:class:`DropSwitch`), attached with a hook on ``blocks.{l}.hook_attn_out`` and ``blocks.{l}.hook_mlp_out`` through
the one hook mechanism (``model.hooks``): the hooks live only for the forward; the switch is flipped between the
backward passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...core import arch
from ...core.cache import check_metric_output, graph_roots
from ...core.hooks import StopForward
from .activation import final_name, normalise


@dataclass
class DropSwitch:
    """Which layer's writes the next backward pass drops (None: none)."""

    layer: int | None = None


class _Drop(torch.autograd.Function):
    """Identity in the forward; in the backward, zero when ``switch.layer`` is this gate's layer (read at backward
    time, so one graph serves every dropped layer)."""

    @staticmethod
    def forward(ctx, x, switch, layer):
        ctx.switch, ctx.layer = switch, layer
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return (torch.zeros_like(grad) if ctx.switch.layer == ctx.layer else grad), None, None


def write_points(model) -> dict[str, int]:
    """``{hook name: layer}`` of every layer's writes to the residual stream: attention output and MLP output."""
    points = set(model.hook_names())
    out = {}
    for layer in range(model.n_layers):
        attn, mlp = f"blocks.{layer}.hook_attn_out", f"blocks.{layer}.hook_mlp_out"
        if attn not in points:
            raise ValueError(f"grad_drop: this model has no hook {attn!r} (a layer's attention write to the residual "
                             "stream); pass grad_drop=False")
        out[attn] = layer
        if not model.attn_only and mlp in points:
            out[mlp] = layer
    return out


def gated_forward(model, tokens: torch.Tensor, last: torch.Tensor, names, switch: DropSwitch
                  ) -> tuple[torch.Tensor, dict]:
    """One forward of ``tokens`` with a drop gate on every layer's writes -> (logits at each row's ``last`` position
    [rows, d_vocab], with grad; the named activations, in the graph). A name that is also a write (``attn_out``,
    ``mlp_out``) is kept as it enters its gate, so dropping its own layer drops its gradient. The forward stops at
    the final residual and unembeds only the scored positions."""
    fin, writes, roots = final_name(model), write_points(model), [n for n, _ in graph_roots(model)]
    wanted = list(dict.fromkeys([*names, fin]))
    store: dict = {}

    def hook_for(name):
        def fn(t, hook):
            if name in roots and not t.requires_grad:
                t = t.detach().requires_grad_(True)
            if name in wanted:
                store[name] = t
            if name == fin:
                raise StopForward
            if name in writes:
                t = _Drop.apply(t, switch, writes[name])
            return t  # hook points that see a reshaped copy: the forward goes on with the kept tensor
        return fn

    points = list(dict.fromkeys([*roots, *wanted, *writes]))
    with torch.enable_grad():
        with model.hooks([(n, hook_for(n)) for n in points], description="attribution patching: GradDrop"):
            model.forward(tokens.to(model.device))
        missing = [n for n in wanted if n not in store]
        if missing:
            raise RuntimeError(f"hooks {missing[:3]} did not fire during the forward pass")
        resid = store[fin][torch.arange(tokens.shape[0]), last.to(store[fin].device)]
        return _unembed_with_grad(model, resid), store


def _unembed_with_grad(model, resid: torch.Tensor) -> torch.Tensor:
    """``model.unembed(model.final_norm(resid))`` (both run without grad) keeping the graph: the same norm module
    and unembedding, so the scored logits are those of the patching runs."""
    norm = arch.final_norm_module(model)
    if norm is not None:
        resid = norm(resid.to(arch.module_device(norm), model.dtype))
    w, b = model.unembedding()
    out = resid.to(w.device, w.dtype) @ w
    return out if b is None else out + b.to(out.device)


def dropped_gradients(total: torch.Tensor, tensors: list, switch: DropSwitch, layers):
    """For each entry of ``layers`` (a layer, or None for no drop): the gradients of ``total`` w.r.t. ``tensors``
    with that layer's writes dropped -> yields ``(layer, grads)``; the graph is freed after the last."""
    layers = list(layers)
    try:
        for i, layer in enumerate(layers):
            switch.layer = layer
            yield layer, torch.autograd.grad(total, tensors, retain_graph=i < len(layers) - 1, allow_unused=True)
    finally:
        switch.layer = None


def grad_drop_terms(model, tokens: torch.Tensor, last: torch.Tensor, names, grad_names, score: Callable,
                    estimator: Callable, first: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-layer GradDrop estimates -> (terms [n_layers, *estimate], metric per prompt [rows]).

    ``score(logits at last [rows, vocab]) -> [rows]`` is the metric; ``estimator(acts)`` (float32 CPU activations of
    ``names``) returns ``estimate(grads) -> tensor`` for gradients of ``grad_names``. Every node lies in layer
    ``first`` or above, so dropping a layer below leaves its gradient alone: those terms are the plain estimate,
    from one backward without a drop; then one backward per layer from ``first`` up."""
    switch = DropSwitch()
    logits, store = gated_forward(model, tokens, last, names, switch)
    with torch.enable_grad():
        values = check_metric_output(score(logits), tokens.shape[0])
        total = values.sum()
    cpu = lambda t: t.detach().to("cpu", torch.float32)
    estimate = estimator({n: cpu(store[n]) for n in names})
    tensors = [store[n] for n in grad_names]
    drops = ([None] if first > 0 else []) + list(range(first, model.n_layers))
    terms = [None] * model.n_layers
    for layer, grads in dropped_gradients(total, tensors, switch, drops):
        est = estimate({n: torch.zeros_like(cpu(t)) if g is None else cpu(g)
                        for n, t, g in zip(grad_names, tensors, grads)})
        for i in (range(first) if layer is None else [layer]):
            terms[i] = est
    return torch.stack(terms), cpu(values)


def combine(terms: torch.Tensor) -> torch.Tensor:
    """[n_layers, ...] per-layer estimates -> the GradDrop magnitude ``sum_l |term_l| / (n_layers - 1)``."""
    return terms.abs().sum(0) / (terms.shape[0] - 1)


def unsigned_values(magnitude_mean: torch.Tensor, clean: float, corrupted: float) -> tuple[torch.Tensor, str]:
    """Magnitudes in metric units -> normalised like the signed grids, then absolute: ``|x / (clean - corrupted)|``.
    Dividing by the gap commutes with |.| only up to its sign (the gap is negative for e.g. kl_to_clean), so the
    absolute value comes after; the base run's own offset (1 for noising) is not added: an unsigned value measures
    the change from the base run, 0 = no effect in either direction. NaN with the note when the gap is ~0."""
    _, note = normalise(torch.zeros(()), clean, corrupted)
    if note:
        return torch.full_like(magnitude_mean, float("nan")), note
    return (magnitude_mean / (clean - corrupted)).abs(), ""
