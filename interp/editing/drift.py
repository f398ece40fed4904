"""Loss on fixed Wikipedia texts: the evaluation's loss drift and ROME's edit guard.

- :func:`drift_set` / :func:`text_nll`: the Wikipedia texts of the loss drift, tokenised once per evaluation, and
  with :func:`drift_start` run from the edited layer on (the layers below are the unedited model's);
- :func:`loss_rise`: how much a candidate down projection would raise the loss of :func:`guard_texts`, other texts
  than the drift's, so that a guard never chooses on the texts that score it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..core.caches import model_cache
from ..core.corpus import token_batches, wiki_documents
from ..core.resume import record_blocks, run_from
from .matrices import kept_matrices

# The texts an edit's own loss check reads: the 4 Wikipedia summaries after the 16 the evaluation's loss drift is
# measured on (same shuffle, drift_texts), so a guard never chooses on the texts that score it.
GUARD_DOCS = (16, 4)  # (offset, count): one batch of 4 x 64 tokens, about 1.7 s per forward on one core


# ============================================================================================ loss drift
def drift_texts(n_docs: int = 16, seed: int = 1234, offset: int = 0) -> list[str]:
    """The fixed Wikipedia summaries the loss drift is measured on (``wiki_documents`` shuffled with ``seed``, the
    ``n_docs`` after the first ``offset``)."""
    return [d.text for d in wiki_documents(n=n_docs, seed=seed, offset=offset)]


@dataclass(frozen=True)
class DriftSet:
    """Texts tokenised once: ``batches`` of (tokens [b, pos], mask [b, pos]), BOS + at most ``max_len`` tokens."""
    texts: tuple
    batches: tuple
    max_len: int


def drift_set(model, texts: Sequence[str], *, max_len: int = 64, batch_size: int = 8) -> DriftSet:
    return DriftSet(tuple(texts), tuple((t, m) for t, m, _ in token_batches(model, list(texts), max_len=max_len,
                                                                              batch_size=batch_size)), max_len)


@dataclass(frozen=True)
class DriftStart:
    """A :class:`DriftSet`'s forwards recorded up to ``layer``: per batch, how the blocks were called and the
    residual entering ``layer`` [b, pos, d_model] (:mod:`interp.core.resume`). A model that differs from the
    recorded one only in layers >= ``layer`` (an edit's down projections) is measured from there on."""
    layer: int
    runs: tuple


def drift_start(model, texts: DriftSet, layer: int) -> DriftStart:
    """Record ``texts``' forwards up to ``layer`` on the model as it is now (see :class:`DriftStart`)."""
    name = f"blocks.{model.check_layer(layer)}.hook_resid_pre"
    runs = []
    for toks, _ in texts.batches:
        store, calls = record_blocks(model, toks, [name], description="drift start")
        runs.append((calls, store[name]))
    return DriftStart(layer, tuple(runs))


def text_nll(model, texts, *, max_len: int = 64, batch_size: int = 8, start: DriftStart | None = None) -> float:
    """Mean next-token NLL (nats) over every token of ``texts`` (a list of texts, each BOS + at most ``max_len``
    tokens, or a :class:`DriftSet` tokenised before). ``start``: the DriftSet's forwards recorded up to a layer
    (:func:`drift_start`), when the model differs from the recorded one only from that layer on: each forward then
    runs the blocks from there (the edit evaluation's drift, the same numbers up to float rounding)."""
    batches = texts.batches if isinstance(texts, DriftSet) else drift_set(model, texts, max_len=max_len,
                                                                          batch_size=batch_size).batches
    if start is not None and len(start.runs) != len(batches):
        raise ValueError(f"start was recorded on {len(start.runs)} batches; these texts have {len(batches)}")
    total, count = 0.0, 0
    for i, (toks, mask) in enumerate(batches):
        with torch.no_grad():
            if start is None:
                logits = model.forward(toks)[:, :-1].float().cpu()
            else:
                calls, resid = start.runs[i]
                final = run_from(model, calls, start.layer, resid, description="drift from a layer")
                logits = model.unembed(model.final_norm(final))[:, :-1].float()
        # log-sum-exp then the target's logit: the float64 log-softmax of every vocabulary entry is 5x the work
        lse = torch.logsumexp(logits, -1).to(torch.float64)
        nll = lse - logits.gather(2, toks[:, 1:, None])[..., 0].to(torch.float64)
        m = mask[:, 1:]
        total += float(nll[m].sum())
        count += int(m.sum())
    return total / count


# ============================================================================================ the edit guard
def guard_texts(model) -> DriftSet:
    """The tokenised guard texts (:data:`GUARD_DOCS`), cached per model."""
    table = model_cache(model, "edit.guard_texts")
    if "set" not in table:
        offset, n = GUARD_DOCS
        table["set"] = drift_set(model, drift_texts(n, offset=offset))
    return table["set"]


def loss_rise(model, layer: int, new: torch.Tensor) -> float:
    """Percent by which the mean next-token loss on :func:`guard_texts` rises when ``layer``'s down projection is
    ``new`` instead of its current value (two forwards of 4 x 64 tokens). The matrix is back bit for bit on
    return, whatever happens."""
    texts = guard_texts(model)
    before = text_nll(model, texts)
    with kept_matrices(model, [layer], always=True):
        matrix = model.mlp_out_matrix(layer)
        with torch.no_grad():
            matrix.copy_(new.to(matrix.device, matrix.dtype))
        after = text_nll(model, texts)
    return 100 * (after - before) / before
