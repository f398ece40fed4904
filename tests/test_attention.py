"""Attention patterns: captured patterns vs an independent softmax(q k^T / sqrt(d_head) + causal mask) from the same
forward, the per-head statistics vs explicit loops and hand-made patterns, GQA groups, plots, CLI, bad input."""

import argparse
import json
import math

import pytest
import torch

from interp.analyses.attention import AttentionResult, attention, head_stats
from interp.cli.attention import cli_attention


def recompute_patterns(model, text, kv_groups):
    """Run attention() while capturing q and k of the same forward; rebuild every pattern from them.
    Llama-family bridges expose the rotated q/k (hook_rot_q / hook_rot_k); GPT-2 has no rotation (hook_q / hook_k).
    Query head h uses KV head kv_groups[h] (taken from the result under test, so a wrong grouping fails)."""
    rotary = "blocks.0.attn.hook_rot_q" in model.hook_names()
    qn, kn = ("hook_rot_q", "hook_rot_k") if rotary else ("hook_q", "hook_k")
    store = {}

    def keeper(name):
        def keep(t, hook):
            store[name] = t.detach().float().clone()
        return keep

    names = [f"blocks.{layer}.attn.{n}" for layer in range(model.n_layers) for n in (qn, kn)]
    with model.hooks([(n, keeper(n)) for n in names]):
        res = attention(model, text)
    expected = []
    for layer in range(model.n_layers):
        q = store[f"blocks.{layer}.attn.{qn}"][0]  # [pos, n_heads, d_head]
        k = store[f"blocks.{layer}.attn.{kn}"][0][:, kv_groups]  # [pos, n_heads, d_head]: each head's KV group
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
        n = scores.shape[-1]
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        expected.append(scores.masked_fill(causal, float("-inf")).softmax(-1))
    return res, torch.stack(expected)


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_patterns_equal_independent_softmax_tiny(arch, request):
    model = request.getfixturevalue(arch)
    groups = [h // (model.n_heads // model.n_kv_heads) for h in range(model.n_heads)]
    res, expected = recompute_patterns(model, "the cat sat on the mat", groups)
    assert res.kv_groups == groups
    assert res.patterns.shape == (model.n_layers, model.n_heads, 23, 23)
    assert (res.patterns - expected).abs().max() <= 1e-5


def test_patterns_equal_independent_softmax_embedded(embedded):
    res = attention(embedded, "The Eiffel Tower is located in the city of")
    assert res.kv_groups == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # SmolLM2: 9 query heads on 3 KV heads
    res2, expected = recompute_patterns(embedded, "The Eiffel Tower is located in the city of", res.kv_groups)
    assert (res2.patterns - expected).abs().max() <= 1e-5
    # any other grouping does not reproduce the model's patterns
    _, wrong = recompute_patterns(embedded, "The Eiffel Tower is located in the city of", [0, 1, 2] * 3)
    assert (res2.patterns - wrong).abs().max() > 1e-2
    stats = res.stats()
    assert stats.shape == (30 * 9, 5)
    assert stats.kv_group.tolist() == res.kv_groups * 30


def test_stats_against_explicit_loops(tiny_llama):
    res = attention(tiny_llama, "abcdefg hij")
    stats = res.stats()
    n = len(res.str_tokens)
    for layer in range(tiny_llama.n_layers):
        for head in range(tiny_llama.n_heads):
            p = res.pattern(layer, head).tolist()
            ent = first = prev = off = 0.0
            for q in range(1, n):
                ent += -sum(x * math.log(x) for x in p[q][: q + 1] if x > 0)
                first += p[q][0]
                prev += p[q][q - 1]
                off += sum(p[q][k] * (q - k) for k in range(q + 1))
            row = stats.loc[(layer, head)]
            assert row.entropy == pytest.approx(ent / (n - 1), abs=1e-5)
            assert row.first_token == pytest.approx(first / (n - 1), abs=1e-6)
            assert row.prev_token == pytest.approx(prev / (n - 1), abs=1e-6)
            assert row.mean_offset == pytest.approx(off / (n - 1), abs=1e-5)


def test_stats_of_hand_made_heads():
    n = 6
    prev = torch.zeros(n, n)
    prev[0, 0] = 1
    for q in range(1, n):
        prev[q, q - 1] = 1
    bos = torch.zeros(n, n)
    bos[:, 0] = 1
    uniform = torch.tril(torch.ones(n, n))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    s = head_stats(torch.stack([prev, bos, uniform]))
    assert s["prev_token"].tolist() == pytest.approx([1, 0.2, sum(1 / (q + 1) for q in range(1, n)) / 5])
    assert s["first_token"].tolist() == pytest.approx([0.2, 1, sum(1 / (q + 1) for q in range(1, n)) / 5])
    assert s["mean_offset"].tolist() == pytest.approx([1, 3, sum(q / 2 for q in range(1, n)) / 5])
    assert s["entropy"].tolist() == pytest.approx([0, 0, sum(math.log(q + 1) for q in range(1, n)) / 5], abs=1e-6)


def test_plots_are_labelled(tiny_gpt2, tmp_path):
    res = attention(tiny_gpt2, "a$b\nc")
    fig = res.plot(1, 2, out=tmp_path / "head.png")
    assert (tmp_path / "head.png").stat().st_size > 0
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["<|bos|>", "a", r"\$", "b", "\\n", "c"]
    assert "layer 1, head 2" in fig.axes[0].get_title()
    grid = res.plot_layer(0, out=tmp_path / "layer.png")
    assert len([ax for ax in grid.axes if ax.images]) == tiny_gpt2.n_heads
    assert "kv" in grid.axes[3].get_title()
    assert "attention patterns" in res._repr_html_()


def test_layers_subset_and_token_tensor(tiny_llama):
    toks = torch.tensor([256, 5, 6, 7, 8])
    full = attention(tiny_llama, toks)
    one = attention(tiny_llama, toks, layers=1)
    assert one.layers == [1] and torch.equal(one.pattern(1, 3), full.pattern(1, 3))
    assert torch.allclose(full.patterns.sum(-1), torch.ones(2, 4, 5))


def test_bad_input(tiny_llama):
    with pytest.raises(ValueError, match=r"layer 5 .*0\.\.1"):
        attention(tiny_llama, "abc", layers=[5])
    with pytest.raises(ValueError, match="empty text"):
        attention(tiny_llama, "")
    with pytest.raises(ValueError, match="at least 2 tokens"):
        attention(tiny_llama, torch.tensor([256]))
    res = attention(tiny_llama, "abc", layers=[0])
    with pytest.raises(ValueError, match=r"head 4 .*0\.\.3"):
        res.plot(0, 4)
    with pytest.raises(ValueError, match=r"layer 1 not in this result"):
        res.plot_layer(1)
    args = argparse.Namespace(text="abc", layer=0, head=9, out=None, json=True)
    with pytest.raises(ValueError, match=r"head 9 .*0\.\.3"):
        cli_attention(args, model=tiny_llama)
    assert tiny_llama.attached_hook_count() == 0


def test_cli_handler(tiny_llama, tmp_path):
    args = argparse.Namespace(text="hello", layer=1, head=2, out=str(tmp_path / "a.png"), json=True)
    out = cli_attention(args, model=tiny_llama)
    json.dumps(out)
    assert (tmp_path / "a.png").stat().st_size > 0
    assert out["kv_group"] == 1 and len(out["pattern"]) == 6
    assert all(abs(sum(row) - 1) < 1e-5 for row in out["pattern"])
    expected = attention(tiny_llama, "hello").stats().loc[(1, 2)]
    assert out["stats"]["entropy"] == pytest.approx(expected.entropy)
    assert out["most_attended"][0]["key_pos"] == 0
    assert "layer 1 head 2" in out["_text"]
    assert isinstance(attention(tiny_llama, "hi"), AttentionResult)


def test_numpy_integers_are_accepted(tiny_llama):
    import numpy as np

    res = attention(tiny_llama, "abc", layers=np.int64(1))
    assert res.layers == [1]
    assert res.plot(np.int64(1), np.int64(2)) is not None


def test_package_exports_the_analyzer(tiny_gpt2):
    """``interp.attention(model, text)`` is the package-level entry point."""
    import interp

    assert torch.equal(interp.attention(tiny_gpt2, "ab").patterns, attention(tiny_gpt2, "ab").patterns)


def test_cli_parser_accepts_the_issue_syntax():
    from interp import cli

    args = cli.build_parser().parse_args(["attention", "some text", "--layer", "3", "--head", "1", "--out", "a.png",
                                          "--json"])
    assert (args.text, args.layer, args.head, args.out, args.json, args.func) == \
        ("some text", 3, 1, "a.png", True, cli_attention)


def test_to_json_and_keyword_only_out(tiny_llama, tmp_path):
    res = attention(tiny_llama, "hello", layers=[0, 1])
    doc = json.loads(json.dumps(res.to_json()))
    assert doc["result"] == "AttentionResult" and doc["layers"] == [0, 1] and doc["tokens"] == res.str_tokens
    assert len(doc["rows"]) == 2 * tiny_llama.n_heads
    assert torch.allclose(torch.tensor(doc["patterns"], dtype=torch.float64), res.patterns.double(), atol=1e-6)
    with pytest.raises(TypeError):
        res.plot(0, 1, tmp_path / "x.png")
    with pytest.raises(TypeError):
        res.plot_layer(0, tmp_path / "x.png")


def test_token_labels_show_whitespace(tiny_gpt2):
    from interp.analyses.attention import token_label

    assert token_label(" the") == "\u2423the" and token_label("a  b\n") == "a\u2423\u2423b\\n"
    assert token_label("$x") == r"\$x" and token_label("") == "''"
    res = attention(tiny_gpt2, torch.tensor([0, 3, 5]))
    res.str_tokens = ["<|bos|>", " a", "b "]  # tokens as a word-level tokenizer would print them
    labels = [t.get_text() for t in res.plot(0, 0).axes[0].get_yticklabels()]
    assert labels == ["<|bos|>", "\u2423a", "b\u2423"]
