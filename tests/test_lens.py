"""Logit lens: every number checked against an independent computation (the model's own logits, or the
residual read through the core API and pushed through a norm written out from the weights)."""

import argparse
import json
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.analyses.lens import LogitLensResult, _block_topk, logit_lens, logit_lens_last
from interp.cli.lens import add_cli, cli_lens

PROMPT = "The Eiffel Tower is located in the city of"
TINY_TEXT = "residual stream!"


def manual_final_norm(model, x):
    """RMSNorm / LayerNorm written out from the weights (independent of the model's modules and of interp)."""
    ln = model.module.ln_final.original_component
    if model.norm == "rms":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + ln.variance_epsilon) * ln.weight.detach()
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + ln.eps) * ln.weight.detach() + ln.bias.detach()


def manual_logits(model, x):
    head = model.hf_model.get_output_embeddings()
    out = manual_final_norm(model, x) @ head.weight.detach().T
    return out if head.bias is None else out + head.bias.detach()


def text_for(name):
    return PROMPT if name == "embedded" else TINY_TEXT


@pytest.mark.parametrize("fixture", ["embedded", "tiny_llama", "tiny_gpt2"])
def test_last_lens_row_is_the_models_output(fixture, request):
    model = request.getfixturevalue(fixture)
    text = text_for(fixture)
    logits = model.run(text)[0]  # [pos, vocab]
    ids = logits[-1].topk(5).indices.tolist() + [3, 100, model.d_vocab - 1]
    res = logit_lens(model, text, targets=ids, k=5)
    n = logits.shape[0]
    assert res.top_ids.shape == (model.n_layers + 1, n, 5)
    assert (res.target_logits[-1] - logits[:, ids]).abs().max() <= 1e-5
    probs = logits.softmax(-1)
    # float32 softmaxes over 49,152 logits that agree to ~1e-5 (in a different order of operations): a probability
    # of 0.4 can move by 1.6e-5 on some CPUs (seen on an AMD EPYC), hence 3e-5 for probabilities
    assert (res.target_probs[-1] - probs[:, ids]).abs().max() <= 3e-5
    ranks = (logits[:, None, :] > logits[:, ids][:, :, None]).sum(-1)
    assert torch.equal(res.target_ranks[-1], ranks)
    top = probs.topk(5, -1)
    assert torch.equal(res.top_ids[-1], top.indices)
    assert (res.top_probs[-1] - top.values).abs().max() <= 3e-5


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_gpt2"])
def test_every_row_matches_a_written_out_lens(fixture, request):
    model = request.getfixturevalue(fixture)
    stack = model.resid_stack(TINY_TEXT)  # [n_layers+1, pos, d_model] read through the core API
    logits = manual_logits(model, stack)
    ids = [0, 97, 256, 300]
    res = logit_lens(model, TINY_TEXT, targets=ids, k=3)
    probs = logits.softmax(-1)
    assert (res.target_logits - logits[..., ids]).abs().max() <= 1e-5
    assert (res.target_probs - probs[..., ids]).abs().max() <= 1e-5
    assert torch.equal(res.target_ranks, (logits[..., None, :] > logits[..., ids][..., None]).sum(-1))
    assert (res.top_probs - probs.topk(3, -1).values).abs().max() <= 1e-5
    # the embedding row really is the embedding (plus learned positions on GPT-2)
    toks = model.to_tokens(TINY_TEXT)[0]
    emb = model.W_E[toks]
    if model.positional == "standard":
        emb = emb + model.hf_model.transformer.wpe.weight.detach()[: len(toks)]
    assert (logits[0] - manual_logits(model, emb)).abs().max() <= 1e-5


def test_embedded_intermediate_rows_at_two_positions(embedded):
    stack = embedded.resid_stack(PROMPT)[:, [3, -1]]
    paris = embedded.to_single_token(" Paris")
    logits = manual_logits(embedded, stack)
    res = logit_lens(embedded, PROMPT, targets=[" Paris"], positions=[3, -1])
    assert res.positions == [3, len(embedded.to_str_tokens(PROMPT)) - 1]
    assert (res.target_logits[..., 0] - logits[..., paris]).abs().max() <= 1e-4
    assert torch.equal(res.target_ranks[..., 0], (logits > logits[..., paris:paris + 1]).sum(-1))
    assert torch.equal(res.top_ids[..., 0], logits.argmax(-1))


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_gpt2", "embedded"])
def test_lens_of_many_texts_at_their_last_position_is_each_texts_own(fixture, request):
    """One right-padded forward of texts of other lengths, each with its own targets, against logit_lens of
    each text alone at its last position."""
    model = request.getfixturevalue(fixture)
    texts = ["The Eiffel Tower is located in the city of", "Paris is", "A much longer text, so that the others "
             "are padded: the capital of Italy is"]
    targets = [[" Paris", " Rome"], [" the"], [" Rome", " Paris", " Milan"]]
    many = logit_lens_last(model, texts, targets, k=3)
    for text, tg, got in zip(texts, targets, many):
        want = logit_lens(model, text, targets=tg, k=3, positions=[-1])
        assert got.positions == want.positions and got.token_ids == want.token_ids
        assert got.target_ids == want.target_ids and got.targets == want.targets
        assert torch.equal(got.top_ids, want.top_ids) and torch.equal(got.target_ranks, want.target_ranks)
        for key in ("top_probs", "target_probs", "target_logits"):
            assert torch.allclose(getattr(got, key), getattr(want, key), rtol=1e-4, atol=1e-5), key
    assert logit_lens_last(model, [], []) == []
    with pytest.raises(ValueError, match="2 texts but 1 target lists"):
        logit_lens_last(model, texts[:2], targets[:1])


def test_positions_subset_equals_the_full_lens(tiny_llama):
    full = logit_lens(tiny_llama, TINY_TEXT, targets=["s"], k=4)
    part = logit_lens(tiny_llama, TINY_TEXT, targets=["s"], k=4, positions=[-1, 2])
    assert part.positions == [len(full.positions) - 1, 2]
    assert torch.equal(part.top_ids, full.top_ids[:, [-1, 2]])
    assert torch.allclose(part.target_probs, full.target_probs[:, [-1, 2]], atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 5), V=st.integers(4096, 9000), k=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_block_topk_equals_torch_topk(rows, V, k, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, V, generator=g)
    x[:, -1] += 6.0 * (seed % 2)  # sometimes the maximum sits in a partial tail block
    v, i = _block_topk(x, k)
    ref = x.topk(k, -1)
    assert torch.equal(v, ref.values)
    assert torch.equal(x.gather(1, i), v)


def test_multi_token_target_scores_its_first_token(tiny_llama):
    with pytest.warns(UserWarning, match="first token"):
        res = logit_lens(tiny_llama, TINY_TEXT, targets=["ab"], positions=[-1])
    ref = logit_lens(tiny_llama, TINY_TEXT, targets=["a"], positions=[-1])
    assert res.targets == ["ab"] and res.target_ids == ref.target_ids == [ord("a")]
    assert torch.equal(res.target_probs, ref.target_probs)


def test_first_top1_reads_the_rank_curve():
    ranks = torch.tensor([3, 0, 2, 0, 0])[:, None, None]
    res = LogitLensResult(str_tokens=["a", "b"], token_ids=[0, 1], positions=[1], top_ids=torch.zeros(5, 1, 1).long(),
                          top_probs=torch.zeros(5, 1, 1), targets=["x"], target_ids=[7],
                          target_logits=torch.zeros(5, 1, 1), target_probs=torch.zeros(5, 1, 1),
                          target_ranks=ranks, n_layers=4)
    assert res.first_top1("x") == 1 and res.first_top1("x", stable=True) == 3
    res.target_ranks = torch.tensor([0, 0, 0, 0, 1])[:, None, None]
    assert res.first_top1("x") == 0 and res.first_top1("x", stable=True) is None


@pytest.mark.parametrize("kwargs, match", [
    ({"text": ""}, "empty text"),
    ({"targets": [""]}, "empty"),
    ({"targets": [100000]}, "not in the vocabulary"),
    ({"targets": [-1]}, "not in the vocabulary"),
    ({"positions": [99]}, "position 99 out of range"),
    ({"positions": []}, "positions is empty"),
    ({"k": 0}, "k=0 out of range"),
    ({"k": 513}, "allowed 1..512"),
])
def test_bad_input_is_a_clear_error(tiny_llama, kwargs, match):
    kw = {"text": TINY_TEXT, **kwargs}
    with pytest.raises(ValueError, match=match):
        logit_lens(tiny_llama, kw.pop("text"), **kw)
    assert tiny_llama.attached_hook_count() == 0


def test_result_accessors_reject_out_of_range(tiny_gpt2):
    res = logit_lens(tiny_gpt2, TINY_TEXT, targets=["s"], positions=[-1])
    with pytest.raises(ValueError, match="lens layer 3 out of range: allowed 0..2"):
        res.top(3)
    with pytest.raises(ValueError, match="was not analysed"):
        res.top(0, 1)
    with pytest.raises(ValueError, match="not in this lens"):
        res.target_curve("q")


def test_an_exception_inside_the_forward_leaves_no_hooks(tiny_llama):
    def boom(t, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"), tiny_llama.hooks([("blocks.1.hook_resid_pre", boom)]):
        logit_lens(tiny_llama, TINY_TEXT)
    assert tiny_llama.attached_hook_count() == 0


def test_frame_plots_and_display(tiny_gpt2, tmp_path):
    res = logit_lens(tiny_gpt2, TINY_TEXT, targets=["s", "t"], k=3)
    frame = res.to_frame()
    n = len(tiny_gpt2.to_str_tokens(TINY_TEXT))
    assert len(frame) == (tiny_gpt2.n_layers + 1) * n
    assert {"top1", "p_top1", "p(s)", "rank(t)", "logit(s)"} <= set(frame.columns)
    assert frame.loc[(2, n - 1), "rank(s)"] == int(res.target_ranks[2, -1, 0])
    fig = res.plot(out=tmp_path / "lens.png")
    assert fig.axes and (tmp_path / "lens.png").stat().st_size > 0
    res.plot_targets(out=tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
    assert "logit lens" in res._repr_html_() and "logit lens" in repr(res)


def test_cli_handler_json(tiny_llama, tmp_path):
    from interp.core.results import jsonable

    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers())
    out = tmp_path / "lens.png"
    args = parser.parse_args(["lens", TINY_TEXT, "--target", "s", "--target", "t", "--pos", "-1", "--out", str(out),
                              "--json"])
    data = cli_lens(args, model=tiny_llama)
    doc = json.loads(json.dumps(jsonable(data)))
    assert doc["layers"][-1] == "final" and len(doc["top"]) == tiny_llama.n_layers + 1
    ref = logit_lens(tiny_llama, TINY_TEXT, targets=["s"], positions=[-1])
    assert doc["targets"]["s"]["rank"] == ref.target_ranks[:, 0, 0].tolist()
    assert out.exists() and (tmp_path / "lens_targets.png").exists()
    assert "_text" in data and "_text" not in doc


def test_embedded_final_row_top1_is_the_models_prediction(embedded):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # " Paris" is one token: no multi-token warning
        res = logit_lens(embedded, PROMPT, targets=[" Paris"], positions=[-1])
    assert int(res.top_ids[-1, 0, 0]) == int(embedded.run(PROMPT)[0, -1].argmax())
    first = res.first_top1(" Paris")
    if first is not None:
        assert int(res.target_ranks[first, 0, 0]) == 0
        assert (res.target_ranks[:first, 0, 0] > 0).all()


def test_multi_token_target_output_names_the_scored_token(tiny_llama):
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers())
    args = parser.parse_args(["lens", TINY_TEXT, "--target", "ab", "--target", "s", "--pos", "-1"])
    with pytest.warns(UserWarning, match="first token"):
        data = cli_lens(args, model=tiny_llama)
    assert data["scored_tokens"] == ["a", "s"]
    assert data["targets"]["ab"]["scored_token"] == "a" and data["targets"]["s"]["scored_token"] == "s"
    assert "'ab' (scored as its first token 'a')" in data["_text"]
    assert data["result"] == "LogitLensResult" and data["summary"].startswith("logit lens")
    with pytest.warns(UserWarning):
        res = logit_lens(tiny_llama, TINY_TEXT, targets=["ab"], positions=[-1])
    assert res.scored_tokens == ["a"] and "first token 'a'" in res.summary()


def test_bad_cli_flag_fails_before_the_model_loads(monkeypatch):
    from interp.core import loading

    monkeypatch.setattr(loading, "load", lambda *a, **k: pytest.fail("the model was loaded before the flag check"))
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers())
    with pytest.raises(ValueError, match="--k"):
        cli_lens(parser.parse_args(["lens", TINY_TEXT, "--k", "0"]))


def test_plot_out_is_keyword_only(tiny_gpt2, tmp_path):
    res = logit_lens(tiny_gpt2, TINY_TEXT, targets=["s"], positions=[-1])
    with pytest.raises(TypeError):
        res.plot(tmp_path / "x.png")
    with pytest.raises(TypeError):
        res.plot_targets(tmp_path / "x.png")
    assert res.plot_targets(out=tmp_path / "t.png", pos=-1).axes


def test_plot_targets_marks_what_its_floor_hides(tiny_gpt2):
    from interp.analyses.lens import PROB_FLOOR

    res = logit_lens(tiny_gpt2, TINY_TEXT, targets=["s"], positions=[-1])
    ax = res.plot_targets().axes[0]
    assert not any("below" in t.get_text() for t in ax.get_legend().get_texts())  # nothing hidden: no floor line
    res.target_probs[1, -1, 0] = 1e-30  # one row far below the floor
    ax = res.plot_targets().axes[0]
    hollow = [ln for ln in ax.lines if ln.get_linestyle() == "None"]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [1] and hollow[0].get_ydata()[0] == PROB_FLOOR
    assert any(f"below {PROB_FLOOR:.0e}" in t.get_text() for t in ax.get_legend().get_texts())
