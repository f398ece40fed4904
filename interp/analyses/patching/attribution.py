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

The AtP* GradDrop fix (section 3.1.2), ``grad_drop=True``, for every ``over``: a node's direct effect and its
indirect effect through later layers can cancel in the gradient (AtP ~0 for a patch that matters). For each layer l
the estimate is taken again with the gradient into layer l's attention and MLP writes to the residual stream
dropped (forward values unchanged), AtP_GD_l; the result is ``1/(L-1) * sum_l |AtP_GD_l|`` per prompt pair,
averaged over pairs — an unsigned magnitude for ranking which nodes to verify, not a signed effect
(``result.signed`` is False, ``method`` "atp+gd", or "atp*" (AtP*: both fixes) with the QK fix, which then linearises from the
dropped gradients dm/dP). It is normalised like the signed grids, then made absolute: ``|x / (clean -
corrupted)|``, the change from the base run (0 = none, in both directions); ``compare`` ranks it against the
truth's magnitudes. One forward with gradient and one backward per layer (:mod:`.graddrop`); the per-layer signed
terms are in ``result.extra["grad_drop_terms"]``.
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
from .graddrop import combine, grad_drop_terms, unsigned_values
from .metrics import PairBatch, bind_metric, make_pairs

ATP_OVER = tuple(k for k in OVER)


def _method_name(qk_fix: bool, grad_drop: bool) -> str:
    """AtP* is both fixes (Kramár et al. 2024); either alone is named for what it is."""
    return {(True, True): "atp*", (True, False): "atp+qk", (False, True): "atp+gd"}.get((qk_fix, grad_drop), "atp")


def attribution_patching(model, clean, corrupted=None, metric=None, *, over="heads", positions="each",
                         direction: str = "denoise", layers=None, qk_fix: bool = True,
                         grad_drop: bool = False) -> PatchingResult:
    """AtP estimate of :func:`~interp.analyses.patching.activation_patching` with the same arguments (``over``
    a kind of :data:`OVER`; lists of hook names are not supported here) -> a PatchingResult with
    ``method="atp"`` (``"atp+qk"`` when the QK fix was applied); ``.compare(exhaustive)`` scores it.
    ``grad_drop=True``: the GradDrop estimate instead, unsigned (``signed=False``), ``method="atp*"`` with the QK
    fix or ``"atp+gd"``; ``extra["grad_drop_terms"]`` holds the per-layer signed terms [n_layers, rows, cols,
    pairs] in metric units and ``raw`` the per-pair magnitudes."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} not known; allowed: 'denoise' (clean into corrupted), 'noise'")
    if not isinstance(over, str):
        raise ValueError(f"over={over!r}: attribution patching takes one of {', '.join(ATP_OVER)}")
    if not isinstance(grad_drop, bool):
        raise ValueError(f"grad_drop={grad_drop!r}: allowed: True (AtP* GradDrop, one backward per layer) or False")
    check_over(model, over)
    if grad_drop and model.n_layers < 2:
        raise ValueError(f"grad_drop=True needs at least 2 layers (it averages over L - 1); this model has "
                         f"{model.n_layers}: pass grad_drop=False")
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

    def score(at_last):
        if batch.clean_logits is None:  # noising: the base run is the clean run
            batch.clean_logits = at_last.detach()
        return fn(at_last, batch)

    cols, col_name, col_labels, kv = columns(model, pairs, over, positions)
    estimator = _Estimator(model, over, fix, layer_ids, names, source, cols, last)
    # Forward 2 + the backward(s): the base run, with the gradient of the summed metric (GradDrop: one backward per
    # dropped layer, one graph).
    if grad_drop:
        grad_names = [n for n in extra if n.endswith("hook_pattern")] if fix else names
        terms, base_v = grad_drop_terms(model, base, last, names + extra, grad_names, score, estimator,
                                        min(layer_ids))
    else:
        def on_last(logits, info):
            return score(logits[torch.arange(logits.shape[0], device=logits.device), last.to(logits.device)])
        base_v, acts, grads = activation_grads(model, base, names + extra, on_last)
        est = estimator(acts)(grads)
    base_v = base_v.float()
    other_v = fn(first_logits, batch).detach().float().cpu()
    clean_v, corr_v = (other_v, base_v) if denoise else (base_v, other_v)
    if grad_drop:
        raw = combine(terms)
        vals, note = unsigned_values(raw.mean(-1), float(clean_v.mean()), float(corr_v.mean()))
    else:
        raw = base_v + est
        vals, note = normalise(raw.mean(-1), float(clean_v.mean()), float(corr_v.mean()))
    return PatchingResult(vals, raw, clean_v, corr_v, layer_ids, [c[1] if over in HEAD_KINDS else c[0] for c in cols],
                          "layer", col_name, col_labels, over, direction, metric_name, describe_positions(positions),
                          kv, note, method=_method_name(fix, grad_drop),
                          extra={"grad_drop_terms": terms} if grad_drop else {}, signed=not grad_drop)


class _Estimator:
    """``_Estimator(...)(acts)(grads)`` -> the first-order estimate [layers, cols, pairs] in metric units. What does
    not depend on the gradient (activation differences; for the QK fix, the recomputed patterns) is computed once
    per set of activations, so GradDrop's backward passes reuse it."""

    def __init__(self, model, over, fix, layer_ids, names, source, cols, last):
        self.model, self.over, self.fix, self.layer_ids, self.names = model, over, fix, layer_ids, names
        self.source, self.cols, self.last = source, cols, last

    def __call__(self, acts):
        if self.fix:
            deltas = [_qk_deltas(self.model, self.over, layer, acts, self.source, self.cols, self.last)
                      for layer in self.layer_ids]
            pattern = [_qk_names(self.model, [layer])[2] for layer in self.layer_ids]
        else:
            diffs = [self.source[name] - acts[name] for name in self.names]

        def estimate(grads):
            est = torch.zeros(len(self.layer_ids), len(self.cols), self.last.shape[0])
            for i, name in enumerate(self.names):
                if self.fix:
                    g = grads[pattern[i]].double()
                    for j, (delta, heads) in enumerate(deltas[i]):
                        est[i, j] = (delta * g[:, heads]).flatten(1).sum(1).float()
                    continue
                for j, (pos, head) in enumerate(self.cols):
                    mask = patch_mask(diffs[i].shape, name, pos, head, self.last)
                    est[i, j] = (torch.where(mask, diffs[i], 0.0) * grads[name]).flatten(1).sum(1)
            return est
        return estimate


def _qk_names(model, layers) -> list[str]:
    points = set(model.hook_names())
    out = []
    for layer in layers:
        rot = f"blocks.{layer}.attn.hook_rot_q" in points  # rotary models: scores use the rotated q and k
        out += [f"blocks.{layer}.attn.hook_{'rot_' if rot else ''}q", f"blocks.{layer}.attn.hook_{'rot_' if rot else ''}k",
                f"blocks.{layer}.attn.hook_pattern", f"blocks.{layer}.attn.hook_attn_scores"]
    return out


def _qk_deltas(model, over, layer, acts, source, cols, last) -> list:
    """For each column, the change of one layer's attention pattern when its queries (head_q) or a KV group's keys
    (head_k) are patched: ``[(P' - P) [b, heads, t, s] (float64), the heads' slice]``. The AtP* estimate of a column
    is ``sum (P' - P) * dm/dP`` over those heads."""
    qn, kn, pn, sn = _qk_names(model, [layer])
    q, k, pattern = acts[qn].double(), acts[kn].double(), acts[pn].double()
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
    out = []
    for pos, head in cols:
        if over == "head_q":
            mask = patch_mask(q.shape, qn, pos, head, last)
            heads = slice(head, head + 1)
            new = probs(torch.where(mask, q_src, q), k)
        else:
            mask = patch_mask(k.shape, kn, pos, head, last)
            heads = slice(head * per, (head + 1) * per)
            new = probs(q, torch.where(mask, k_src, k))
        out.append((new[:, heads] - pattern[:, heads], heads))
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
