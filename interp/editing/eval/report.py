"""The result of an edit evaluation (:class:`EvalResult`: aggregates with 95% CIs, JSON, table, plots), the
diagnosis of failed edits (:func:`diagnose`), and the logit lens of one prompt before / after an edit.

Failed edits. A record fails when its efficacy (success form, P(new) > P(true) on the rewrite prompt) is false
after the edit. Its reason, from the edit's own record of its optimisation (ROME ``Edit.norms``, MEMIT
``facts_info``, FT-L ``norms`` / ``losses``, each read through the edit's ``diagnostics()``), the first that applies:

1. ``"clamp bound"``: the optimisation did not reach its target (below) and the change it optimised sat at its
   bound: ``|delta| >= 0.999 * clamp`` (ROME, MEMIT) or ``max |D| >= 0.999 * norm_constraint`` (FT-L);
2. ``"v* not converged"``: the target's probability at the end of the optimisation, ``exp(-final NLL)`` (ROME /
   MEMIT: mean over the templated prompts; FT-L: its fine-tuning loss), is below :data:`P_CONVERGED` = 0.5;
3. ``"key mismatch"``: the bare rewrite prompt's own key gets less than :data:`KEY_MATCH` = 0.5 of the update
   (ROME: ``key_match`` = ``v · k`` of that prompt under ``u vᵀ``; MEMIT: its share relative to the fact's mean
   key, averaged over the layers; v* was optimised as if it got all of it). Typical for a subject right after
   BOS, whose key differs from the key of the same subject inside a sentence; ROME's default
   ``key_rule="auto"`` then answers to every templated key instead (MEMIT's ``key_spread_weight`` can ask for
   it, but on dev it did not help: study "memit_key_rule");
4. ``"small key"``: ``k*ᵀC⁻¹k*`` (ROME's ``key_dot``) or ``|k*|`` is below :data:`SMALL_KEY` = 0.25 times its
   median over the evaluation's edits by the same editor (MEMIT: the key at its last layer);
5. ``"edit did not transfer"``: v* reached its target with an ordinary, matching key, yet the bare rewrite prompt
   still prefers the true answer.

An editor that reports none of these (a custom callable) gives ``"unknown"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from ...core.results import Result, new_figure, save_fig, wilson
from ..hparams import KEY_MATCH

SCORES = ("efficacy", "paraphrase", "neighborhood")
ALL_SCORES = SCORES + ("paraphrase_other", "neighborhood_unedited")
P_CONVERGED = 0.5
CLAMP_SHARE = 0.999
SMALL_KEY = 0.25
FAILURE_REASONS = ("clamp bound", "v* not converged", "key mismatch", "small key", "edit did not transfer", "unknown")
DIAGNOSTICS = ("opt_p_final", "delta_norm", "clamp", "key_norm", "key_dot", "key_match")


def diagnose(frame) -> list:
    """The failure reason of each row of an evaluation frame (None where the edit succeeded or raised); see the
    module docstring for the rules and thresholds."""
    def col(name):
        return frame[name] if name in frame else [float("nan")] * len(frame)

    def median(values):
        vals = sorted(float(v) for v in values if _finite(v))
        return vals[len(vals) // 2] if vals else float("nan")

    med = {k: median(col(k)) for k in ("key_norm", "key_dot")}
    errors = col("error") if "error" in frame else [None] * len(frame)
    out = []
    for eff, err, p, d, c, kn, kd, km in zip(col("efficacy_score_post"), errors, col("opt_p_final"),
                                             col("delta_norm"), col("clamp"), col("key_norm"), col("key_dot"),
                                             col("key_match")):
        if isinstance(err, str) or not _finite(eff) or eff > 0:
            out.append(None)
        elif not _finite(p):
            out.append("unknown")
        elif p < P_CONVERGED and _finite(d) and _finite(c) and d >= CLAMP_SHARE * c:
            out.append("clamp bound")
        elif p < P_CONVERGED:
            out.append("v* not converged")
        elif _finite(km) and km < KEY_MATCH:
            out.append("key mismatch")
        elif any(_finite(v) and _finite(med[k]) and v < SMALL_KEY * med[k]
                 for k, v in (("key_norm", kn), ("key_dot", kd))):
            out.append("small key")
        else:
            out.append("edit did not transfer")
    return out


def _finite(v) -> bool:
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


@dataclass(repr=False)
class EvalResult(Result):
    """Per-record measurements (``frame``) of one editor; ``baseline`` holds another editor's on the same
    records (or None). ``layers``: every layer the editor writes (ROME / FT-L: ``[layer]``)."""
    frame: object  # pandas DataFrame, one row per record
    editor: str
    layer: int
    hparams: dict
    settings: dict
    seconds: float
    baseline: "EvalResult | None" = None
    lens_curves: dict = field(default_factory=dict)  # case_id -> {"before": {...}, "after": {...}}
    layers: list = field(default_factory=list)

    def to_frame(self):
        return self.frame

    def _ok(self):
        """The rows of records whose edit succeeded, with NaN after-columns when none did (so a run in which
        every edit failed still reports its failures)."""
        f = self.frame[self.frame["error"].isna()] if "error" in self.frame else self.frame
        missing = [c[:-4] + "_post" for c in f.columns if c.endswith("_pre") and c[:-4] + "_post" not in f.columns]
        missing += [c for c in ("loss_drift", "edit_seconds") if c not in f.columns]
        return f.assign(**dict.fromkeys(missing, float("nan"))) if missing else f

    def _per_batch(self, column: str):
        """A measurement made once per batch (the loss drift, with ``batch_size`` > 1 on every row of its batch),
        over the successful edits: one value per batch, so that its CI counts batches, not rows (one batch: no
        CI)."""
        import pandas as pd

        f, bs = self.frame, int(self.settings.get("batch_size", 1) or 1)
        ok = f["error"].isna().to_numpy() if "error" in f else [True] * len(f)
        vals = f[column].to_numpy() if column in f else [float("nan")] * len(f)
        per_row = pd.Series(vals, index=[i // bs for i in range(len(f))], dtype=float)[ok]
        return per_row if bs <= 1 else per_row.groupby(level=0).first()

    def aggregates(self):
        """Mean and 95% CI per metric (scores and accuracies in percent; entropy drop and loss drift in percent).
        ``*_score`` is the paper's success form, ``*_acc`` the strict form (the wanted target is top-1)."""
        import pandas as pd

        f = self._ok()
        rows = []
        for name in ALL_SCORES:
            for when in ("pre", "post"):
                for kind in ("score", "magnitude", "acc"):
                    key = f"{name}_{kind}_{when}"
                    if key in f:  # a success or strict score lies in [0, 100]; a magnitude p(new) - p(true) does not
                        rows.append(mean_ci(key, 100 * f[key], bounds=None if kind == "magnitude" else (0, 100)))
        ge_pre = float(f["gen_entropy_pre"].mean()) if len(f) else float("nan")
        rows.append(mean_ci("generation_entropy_pre", f["gen_entropy_pre"]))
        rows.append(mean_ci("generation_entropy_post", f["gen_entropy_post"]))
        rows.append(mean_ci("generation_entropy_drop", 100 * (f["gen_entropy_pre"] - f["gen_entropy_post"]) / ge_pre))
        rows.append(mean_ci("loss_drift", self._per_batch("loss_drift")))
        rows.append(mean_ci("edit_seconds", f["edit_seconds"] if "edit_seconds" in f else []))
        for form in ("", "_acc"):
            kind = "acc" if form else "score"
            for when in ("pre", "post"):
                if all(f"{n}_{kind}_{when}" in f for n in SCORES):
                    s = [float(100 * f[f"{n}_{kind}_{when}"].mean()) if len(f) else float("nan") for n in SCORES]
                    rows.append({"metric": f"harmonic_mean{form}_{when}", "mean": _harmonic(s),
                                 "ci_low": float("nan"), "ci_high": float("nan"), "n": len(f)})
        return pd.DataFrame(rows).set_index("metric")

    def failures(self) -> list[dict]:
        """One dict per record whose efficacy (success form) is false after the edit: its reason (see
        :func:`diagnose`) and the diagnostics it was read from."""
        if "failure" not in self.frame:
            return []
        out = []
        for cid, row in self.frame[self.frame["failure"].notna()].iterrows():
            item = {"case_id": _plain(cid), "subject": row["subject"], "target_new": row["target_new"],
                    "reason": row["failure"], "efficacy_magnitude": float(row["efficacy_magnitude_post"])}
            item.update({k: float(row[k]) for k in DIAGNOSTICS if k in row and _finite(row[k])})
            out.append(item)
        return out

    def failure_counts(self) -> dict:
        counts = {}
        for item in self.failures():
            counts[item["reason"]] = counts.get(item["reason"], 0) + 1
        return counts

    def to_json(self) -> dict:
        """The CLI document: aggregates under their names (percent), their CIs, counts, settings, failures."""
        agg = self.aggregates()
        out = {"editor": self.editor, "layer": self.layer, "layers": list(self.layers) or [self.layer],
               "n_records": int(len(self.frame)),
               "n_failed": int(self.frame["error"].notna().sum()) if "error" in self.frame else 0,
               "seconds": self.seconds, "hparams": self.hparams, "settings": self.settings}
        for name in ALL_SCORES:
            for kind in ("score", "magnitude", "acc"):
                key = f"{name}_{kind}"
                if f"{key}_post" not in agg.index or agg.loc[f"{key}_post", "n"] == 0:
                    continue  # a metric no record has (paraphrase_other without the second paraphrase set)
                out[key] = agg.loc[f"{key}_post", "mean"]
                out[f"{key}_ci"] = [agg.loc[f"{key}_post", "ci_low"], agg.loc[f"{key}_post", "ci_high"]]
                out[f"{key}_before"] = agg.loc[f"{key}_pre", "mean"]
        for key in ("generation_entropy_drop", "loss_drift", "edit_seconds"):
            out[key] = agg.loc[key, "mean"]
            out[f"{key}_ci"] = [agg.loc[key, "ci_low"], agg.loc[key, "ci_high"]]
        out["generation_entropy_before"] = agg.loc["generation_entropy_pre", "mean"]
        out["generation_entropy_after"] = agg.loc["generation_entropy_post", "mean"]
        for form in ("", "_acc"):
            if f"harmonic_mean{form}_post" in agg.index:
                out[f"harmonic_mean{form}"] = agg.loc[f"harmonic_mean{form}_post", "mean"]
                out[f"harmonic_mean{form}_before"] = agg.loc[f"harmonic_mean{form}_pre", "mean"]
        if "lens_new_row_post" in self.frame:
            out["lens_new_row_before"] = _median(self.frame["lens_new_row_pre"])
            out["lens_new_row_after"] = _median(self.frame["lens_new_row_post"])
        out["failures"] = self.failures()
        out["failure_counts"] = self.failure_counts()
        if self.baseline is not None:
            out["baseline"] = self.baseline.to_json()
        return out

    def summary(self) -> str:
        agg = self.aggregates()
        parts = [f"{n} {agg.loc[f'{n}_score_post', 'mean']:.1f}" for n in SCORES]
        acc = [f"{n} {agg.loc[f'{n}_acc_post', 'mean']:.1f}" for n in SCORES if f"{n}_acc_post" in agg.index]
        counts = self.failure_counts()
        fails = (", failed edits: " + ", ".join(f"{k} {v}" for k, v in counts.items())) if counts else ""
        return (f"{self.editor} on {len(self.frame)} records (layer {self.layer}): " + ", ".join(parts) +
                f", S {agg.loc['harmonic_mean_post', 'mean']:.1f}" +
                (f"; top-1 accuracy: {', '.join(acc)}" if acc else "") +
                f"; entropy drop {agg.loc['generation_entropy_drop', 'mean']:.2f}%, loss drift "
                f"{agg.loc['loss_drift', 'mean']:.3f}%" + fails)

    def table(self):
        """Side by side: unedited, this editor and the baseline (post) — mean [95% CI] per metric."""
        import pandas as pd

        cols = {"unedited": self._col("pre"), self.editor: self._col("post")}
        if self.baseline is not None:
            cols[self.baseline.editor] = self.baseline._col("post")
        return pd.DataFrame(cols)

    def _col(self, when: str) -> dict:
        agg = self.aggregates()
        col = {}
        for kind, label in (("score", "score"), ("acc", "acc (top-1)")):
            for name in ALL_SCORES:
                key = f"{name}_{kind}_{when}"
                if key in agg.index and agg.loc[key, "n"] > 0:
                    r = agg.loc[key]
                    col[f"{name} {label}"] = f"{r['mean']:.1f} [{r['ci_low']:.1f}, {r['ci_high']:.1f}]"
        col["harmonic mean"] = f"{agg.loc[f'harmonic_mean_{when}', 'mean']:.1f}"
        if f"harmonic_mean_acc_{when}" in agg.index:
            col["harmonic mean (acc)"] = f"{agg.loc[f'harmonic_mean_acc_{when}', 'mean']:.1f}"
        if when == "post":
            for key, label in (("generation_entropy_drop", "entropy drop %"), ("loss_drift", "loss drift %")):
                r = agg.loc[key]
                col[label] = f"{r['mean']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
            col["failed edits"] = ", ".join(f"{k}: {v}" for k, v in self.failure_counts().items()) or "-"
        return col

    def plot(self, *, out=None):
        """Scores before / after the edit (and after the baseline's), mean with 95% CI."""
        import numpy as np

        fig = new_figure(figsize=(7.5, 3.6))
        ax = fig.add_subplot(1, 1, 1)
        series = [("unedited", self, "pre"), (self.editor, self, "post")]
        if self.baseline is not None:
            series.append((self.baseline.editor, self.baseline, "post"))
        x, width = np.arange(len(SCORES)), 0.8 / len(series)
        for i, (label, res, when) in enumerate(series):
            agg = res.aggregates()
            m = [agg.loc[f"{n}_score_{when}", "mean"] for n in SCORES]
            lo = [m[j] - agg.loc[f"{n}_score_{when}", "ci_low"] for j, n in enumerate(SCORES)]
            hi = [agg.loc[f"{n}_score_{when}", "ci_high"] - m[j] for j, n in enumerate(SCORES)]
            ax.bar(x + (i - (len(series) - 1) / 2) * width, m, width, yerr=[lo, hi], capsize=3, label=label)
        ax.set_xticks(x, [f"{n} score" for n in SCORES])
        ax.set_ylabel("% of prompts (95% CI)")
        ax.set_ylim(0, 105)
        ax.set_title(f"{len(self.frame)} facts, edits at layer {self.layer}")
        ax.legend(fontsize=8)
        return save_fig(fig, out)

    def lens(self, case_id=None) -> "LensBeforeAfter":
        """The logit lens of one record's rewrite prompt before and after (default: the first record)."""
        cid = next(iter(self.lens_curves), None) if case_id is None else case_id
        if cid not in self.lens_curves:
            raise ValueError(f"no lens curves for case {cid!r}; available: {list(self.lens_curves)[:10]}")
        row = self.frame.loc[cid]
        return LensBeforeAfter(text=f"case {cid}'s rewrite prompt", target_new=row["target_new"],
                               target_true=row["target_true"], layer=self.layer, curves=self.lens_curves[cid],
                               rows={"before": row.get("lens_new_row_pre"), "after": row.get("lens_new_row_post")})

    def plot_lens(self, case_id=None, *, out=None):
        """Logit lens of one rewrite prompt: P(target_new), P(target_true) per layer, before and after."""
        cid = next(iter(self.lens_curves), None) if case_id is None else case_id
        return self.lens(cid).plot(out=out, title=f"logit lens, case {cid} (edit at layer {self.layer})")


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def mean_ci(name: str, values, *, bounds: tuple | None = None) -> dict:
    """{"metric", "mean", "ci_low", "ci_high", "n"}: the mean of the finite ``values`` with a 95% CI.

    The normal approximation: mean +- 1.96 standard errors (NaN for fewer than two values). A score with
    ``bounds=(lo, hi)`` (e.g. (0, 100) percent) keeps its CI within them: outcomes that are all lo or hi (efficacy:
    one prompt per record) get Wilson's score interval, which is not zero-width at 100 %; per-record shares
    (paraphrase, neighbourhood) get the normal interval cut at the bounds (the mean cannot lie beyond them, so
    the cut loses no coverage). Uncut, scores near 100 gave [96.9, 101.0]."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    n = len(vals)
    mean = sum(vals) / n if n else float("nan")
    if bounds is not None and any(v < bounds[0] or v > bounds[1] for v in vals):
        raise ValueError(f"{name}: values must lie within {bounds}, got {min(vals)} .. {max(vals)}")
    if bounds is not None and n and all(v in bounds for v in vals):
        lo, hi = bounds
        low, high = wilson((mean - lo) / (hi - lo), n)
        # min / max: at a share of 0 or 1 the bound is the mean itself, and rounding must not put it beyond
        return {"metric": name, "mean": mean, "ci_low": min(mean, lo + (hi - lo) * low),
                "ci_high": max(mean, lo + (hi - lo) * high), "n": n}
    if n > 1:
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
        half = 1.96 * sd / math.sqrt(n)
    else:
        half = float("nan")
    low, high = mean - half, mean + half
    if bounds is not None and half == half:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return {"metric": name, "mean": mean, "ci_low": low, "ci_high": high, "n": n}


def _harmonic(values: Sequence[float]) -> float:
    if any(not v > 0 for v in values):
        return 0.0 if all(v == v for v in values) else float("nan")
    return len(values) / sum(1 / v for v in values)


def _median(series):
    vals = [float(v) for v in series if v is not None and v == v]
    return float(sorted(vals)[len(vals) // 2]) if vals else None


@dataclass(repr=False)
class LensBeforeAfter(Result):
    """Logit lens of one prompt's last position before and after an edit: per lens row (residual entering each
    layer, then the output), the probabilities of target_new and target_true (their first tokens)."""
    text: str
    target_new: str
    target_true: str
    layer: int
    curves: dict  # {"before"|"after": {"p_new": [...], "p_true": [...]}}
    rows: dict    # {"before"|"after": first row from which target_new stays top-1 (None: never)}

    def to_frame(self):
        import pandas as pd

        n = len(self.curves["before"]["p_new"])
        return pd.DataFrame({f"{k}_{when}": self.curves[when][k] for when in ("before", "after")
                             for k in ("p_new", "p_true")}, index=pd.RangeIndex(n, name="lens_row"))

    def summary(self) -> str:
        return (f"logit lens of {self.text!r}: {self.target_new!r} top-1 from row {self.rows['before']} before, "
                f"row {self.rows['after']} after the edit at layer {self.layer} (its output enters row "
                f"{self.layer + 1})")

    def plot(self, *, out=None, title: str | None = None):
        fig = new_figure(figsize=(6.5, 3.4))
        ax = fig.add_subplot(1, 1, 1)
        for when, style in (("before", "--"), ("after", "-")):
            ax.plot(self.curves[when]["p_new"], style, color="tab:red", label=f"P({self.target_new.strip()}) {when}")
            ax.plot(self.curves[when]["p_true"], style, color="tab:blue",
                    label=f"P({self.target_true.strip()}) {when}")
        ax.axvline(self.layer + 1, color="gray", lw=0.8)
        ax.set(xlabel="lens row (residual entering layer; last = output)", ylabel="probability",
               title=title or f"logit lens before/after (edit at layer {self.layer})")
        ax.legend(fontsize=8)
        return save_fig(fig, out)
