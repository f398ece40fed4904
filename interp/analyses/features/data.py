"""The token stream dictionaries train and are evaluated on: documents packed into rows of ``ctx`` tokens.

Each document (rendered by :func:`interp.core.texts.render`: plain text, or chat messages in the model's template)
becomes BOS + its tokens; the documents of a split, shuffled with the seed, are concatenated and cut into rows of
``ctx`` tokens, so no position is padding and no token is seen twice. Position 0 of every row and every BOS are
not *counted*: the first position of a causal model is an attention sink with an outlier residual, a different
distribution from the text the dictionaries are for (the tuned lens and the key statistics leave BOS out too).
The stream is a pure function of (model tokenizer, split, sources, seed, ctx), so a resumed run reads the same
rows from the same row index.

``bos_rows``: every row starts with BOS and holds the stream's next ``ctx - 1`` tokens (a row that starts at a
document keeps that document's one BOS), as every input the model gets in use starts with BOS. It does not remove
the few position-1 tokens whose MLP writes dominate two layers' variance: they come with BOS before them too
(``studies/features_layer11``), so the default keeps plain rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ...core.inputs import check_int
from ...core.texts import SOURCES, render, text_documents


def token_rows(model, split: str = "train", *, seed: int = 0, ctx: int = 256, sources=SOURCES,
               start_row: int = 0, bos_rows: bool = False) -> Iterator[torch.Tensor]:
    """Rows [ctx] (int64) of the packed split, from row ``start_row`` on (``bos_rows``: see the module docstring)."""
    check_int("ctx", ctx, 2)
    bos = model.bos_token_id
    buf: list[int] = []
    row = 0
    for doc in text_documents(split, sources=sources, seed=seed):
        buf.append(bos)
        buf.extend(model.encode(render(model, doc), prepend_bos=False))
        while len(buf) >= ctx:
            if bos_rows and buf[0] != bos:
                buf.insert(0, bos)
            if row >= start_row:
                yield torch.tensor(buf[:ctx], dtype=torch.long)
            del buf[:ctx]
            row += 1


def batches(model, split: str = "train", *, rows: int = 4, seed: int = 0, ctx: int = 256, sources=SOURCES,
            start_batch: int = 0, bos_rows: bool = False) -> Iterator[torch.Tensor]:
    """Batches [rows, ctx] of :func:`token_rows`, from batch ``start_batch`` on (a last partial batch is dropped)."""
    check_int("rows", rows, 1)
    cur = []
    for r in token_rows(model, split, seed=seed, ctx=ctx, sources=sources, start_row=start_batch * rows,
                        bos_rows=bos_rows):
        cur.append(r)
        if len(cur) == rows:
            yield torch.stack(cur)
            cur = []


def counted(tokens: torch.Tensor, bos: int) -> torch.Tensor:
    """[rows, ctx] bool: the positions statistics count (not position 0, not BOS)."""
    mask = tokens != bos
    mask[:, 0] = False
    return mask
