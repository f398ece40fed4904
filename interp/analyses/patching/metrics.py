"""Patching metrics and prompt-pair inputs, shared by activation, attribution and path patching.

A metric is any callable ``metric(logits, batch) -> [n_pairs]``. ``logits`` are the logits at each prompt's last
real token, ``[n_pairs, d_vocab]`` (a patching experiment only ever scores the next token, so the patching code
unembeds that one position instead of all of them), and ``batch`` is a :class:`PairBatch` giving the answer and
wrong token ids, the clean run's logits at the same positions (for :func:`kl_to_clean`), tokens and lengths.

The three built-in metrics are :class:`Metric` objects: they check their arguments against the model (a
multi-token answer in ``logit_diff`` is an error naming the split) before any forward runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...core.cache import check_metric_output
from ...core.inputs import single_token


@dataclass
class PairBatch:
    """What a metric may read besides the logits: per-pair answer/wrong ids (None when nobody gave them), the
    clean run's last-token logits, and the clean tokens with each pair's real length."""

    answer_ids: torch.Tensor | None
    wrong_ids: torch.Tensor | None
    clean_logits: torch.Tensor | None
    tokens: torch.Tensor
    lengths: torch.Tensor

    @property
    def last(self) -> torch.Tensor:
        return self.lengths - 1


class Metric:
    """A named metric that resolves its tokens against the model once (:meth:`bind`) before any forward."""

    name = "metric"

    def bind(self, model, n_pairs: int) -> Callable:  # pragma: no cover - every subclass implements it
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


def _ids(model, targets, n_pairs: int, what: str) -> torch.Tensor | None:
    """One target for every pair, or one per pair -> LongTensor [n_pairs]; each must be a single token."""
    if targets is None:
        return None
    items = [targets] * n_pairs if isinstance(targets, (str, int)) else list(targets)
    if len(items) != n_pairs:
        raise ValueError(f"{len(items)} {what}s for {n_pairs} prompt pairs; give one for all or one per pair")
    return torch.tensor([single_token(model, t, what=what) for t in items], dtype=torch.long)


def _pick(ids: torch.Tensor | None, default: torch.Tensor | None, what: str, metric: str) -> torch.Tensor:
    out = ids if ids is not None else default
    if out is None:
        raise ValueError(f"{metric} needs {what} tokens: pass them to the metric (e.g. logit_diff(' Mary', ' John')) "
                         f"or give PromptPairs, which carry them")
    return out


class _LogitDiff(Metric):
    def __init__(self, answers, wrongs):
        self.answers, self.wrongs = answers, wrongs
        self.name = "logit_diff"

    def bind(self, model, n_pairs):
        a, w = _ids(model, self.answers, n_pairs, "answer"), _ids(model, self.wrongs, n_pairs, "wrong")

        def fn(logits, batch: PairBatch):
            ans = _pick(a, batch.answer_ids, "answer", "logit_diff").to(logits.device)
            wrong = _pick(w, batch.wrong_ids, "wrong", "logit_diff").to(logits.device)
            rows = torch.arange(logits.shape[0], device=logits.device)
            return logits[rows, ans] - logits[rows, wrong]
        return fn


class _Prob(Metric):
    def __init__(self, answers):
        self.answers = answers
        self.name = "prob"

    def bind(self, model, n_pairs):
        a = _ids(model, self.answers, n_pairs, "answer")

        def fn(logits, batch: PairBatch):
            ans = _pick(a, batch.answer_ids, "answer", "prob").to(logits.device)
            probs = torch.softmax(logits.float(), -1)
            return probs[torch.arange(logits.shape[0], device=logits.device), ans]
        return fn


class _KLToClean(Metric):
    name = "kl_to_clean"

    def bind(self, model, n_pairs):
        def fn(logits, batch: PairBatch):
            if batch.clean_logits is None:
                raise ValueError("kl_to_clean needs the clean run's logits; this caller did not provide them")
            clean = torch.log_softmax(batch.clean_logits.to(logits.device).float(), -1)
            patched = torch.log_softmax(logits.float(), -1)
            return (clean.exp() * (clean - patched)).sum(-1)
        return fn


def logit_diff(answers=None, wrongs=None) -> Metric:
    """logit(answer) - logit(wrong) at the last token. ``answers``/``wrongs``: one single-token string or id for
    every pair, one per pair, or None to use the ones a :class:`PromptPairs` carries."""
    return _LogitDiff(answers, wrongs)


def prob(answers=None) -> Metric:
    """Probability of the answer token at the last token (answers as in :func:`logit_diff`)."""
    return _Prob(answers)


def kl_to_clean() -> Metric:
    """KL(clean || patched) of the next-token distributions: 0 on the clean run. Normalised patching results
    still read 0 = corrupted behaviour, 1 = clean."""
    return _KLToClean()


def bind_metric(model, metric, n_pairs: int) -> tuple[Callable, str]:
    """``metric`` (a Metric, a callable ``(logits, batch) -> [n_pairs]``, or None for logit_diff on the pairs'
    own answers) -> ``(fn, name)`` where ``fn`` checks that one value per pair comes back."""
    if metric is None:
        metric = logit_diff()
    if isinstance(metric, Metric):
        fn, name = metric.bind(model, n_pairs), metric.name
    elif callable(metric):
        fn, name = metric, getattr(metric, "__name__", type(metric).__name__)
    else:
        raise ValueError(f"metric {metric!r}: expected logit_diff(...), prob(...), kl_to_clean() or a callable "
                         "(logits [n_pairs, d_vocab], batch) -> [n_pairs]")

    def checked(logits, batch):
        return check_metric_output(fn(logits, batch), logits.shape[0])
    return checked, name


# ---------------------------------------------------------------------------------------------- prompt pairs
@dataclass
class Pairs:
    """Tokenised clean/corrupted pairs: right-padded tokens [n, width], each pair's real length, and the
    answer/wrong ids a PromptPairs carried (else None)."""

    clean: torch.Tensor
    corrupted: torch.Tensor
    lengths: torch.Tensor
    answer_ids: torch.Tensor | None = None
    wrong_ids: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.clean.shape[0]

    @property
    def same_length(self) -> bool:
        return bool((self.lengths == self.lengths[0]).all())


def _tokens(model, x, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(x, torch.Tensor):
        toks = model.to_tokens(x)
        return toks, torch.full((toks.shape[0],), toks.shape[1], dtype=torch.long)
    if isinstance(x, str):
        x = [x]
    if not isinstance(x, (list, tuple)) or not x or not all(isinstance(t, str) for t in x):
        raise ValueError(f"{what} must be a string, a non-empty list of strings, a token tensor or PromptPairs; "
                         f"got {type(x).__name__}")
    return model.to_tokens(list(x)), torch.tensor(model.lengths(list(x)), dtype=torch.long)


def make_pairs(model, clean, corrupted=None) -> Pairs:
    """Clean/corrupted inputs (two strings, two lists of strings, two token tensors, or one PromptPairs as
    ``clean`` with ``corrupted=None``) -> :class:`Pairs`. A pair whose token lengths differ is an error naming both
    lengths and the first position where the tokens differ."""
    answer_ids = wrong_ids = None
    if hasattr(clean, "answer_ids") and hasattr(clean, "corrupted"):
        pp = clean
        if corrupted is not None and corrupted is not pp.corrupted:
            raise ValueError("PromptPairs already hold the corrupted prompts; pass corrupted=None")
        clean, corrupted = pp.clean, pp.corrupted
        answer_ids = torch.tensor(pp.answer_ids, dtype=torch.long)
        wrong_ids = torch.tensor(pp.wrong_ids, dtype=torch.long)
    if corrupted is None:
        raise ValueError("no corrupted input: pass corrupted prompts, or PromptPairs as clean")
    c, cl = _tokens(model, clean, "clean")
    x, xl = _tokens(model, corrupted, "corrupted")
    if c.shape[0] != x.shape[0]:
        raise ValueError(f"{c.shape[0]} clean prompts but {x.shape[0]} corrupted ones; give them in pairs")
    for i in range(c.shape[0]):
        if int(cl[i]) != int(xl[i]):
            n = min(int(cl[i]), int(xl[i]))
            diff = (c[i, :n] != x[i, :n]).nonzero()
            first = int(diff[0]) if len(diff) else n
            raise ValueError(f"pair {i}: the clean prompt is {int(cl[i])} tokens and the corrupted one {int(xl[i])} "
                             f"(first differing token at position {first}); patching needs pairs of equal token "
                             "length")
    width = max(c.shape[1], x.shape[1])
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=model.pad_token_id)
    return Pairs(pad(c), pad(x), cl, answer_ids, wrong_ids)


def str_tokens(model, toks: torch.Tensor, n: int) -> list[str]:
    """The first ``n`` tokens of one row as text (ids when the model has no tokenizer)."""
    if model.tokenizer is None:
        return [str(int(t)) for t in toks[:n]]
    return [model.tokenizer.decode([int(t)]) for t in toks[:n]]


def position_labels(model, pairs: Pairs) -> list[str]:
    """Token labels of the first pair's positions; ``clean/corrupted`` where the two differ."""
    n = int(pairs.lengths[0])
    a, b = str_tokens(model, pairs.clean[0], n), str_tokens(model, pairs.corrupted[0], n)
    return [s if s == t else f"{s}/{t}" for s, t in zip(a, b)]
