"""Attribution patching (AtP): a first-order estimate of every activation-patching effect from one gradient.

For denoising, the patched metric of a component ``a`` is estimated as ``m(corrupted) + (a_clean - a_corrupted)
. dm/da``, the gradient taken on the corrupted run (for noising, swap the runs): the clean run once without
gradients, the corrupted run once with, one backward — 2 forwards + 1 backward for every layer, head and
position at once (Nanda 2023; Syed et al. 2023). Results are :class:`PatchingResult` objects normalised like the
exhaustive ones, so ``atp.compare(exhaustive)`` ranks the estimate against the truth.

The AtP* QK fix (Kramár et al. 2024, "AtP*", section 3.1.1), ``qk_fix=True`` for ``over="head_q"``/``"head_k"``:
a query or key only acts through its head's attention softmax, where a linear estimate is poorest (a saturated
softmax has a near-zero gradient however much a new key would change it). So instead of ``dq . dm/dq`` we
recompute that head's attention pattern exactly with the patched queries (or keys, for every query head of the
KV group) — ``softmax(scale * q' k'^T + causal mask)`` from the rotated queries and keys of both runs — and
linearise only from the pattern onwards: ``sum_{t,s} (P' - P)[t, s] * dm/dP[t, s]``. All positions chosen in
``positions`` are patched together, as in the exhaustive [layer x head] grid. The recomputed scores are checked
against the model's own (``attn.hook_attn_scores``); a model whose scores differ (soft-capping, ALiBi, another
scale) is refused with ``qk_fix=False`` as the way out. Heads' outputs (``over="heads"``, z) never pass through
their own softmax, so the fix does not apply there and the plain estimate is used.
"""

from __future__ import annotations

import torch

from ...core import arch
from ...core.cache import activation_grads
from .activation import (
    DIRECTIONS,
    HEAD_KINDS,
    OVER,
    PatchingResult,
    check_over,
    columns,
    describe_positions,
    last_logits,
    layer_ids_of,
    normalise,
    patch_mask,
)
from .metrics import PairBatch, bind_metric, make_pairs

ATP_OVER = tuple(k for k in OVER)


def attribution_patching(model, clean, corrupted=None, metric=None, *, over="heads", positions="each",
                         direction: str = "denoise", layers=None, qk_fix: bool = True) -> PatchingResult:
    """AtP estimate of :func:`~interp.analyses.patching.activation_patching` with the same arguments (``over``
    a kind of :data:`OVER`; lists of hook names are not supported here) -> a PatchingResult with
    ``method="atp"`` (``"atp*"`` when the QK fix was applied); ``.compare(exhaustive)`` scores it."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} not known; allowed: 'denoise' (clean into corrupted), 'noise'")
    if not isinstance(over, str):
        raise ValueError(f"over={over!r}: attribution patching takes one of {', '.join(ATP_OVER)}")
    check_over(model, over)
    pairs = make_pairs(model, clean, corrupted)
    fn, metric_name = bind_metric(model, metric, len(pairs))
    layer_ids = layer_ids_of(model, layers)
    fix = qk_fix and over in ("head_q", "head_k")
    names = [f"blocks.{layer}.{OVER[over][0]}" for layer in layer_ids]
    extra = _qk_names(model, layer_ids) if fix else []
    last = pairs.lengths - 1
    base, src = (pairs.corrupted, pairs.clean) if direction == "denoise" else (pairs.clean, pairs.corrupted)

    # Forward 1, without gradients: the source run (for denoising the clean run, whose last-token logits also
    # feed kl_to_clean).
    denoise = direction == "denoise"
    first_logits, store = last_logits(model, src, last, names=names + [n for n in extra if "attn_scores" not in n
                                                                       and "pattern" not in n])
    batch = PairBatch(pairs.answer_ids, pairs.wrong_ids, first_logits if denoise else None, pairs.clean,
                      pairs.lengths)
    source = {n: t.detach().to("cpu", torch.float32) for n, t in store.items()}

    def on_last(logits, info):
        at_last = logits[torch.arange(logits.shape[0], device=logits.device), last.to(logits.device)]
        if batch.clean_logits is None:  # noising: the base run is the clean run
            batch.clean_logits = at_last.detach()
        return fn(at_last, batch)

    # Forward 2 + the backward: the base run, with the gradient of the summed metric.
    base_v, acts, grads = activation_grads(model, base, names + extra, on_last)
    base_v = base_v.float()
    other_v = fn(first_logits, batch).detach().float().cpu()
    clean_v, corr_v = (other_v, base_v) if denoise else (base_v, other_v)
    cols, col_name, col_labels, kv = columns(model, pairs, over, positions)
    est = torch.zeros(len(layer_ids), len(cols), len(pairs))
    for i, (layer, name) in enumerate(zip(layer_ids, names)):
        if fix:
            est[i] = _qk_effects(model, over, layer, acts, grads, source, cols, last)
        else:
            diff = source[name] - acts[name]
            for j, (pos, head) in enumerate(cols):
                mask = patch_mask(diff.shape, name, pos, head, last)
                est[i, j] = (torch.where(mask, diff, 0.0) * grads[name]).flatten(1).sum(1)
    raw = base_v + est
    vals, note = normalise(raw.mean(-1), float(clean_v.mean()), float(corr_v.mean()))
    return PatchingResult(vals, raw, clean_v, corr_v, layer_ids, [c[1] if over in HEAD_KINDS else c[0] for c in cols],
                          "layer", col_name, col_labels, over, direction, metric_name, describe_positions(positions),
                          kv, note, method="atp*" if fix else "atp")



def _qk_names(model, layers) -> list[str]:
    points = set(model.hook_names())
    out = []
    for layer in layers:
        rot = f"blocks.{layer}.attn.hook_rot_q" in points  # rotary models: scores use the rotated q and k
        out += [f"blocks.{layer}.attn.hook_{'rot_' if rot else ''}q", f"blocks.{layer}.attn.hook_{'rot_' if rot else ''}k",
                f"blocks.{layer}.attn.hook_pattern", f"blocks.{layer}.attn.hook_attn_scores"]
    return out


def _qk_effects(model, over, layer, acts, grads, source, cols, last) -> torch.Tensor:
    """[n_cols, n_pairs]: the AtP* estimate for each query head (head_q) or KV group (head_k) of one layer."""
    qn, kn, pn, sn = _qk_names(model, [layer])
    q, k, pattern, g = acts[qn].double(), acts[kn].double(), acts[pn].double(), grads[pn].double()
    q_src, k_src = source[qn].double(), source[kn].double()
    n_heads, n_groups = q.shape[2], k.shape[2]
    per = n_heads // n_groups
    scale = arch.attn_scale(model)
    n = q.shape[1]
    causal = arch.attention_mask(model, layer, n)  # causal, and the sliding window on Gemma's local layers

    def probs(qq, kk):  # [b, p, H, d], [b, p, G, d] -> [b, H, t, s]
        scores = torch.einsum("bthd,bshd->bhts", qq, kk.repeat_interleave(per, dim=2)) * scale
        return scores.masked_fill(~causal, float("-inf")).softmax(-1)

    _check_scores(q, k, acts[sn].double(), scale, per, causal & _real_queries(last, n), layer)
    out = torch.zeros(len(cols), q.shape[0])
    for j, (pos, head) in enumerate(cols):
        if over == "head_q":
            mask = patch_mask(q.shape, qn, pos, head, last)
            new = probs(torch.where(mask, q_src, q), k)
            out[j] = ((new - pattern) * g)[:, head].flatten(1).sum(1).float()
        else:
            mask = patch_mask(k.shape, kn, pos, head, last)
            new = probs(q, torch.where(mask, k_src, k))
            out[j] = ((new - pattern) * g)[:, head * per:(head + 1) * per].flatten(1).sum(1).float()
    return out


def _real_queries(last: torch.Tensor, n: int) -> torch.Tensor:
    """[b, 1, n, 1]: True on the rows of real (not padding) query positions."""
    return (torch.arange(n)[None, :] <= last[:, None])[:, None, :, None]


def _check_scores(q, k, scores, scale, per, where, layer) -> None:
    # Only where the model computes a real score: causal entries of real queries (a model may mask padding).
    mine = torch.einsum("bthd,bshd->bhts", q, k.repeat_interleave(per, dim=2)) * scale
    theirs = scores[..., :mine.shape[-1]]
    ok = where.expand_as(mine)
    err = float((mine[ok] - theirs[ok]).abs().max())
    tol = 1e-3 * max(1.0, float(theirs[ok].abs().max()))
    if err > tol:
        raise ValueError(f"qk_fix: layer {layer}'s attention scores are not scale * q.k (max difference {err:.3g}); "
                         "this model's attention is not plain softmax attention; pass qk_fix=False")
