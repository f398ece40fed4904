"""Path patching (Wang et al. 2022, "Interpretability in the Wild", section 3.1 and appendix B): the effect of one
sender component on the metric that flows through named receivers only.

With ``direction="noise"`` (the paper's procedure) the base run is the clean one and the sender takes its
corrupted value; ``"denoise"`` swaps the runs. Three steps:

1. run both inputs, keeping every head's output (z) and every MLP's output;
2. run the base input with the sender patched and every OTHER head and MLP frozen at its base-run value, and
   record the receivers' inputs — so the sender reaches them only directly through the residual stream;
3. run the base input again, patching only the receivers' inputs with those recorded values.

The metric of step 3 is normalised like activation patching, 0 = corrupted behaviour, 1 = clean: with noising,
a path that carries the behaviour reads near 0 and an irrelevant one near 1.

Receivers: ``("q"|"k"|"v", layer, head)`` — the query, key or value of a head (on grouped-query models keys and
values belong to a KV group: ``("k", layer, head)`` patches the group head reads, shared with its other query
heads); ``("mlp", layer)`` — the MLP's input (the residual entering its norm); ``"final"`` — the final residual.
Senders: ``(layer, head)`` / ``("head", layer, head)`` or ``("mlp", layer)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core.hooks import capture
from ...core.results import Result, jsonable, new_figure, save_fig
from .activation import DIRECTIONS, Patch, baselines, final_name, last_logits, normalise, patch_hooks
from .metrics import PairBatch, bind_metric, make_pairs


def _sender(model, sender) -> tuple[str, int, int | None]:
    s = tuple(sender) if isinstance(sender, (list, tuple)) else (sender,)
    if len(s) == 2 and all(isinstance(v, int) for v in s):
        s = ("head",) + s
    if len(s) == 3 and s[0] == "head":
        return "head", model.check_layer(s[1]), model.check_head(s[2])
    if len(s) == 2 and s[0] == "mlp" and not model.attn_only:
        return "mlp", model.check_layer(s[1]), None
    raise ValueError(f"sender {sender!r} not understood; allowed: (layer, head), ('head', layer, head)"
                     + ("" if model.attn_only else ", ('mlp', layer)"))


def _receiver(model, r, sender) -> Patch:
    kind, layer, _ = sender
    points = set(model.hook_names())
    if r == "final" or r == ("final",):
        return Patch(final_name(model))
    rr = tuple(r) if isinstance(r, (list, tuple)) else (r,)
    if len(rr) == 3 and rr[0] in ("q", "k", "v"):
        rl, h = model.check_layer(rr[1]), model.check_head(rr[2])
        if rl <= layer:
            raise ValueError(f"receiver {r!r} reads the residual before the sender (layer {layer}) writes to it; "
                             f"a head receiver must sit in a later layer")
        head = h if rr[0] == "q" else model.kv_group(h)
        return Patch(f"blocks.{rl}.attn.hook_{rr[0]}", None, head)
    if len(rr) == 2 and rr[0] == "mlp" and not model.attn_only:
        rl = model.check_layer(rr[1])
        if rl < layer or (rl == layer and kind == "mlp"):
            raise ValueError(f"receiver {r!r} reads the residual before the sender ({kind} at layer {layer}) writes")
        name = f"blocks.{rl}.ln2.hook_in"
        return Patch(name if name in points else f"blocks.{rl}.hook_mlp_in")
    raise ValueError(f"receiver {r!r} not understood; allowed: ('q'|'k'|'v', layer, head)"
                     + ("" if model.attn_only else ", ('mlp', layer)") + ", 'final'")


def path_patching(model, clean, corrupted=None, sender=None, receivers=("final",), metric=None, *,
                  direction: str = "noise", separately: bool = False) -> PathPatchingResult:
    """The sender's effect through ``receivers`` only (module docstring) -> :class:`PathPatchingResult`, one
    row for all receivers together (and, with ``separately=True``, one per receiver before it)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} not known; allowed: 'noise' (the paper's), 'denoise'")
    if sender is None:
        raise ValueError("no sender: give (layer, head) or ('mlp', layer)")
    snd = _sender(model, sender)
    recv_items = [receivers] if isinstance(receivers, str) else list(receivers)
    if not recv_items:
        raise ValueError("no receivers given")
    recv = [_receiver(model, r, snd) for r in recv_items]
    pairs = make_pairs(model, clean, corrupted)
    fn, metric_name = bind_metric(model, metric, len(pairs))
    last = pairs.lengths - 1
    base = pairs.clean if direction == "noise" else pairs.corrupted

    # Step 1: every head's and MLP's output on both runs.
    outs = [f"blocks.{layer}.attn.hook_z" for layer in range(model.n_layers)]
    if not model.attn_only:
        outs += [f"blocks.{layer}.hook_mlp_out" for layer in range(model.n_layers)]
    sets = ([[r] for r in recv] if separately and len(recv) > 1 else []) + [recv]
    ref = baselines(model, pairs.clean, pairs.corrupted, last, outs, 1)
    clean_logits, clean_store, corr_logits, corr_store = (ref.clean_logits, ref.clean_store, ref.corrupted_logits,
                                                          ref.corrupted_store)
    base_store, new_store = (clean_store, corr_store) if direction == "noise" else (corr_store, clean_store)
    batch = PairBatch(pairs.answer_ids, pairs.wrong_ids, clean_logits, pairs.clean, pairs.lengths)
    clean_v, corr_v = fn(clean_logits, batch).float().cpu(), fn(corr_logits, batch).float().cpu()

    # Step 2: sender patched, everything else frozen; record the receivers' inputs.
    kind, layer, head = snd
    sender_name = f"blocks.{layer}.attn.hook_z" if kind == "head" else f"blocks.{layer}.hook_mlp_out"
    mixed = dict(base_store)
    if kind == "head":
        sel = torch.arange(new_store[sender_name].shape[2]) == head
        mixed[sender_name] = torch.where(sel[None, None, :, None], new_store[sender_name], base_store[sender_name])
    else:
        mixed[sender_name] = new_store[sender_name]
    freeze = patch_hooks({n: [(0, Patch(n))] for n in outs}, mixed, len(pairs), last)
    names = list(dict.fromkeys(p.name for p in recv))
    recorded, _ = capture(model, base.to(model.device), names, hooks=freeze, stop=True,
                          description="path patching: record receivers")

    # Step 3: only the receivers' inputs patched, each receiver set in its own copy of the batch.
    raw = torch.stack([_run_set(model, base, last, recorded, s, fn, batch) for s in sets])
    values, note = normalise(raw.mean(-1), float(clean_v.mean()), float(corr_v.mean()))
    together = ", ".join(_label(r) for r in recv_items)
    labels = [_label(r) for r in recv_items][:len(sets) - 1] + [together if len(recv) == 1 else
                                                                 f"together: {together}"]
    return PathPatchingResult(values, raw, clean_v, corr_v, _label(sender), labels, direction, metric_name, note)


def _run_set(model, base, last, recorded, patches, fn, batch) -> torch.Tensor:
    # All receivers of one set in ONE copy of the batch: several Patch entries for copy 0.
    src = {p.name: recorded[p.name] for p in patches}
    hooks = patch_hooks({n: [(0, p) for p in patches if p.name == n] for n in src}, src, base.shape[0], last)
    logits, _ = last_logits(model, base, last, hooks)
    return fn(logits, batch).detach().float().cpu()


def _label(x) -> str:
    if isinstance(x, str):
        return x
    return "(" + ", ".join(repr(v) if isinstance(v, str) else str(v) for v in x) + ")"


@dataclass(repr=False)
class PathPatchingResult(Result):
    """``values`` [n_rows]: normalised effect through each receiver set (0 = corrupted, 1 = clean); ``raw``
    [n_rows, n_pairs]; ``clean``/``corrupted`` [n_pairs]."""

    values: torch.Tensor
    raw: torch.Tensor
    clean: torch.Tensor
    corrupted: torch.Tensor
    sender: str
    receivers: list
    direction: str
    metric: str
    note: str = ""

    @property
    def value(self) -> float:
        """The normalised effect through all receivers together."""
        return float(self.values[-1])

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"sender": self.sender, "receivers": self.receivers, "value": self.values.tolist(),
                             "raw": self.raw.mean(-1).tolist()})

    def summary(self) -> str:
        head = f"path patching ({self.direction}) from {self.sender} through {self.receivers[-1]}: "
        return head + (self.note if self.note else f"{self.value:+.3f} (0 = corrupted, 1 = clean; {self.metric})")

    def to_json(self) -> dict:
        return {**super().to_json(), "clean": jsonable(self.clean), "corrupted": jsonable(self.corrupted),
                "direction": self.direction, "metric": self.metric, "note": self.note}

    def plot(self, *, out=None):
        fig = new_figure(figsize=(6, 0.4 * len(self.receivers) + 1.5))
        ax = fig.add_subplot(1, 1, 1)
        ax.barh(range(len(self.receivers)), torch.nan_to_num(self.values).tolist(), color="tab:blue")
        ax.set_yticks(range(len(self.receivers)))
        ax.set_yticklabels(self.receivers, fontsize=8)
        ax.axvline(0, color="k", lw=0.5)
        ax.axvline(1, color="k", lw=0.5, ls="--")
        ax.set_xlabel("normalised metric (0 = corrupted, 1 = clean)")
        ax.set_title(f"path patching from {self.sender} ({self.direction})", fontsize=9)
        return save_fig(fig, out)
