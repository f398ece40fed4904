"""Input checks shared by every analysis: one policy each, one error message each.

- texts: :func:`one_text` (one string or one row of tokens -> [1, pos], BOS prepended to strings);
  :func:`texts_batch` (several texts -> right-padded [batch, pos] plus each row's length).
- targets: :func:`target_id`. **The target policy**, everywhere in interp: a target is a token id or a string; a
  string of several tokens is scored by its FIRST token (the token the model must predict next), with a
  ``UserWarning`` naming the split; the returned :class:`Target` names the token actually scored (``.token``)
  next to the text given (``.label``). Empty strings, ids outside the vocabulary and strings that map to the
  unknown token are errors.
- positions: :func:`positions` (None = all; an int or a list; negative counts from the end).
- layers: :func:`layer_list`; integers: :func:`as_int`, :func:`check_int`; top-k: :func:`check_k`.
- tokens back to text: :func:`decode`.

Every function takes the :class:`~interp.core.model.Model` as its first argument where it needs one; none imports
it (so the model module can use these too).
"""

from __future__ import annotations

import operator
import warnings
from typing import NamedTuple, Sequence

import torch


# ---------------------------------------------------------------------------------------------- integers
def as_int(x):
    """numpy / torch integer scalars -> int (as found in DataFrames); anything else (bool included) is returned
    unchanged so the caller's range check rejects it with its own message."""
    if isinstance(x, bool):
        return x
    try:
        return operator.index(x)
    except TypeError:
        return x


def check_int(name: str, value, lo: int | None = None, hi: int | None = None, *, allow_none: bool = False):
    """``value`` as an int in ``lo..hi`` (either bound may be None); ValueError naming ``name`` and the range."""
    if value is None and allow_none:
        return None
    v = as_int(value)
    ok = isinstance(v, int) and not isinstance(v, bool) and (lo is None or v >= lo) and (hi is None or v <= hi)
    if not ok:
        if lo is not None and hi is not None:
            allowed = f"an integer in {lo}..{hi}"
        elif lo is not None:
            allowed = f"an integer >= {lo}"
        elif hi is not None:
            allowed = f"an integer <= {hi}"
        else:
            allowed = "an integer"
        raise ValueError(f"{name}={value!r}; allowed: {allowed}" + (" or None" if allow_none else ""))
    return v


def check_k(model, k) -> int:
    """A top-k size in 1..d_vocab."""
    if not isinstance(as_int(k), int) or isinstance(k, bool) or not 1 <= as_int(k) <= model.d_vocab:
        raise ValueError(f"k={k!r} out of range: allowed 1..{model.d_vocab} (the vocabulary size)")
    return as_int(k)


# ---------------------------------------------------------------------------------------------- texts
def one_text(model, text) -> torch.Tensor:
    """``str`` or token tensor -> LongTensor [1, pos] (BOS prepended to strings); one text only."""
    if isinstance(text, str) and not text:
        raise ValueError("empty text: give at least one character to analyse")
    if isinstance(text, (list, tuple)) and len(text) != 1:
        raise ValueError(f"one text at a time: got a list of {len(text)}")
    toks = model.to_tokens(text)
    if toks.shape[0] != 1:
        raise ValueError(f"one text at a time: got a batch of {toks.shape[0]}")
    return toks


def texts_batch(model, texts, *, prepend_bos: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Several texts -> (tokens [batch, pos] right-padded with the pad id, lengths [batch]) — BOS included.
    A token tensor [batch, pos] passes through with every row counted as full length."""
    if isinstance(texts, torch.Tensor):
        toks = model.to_tokens(texts)
        return toks, torch.full((toks.shape[0],), toks.shape[1], dtype=torch.long)
    items = [texts] if isinstance(texts, str) else list(texts)
    if not items:
        raise ValueError("no texts given: expected a non-empty string or a non-empty list of strings")
    rows = [model.encode(t, prepend_bos=prepend_bos) for t in items]
    return pad_rows(model, rows)


def pad_rows(model, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id lists -> (right-padded LongTensor [batch, max_len], lengths [batch]); the context length is
    checked. The one place interp builds a padded batch."""
    if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("cannot batch an empty row of tokens")
    width = max(len(r) for r in rows)
    if width > model.n_ctx:
        raise ValueError(f"text is {width} tokens long; this model's context allows at most {model.n_ctx}")
    pad = model.pad_token_id
    toks = torch.tensor([list(r) + [pad] * (width - len(r)) for r in rows], dtype=torch.long)
    return toks, torch.tensor([len(r) for r in rows], dtype=torch.long)


def pad_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """[batch] lengths -> bool [batch, width], True on real tokens."""
    return torch.arange(width)[None, :] < lengths[:, None]


def decode(model, token_id) -> str:
    """One token id -> its text (the id as a string when the model has no tokenizer)."""
    tok = model.tokenizer
    return str(int(token_id)) if tok is None else tok.decode([int(token_id)])


# ---------------------------------------------------------------------------------------------- targets
class Target(NamedTuple):
    """A scored target: ``id`` (the token scored), ``label`` (the text or id the caller gave), ``token`` (the
    scored token's text; differs from ``label`` when a multi-token string is scored by its first token)."""

    id: int
    label: str
    token: str

    @property
    def split(self) -> bool:
        return self.label != self.token


def target_id(model, target, *, what: str = "target", stacklevel: int = 2) -> Target:
    """The one target policy (see the module docstring): ``Target(id, label, token)``. ``stacklevel`` points the
    multi-token warning at the caller's caller (as ``warnings.warn`` counts)."""
    if isinstance(target, torch.Tensor) and target.numel() == 1:
        target = int(target)
    target = as_int(target) if not isinstance(target, str) else target
    if isinstance(target, bool) or not isinstance(target, (int, str)):
        raise ValueError(f"{what} {target!r}: expected a string (e.g. ' Paris') or a token id")
    if isinstance(target, int):
        if not 0 <= target < model.d_vocab:
            raise ValueError(f"{what} token id {target} not in the vocabulary: allowed 0..{model.d_vocab - 1} "
                             f"({what} {target} given)")
        text = decode(model, target)
        return Target(target, text, text)
    if not target:
        raise ValueError(f"{what} {target!r} is empty; give the continuation text, e.g. ' Paris'")
    ids = model.encode(target, prepend_bos=False)
    if not ids:
        raise ValueError(f"{what} {target!r} tokenizes to no tokens; give a non-empty continuation")
    unk = getattr(model.tokenizer, "unk_token_id", None)
    if unk is not None and unk in ids and target != getattr(model.tokenizer, "unk_token", None):
        raise ValueError(f"{what} {target!r} is not in the vocabulary (it maps to the unknown token {unk})")
    bad = [i for i in ids if not 0 <= i < model.d_vocab]
    if bad:
        raise ValueError(f"{what} {target!r} maps to token ids {bad} outside the model's vocabulary "
                         f"0..{model.d_vocab - 1}")
    first = decode(model, ids[0])
    if len(ids) > 1:
        pieces = [decode(model, i) for i in ids]
        warnings.warn(f"{what} {target!r} is {len(ids)} tokens {pieces}; scoring its first token "
                      f"{first!r} (the token predicted next)", UserWarning, stacklevel=stacklevel + 1)
    return Target(ids[0], target, first)


def target_list(model, targets, *, what: str = "target") -> list[Target]:
    """None -> []; one target or a list of them -> [Target, ...] (each by :func:`target_id`)."""
    if targets is None:
        return []
    items = [targets] if isinstance(targets, (str, int, torch.Tensor)) else list(targets)
    return [target_id(model, t, what=what, stacklevel=3) for t in items]


def single_token(model, target, *, what: str = "target") -> int:
    """Token id of a target that must be exactly one token (APIs that compare two tokens' logits); a split
    string is an error naming its pieces."""
    if isinstance(target, str) and target:
        ids = model.encode(target, prepend_bos=False)
        if len(ids) != 1:
            pieces = [decode(model, i) for i in ids]
            raise ValueError(f"{what} {target!r} is {len(ids)} tokens {pieces}, not one token; choose a "
                             "single-token target (mind the leading space)")
    return target_id(model, target, what=what, stacklevel=3).id


# ---------------------------------------------------------------------------------------------- positions, layers
def check_pos(pos, n: int) -> int:
    """One position in a sequence of ``n`` tokens (negative counts from the end) -> 0..n-1."""
    p = as_int(pos)
    if not isinstance(p, int) or isinstance(p, bool) or not -n <= p < n:
        raise ValueError(f"position {pos!r} out of range for a sequence of {n} tokens (BOS included); "
                         f"allowed 0..{n - 1} or -{n}..-1")
    return p % n


def positions(positions, n: int) -> list[int]:
    """None -> every position; an int or a list of ints -> checked indices 0..n-1 (order kept)."""
    if positions is None:
        return list(range(n))
    items = [positions] if isinstance(as_int(positions), int) else list(positions)
    if not items:
        raise ValueError(f"positions is empty; give indices in 0..{n - 1} (or -{n}..-1), or None for all")
    return [check_pos(p, n) for p in items]


def layer_list(model, layers) -> list[int]:
    """``None`` -> every layer; an int -> [it]; a list -> sorted, de-duplicated; each checked by the model."""
    if layers is None:
        return list(range(model.n_layers))
    if isinstance(as_int(layers), int) and not isinstance(layers, bool):
        return [model.check_layer(layers)]
    out = sorted({model.check_layer(layer) for layer in layers})
    if not out:
        raise ValueError(f"no layers given; allowed: 0..{model.n_layers - 1}")
    return out
