"""Residual decomposition and direct logit attribution, checked against independent computations: the model's
own residual and logits, head ablations through the core API, and logit changes with the final norm's scale
frozen through its own hook."""

import argparse
import json

import pytest
import torch

import interp
from interp.analyses.attribution import decompose, direct_logit_attribution
from interp.cli.attribution import add_cli, cli_dla

PROMPT = "The Eiffel Tower is located in the city of"
TINY_TEXT = "residual stream!"


def text_for(name):
    return PROMPT if name == "embedded" else TINY_TEXT


def token_for(name):
    return " Paris" if name == "embedded" else "s"


@pytest.fixture(scope="module")
def gpt2_biased():
    """A tiny GPT-2 whose final LayerNorm and attention output biases are non-trivial (HF initialises them to
    0 and 1), so the LayerNorm remainder and the b_O parts are really exercised. Its own instance: nothing
    shared is modified."""
    model = interp.load_tiny("gpt2", seed=3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_params().items():
            if name.startswith("transformer.ln_f") or name.endswith("attn.c_proj.bias"):
                p.add_(0.5 * torch.randn(p.shape, generator=g))
    return model


@pytest.fixture(autouse=True)
def _no_hook_leaks_on_gpt2_biased(request):
    yield
    if "gpt2_biased" in request.fixturenames:
        assert request.getfixturevalue("gpt2_biased").attached_hook_count() == 0


@pytest.mark.parametrize("fixture", ["embedded", "tiny_llama", "tiny_gpt2", "gpt2_biased"])
@pytest.mark.parametrize("pos", [-1, 2])
def test_parts_sum_to_the_final_residual(fixture, pos, request):
    model = request.getfixturevalue(fixture)
    text = text_for(fixture)
    d = decompose(model, text, pos=pos)
    final = model.resid(text, model.n_layers - 1, "post", pos=pos)  # read independently through the core API
    assert (d.total("layer") - final).abs().max() <= 1e-4
    # head level: the model's float32 output projection rounds at ~1e-5 of the residual's scale
    assert (d.parts.double().sum(0) - final.double()).abs().max() <= 1e-4
    kinds = set(d.kinds)
    assert {"embed", "head", "mlp"} <= kinds
    assert ("pos_embed" in kinds) == (model.positional == "standard")
    assert ("attn_bias" in kinds) == (model.b_O(0) is not None)
    assert d.parts.shape[0] == 1 + ("pos_embed" in kinds) + model.n_layers * (
        model.n_heads + 1 + ("attn_bias" in kinds))


@pytest.mark.parametrize("fixture", ["tiny_llama", "gpt2_biased"])
def test_embedding_parts_are_the_embedding_rows(fixture, request):
    model = request.getfixturevalue(fixture)
    toks = model.to_tokens(TINY_TEXT)[0]
    d = decompose(model, TINY_TEXT, pos=4)
    assert torch.equal(d.parts[d.labels.index("embed")], model.W_E[toks[4]])
    if model.positional == "standard":
        wpe = model.hf_model.transformer.wpe.weight.detach()
        assert torch.allclose(d.parts[d.labels.index("pos_embed")], wpe[4], atol=1e-7)
        layer = 1
        assert torch.allclose(d.parts[d.labels.index(f"L{layer}.b_O")], model.b_O(layer))


@pytest.mark.parametrize("fixture, heads", [("tiny_llama", [(0, 1), (1, 3)]), ("gpt2_biased", [(1, 0)]),
                                            ("embedded", [(29, 0), (3, 8)])])
def test_each_head_part_is_what_ablating_that_head_removes(fixture, heads, request):
    model = request.getfixturevalue(fixture)
    text = text_for(fixture)
    d = decompose(model, text)
    for layer, head in heads:
        full = model.attn_out(text, layer)[-1]
        with model.ablate_heads([(layer, head)], mode="zero"):
            ablated = model.attn_out(text, layer)[-1]
        part = d.parts[d.labels.index(f"L{layer}H{head}")]
        assert (full - ablated - part).abs().max() <= 1e-4 * max(1.0, float(part.abs().max()))


@pytest.mark.parametrize("fixture", ["embedded", "tiny_llama", "tiny_gpt2", "gpt2_biased"])
@pytest.mark.parametrize("pos", [-1, 3])
def test_dla_sums_to_the_models_logit(fixture, pos, request):
    model = request.getfixturevalue(fixture)
    text = text_for(fixture)
    logits = model.run(text)[0, pos]  # an independent forward
    res = direct_logit_attribution(model, text, token_for(fixture), pos=pos)
    assert abs(res.total("layer") - float(logits[res.token_id])) <= 1e-4
    assert abs(res.total("head") - float(logits[res.token_id])) <= 1e-4
    assert res.norm == model.norm
    if fixture == "gpt2_biased":
        assert abs(res.remainder) > 1e-3  # the LayerNorm bias is really part of the sum


@pytest.mark.parametrize("fixture, baseline", [("embedded", " London"), ("tiny_llama", "t"), ("gpt2_biased", "t")])
def test_dla_of_a_logit_difference(fixture, baseline, request):
    model = request.getfixturevalue(fixture)
    text = text_for(fixture)
    logits = model.run(text)[0, -1]
    res = direct_logit_attribution(model, text, token_for(fixture), baseline_token=baseline)
    assert abs(res.total() - float(logits[res.token_id] - logits[res.baseline_id])) <= 1e-4
    assert abs(res.total("head") - res.model_value) <= 1e-4
    assert "logit(" in res.what and baseline in res.what


@pytest.mark.parametrize("fixture", ["embedded", "tiny_llama", "gpt2_biased"])
@pytest.mark.filterwarnings("ignore:A forward hook edited hook_scale")
def test_contribution_is_the_logit_change_with_the_norm_scale_frozen(fixture, request):
    """Remove one part from the final residual, keep ln_final's scale at its clean value (through the
    model's own hook_scale), and the logit must drop by exactly that part's contribution."""
    model = request.getfixturevalue(fixture)
    text = text_for(fixture)
    res = direct_logit_attribution(model, text, token_for(fixture))
    d = res.decomposition
    clean_scale = model.cache(text, ["ln_final.hook_scale"])["ln_final.hook_scale"]
    L = model.n_layers
    base = model.run(text)[0, -1, res.token_id]
    picks = ["embed", f"L{L - 1}.mlp", f"L{L - 1}H0", "L0H1"] + (["pos_embed", "L1.b_O"] if fixture == "gpt2_biased"
                                                                  else [])
    for label in picks:
        i = d.labels.index(label)
        final = d.resid - d.parts[i]
        with model.hooks([("ln_final.hook_scale", lambda t, hook: clean_scale.to(t.device, t.dtype).clone())]), \
                model.patch(L - 1, "post", -1, final):
            logit = model.run(text)[0, -1, res.token_id]
        assert abs(float(base - logit) - float(res.contributions[i])) <= 1e-4 * max(1.0, abs(float(base)))


def test_head_matrix_and_layer_totals_agree(tiny_llama):
    res = direct_logit_attribution(tiny_llama, TINY_TEXT, "s")
    d = res.decomposition
    m = res.head_matrix()
    assert m.shape == (tiny_llama.n_layers, tiny_llama.n_heads)
    for layer in range(tiny_llama.n_layers):
        attn = float(res.layer_contributions[d.layer_labels.index(f"L{layer}.attn")])
        assert abs(float(m[layer].sum()) - attn) <= 1e-5


def test_embedding_share(tiny_gpt2):
    res = direct_logit_attribution(tiny_gpt2, TINY_TEXT, "s")
    e = res.embedding_share()
    c = dict(zip(res.decomposition.layer_labels, res.layer_contributions.tolist()))
    assert e["contribution"] == pytest.approx(c["embed"] + c["pos_embed"])
    mass = sum(abs(v) for v in c.values()) + abs(res.remainder)
    assert e["abs_share"] == pytest.approx(abs(c["embed"] + c["pos_embed"]) / mass)
    assert e["fraction_of_value"] == pytest.approx(e["contribution"] / res.model_value)


@pytest.mark.parametrize("call, match", [
    (lambda m: decompose(m, ""), "empty text"),
    (lambda m: decompose(m, TINY_TEXT, pos=17), "position 17 out of range"),
    (lambda m: direct_logit_attribution(m, TINY_TEXT, ""), "empty"),
    (lambda m: direct_logit_attribution(m, TINY_TEXT, 512), r"not in the vocabulary: allowed 0..511"),
    (lambda m: direct_logit_attribution(m, TINY_TEXT, "s", baseline_token=-3), "baseline token id -3"),
    (lambda m: direct_logit_attribution(m, TINY_TEXT, "s", baseline_token="s"), "same token"),
    (lambda m: direct_logit_attribution(m, TINY_TEXT, "s", pos=-18), "position -18 out of range"),
    (lambda m: decompose(m, TINY_TEXT).to_frame(level="neuron"), "level 'neuron' not known"),
])
def test_bad_input_is_a_clear_error(tiny_llama, call, match):
    with pytest.raises(ValueError, match=match):
        call(tiny_llama)
    assert tiny_llama.attached_hook_count() == 0


def test_frames_plots_display(tiny_gpt2, tmp_path):
    res = direct_logit_attribution(tiny_gpt2, TINY_TEXT, "s", baseline_token="t")
    f = res.to_frame()
    assert list(f.index[:2]) == ["embed", "pos_embed"] and f.index[-1] == "remainder"
    assert f["contribution"].sum() == pytest.approx(res.total(), abs=1e-9)
    assert len(res.to_frame("head")) == len(res.decomposition.labels) + 1
    assert res.plot(out=tmp_path / "dla.png").axes and (tmp_path / "dla.png").stat().st_size > 0
    assert res.plot_heads(out=tmp_path / "heads.png").axes
    d = res.decomposition
    df = d.to_frame()
    assert df["share_of_final"].sum() == pytest.approx(1.0, abs=1e-4)
    assert d.plot(out=tmp_path / "dec.png").axes
    assert "DLA" in res._repr_html_() and "residual" in repr(d)


def test_cli_handler_json(tiny_llama, tmp_path):
    from interp.core.results import jsonable

    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers())
    args = parser.parse_args(["dla", TINY_TEXT, "--token", "s", "--baseline", "t", "--top", "3",
                              "--out", str(tmp_path / "d.png"), "--json"])
    data = cli_dla(args, model=tiny_llama)
    doc = json.loads(json.dumps(jsonable(data)))
    logits = tiny_llama.run(TINY_TEXT)[0, -1]
    assert doc["value"] == pytest.approx(float(logits[ord("s")] - logits[ord("t")]), abs=1e-5)
    assert len(doc["top"]) == 3 and set(doc["embedding"]) >= {"contribution", "abs_share"}
    assert (tmp_path / "d.png").exists() and (tmp_path / "d_heads.png").exists()
    args = parser.parse_args(["dla", TINY_TEXT, "--token", "s", "--top", "0"])
    with pytest.raises(ValueError, match="--top 0"):
        cli_dla(args, model=tiny_llama)


def test_attention_only_model_without_final_norm():
    """A model wrapped with Model.from_module (no MLPs, no final norm, [pos, d_model] positional hook)."""
    from interp.analyses.lens import logit_lens
    from interp.analyses.induction import AttnOnlyTransformer, ToyConfig

    model = interp.Model.from_module(AttnOnlyTransformer(ToyConfig(), seed=0))
    toks = torch.randint(0, model.d_vocab, (12,), generator=torch.Generator().manual_seed(0))
    logits = model.run(toks)[0]
    res = direct_logit_attribution(model, toks, 3, baseline_token=5)
    assert abs(res.total("head") - float(logits[-1, 3] - logits[-1, 5])) <= 1e-4
    d = res.decomposition
    assert "mlp" not in d.kinds and "pos_embed" in d.kinds
    assert (d.total() - model.resid(toks, model.n_layers - 1, "post", pos=-1)).abs().max() <= 1e-5
    lens = logit_lens(model, toks, targets=[3])
    assert (lens.target_logits[-1, :, 0] - logits[:, 3]).abs().max() <= 1e-5
    # no norm: every lens row is the residual times W_U
    stack = model.resid_stack(toks)
    assert (lens.target_logits[:, :, 0] - (stack @ model.W_U)[..., 3]).abs().max() <= 1e-4
    assert model.attached_hook_count() == 0


def test_multi_token_token_is_scored_by_its_first_token_and_named(tiny_llama):
    with pytest.warns(UserWarning, match="first token"):
        res = direct_logit_attribution(tiny_llama, TINY_TEXT, "st", baseline_token="tu")
    ref = direct_logit_attribution(tiny_llama, TINY_TEXT, "s", baseline_token="t")
    assert (res.token, res.scored_token, res.token_id) == ("st", "s", ord("s"))
    assert (res.baseline, res.baseline_scored_token, res.baseline_id) == ("tu", "t", ord("t"))
    assert torch.equal(res.contributions, ref.contributions)
    doc = res.to_json()
    assert doc["scored_token"] == "s" and doc["baseline_scored_token"] == "t"
    assert "first token of 'st'" in res.what and "first token of 'st'" in res.summary()
    assert ref.what == "logit('s') - logit('t')"


def test_bad_cli_flag_fails_before_the_model_loads(monkeypatch):
    from interp.core import loading

    monkeypatch.setattr(loading, "load", lambda *a, **k: pytest.fail("the model was loaded before the flag check"))
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers())
    with pytest.raises(ValueError, match="--top -3"):
        cli_dla(parser.parse_args(["dla", TINY_TEXT, "--token", "s", "--top", "-3"]))


def test_plot_out_is_keyword_only(tiny_gpt2, tmp_path):
    res = direct_logit_attribution(tiny_gpt2, TINY_TEXT, "s")
    for plot in (res.plot, res.plot_heads, res.decomposition.plot):
        with pytest.raises(TypeError):
            plot(tmp_path / "x.png")
