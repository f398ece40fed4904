"""Down projections kept, written back and varied per row: the weight bookkeeping of edits and their evaluation.

The one place besides :mod:`interp.core.hooks` that changes a forward: :func:`row_matrices` replaces the down
projections' ``forward`` for the length of a ``with`` block (a named exception in tests/test_layers.py: hooks see
activations, not the weight a product uses; it is put back on every exit path).

- :func:`kept_matrices` / :func:`restore_matrices`: copies of some layers' down projections, put back bit for bit
  (every edit's write, revert and rollback);
- :func:`written_matrices`: other matrices written in for a block, then the model's own put back;
- :func:`row_matrices`: one batch in which each group of rows runs under its own down-projection matrices.

An edit evaluation measures many edited models that differ from the unedited one in a few MLP down projections
(a ROME edit: one matrix). Measured one by one, each KV-cached decode step reads every weight of the model for a
batch of three rows, so sampling costs the same for 3 rows as for 50; run as one batch whose rows each see their
own edit's matrices, the other weights are read once for all of them (``interp.editing.eval.run``).

    with row_matrices(model, [{4: m0}, {4: m1}, {}], groups=torch.tensor([0, 0, 1, 2])):
        model.run(tokens)          # rows 0-1 under m0, row 2 under m1, row 3 under the model's own matrix

Inside, the down projection of each layer named by a variant computes, for the rows of group ``g``,
``hidden @ matrices[g][layer].T + bias`` — the same product the edited model computes, on the group's rows only
(so it equals the edited model's own batch up to float rounding in the other layers' batched products). The
bridge and the KV-cached twin of :mod:`interp.core.generation` share the Hugging Face modules' weights but not
the modules, so both are switched; both are put back on every exit path. Every forward inside must have one row
per entry of ``groups`` (a forward of another batch size is refused).
"""

from __future__ import annotations

import contextlib
from typing import Mapping, Sequence

import torch

from ..core.generation import kv_twin


def restore_matrices(model, originals: Mapping[int, torch.Tensor]) -> None:
    """Copy kept down projections ``{layer: tensor}`` back into ``model``, bit for bit."""
    with torch.no_grad():
        for layer, m in originals.items():
            w = model.mlp_out_matrix(layer)
            w.copy_(m.to(w.device))


@contextlib.contextmanager
def kept_matrices(model, layers, *, always: bool = False):
    """Keep the down projections of ``layers`` (CPU copies, yielded as ``{layer: tensor}``); any exception
    (KeyboardInterrupt included) inside puts every one back bit for bit, and with ``always`` so does a normal exit."""
    originals = {layer: model.mlp_out_matrix(layer).detach().cpu().clone() for layer in layers}
    try:
        yield originals
    except BaseException:
        restore_matrices(model, originals)
        raise
    if always:
        restore_matrices(model, originals)


@contextlib.contextmanager
def written_matrices(model, matrices: Mapping[int, torch.Tensor]):
    """The down projections ``{layer: matrix}`` written into ``model`` for the block and put back bit for bit on
    every exit (the measurement of an edit that was made, kept and reverted: ``interp.editing.eval.run``)."""
    with kept_matrices(model, list(matrices), always=True):
        restore_matrices(model, matrices)
        yield


def _twin_module(model, module: torch.nn.Module) -> torch.nn.Module | None:
    """The KV twin's module holding the same weight as ``module`` (None without a twin)."""
    twin = kv_twin(model)
    if twin is None:
        return None
    name = model.param_name(module.weight).rsplit(".", 1)[0]
    found = twin.get_submodule(name)
    return found if found.weight is module.weight else None


def _grouped_forward(module: torch.nn.Module, layer: int, mats: list, groups: torch.Tensor, conv1d: bool):
    """A forward for ``module`` computing each group's rows with its own matrix ([d_out, d_in]; None: the
    module's own weight)."""
    rows = {g: (groups == g).nonzero()[:, 0] for g in sorted(set(groups.tolist()))}

    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] != len(groups):
            raise ValueError(f"row_matrices: a forward of {x.shape[0]} rows inside a context for {len(groups)} "
                             f"rows (layer {layer}); run the batch the groups were given for")
        own = module.weight.T if conv1d else module.weight           # [d_out, d_in]
        out = x.new_empty(x.shape[:-1] + (own.shape[0],))
        for g, idx in rows.items():
            w = own if mats[g] is None else mats[g]
            idx = idx.to(x.device)
            out[idx] = torch.nn.functional.linear(x[idx], w.to(x.device, x.dtype), module.bias)
        return out

    return forward


@contextlib.contextmanager
def row_matrices(model, variants: Sequence[Mapping[int, torch.Tensor]], groups: torch.Tensor):
    """Within the context, row ``i`` of every forward of ``model`` computes layer ``l``'s down projection with
    ``variants[groups[i]][l]`` ([d_model, d_mlp], as :meth:`interp.Model.mlp_out_matrix`); a variant without
    layer ``l`` uses the model's own matrix. ``groups``: long [batch], values in ``0..len(variants)-1``.
    One device only (the rows are split inside one module call)."""
    groups = torch.as_tensor(groups, dtype=torch.long).reshape(-1).cpu()
    if len(groups) and (int(groups.min()) < 0 or int(groups.max()) >= len(variants)):
        raise ValueError(f"groups hold values {int(groups.min())}..{int(groups.max())}; allowed: "
                         f"0..{len(variants) - 1} (one per variant)")
    if len(model.devices) != 1:
        raise ValueError(f"row_matrices needs a model on one device; this one spans {model.devices}")
    layers = sorted({int(l) for v in variants for l in v})
    patched = []
    try:
        for layer in layers:
            layer = model.check_layer(layer)
            module = model.mlp_out_module(layer)
            shape = tuple(model.mlp_out_matrix(layer).shape)
            mats = []
            for g, v in enumerate(variants):
                m = v.get(layer)
                if m is not None and tuple(m.shape) != shape:
                    raise ValueError(f"variant {g}'s matrix for layer {layer} has shape {tuple(m.shape)}; the "
                                     f"down projection is {shape}")
                mats.append(None if m is None else m.detach())
            conv1d = model.mlp_out_orientation(layer) == "conv1d"
            for mod in (module, _twin_module(model, module)):
                if mod is not None:
                    patched.append((mod, mod.__dict__.get("forward")))  # an instance forward (accelerate's) kept
                    mod.forward = _grouped_forward(mod, layer, mats, groups, conv1d)
        yield
    finally:
        for mod, before in reversed(patched):
            if before is None:
                del mod.forward  # the class's forward again
            else:
                mod.forward = before

