"""In-context learning on natural text (Olsson et al. 2022's ICL score), and its dependence on induction heads.

ICL score = loss at a late token minus loss at an early one (negative: later tokens are predicted better thanks to
the context); each loss is averaged over a window of tokens centred on the position. Olsson et al. use tokens 500
and 50 of 512-token contexts. Two kinds of rows:

* ``context="document"``: BOS + one Wikipedia lead paragraph (shuffled with ``seed``), truncated to the late window,
  keeping only the paragraphs long enough. The paragraphs are ~40-170 tokens, so positions up to ~100 only.
* ``context="concat"``: BOS + consecutive documents of the shuffled corpus joined by the tokens of ``"\\n\\n"``
  (``SEPARATOR``); each context starts at the start of a document and is cut at the end of the late window
  (BOS + ``late + window // 2`` tokens; the model is causal, so the losses up to there are those of a longer
  context); the cut document's rest is dropped and the next context starts at the next document.

Every result keeps the per-row losses, so the score has a 95% t-interval over rows (rows are independent
documents or contexts; a t-interval rather than a bootstrap because the real-model runs afford few rows).
``icl_ablation`` measures the score with no ablation, with given heads mean-ablated, and with layer-matched random
heads mean-ablated (the baseline), on the same rows, and reports the paired changes with t-intervals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ...core.corpus import wiki_documents
from ...core.inputs import check_int
from ...core.results import Result, jsonable, new_figure, save_fig
from .causal import check_heads, random_heads

SEPARATOR = "\n\n"
CONTEXTS = ("document", "concat")


# Two-sided 95% quantiles of Student's t by degrees of freedom (1..30, then 40, 60, 120; beyond: the normal 1.96).
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
T95_LARGE = [(40, 2.021), (60, 2.000), (120, 1.980)]


def t95(df: int) -> float:
    """The 95% two-sided t quantile for df degrees of freedom (the next tabulated df below: conservative)."""
    if df <= 30:
        return T95[df - 1]
    return next((t for d, t in reversed(T95_LARGE) if df >= d), T95[-1]) if df < 1000 else 1.960


def t_interval(values) -> tuple[float, float]:
    """95% t-interval of the mean of `values` over rows; (nan, nan) for fewer than 2 values."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return float("nan"), float("nan")
    half = t95(len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return float(v.mean() - half), float(v.mean() + half)


def fmt_heads(heads) -> str:
    return " ".join(f"L{layer}H{head}" for layer, head in heads)


@dataclass(repr=False)
class ICLScore(Result):
    """Olsson's in-context-learning score on natural text: loss at a late token minus loss at an
    early one (negative = later tokens are predicted better thanks to the context). Each loss is
    the mean over a window of `window` tokens centred on the position, to tame per-token noise."""

    early: int
    late: int
    window: int
    loss_by_pos: torch.Tensor  # mean loss of the token at position t (BOS = 0), stored at index t - 1
    n_docs: int  # rows: documents, or concatenated contexts
    model_name: str
    row_losses: torch.Tensor | None = None  # [n_docs, positions], per row
    context: str = "document"
    heads: list = field(default_factory=list)  # heads ablated while measuring ([] = none)
    mode: str = "mean"
    seed: int = 0

    def _around(self, pos: int, losses=None) -> float | torch.Tensor:
        half = self.window // 2
        losses = self.loss_by_pos if losses is None else losses
        out = losses[..., pos - 1 - half: pos + half].mean(-1)
        return float(out) if out.dim() == 0 else out

    @property
    def loss_early(self) -> float:
        return self._around(self.early)

    @property
    def loss_late(self) -> float:
        return self._around(self.late)

    @property
    def score(self) -> float:
        return self.loss_late - self.loss_early

    @property
    def row_scores(self) -> np.ndarray:
        """Per-row ICL score (late window minus early window of that row)."""
        if self.row_losses is None:
            return np.array([])
        return (self._around(self.late, self.row_losses) - self._around(self.early, self.row_losses)).numpy()

    @property
    def ci(self) -> tuple[float, float]:
        """95% t-interval of the score over rows (the rows are independent documents or contexts)."""
        return t_interval(self.row_scores)

    def change_from(self, baseline: ICLScore) -> tuple[float, float, float]:
        """(mean change of the per-row score from `baseline`, 95% t-interval low, high), paired over rows: both
        must be measured on the same rows (same context, positions, n_docs and seed)."""
        same = (self.context, self.early, self.late, self.window, self.n_docs, self.seed) == \
            (baseline.context, baseline.early, baseline.late, baseline.window, baseline.n_docs, baseline.seed)
        if not same or self.row_losses is None or baseline.row_losses is None:
            raise ValueError("baseline measured on other rows; allowed: an ICLScore with the same context, early, "
                             "late, window, n_docs and seed")
        diff = self.row_scores - baseline.row_scores
        return (float(diff.mean()), *t_interval(diff))

    @property
    def rows_name(self) -> str:
        return (f"{self.late + self.window // 2 + 1}-token contexts of concatenated Wikipedia summaries"
                if self.context == "concat" else "Wikipedia summaries")

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"token_position": np.arange(1, len(self.loss_by_pos) + 1),
                             "loss": self.loss_by_pos.numpy()}).set_index("token_position")

    def summary(self) -> str:
        lo, hi = self.ci
        ablated = f", {self.mode}-ablating {fmt_heads(self.heads)}" if self.heads else ""
        return (f"ICL score {self.score:+.3f} nats (95% t-interval {lo:+.3f} .. {hi:+.3f} over rows) = loss at token "
                f"{self.late} ({self.loss_late:.3f}) - loss at token {self.early} ({self.loss_early:.3f}), windows "
                f"of {self.window} tokens, {self.n_docs} {self.rows_name}{ablated}, {self.model_name}")

    def to_json(self) -> dict:
        lo, hi = self.ci
        return jsonable({"result": "ICLScore", "summary": self.summary(), "score": self.score, "ci_low": lo,
                         "ci_high": hi, "early": self.early, "late": self.late, "window": self.window,
                         "loss_early": self.loss_early, "loss_late": self.loss_late, "n_docs": self.n_docs,
                         "context": self.context, "heads": [list(h) for h in self.heads], "mode": self.mode,
                         "seed": self.seed, "model": self.model_name, "loss_by_pos": self.loss_by_pos})

    def plot(self, *, out=None):
        fig = new_figure(figsize=(6, 3.5), layout="constrained")
        ax = fig.add_subplot(1, 1, 1)
        pos = np.arange(1, len(self.loss_by_pos) + 1)
        ax.plot(pos, self.loss_by_pos.numpy(), lw=1)
        half = self.window // 2
        for p in (self.early, self.late):
            ax.axvspan(p - half - 0.5, p + half + 0.5, color="C3", alpha=0.2)
        ax.set(xlabel="token position (BOS = 0)", ylabel="mean loss (nats)",
               title=f"ICL score {self.score:+.3f} nats ({self.n_docs} {self.context} rows)")
        return save_fig(fig, out)


def check_icl_args(model, early, late, window, context) -> int:
    """Validate the positions and the context kind -> the last token position needed."""
    if context not in CONTEXTS:
        raise ValueError(f"context={context!r} not known; allowed: {', '.join(map(repr, CONTEXTS))}")
    if not isinstance(window, int) or isinstance(window, bool) or window < 1 or window % 2 == 0:
        raise ValueError(f"window={window!r} out of range: allowed an odd integer >= 1")
    half = window // 2
    if not isinstance(early, int) or not isinstance(late, int) or \
            not 1 + half <= early < late <= model.n_ctx - 1 - half:
        raise ValueError(f"early={early!r}, late={late!r}: allowed {1 + half} <= early < late <= "
                         f"{model.n_ctx - 1 - half} (window {window}, context {model.n_ctx})")
    if model.tokenizer is None:
        raise ValueError(f"model {model.source} has no tokenizer; the ICL score needs text (allowed: a model with one)")
    return late + half


def document_rows(model, end: int, n: int, seed: int) -> list[list[int]]:
    """BOS + each shuffled document reaching token position `end`, cut there; the first n."""
    rows = []
    for doc in wiki_documents(seed=seed):
        ids = model.encode(doc.text, prepend_bos=True)
        if len(ids) > end:
            rows.append(ids[: end + 1])
            if len(rows) == n:
                break
    if not rows:
        raise ValueError(f"no document reaches token {end}; choose a smaller late position (or context='concat')")
    return rows


def concat_rows(model, end: int, n: int, seed: int) -> list[list[int]]:
    """n contexts of BOS + `end` tokens: consecutive shuffled documents joined by the tokens of SEPARATOR, each
    context starting at a document's start; the last document of a context is cut, its rest dropped."""
    sep = model.encode(SEPARATOR, prepend_bos=False)
    docs = iter(wiki_documents(seed=seed))
    rows = []
    for _ in range(n):
        ids = [model.bos_token_id]
        for doc in docs:
            ids += model.encode(doc.text, prepend_bos=False)
            if len(ids) > end:
                break
            ids += sep
        if len(ids) <= end:
            raise ValueError(f"the corpus ran out after {len(rows)} contexts; allowed: n_docs <= {len(rows)}")
        rows.append(ids[: end + 1])
    return rows


def row_losses(model, rows: list[list[int]], batch_size: int) -> torch.Tensor:
    """Per-row cross-entropy of each next token: [n_rows, len - 1] (index t = the token at position t + 1)."""
    out = []
    for start in range(0, len(rows), batch_size):
        toks = torch.tensor(rows[start:start + batch_size])
        logp = model.run(toks)[:, :-1].float().log_softmax(-1)
        out.append(-logp.gather(-1, toks[:, 1:, None])[..., 0])
    return torch.cat(out)


def icl_score(model, *, early: int = 10, late: int = 100, window: int = 5, n_docs: int = 100,
              batch_size: int = 8, seed: int = 0, context: str = "document", heads=None,
              mode: str = "mean") -> ICLScore:
    """Loss at token `late` minus loss at token `early` (token positions, BOS = 0), each averaged over
    `window` tokens centred there, over `n_docs` rows (documents shuffled with `seed`; see the module doc):
    context="document" (default): the first n_docs Wikipedia summaries long enough to reach the late window (they
    are ~40-170 tokens, hence the defaults 10 and 100); context="concat": n_docs contexts of consecutive
    documents joined by "\\n\\n", which reach Olsson et al.'s 50 and 500. heads: [(layer, head), ...] to ablate
    (mode "mean": each head's z replaced by its mean over the batch and positions; "zero")."""
    end = check_icl_args(model, early, late, window, context)
    check_int("n_docs", n_docs, 1)
    check_int("batch_size", batch_size, 1)
    if mode not in ("zero", "mean"):
        raise ValueError(f"mode={mode!r} not known; allowed: 'zero', 'mean'")
    heads = check_heads(model, heads) if heads is not None else []
    rows = (concat_rows if context == "concat" else document_rows)(model, end, n_docs, seed)
    if heads:
        with model.ablate_heads(heads, mode=mode):
            losses = row_losses(model, rows, batch_size)
    else:
        losses = row_losses(model, rows, batch_size)
    return ICLScore(early=early, late=late, window=window, loss_by_pos=losses.mean(0), n_docs=len(rows),
                    model_name=model.source, row_losses=losses, context=context, heads=heads, mode=mode, seed=seed)


@dataclass(repr=False)
class ICLAblation(Result):
    """The ICL score with nothing ablated, with the given heads ablated, and with random heads (layer-matched by
    default) ablated, all on the same rows; changes are paired over rows."""

    baseline: ICLScore
    top: ICLScore
    random: list  # ICLScore per random draw
    match_layers: bool = True

    def change(self, result: ICLScore) -> tuple[float, float, float]:
        """(mean change of the per-row score vs no ablation, 95% t-interval low, high), paired over rows."""
        return result.change_from(self.baseline)

    def _conditions(self):
        name = "layer-matched random" if self.match_layers else "random"
        yield "none", self.baseline
        yield f"top-{len(self.top.heads)}", self.top
        for i, r in enumerate(self.random):
            yield f"{name} {i}", r

    def to_frame(self):
        import pandas as pd

        rows = []
        for cond, r in self._conditions():
            lo, hi = r.ci
            d, dlo, dhi = self.change(r)
            rows.append({"condition": cond, "heads": fmt_heads(r.heads), "icl_score": r.score, "ci_low": lo,
                         "ci_high": hi, "change": d, "change_ci_low": dlo, "change_ci_high": dhi})
        return pd.DataFrame(rows).set_index("condition")

    def summary(self) -> str:
        b = self.baseline
        head = (f"ICL score = loss at token {b.late} - loss at token {b.early} (windows of {b.window}), {b.n_docs} "
                f"{b.rows_name}, {b.mode}-ablation, 95% t-intervals over the {b.n_docs} rows:")
        lines = [head]
        for cond, r in self._conditions():
            lo, hi = r.ci
            line = f"  {cond:<24} {r.score:+.3f} [{lo:+.3f}, {hi:+.3f}]"
            if r is not b:
                d, dlo, dhi = self.change(r)
                line += f"   change {d:+.3f} [{dlo:+.3f}, {dhi:+.3f}]   ({fmt_heads(r.heads)})"
            lines.append(line)
        return "\n".join(lines)

    def to_json(self) -> dict:
        return jsonable({"result": "ICLAblation", "summary": self.summary(), "match_layers": self.match_layers,
                         "conditions": self.to_frame().reset_index().to_dict(orient="records"),
                         "baseline": self.baseline.to_json(), "top": self.top.to_json(),
                         "random": [r.to_json() for r in self.random]})

    def plot(self, *, out=None):
        fig = new_figure(figsize=(7, 3.8), layout="constrained")
        ax = fig.add_subplot(1, 1, 1)
        for i, (cond, r) in enumerate(self._conditions()):
            pos = np.arange(1, len(r.loss_by_pos) + 1)
            ax.plot(pos, r.loss_by_pos.numpy(), lw=0.8, color=f"C{i}", label=f"{cond} ({r.score:+.2f})")
        b, half = self.baseline, self.baseline.window // 2
        for p in (b.early, b.late):
            ax.axvspan(p - half - 0.5, p + half + 0.5, color="gray", alpha=0.2)
        ax.set(xlabel="token position (BOS = 0)", ylabel="mean loss (nats)",
               title=f"ICL score with heads ablated ({b.n_docs} rows)")
        ax.legend(fontsize=7)
        return save_fig(fig, out)


def icl_ablation(model, heads, *, n_random: int = 1, seed: int = 0, match_layers: bool = True,
                 **icl_kwargs) -> ICLAblation:
    """icl_score with nothing ablated, with `heads` ablated, and with `n_random` random head sets of the same size
    outside `heads` ablated (draw i seeded with seed + i; layer-matched unless match_layers is False), all on the
    same rows (icl_kwargs: early, late, window, n_docs, batch_size, context, mode; `seed` also shuffles the
    documents)."""
    heads = check_heads(model, heads)
    check_int("n_random", n_random, 1)
    if not isinstance(match_layers, bool):
        raise ValueError(f"match_layers={match_layers!r}; allowed: True or False")  # noqa: TRY004
    if "heads" in icl_kwargs:
        raise ValueError("heads given twice; pass them as the second argument")
    like = heads if match_layers else None
    sets = [random_heads(model, len(heads), heads, seed=seed + i, like=like) for i in range(n_random)]
    baseline = icl_score(model, seed=seed, **icl_kwargs)
    top = icl_score(model, seed=seed, heads=heads, **icl_kwargs)
    rand = [icl_score(model, seed=seed, heads=s, **icl_kwargs) for s in sets]
    return ICLAblation(baseline=baseline, top=top, random=rand, match_layers=match_layers)
