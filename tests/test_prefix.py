"""Tails run against kept heads (interp.editing.prefix): the same logits, hooks and gradients as the whole rows."""

import pytest
import torch

from interp.core import caches
from interp.editing import prefix
from interp.core.generation import selected_logits
from interp.core.inputs import pad_rows

TEXTS = ("The Eiffel Tower is located in the city of Paris", "Because it rained, the match was", "A")


def rows_and_heads(model):
    rows = [model.encode(t) for t in TEXTS[:2]] + [model.encode(TEXTS[0])[:4]]
    return rows, [5, 2, 3]


def selection(rows, heads):
    r = [i for i, (row, h) in enumerate(zip(rows, heads)) for _ in range(h, len(row))]
    p = [q for row, h in zip(rows, heads) for q in range(h, len(row))]
    return torch.tensor(r), torch.tensor(p)


def whole_and_tails(model, rows, heads, vec=None):
    """(whole-row logits, tail logits) at every tail position, ``vec`` added at each row's first tail token at
    layer 1's MLP output in both."""
    split = prefix.split_rows(model, rows, heads)
    whole, _ = pad_rows(model, rows)
    r, p = selection(rows, heads)
    n = len(rows)

    def adder(cols):
        def fn(t, hook):
            if vec is None:
                return None
            m = torch.zeros(t.shape[:2] + (1,), dtype=t.dtype)
            m[torch.arange(n), cols] = 1.0
            return t + m * vec
        return fn

    name = "blocks.1.hook_mlp_out"
    a = selected_logits(model, whole, r, p, [(name, adder(torch.tensor(heads)))])
    b = prefix.tail_logits(model, split, r, p, [(name, adder(split.columns(torch.arange(n), torch.tensor(heads))))])
    return a, b, split


@pytest.mark.parametrize("name", ["tiny_llama", "embedded", "gemma"])
def test_tails_against_kept_heads_give_the_whole_rows_logits(request, name):
    model = request.getfixturevalue(name)
    assert prefix.usable(model)  # every bridge here takes the fast path (Gemma's sliding layers too)
    rows, heads = rows_and_heads(model)
    with torch.no_grad():
        a, b, split = whole_and_tails(model, rows, heads)
    assert (split.cache is not None) == prefix.usable(model)
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), float((a - b).abs().max())
    if split.cache is not None:
        assert split.tokens.shape[1] == max(len(r) - h for r, h in zip(rows, heads))
    # a hook on the tails (as ROME's delta) acts as on the whole rows, and its gradient is the same
    vec = torch.zeros(model.d_model, requires_grad=True)
    with torch.enable_grad():
        a, b, _ = whole_and_tails(model, rows, heads, vec)
        ga, = torch.autograd.grad(torch.log_softmax(a.float(), -1)[:, 7].sum(), vec)
        gb, = torch.autograd.grad(torch.log_softmax(b.float(), -1)[:, 7].sum(), vec)
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    assert ga.abs().max() > 0 and torch.allclose(ga, gb, atol=1e-4, rtol=1e-3), float((ga - gb).abs().max())


def test_rows_run_whole_while_a_hook_is_attached_and_bad_heads_are_refused(tiny_llama):
    rows, heads = rows_and_heads(tiny_llama)
    with tiny_llama.hooks([("blocks.0.hook_resid_pre", lambda t, hook: None)]):
        split = prefix.split_rows(tiny_llama, rows, heads)
    assert split.cache is None and torch.equal(split.tokens, pad_rows(tiny_llama, rows)[0])
    assert torch.equal(split.columns(torch.tensor([0, 1]), torch.tensor([6, 3])), torch.tensor([6, 3]))
    for bad in ([0, 2, 3], [5, 2, 4], [5, 2]):
        lengths = ", ".join(str(len(r)) for r in rows)
        with pytest.raises(ValueError, match=rf"heads=\[{bad[0]}, .*row lengths \[{lengths}\]"):
            prefix.split_rows(tiny_llama, rows, bad)
    split = prefix.split_rows(tiny_llama, rows, heads)
    with pytest.raises(ValueError, match="lies in a row's head"):
        prefix.tail_logits(tiny_llama, split, torch.tensor([0]), torch.tensor([2]))


def test_a_model_whose_probe_fails_runs_the_rows_whole(tiny_llama, monkeypatch):
    caches.clear(tiny_llama, "prefix")
    monkeypatch.setattr(prefix, "_probe", lambda model: False)
    try:
        rows, heads = rows_and_heads(tiny_llama)
        with torch.no_grad():
            a, b, split = whole_and_tails(tiny_llama, rows, heads)
        assert split.cache is None and torch.equal(a, b)
    finally:
        caches.clear(tiny_llama, "prefix")
