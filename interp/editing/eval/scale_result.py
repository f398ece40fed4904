"""The result of a sequential or mass editing run (:class:`ScaleResult`: steps, checkpoints, collapse, failures,
JSON, plots) and the table and figure of several runs (:func:`mass_table`, :func:`plot_mass`)."""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...core.results import Result, jsonable, new_figure, save_fig
from .scale_state import nan_for_null

SUDDEN_SHARE = 0.25      # a step that moves a measure by this share of its threshold caused the collapse alone
MIN_CI_N = 10            # plot_mass draws no interval for fewer facts (one fact's Wilson interval spans ~21-100)
LOG_SPAN = 20            # a run's x axis is logarithmic when its facts edited span at least this factor
TITLE_WIDTH = 130        # characters per line of a figure's title (wrapped, never cut)


@dataclass(repr=False)
class ScaleResult(Result):
    """A sequential (or, with one step, mass) editing run: ``steps`` (one dict per step), ``checkpoints`` (full
    scores of every fact edited so far), the unedited model's loss and entropy (``before``), settings."""
    editor: str
    steps: list
    checkpoints: list
    settings: dict
    hparams: dict = field(default_factory=dict)
    before: dict = field(default_factory=dict)
    seconds: float = float("nan")

    @property
    def collapse(self) -> dict | None:
        """The first step whose loss drift or entropy drop crossed its threshold: ``{"step", "n_edited",
        "case_ids" (that step's edits), "reason", "loss_drift", "entropy_drop", "sudden", "increment",
        "since_step"}``; None when none did. ``increment``: how far the measure that crossed moved since its last
        measurement (``since_step``; 0: the unedited model). ``sudden``: True when that step alone moved it by at
        least :data:`SUDDEN_SHARE` of the threshold (its edit caused the collapse); False when the move was smaller
        (the threshold was reached by accumulation, the step's edit is only the last of many); None when a larger
        move spans unmeasured steps (no single edit can be named)."""
        last = {"loss_drift": (0.0, 0), "entropy_drop": (0.0, 0)}  # (value, step) last measured; 0: unedited
        for row in self.steps:
            reasons, moves = [], []
            for key, limit, what in (("loss_drift", self.settings["max_drift"], "loss drift"),
                                     ("entropy_drop", self.settings["max_entropy_drop"], "entropy drop")):
                value = row[key]
                if not math.isfinite(value):  # not measured on this step (probe_every, measure_from)
                    continue
                if value > limit:
                    moves.append((value - last[key][0], limit, last[key][1]))
                    reasons.append(f"{what} {value:.1f}% > {limit}%")
                last[key] = (value, row["step"])
            if reasons:
                increment, limit, since = max(moves, key=lambda m: m[0] / m[1])
                if increment < SUDDEN_SHARE * limit:
                    sudden, how = False, f"reached by accumulation: {increment:+.2f} points since step {since}"
                elif since == row["step"] - 1:
                    sudden, how = True, f"this step alone added {increment:+.2f} points"
                else:  # a jump somewhere in unmeasured steps: no single edit can be named
                    sudden, how = None, (f"{increment:+.2f} points since step {since}, the last measured one: the "
                                         "edits between are not told apart")
                return {"step": row["step"], "n_edited": row["n_edited"], "case_ids": row["case_ids"],
                        "reason": "; ".join(reasons) + f" ({how})", "loss_drift": row["loss_drift"],
                        "entropy_drop": row["entropy_drop"], "sudden": sudden, "increment": increment,
                        "since_step": since}
        return None

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.steps).set_index("step")

    def checkpoint_frame(self):
        """One row per (checkpoint, metric): n_edited, mean, ci_low, ci_high, n (percent)."""
        import pandas as pd

        rows = [{"step": c["step"], "n_edited": c["n_edited"], **v} for c in self.checkpoints
                for v in c["scores"].values()]
        return pd.DataFrame(rows, columns=["step", "n_edited", "metric", "mean", "ci_low", "ci_high", "n"])

    def final_scores(self) -> dict:
        """The last checkpoint's means ``{metric: percent}`` (every fact of the run, with all edits applied)."""
        return {k: v["mean"] for k, v in self.checkpoints[-1]["scores"].items()} if self.checkpoints else {}

    def failures(self):
        """DataFrame, one row per fact failing efficacy (success form) at the last checkpoint: ``case_id``, the
        ``step`` that edited it, ``flipped`` (its efficacy right after that step) and ``why``: "never flipped"
        (the edit did not take) or "forgotten later" (it took, and later edits overwrote it); "not recorded" for a
        run saved before the edits were checked as they were made."""
        import pandas as pd

        made = {e["case_id"]: (r["step"], e.get("flipped")) for r in self.steps for e in r["edits"]}
        failing = self.checkpoints[-1].get("failing", []) if self.checkpoints else []
        rows = []
        for cid in failing:
            step, flipped = made.get(cid, (None, None))
            why = "not recorded" if flipped is None else (
                "forgotten later" if flipped else "never flipped")
            rows.append({"case_id": cid, "step": step, "flipped": flipped, "why": why})
        return pd.DataFrame(rows, columns=["case_id", "step", "flipped", "why"])

    def summary(self) -> str:
        last = self.steps[-1] if self.steps else {}
        bs = self.settings.get("batch_size", 1)
        how = f"{len(self.steps)} step(s) of {bs} fact(s)" if bs > 1 else f"{len(self.steps)} edits one after another"
        s = self.final_scores()
        scores = (f"; all {last.get('n_edited')} facts: ES {s.get('efficacy_score', math.nan):.1f} "
                  f"PS {s.get('paraphrase_score', math.nan):.1f} NS {s.get('neighborhood_score', math.nan):.1f} "
                  f"(strict {s.get('efficacy_acc', math.nan):.1f} / {s.get('paraphrase_acc', math.nan):.1f} / "
                  f"{s.get('neighborhood_acc', math.nan):.1f})") if s else ""
        if s and "failing" in self.checkpoints[-1]:
            why = self.failures()["why"].value_counts()
            scores += (f"; {len(self.checkpoints[-1]['failing'])} failing efficacy (never flipped "
                       f"{why.get('never flipped', 0)}, forgotten later {why.get('forgotten later', 0)})")
        c = self.collapse
        col = (f"collapse at step {c['step']} ({c['n_edited']} facts; {c['reason']})" if c else
               f"no collapse (drift <= {self.settings['max_drift']}%, entropy drop <= "
               f"{self.settings['max_entropy_drop']}%)")
        return (f"{self.editor.upper()}, {how}: retention {last.get('retention', math.nan):.1f}% (strict "
                f"{last.get('retention_acc', math.nan):.1f}%), loss drift {last.get('loss_drift', math.nan):+.2f}%, "
                f"entropy drop {last.get('entropy_drop', math.nan):+.2f}%{scores}; {col}")

    def to_json(self) -> dict:
        return jsonable({"result": type(self).__name__, "summary": self.summary(), "editor": self.editor,
                         "steps": self.steps, "checkpoints": self.checkpoints, "settings": self.settings,
                         "hparams": self.hparams, "before": self.before, "seconds": self.seconds,
                         "collapse": self.collapse})

    def save(self, path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return path

    @classmethod
    def from_json(cls, doc: dict) -> ScaleResult:
        if doc.get("result") != cls.__name__:
            raise ValueError(f"not a {cls.__name__} document (result={doc.get('result')!r})")
        nan = nan_for_null  # JSON writes NaN as null
        return cls(editor=doc["editor"], steps=nan(doc["steps"]), checkpoints=nan(doc["checkpoints"]),
                   settings=doc["settings"], hparams=doc.get("hparams", {}), before=nan(doc.get("before", {})),
                   seconds=doc.get("seconds", math.nan))

    def plot(self, *, out=None):
        """Retention, loss drift and generation entropy per step; paraphrase / neighbourhood at checkpoints."""
        f = self.to_frame()
        fig = new_figure(figsize=(11, 7))
        axes = fig.subplots(2, 2)
        n = f["n_edited"]
        probed = f.dropna(subset=["retention"])  # probe_every > 1: retention and entropy on some steps only
        ax = axes[0, 0]
        ax.plot(probed["n_edited"], probed["retention"], label="retention (P(new) > P(true))")
        ax.plot(probed["n_edited"], probed["retention_acc"], "--", label="retention, strict (top-1)")
        ax.set(ylabel="% of facts edited so far", ylim=(-2, 102), title="efficacy of every fact so far")
        ax = axes[0, 1]
        cf = self.checkpoint_frame()
        for metric, style in (("paraphrase_score", "o-"), ("paraphrase_acc", "o--"), ("neighborhood_score", "s-"),
                              ("neighborhood_acc", "s--"), ("paraphrase_other_score", "^:")):
            part = cf[cf["metric"] == metric]
            if len(part):
                ax.errorbar(part["n_edited"], part["mean"], yerr=[part["mean"] - part["ci_low"],
                            part["ci_high"] - part["mean"]], fmt=style, capsize=3, label=metric)
        ax.set(ylabel="%", ylim=(-2, 102), title="scores at checkpoints (95% CI)")
        axes[1, 0].plot(n, f["loss_drift"])
        axes[1, 0].axhline(self.settings["max_drift"], color="r", lw=0.8, ls=":")
        axes[1, 0].set(ylabel="Wikipedia loss drift (%)", title="loss drift")
        axes[1, 1].plot(probed["n_edited"], probed["generation_entropy"])
        axes[1, 1].axhline(self.before.get("generation_entropy", math.nan) * (1 - self.settings[
            "max_entropy_drop"] / 100), color="r", lw=0.8, ls=":")
        axes[1, 1].set(ylabel="n-gram entropy", title="generation entropy")
        c = self.collapse
        for ax in axes.flat:
            if c:
                ax.axvline(c["n_edited"], color="k", lw=0.8, ls="--")
            _facts_axis(ax, n)
        for ax in axes[0]:
            ax.legend(fontsize=7)
        _wrapped_title(fig, self.summary())
        return save_fig(fig, out)


def _facts_axis(ax, n) -> None:
    """The x axis "facts edited", starting where the data start: logarithmic from the first count when the
    counts are all >= 1 and span at least :data:`LOG_SPAN` (the early steps stay visible, no negative ticks),
    else linear from 0. Tick labels are plain numbers (1, 10, 100)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_xlabel("facts edited")
    n = [float(v) for v in n if math.isfinite(float(v))]
    if n and min(n) >= 1 and max(n) >= LOG_SPAN * min(n):
        ax.set_xscale("log")
        ax.set_xlim(min(n) / 1.15, max(n) * 1.15)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.set_xlim(0, max(n + [1]) * 1.05)


def _wrapped_title(fig, text: str, fontsize: float = 8) -> None:
    """``text`` as the figure's title, wrapped to lines of :data:`TITLE_WIDTH` characters (never cut); the figure's
    constrained layout (:func:`new_figure`) places the subplots below it, so that no character leaves the canvas."""
    fig.suptitle("\n".join(textwrap.wrap(text, TITLE_WIDTH, break_on_hyphens=False)), fontsize=fontsize)


def mass_table(results: Sequence[ScaleResult]):
    """DataFrame: one row per (editor, batch size, facts edited) with every final score (percent) and its 95% CI
    (``{score}_ci_low`` / ``_ci_high``: a score's CI need not be symmetric near 0 or 100) — e.g. MEMIT runs of
    one batch of N facts beside ROME / FT-L runs of N edits one after another."""
    import pandas as pd

    rows = []
    for r in results:
        for c in r.checkpoints:
            bs = r.settings.get("batch_size", 1)
            mode = "one batch" if len(r.steps) == 1 and bs > 1 else f"batches of {bs}" if bs > 1 else "one by one"
            row = {"editor": r.editor, "mode": mode, "batch_size": bs, "n_edited": c["n_edited"]}
            for k, v in c["scores"].items():
                row[k], row[f"{k}_ci_low"], row[f"{k}_ci_high"] = v["mean"], v["ci_low"], v["ci_high"]
            rows.append(row)
    return pd.DataFrame(rows)


def plot_mass(results: Sequence[ScaleResult], *, out=None):
    """Efficacy, paraphrase and neighbourhood (success form solid, strict dashed) against facts edited, one
    colour per run."""
    import pandas as pd

    # a run of one step is one batch, whatever its size (a MEMIT batch of one fact is not "one by one")
    t = pd.concat([mass_table([r]).assign(mode="one batch") if len(r.steps) == 1 else mass_table([r])
                   for r in results], ignore_index=True)
    fig = new_figure(figsize=(12, 3.8))
    axes = fig.subplots(1, 3)
    for i, ((ed, mode), part) in enumerate(t.groupby(["editor", "mode"], sort=False)):
        label = f"{ed} ({mode})"
        part = part.sort_values("n_edited")
        wide = part[part["n_edited"] >= MIN_CI_N]
        for ax, m in zip(axes, ("efficacy", "paraphrase", "neighborhood")):
            ax.plot(part["n_edited"], part[f"{m}_score"], "o-", color=f"C{i}", label=label)
            y = wide[f"{m}_score"]
            # clipped at 0: a Wilson bound at 100 can come out a rounding error below a mean of 100
            err = [(y - wide[f"{m}_score_ci_low"]).clip(lower=0), (wide[f"{m}_score_ci_high"] - y).clip(lower=0)]
            if len(wide):
                ax.errorbar(wide["n_edited"], y, yerr=err, fmt="none", ecolor=f"C{i}", capsize=2)
            ax.plot(part["n_edited"], part[f"{m}_acc"], "x--", color=f"C{i}")
    for ax, m in zip(axes, ("efficacy", "paraphrase", "neighborhood")):
        ax.set(xscale="log", xlabel="facts edited", ylabel="%", ylim=(-2, 102), title=m)
    axes[0].legend(fontsize=7)
    _wrapped_title(fig, f"solid: success form, dashed: strict (top-1). 95% CI of the success form drawn from "
                        f"{MIN_CI_N} facts on; fewer facts give intervals too wide to read (one fact: about 21-100)",
                   fontsize=8)
    return save_fig(fig, out)
