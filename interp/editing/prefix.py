"""Rows run many times with only their tails changing: each row's head runs once, its keys and values are kept,
and every later forward runs the tails alone, attending to the kept heads.

ROME's value optimisation runs the same rows twenty times with a vector added at the subject's last token. The
tokens before that position come out the same every time (attention is causal), and in the templated rows they
are most of the tokens: on the test split 5,310 padded positions per 40 edits, 1,470 once the heads are cut off.

    split = split_rows(model, rows, heads=[5, 11, 2])     # row i's first heads[i] tokens run once, here
    logits = tail_logits(model, split, rows_sel, pos_sel, hooks)   # positions counted in the whole rows
    split.columns(rows_sel, pos_sel)                      # where those positions sit in split.tokens

Heads are left-padded to one width and masked, so each tail starts right after its own head; tails are
right-padded. Hooks attached for a tail forward see tensors of the tails' shape ([rows, tail width, ...]) and
index them with :meth:`SplitRows.columns`.

The bridge's attention reads a key/value cache under the keyword ``layer_past`` (transformers 5 hands its
attention modules the cache as ``cache``, which the bridge's re-implemented attention does not read), so the
cache is passed under both names. Whether that works is checked once per model on a probe (the tails' logits
must match the whole rows'); where it does not, where the model spans several devices, or where any hook is
attached when the rows are split (a hook that indexes positions would see other columns), the rows run whole:
``split.tokens`` is then the whole rows and ``columns`` returns the positions unchanged.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Sequence

import torch

from ..core.caches import model_cache
from ..core.generation import selected_logits
from ..core.inputs import pad_rows

PROBE = "The quick brown fox jumps over the lazy dog because it was"


@dataclass
class SplitRows:
    """Rows cut after their heads: ``tokens`` [n, width] the tails (right-padded; ``lengths`` [n] their lengths),
    ``start`` [n] the column of each tail's first token in its whole row; ``cache`` the heads' keys/values with
    their ``mask`` [n, P + width] and the tails' ``positions`` [n, width]. Without a cache, ``tokens`` are the
    whole rows and ``start`` is 0."""
    tokens: torch.Tensor
    lengths: torch.Tensor
    start: torch.Tensor
    cache: object | None = None
    mask: torch.Tensor | None = None
    positions: torch.Tensor | None = None

    def select(self, rows: torch.Tensor) -> "SplitRows":
        """The split of rows ``rows`` alone (their heads' keys and values as kept), padded to their longest tail."""
        width = int(self.lengths[rows].max())
        if self.cache is None:
            return SplitRows(self.tokens[rows, :width], self.lengths[rows], self.start[rows])
        cache = copy.deepcopy(self.cache)
        cache.batch_select_indices(rows.to(self.mask.device))
        cut = self.mask.shape[1] - self.tokens.shape[1] + width
        return SplitRows(self.tokens[rows, :width], self.lengths[rows], self.start[rows], cache,
                         self.mask[rows.to(self.mask.device), :cut], self.positions[rows.to(self.mask.device), :width])

    def columns(self, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Columns in ``tokens`` of the whole-row positions ``pos`` of rows ``rows``."""
        return pos - self.start[rows]

    def forward_kwargs(self) -> dict:
        """Keyword arguments of one tail forward: a fresh copy of the heads' cache (a forward appends to it)."""
        if self.cache is None:
            return {}
        cache = copy.deepcopy(self.cache)  # a few MB: the heads' keys and values
        return {"attention_mask": self.mask, "position_ids": self.positions, "cache": cache, "layer_past": cache,
                "use_cache": True}


def split_rows(model, rows: Sequence[Sequence[int]], heads: Sequence[int]) -> SplitRows:
    """Run the first ``heads[i]`` tokens of each row once (1 <= heads[i] < len(rows[i])) and keep their keys and
    values; see the module docstring for when the rows run whole instead."""
    rows = [list(r) for r in rows]
    heads = [int(h) for h in heads]
    if len(heads) != len(rows) or any(not 1 <= h < len(r) for h, r in zip(heads, rows)):
        raise ValueError(f"heads={heads}: one per row, each at least 1 and shorter than its row "
                         f"(row lengths {[len(r) for r in rows]})")
    if not usable(model):
        toks, lengths = pad_rows(model, rows)
        return SplitRows(toks, lengths, torch.zeros(len(rows), dtype=torch.long))
    return _split(model, rows, heads)


def tail_logits(model, split: SplitRows, rows: torch.Tensor, pos: torch.Tensor, hooks=()) -> torch.Tensor:
    """Logits [m, vocab] at whole-row positions ``pos[i]`` of rows ``rows[i]`` (each at or after its row's head),
    one forward of the tails under ``hooks``, in the caller's grad mode."""
    cols = split.columns(rows, pos)
    if bool((cols < 0).any()):
        raise ValueError("a selected position lies in a row's head; split the rows at or before it")
    return selected_logits(model, split.tokens, rows, cols, hooks, forward_kwargs=split.forward_kwargs())


def usable(model) -> bool:
    """Whether tails can run against kept heads on ``model`` right now (see the module docstring)."""
    if model.attached_hook_count() != 0 or len(model.devices) != 1 or model.hf_model is None:
        return False
    table = model_cache(model, "prefix")
    if "ok" not in table:
        table["ok"] = _probe(model)
    return table["ok"]


def _split(model, rows: list[list[int]], heads: list[int]) -> SplitRows:
    from transformers.cache_utils import DynamicCache

    n, width, tail = len(rows), max(heads), max(len(r) - h for r, h in zip(rows, heads))
    pad, dev = model.pad_token_id, model.device
    head_toks = torch.full((n, width), pad, dtype=torch.long)
    head_mask = torch.zeros(n, width, dtype=torch.long)
    head_pos = torch.zeros(n, width, dtype=torch.long)
    tails = torch.full((n, tail), pad, dtype=torch.long)
    for i, (r, h) in enumerate(zip(rows, heads)):
        head_toks[i, width - h:] = torch.tensor(r[:h])
        head_mask[i, width - h:] = 1
        head_pos[i, width - h:] = torch.arange(h)
        tails[i, : len(r) - h] = torch.tensor(r[h:])
    cache = DynamicCache(config=model.hf_model.config)
    with torch.no_grad():
        model.forward(head_toks, attention_mask=head_mask.to(dev), position_ids=head_pos.to(dev), cache=cache,
                      layer_past=cache, use_cache=True)
    start = torch.tensor(heads, dtype=torch.long)
    mask = torch.cat([head_mask, torch.ones(n, tail, dtype=torch.long)], 1)
    lengths = torch.tensor([len(r) - h for r, h in zip(rows, heads)], dtype=torch.long)
    return SplitRows(tails, lengths, start, cache, mask.to(dev), (start[:, None] + torch.arange(tail)).to(dev))


def _probe(model) -> bool:
    """Tails against kept heads give the whole rows' logits on a probe (two rows, heads of different lengths)."""
    try:
        ids = model.encode(PROBE)
        rows, heads = [ids, ids[:-3]], [4, 2]
        split = _split(model, rows, heads)
        whole, _ = pad_rows(model, rows)
        r = torch.tensor([0] * (len(ids) - 4) + [1] * (len(ids) - 5))
        p = torch.tensor(list(range(4, len(ids))) + list(range(2, len(ids) - 3)))
        with torch.no_grad():
            mine = tail_logits(model, split, r, p).float().cpu()
            theirs = selected_logits(model, whole, r, p).float().cpu()
        return bool(torch.allclose(mine, theirs, atol=1e-4, rtol=1e-4))
    except Exception:  # another architecture or transformers version: the rows run whole
        return False
