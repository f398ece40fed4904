"""Resume a forward pass at a layer: run only blocks L..n-1 on a given residual, reusing a recorded forward.

Patching experiments rerun the same input hundreds of times, each changed at one layer: everything below that
layer is the same in every run. :func:`record_blocks` runs one forward and keeps, for every block, the arguments
the model called it with (attention mask, rotary embeddings, position ids, ...); :func:`run_from` then calls
blocks L..n-1 directly on a residual, with hooks attached through the one hook mechanism, and returns the final
residual (before the final norm). The result equals the full forward's (tests check it on both architectures),
provided the residual has the batch size of the recorded forward — the recorded arguments (the attention mask)
carry that batch size.

Block calls are read with :func:`interp.core.hooks.recorded_calls` (forward pre-hooks on the blocks, removed
whatever happens during the forward). A KV cache the model passed to its blocks is dropped on resume:
it was filled by the recorded forward and would otherwise be appended to.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .hooks import capture, recorded_calls


@dataclass
class BlockCalls:
    """How one forward called each block: ``args[layer]`` (positional arguments after the residual) and
    ``kwargs[layer]``, for a batch of ``rows`` rows."""

    args: list
    kwargs: list
    rows: int


def _blocks(model):
    blocks = getattr(model.module, "blocks", None)
    if blocks is None or len(blocks) != model.n_layers:
        raise ValueError(f"model {model.source} has no list of {model.n_layers} blocks to resume a forward from")
    return blocks


def _resumable(kwargs: dict) -> dict:
    out = {}
    for k, v in kwargs.items():
        if type(v).__name__.endswith("Cache"):  # transformers' DynamicCache & co: filled by the recorded run
            v = None
        elif k == "use_cache":
            v = False
        out[k] = v
    return out


def record_blocks(model, tokens: torch.Tensor, names=(), *, hooks=(), description: str = "record blocks"):
    """One forward of ``tokens`` (on the model's device), stopped at the final residual -> ``(store,
    BlockCalls)``: ``store`` holds the named activations (as :func:`~interp.core.hooks.capture` keeps them) and
    the final residual under ``blocks.{n-1}.hook_resid_post``."""
    blocks = _blocks(model)
    final = f"blocks.{model.n_layers - 1}.hook_resid_post"
    with recorded_calls(list(blocks)) as calls:
        store, _ = capture(model, tokens, list(dict.fromkeys([*names, final])), hooks=hooks, stop=True,
                           description=description)
    if any(c is None for c in calls):
        raise RuntimeError("not every block was called during the recorded forward")
    args = [a for a, _ in calls]
    kwargs = [_resumable(kw) for _, kw in calls]
    return store, BlockCalls(args, kwargs, tokens.shape[0])


def run_from(model, calls: BlockCalls, layer: int, resid: torch.Tensor, hooks=(),
             description: str = "resumed forward") -> torch.Tensor:
    """Blocks ``layer``..n-1 on ``resid`` ([rows, pos, d_model], the residual entering ``layer``) with ``hooks``
    attached -> the final residual [rows, pos, d_model] (before the final norm), without gradients."""
    layer = model.check_layer(layer)
    if resid.shape[0] != calls.rows:
        raise ValueError(f"resid has {resid.shape[0]} rows; the recorded forward had {calls.rows} (the recorded "
                         "attention mask is per row): record a forward of the same batch size")
    blocks = _blocks(model)
    h = resid
    with torch.no_grad(), model.hooks(list(hooks), description=description):
        for i in range(layer, model.n_layers):
            out = blocks[i](h.to(model.device_of(i)), *calls.args[i], **calls.kwargs[i])
            h = out[0] if isinstance(out, tuple) else out
    return h
