"""The interactive views of features (:mod:`interp.analyses.features`): a feature's card, and a text's active
features per token."""

from __future__ import annotations

from pathlib import Path

from ...core.views import View, rounded

SCRIPT = Path(__file__).with_name("features_view.js")  # draws the view kinds "feature_card", "feature_tokens"


def card_view(card) -> View:
    edges = [0.0] + list(card.bins)
    labels = [f"< {edges[1]:.0e}"] + [f"{a:.0e}-{b:.0e}" for a, b in zip(edges[1:-1], edges[2:])] + [f"> {edges[-1]:.0e}"]
    site = f"layer {card.key}" if isinstance(card.key, int) else str(card.key)
    data = {"title": f"feature {card.feature} at {site}", "summary": card.summary(), "feature": card.feature,
            "site": site, "density": card.density, "n_tokens": card.n_tokens, "hist": card.hist, "bin_labels": labels,
            "contexts": [{**c, "acts": rounded(c["acts"], 4)} for c in card.strips],
            "promoted": [[t, rounded([v], 4)[0]] for t, v in card.vocab["promoted"]],
            "suppressed": [[t, rounded([v], 4)[0]] for t, v in card.vocab["suppressed"]],
            "note": "promotes / suppresses: the decoder row through the final norm's learned scale and W_U, per unit "
                    "of activation (the norm's 1/rms left out: it does not change the ranking)"}
    return View("feature_card", data["title"], data, script=SCRIPT)


def tokens_view(fa) -> View:
    keys = list(fa.acts)
    active = [[[[f, rounded([v], 4)[0]] for f, v in fa.active(k, p)[: fa.top]] for p in range(len(fa.tokens))]
              for k in keys]
    data = {"title": "active features per token", "summary": fa.summary(), "tokens": list(fa.tokens),
            "keys": [f"L{k}" if isinstance(k, int) else str(k) for k in keys], "active": active}
    return View("feature_tokens", data["title"], data, script=SCRIPT)
