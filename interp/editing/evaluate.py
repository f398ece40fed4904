"""Evaluate fact edits before and after (CounterFact metrics of the ROME paper), and the FT-L baseline.

    res = interp.rome.evaluate(model, interp.rome.load_records(split="dev")[:10], editor="rome", baseline="ft")
    res.aggregates()      # mean and 95% CI of every metric
    res.to_frame()        # one row per record
    res.plot(out="scores.png")

Per record: measure the unedited model, edit, measure again, revert (the edited weight is checked bit for bit
against its state before the edit). Scores (paper definitions, each prompt scored by the length-normalized
probability ``P = exp(-mean per-token NLL)`` of the target continuation):

- efficacy score: P(target_new) > P(target_true) on the rewrite prompt; magnitude P(new) - P(true);
- paraphrase score/magnitude: the same, averaged over the paraphrase prompts;
- neighborhood score: share of neighbourhood prompts (other subjects whose answer is target_true) where
  P(true) > P(new) still; magnitude P(true) - P(new);
- generation entropy: weighted n-gram entropy (n = 2, 3; weights 2/3, 4/3) of seeded top-5 samples continuing
  the generation prompts — the same samples (seed) before and after, so the drop is paired;
- loss drift: mean next-token NLL on a fixed set of Wikipedia summaries, after vs before, in percent;
- logit lens of the rewrite prompt before and after: first layer from which target_new stays the top-1 token.

Aggregates are means over records with a normal-approximation 95% CI (mean +- 1.96 standard errors).
"""

from __future__ import annotations

import math
import re
import time
import types
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..analyses.lens import logit_lens
from ..core.corpus import token_batches, wiki_documents
from ..core.generation import sample_text, selected_logits
from ..core.inputs import pad_rows
from ..core.progress import bar
from ..core.results import Result, new_figure, save_fig
from .facts import Fact, as_fact
from .ft import FT_DEFAULTS, ft_edit
from .rome import RomeHparams, default_layer, edit, key_stats

SCORES = ("efficacy", "paraphrase", "neighborhood")
# The showcase's before/after prompts: the rewritten prompt, a paraphrase, a neighbouring landmark (in Paris).
DEMO_PROMPTS = ("The Eiffel Tower is located in the city of",
                "Where is the Eiffel Tower? It stands in the city of",
                "The Louvre is located in the city of")


# ============================================================================================ measurements
def target_nll(model, prompts: Sequence[str], targets: Sequence[str], *, batch_size: int = 32) -> torch.Tensor:
    """Mean per-token NLL (nats) of ``targets[i]`` continuing ``prompts[i]`` -> float64 [n]. Tokens: BOS + the
    prompt's tokens + the target's tokens (tokenized on its own, as the edit does)."""
    if len(prompts) != len(targets):
        raise ValueError(f"{len(prompts)} prompts but {len(targets)} targets")
    out = []
    for start in range(0, len(prompts), batch_size):
        rows, sel_r, sel_p, ids = [], [], [], []
        for j, (p, t) in enumerate(zip(prompts[start:start + batch_size], targets[start:start + batch_size])):
            pt, tt = model.to_tokens(p)[0].tolist(), model.target_tokens(t)
            rows.append(pt + tt[:-1])
            sel_r += [j] * len(tt)
            sel_p += list(range(len(pt) - 1, len(pt) - 1 + len(tt)))
            ids.append(tt)
        toks, _ = pad_rows(model, rows)
        with torch.no_grad():
            logp = torch.log_softmax(selected_logits(model, toks, torch.tensor(sel_r), torch.tensor(sel_p))
                                     .to(torch.float64).cpu(), -1)
        flat = torch.tensor([i for t in ids for i in t])
        nll = -logp.gather(1, flat[:, None])[:, 0]
        k = 0
        for t in ids:
            out.append(nll[k: k + len(t)].mean())
            k += len(t)
    return torch.stack(out)


def fact_probs(model, fact: Fact) -> dict[str, torch.Tensor]:
    """{"rewrite"|"paraphrase"|"neighborhood": (P(new), P(true)) [n, 2]}, length-normalized probabilities."""
    groups = {"rewrite": [fact.text], "paraphrase": list(fact.paraphrase_prompts),
              "neighborhood": list(fact.neighborhood_prompts)}
    prompts = [p for g in groups.values() for p in g]
    nll = target_nll(model, prompts * 2, [fact.target_new] * len(prompts) + [fact.target_true] * len(prompts))
    p = torch.exp(-nll).reshape(2, -1).T  # [n_prompts, (new, true)]
    out, k = {}, 0
    for name, g in groups.items():
        out[name] = p[k: k + len(g)]
        k += len(g)
    return out


def fact_scores(probs: dict[str, torch.Tensor]) -> dict[str, float]:
    """The paper's scores and magnitudes from :func:`fact_probs` (fractions in 0..1, magnitudes in -1..1)."""
    rw, pa, ne = probs["rewrite"], probs["paraphrase"], probs["neighborhood"]
    return {"efficacy_score": float((rw[:, 0] > rw[:, 1]).double().mean()),
            "efficacy_magnitude": float((rw[:, 0] - rw[:, 1]).mean()),
            "paraphrase_score": float((pa[:, 0] > pa[:, 1]).double().mean()),
            "paraphrase_magnitude": float((pa[:, 0] - pa[:, 1]).mean()),
            "neighborhood_score": float((ne[:, 1] > ne[:, 0]).double().mean()),
            "neighborhood_magnitude": float((ne[:, 1] - ne[:, 0]).mean())}


def ngram_entropy(text: str, ns=(2, 3), weights=(2 / 3, 4 / 3)) -> float:
    """The ROME paper's generation entropy of one text: mean over n of weight_n * entropy (bits) of its word
    n-gram distribution (words: runs of letters/digits, or single punctuation marks)."""
    words = re.findall(r"\w+|[^\w\s]", text.lower())
    vals = []
    for n, w in zip(ns, weights):
        grams = Counter(tuple(words[i: i + n]) for i in range(len(words) - n + 1))
        total = sum(grams.values())
        h = -sum(c / total * math.log2(c / total) for c in grams.values()) if total else 0.0
        vals.append(w * h)
    return sum(vals) / len(vals)


def generation_entropy(model, prompts: Sequence[str], *, n_tokens: int = 40, seed: int = 0
                       ) -> tuple[float, list[str]]:
    """(mean n-gram entropy, texts) of seeded top-5 samples of ``n_tokens`` continuing each prompt."""
    texts = sample_text(model, list(prompts), n_tokens, seed=seed, top_k=5)
    return sum(ngram_entropy(p + t) for p, t in zip(prompts, texts)) / len(texts), texts


def drift_texts(n_docs: int = 16, seed: int = 1234) -> list[str]:
    """The fixed Wikipedia summaries the loss drift is measured on (``wiki_documents`` shuffled with ``seed``)."""
    return [d.text for d in wiki_documents(n=n_docs, seed=seed)]


def text_nll(model, texts: Sequence[str], *, max_len: int = 64, batch_size: int = 8) -> float:
    """Mean next-token NLL (nats) over every token of ``texts`` (each BOS + at most ``max_len`` tokens)."""
    total, count = 0.0, 0
    for toks, mask, _ in token_batches(model, list(texts), max_len=max_len, batch_size=batch_size):
        with torch.no_grad():
            logp = torch.log_softmax(model.forward(toks).to(torch.float64).cpu(), -1)
        nll = -logp[:, :-1].gather(2, toks[:, 1:, None])[..., 0]
        m = mask[:, 1:]
        total += float(nll[m].sum())
        count += int(m.sum())
    return total / count


def lens_rows(model, fact: Fact) -> dict[str, float | None]:
    """Logit lens of the rewrite prompt's last position (``interp.lens.logit_lens``): first lens row from which
    the first token of target_new (resp. target_true) stays top-1, and their final-row probabilities."""
    ids = [model.target_tokens(fact.target_new)[0], model.target_tokens(fact.target_true)[0]]
    lens = logit_lens(model, fact.text, targets=ids, positions=[-1], k=1)
    new, true = lens.target_curve(ids[0]), lens.target_curve(ids[1])
    return {"lens_new_row": lens.first_top1(ids[0], stable=True),
            "lens_true_row": lens.first_top1(ids[1], stable=True),
            "lens_p_new": float(new["prob"][-1]), "lens_p_true": float(true["prob"][-1]),
            "_curves": {"p_new": new["prob"].tolist(), "p_true": true["prob"].tolist()}}


# ============================================================================================ evaluation
@dataclass(repr=False)
class EvalResult(Result):
    """Per-record measurements (``frame``) of one editor; ``baseline`` holds another editor's on the same
    records (or None)."""
    frame: object  # pandas DataFrame, one row per record
    editor: str
    layer: int
    hparams: dict
    settings: dict
    seconds: float
    baseline: "EvalResult | None" = None
    lens_curves: dict = field(default_factory=dict)  # case_id -> {"before": {...}, "after": {...}}

    def to_frame(self):
        return self.frame

    def aggregates(self):
        """Mean and 95% CI per metric (scores in percent; entropy drop and loss drift in percent)."""
        import pandas as pd

        f = self.frame[self.frame["error"].isna()] if "error" in self.frame else self.frame
        rows = []
        for name in SCORES:
            for when in ("pre", "post"):
                rows.append(_agg(f"{name}_score_{when}", 100 * f[f"{name}_score_{when}"]))
                rows.append(_agg(f"{name}_magnitude_{when}", 100 * f[f"{name}_magnitude_{when}"]))
        ge_pre = float(f["gen_entropy_pre"].mean()) if len(f) else float("nan")
        rows.append(_agg("generation_entropy_pre", f["gen_entropy_pre"]))
        rows.append(_agg("generation_entropy_post", f["gen_entropy_post"]))
        rows.append(_agg("generation_entropy_drop", 100 * (f["gen_entropy_pre"] - f["gen_entropy_post"]) / ge_pre))
        rows.append(_agg("loss_drift", f["loss_drift"]))
        rows.append(_agg("edit_seconds", f["edit_seconds"]))
        for when in ("pre", "post"):
            s = [float(100 * f[f"{n}_score_{when}"].mean()) if len(f) else float("nan") for n in SCORES]
            rows.append({"metric": f"harmonic_mean_{when}", "mean": _harmonic(s), "ci_low": float("nan"),
                         "ci_high": float("nan"), "n": len(f)})
        return pd.DataFrame(rows).set_index("metric")

    def to_json(self) -> dict:
        """The CLI document: aggregates under their names (percent), their CIs, counts, settings."""
        agg = self.aggregates()
        out = {"editor": self.editor, "layer": self.layer, "n_records": int(len(self.frame)),
               "n_failed": int(self.frame["error"].notna().sum()) if "error" in self.frame else 0,
               "seconds": self.seconds, "hparams": self.hparams, "settings": self.settings}
        for name in SCORES:
            for kind in ("score", "magnitude"):
                key = f"{name}_{kind}"
                out[key] = agg.loc[f"{key}_post", "mean"]
                out[f"{key}_ci"] = [agg.loc[f"{key}_post", "ci_low"], agg.loc[f"{key}_post", "ci_high"]]
                out[f"{key}_before"] = agg.loc[f"{key}_pre", "mean"]
        for key in ("generation_entropy_drop", "loss_drift", "edit_seconds"):
            out[key] = agg.loc[key, "mean"]
            out[f"{key}_ci"] = [agg.loc[key, "ci_low"], agg.loc[key, "ci_high"]]
        out["generation_entropy_before"] = agg.loc["generation_entropy_pre", "mean"]
        out["generation_entropy_after"] = agg.loc["generation_entropy_post", "mean"]
        out["harmonic_mean"] = agg.loc["harmonic_mean_post", "mean"]
        out["harmonic_mean_before"] = agg.loc["harmonic_mean_pre", "mean"]
        if "lens_new_row_post" in self.frame:
            out["lens_new_row_before"] = _median(self.frame["lens_new_row_pre"])
            out["lens_new_row_after"] = _median(self.frame["lens_new_row_post"])
        if self.baseline is not None:
            out["baseline"] = self.baseline.to_json()
        return out

    def summary(self) -> str:
        agg = self.aggregates()
        parts = [f"{n} {agg.loc[f'{n}_score_post', 'mean']:.1f}" for n in SCORES]
        return (f"{self.editor} on {len(self.frame)} records (layer {self.layer}): " + ", ".join(parts) +
                f", S {agg.loc['harmonic_mean_post', 'mean']:.1f}, entropy drop "
                f"{agg.loc['generation_entropy_drop', 'mean']:.2f}%, loss drift {agg.loc['loss_drift', 'mean']:.3f}%")

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
        for name in SCORES:
            r = agg.loc[f"{name}_score_{when}"]
            col[f"{name} score"] = f"{r['mean']:.1f} [{r['ci_low']:.1f}, {r['ci_high']:.1f}]"
        col["harmonic mean"] = f"{agg.loc[f'harmonic_mean_{when}', 'mean']:.1f}"
        if when == "post":
            for key, label in (("generation_entropy_drop", "entropy drop %"), ("loss_drift", "loss drift %")):
                r = agg.loc[key]
                col[label] = f"{r['mean']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
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


def _agg(name: str, values) -> dict:
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    n = len(vals)
    mean = sum(vals) / n if n else float("nan")
    if n > 1:
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
        half = 1.96 * sd / math.sqrt(n)
    else:
        half = float("nan")
    return {"metric": name, "mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": n}


def _harmonic(values: Sequence[float]) -> float:
    if any(not v > 0 for v in values):
        return 0.0 if all(v == v for v in values) else float("nan")
    return len(values) / sum(1 / v for v in values)


def _median(series):
    vals = [float(v) for v in series if v is not None and v == v]
    return float(sorted(vals)[len(vals) // 2]) if vals else None


def _editor_fn(model, editor, layer, seed, stats, hparams) -> tuple[str, Callable]:
    """(name, fn(fact) -> applied edit with .revert())."""
    if callable(editor):
        return getattr(editor, "__name__", "custom"), lambda fact: editor(model, fact)
    if editor == "rome":
        hp = RomeHparams.make(**(hparams or {}))
        if stats is None:
            stats = key_stats(model, layer, hp.mom2_n_tokens, progress=False)
        return "rome", lambda fact: edit(model, fact.prompt, fact.subject, fact.target_new, layer, seed=seed,
                                         stats=stats, **(hparams or {}))
    if editor == "ft":
        return "ft", lambda fact: ft_edit(model, fact.prompt, fact.subject, fact.target_new, layer, seed=seed,
                                          **(hparams or {}))
    raise ValueError(f"editor {editor!r} not known; allowed: 'rome', 'ft' or a callable(model, record) -> edit")


def evaluate(model, records, editor="rome", *, layer: int | None = None, seed: int = 0, stats=None,
             hparams: dict | None = None, baseline=None, baseline_hparams: dict | None = None,
             generation: bool = True, gen_tokens: int = 40, drift: bool = True, drift_docs: int = 16,
             lens: bool = True, progress: bool = True) -> EvalResult:
    """Measure each record before the edit, edit, measure after, revert (see the module docstring).

    editor: "rome", "ft" (FT-L) or ``fn(model, record) -> edit`` (anything with ``.revert()``).
    baseline: optionally a second editor evaluated on the same records (shares the "before" measurements);
        its result is ``result.baseline``. hparams / baseline_hparams: keyword overrides for the editors.
    generation / drift / lens: switch off the slower measurements (their columns are then NaN).
    """
    t_start = time.perf_counter()
    facts = [as_fact(r, where=f"record {i}") for i, r in enumerate(records)]
    if not facts:
        raise ValueError("no records to evaluate; pass a non-empty list (see interp.rome.load_records)")
    layer = default_layer(model) if layer is None else model.check_layer(layer)
    runs = [_editor_fn(model, editor, layer, seed, stats, hparams)]
    if baseline is not None:
        runs.append(_editor_fn(model, baseline, layer, seed, None, baseline_hparams))
    texts = drift_texts(drift_docs) if drift else []
    loss_pre = text_nll(model, texts) if drift else float("nan")
    rows: list[list[dict]] = [[] for _ in runs]
    curves: list[dict] = [{} for _ in runs]
    progress_bar = bar(total=len(facts) * len(runs), desc="evaluate edits", enabled=progress, unit="edit")
    for i, fact in enumerate(facts):
        before = _measure(model, fact, seed + i, generation, gen_tokens, lens)
        for r, (name, fn) in enumerate(runs):
            row = {"case_id": fact.case_id, "relation": fact.relation, "subject": fact.subject,
                   "target_true": fact.target_true, "target_new": fact.target_new, "error": None,
                   "loss_pre": loss_pre}
            row.update({f"{k}_pre": v for k, v in before.items() if not k.startswith("_")})
            weight = model.mlp_out_matrix(layer).detach().cpu().clone() if not callable(editor) else None
            t0 = time.perf_counter()
            try:
                handle = fn(fact)
            except (ValueError, FloatingPointError) as e:
                row["error"] = f"{type(e).__name__}: {e}"
                rows[r].append(row)
                progress_bar.update(1)
                continue
            row["edit_seconds"] = time.perf_counter() - t0
            norms = getattr(handle, "norms", {}) or {}
            row["relative_update"] = norms.get("relative_update", float("nan"))
            try:
                after = _measure(model, fact, seed + i, generation, gen_tokens, lens)
                row["loss_post"] = text_nll(model, texts) if drift else float("nan")
            finally:
                handle.revert()
            if weight is not None and not torch.equal(weight, model.mlp_out_matrix(layer).detach().cpu()):
                raise RuntimeError(f"revert did not restore layer {layer}'s weights bit for bit (case "
                                   f"{fact.case_id})")
            row.update({f"{k}_post": v for k, v in after.items() if not k.startswith("_")})
            row["loss_drift"] = 100 * (row["loss_post"] - loss_pre) / loss_pre if drift else float("nan")
            if lens:
                curves[r][fact.case_id] = {"before": before["_curves"], "after": after["_curves"]}
            rows[r].append(row)
            progress_bar.update(1)
    progress_bar.close()
    results = []
    import pandas as pd

    settings = {"seed": seed, "generation": generation, "gen_tokens": gen_tokens, "drift": drift,
                "drift_docs": drift_docs, "lens": lens, "n_records": len(facts)}
    for r, (name, _) in enumerate(runs):
        hp = hparams if r == 0 else baseline_hparams
        full = (RomeHparams.make(**(hp or {})).to_dict() if name == "rome" else
                {**FT_DEFAULTS, **(hp or {})} if name == "ft" else dict(hp or {}))
        results.append(EvalResult(frame=pd.DataFrame(rows[r]).set_index("case_id"), editor=name, layer=layer,
                                  hparams=full, settings=settings, seconds=time.perf_counter() - t_start,
                                  lens_curves=curves[r]))
    if len(results) > 1:
        results[0].baseline = results[1]
    return results[0]


def _measure(model, fact: Fact, seed: int, generation: bool, gen_tokens: int, lens: bool) -> dict:
    out = fact_scores(fact_probs(model, fact))
    if generation:
        out["gen_entropy"], texts = generation_entropy(model, fact.generation_prompts, n_tokens=gen_tokens,
                                                       seed=seed)
        out["gen_text"] = texts[0]
    else:
        out["gen_entropy"], out["gen_text"] = float("nan"), None
    if lens:
        out.update(lens_rows(model, fact))
    return out


# ============================================================================================ before / after
def with_and_without(model, edit_obj, measure: Callable):
    """``(measure() with the edit applied, measure() without it)``; the edit ends in the state it started in
    (applied to ``model`` or not). Works with any edit that has ``apply(model)`` and ``revert()``."""
    was_applied = getattr(edit_obj, "applied_model", None) is model
    with model.edited(edit_obj):
        after = measure()
    try:
        before = measure()
    finally:
        if was_applied:
            edit_obj.apply(model)
    return after, before


def compare_completions(model, edit_obj, prompts: Sequence[str], *, n_tokens: int = 8):
    """DataFrame: greedy completions of ``prompts`` with the edit applied and without it (a ROME ``Edit`` or an
    FT-L ``FTEdit``). The edit ends in the state it started in (applied or not)."""
    import pandas as pd

    after, before = with_and_without(model, edit_obj,
                                     lambda: sample_text(model, list(prompts), n_tokens, greedy=True))
    return pd.DataFrame({"prompt": list(prompts), "before": before, "after": after})


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


def lens_before_after(model, edit_obj, text: str | None = None, target_true: str | None = None) -> LensBeforeAfter:
    """Logit lens of ``text`` (default: the edited prompt) with and without ``edit_obj`` (ROME or FT-L);
    the edit ends in the state it started in."""
    req = edit_obj.request
    text = text or req["prompt"].replace("{}", req["subject"])
    true = target_true or req.get("target_true")
    if not true:
        raise ValueError("target_true unknown for this edit; pass target_true=' ...'")
    fact = types.SimpleNamespace(text=text, target_new=req["target"], target_true=true)
    after, before = with_and_without(model, edit_obj, lambda: lens_rows(model, fact))
    return LensBeforeAfter(text=text, target_new=req["target"], target_true=true, layer=edit_obj.layer,
                           curves={"before": before["_curves"], "after": after["_curves"]},
                           rows={"before": before["lens_new_row"], "after": after["lens_new_row"]})
