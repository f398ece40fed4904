"""The interactive view of a causal trace (:class:`interp.analyses.trace.TraceResult`): one heatmap per traced
kind with token labels and hover values, coloured by the rules of its static plot."""

from __future__ import annotations

from ...core.views import View, finite_range, grid_view, panel

CMAP = {"resid": "Purples", "mlp": "Greens", "attn": "Reds"}
TITLE = {"resid": "restore residual (after block)", "mlp": "restore MLP output", "attn": "restore attention output"}


def trace_view(tr, *, kinds=None, value: str = "prob") -> View:
    """One panel per traced kind: tokens down (subject tokens marked *), layers across, as ``tr.plot()``;
    ``value`` "prob" (p(target) with the state restored; colours from the corrupted probability to the largest)
    or "effect" (that minus the corrupted probability)."""
    if value not in ("prob", "effect"):
        raise ValueError(f"value {value!r} not known; allowed: 'prob', 'effect'")
    kinds = list(tr.effects) if kinds is None else [kinds] if isinstance(kinds, str) else list(kinds)
    for k in kinds:
        if k not in tr.effects:
            raise ValueError(f"kind {k!r} was not traced; available: {', '.join(tr.effects)}")
    s0, s1 = tr.subject_range
    labels = [repr(t)[1:-1] + ("*" if s0 <= i < s1 else "") for i, t in enumerate(tr.tokens)]
    panels = []
    for k in kinds:
        prob, eff = tr.restored[k].T, tr.effects[k].T  # [token, layer]
        data = prob if value == "prob" else eff
        lo, hi = finite_range(data)
        vmin = tr.corrupted_prob if value == "prob" else min(0.0, lo)
        panels.append(panel(TITLE[k] + (f" (window {tr.window})" if k != "resid" else ""), data, labels,
                            list(range(tr.n_layers)), cmap=CMAP[k], vmin=vmin, vmax=max(hi, vmin),
                            row_name="token", col_name="layer",
                            value_name=f"p({tr.target.strip() or tr.target!r})" if value == "prob" else "indirect effect",
                            extra={"indirect effect": eff} if value == "prob" else {"restored p": prob},
                            pid=f"trace-{k}", cell=(14, 16)))
    note = (f"{tr.text!r} -> {tr.target!r}: clean p {tr.clean_prob:.4g}, corrupted p {tr.corrupted_prob:.4g} "
            f"({tr.corruption_label}); * = subject token; blank = not computed")
    return grid_view(f"causal trace of {tr.subject!r}", tr.summary(), panels, note)

