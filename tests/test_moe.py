"""Mixture-of-experts blocks (tiny random Mixtral and OLMoE): routing, load, per-expert decomposition, expert
neurons and ablation, each checked against the plain transformers model observed through its own modules."""

import pytest
import torch
import torch.nn.functional as F

import interp
from interp.core import loading, moe

TEXT = "mixture of experts routes tokens"
DOCS = ["hello world", "mixture of experts routes tokens", "abc", "a longer document about routers and experts"]


@pytest.fixture(scope="module", params=["mixtral", "olmoe"])
def pair(request):
    """(bridged model, plain transformers twin with the same weights)."""
    arch = request.param
    return interp.load_tiny(arch, seed=2), loading.tiny_transformers(arch, seed=2)[0]


def observe(raw, toks, layer):
    """Run the plain model, recording the router's outputs and the experts' inputs of ``layer`` (torch hooks on
    transformers' own modules: nothing of interp's)."""
    seen = {}
    block = raw.model.layers[layer].mlp
    h1 = block.gate.register_forward_hook(lambda mod, args, out: seen.update(router=out))
    h2 = block.experts.register_forward_hook(lambda mod, args, out: seen.update(experts_in=args, experts_out=out))
    try:
        with torch.no_grad():
            seen["logits"] = raw(toks).logits
    finally:
        h1.remove()
        h2.remove()
    return seen


def by_hand(raw, layer, x, expert):
    """One expert's output written out from its stacked weights: down(act(gate x) * up x)."""
    ex = raw.model.layers[layer].mlp.experts
    gate, up = ex.gate_up_proj[expert].detach().chunk(2, dim=0)
    hidden = ex.act_fn(x @ gate.T) * (x @ up.T)
    return hidden, hidden @ ex.down_proj[expert].detach().T


def test_bridge_equals_raw_and_routing_matches_the_router(pair):
    model, raw = pair
    toks = model.to_tokens(TEXT)
    seen = observe(raw, toks, 1)
    assert torch.equal(model.run(toks), seen["logits"])
    r = interp.experts.routing(model, TEXT)
    logits, weights, chosen = seen["router"]
    assert torch.allclose(r.probs[1], logits.softmax(-1), atol=1e-6)
    assert torch.equal(r.chosen[1], chosen)
    assert torch.allclose(r.weights[1].gather(-1, chosen), weights, atol=1e-7)
    assert r.weights[1].sum(-1).gt(0).all() and int((r.weights[1] > 0).sum(-1).max()) <= moe.top_k(model)
    assert "experts" in r.to_frame().columns and r.plot(layer=1) is not None


def test_decomposition_has_per_expert_parts_that_sum_exactly(pair):
    model, raw = pair
    d = interp.decompose(model, TEXT)
    E = moe.n_experts(model)
    assert [lab for lab in d.labels if lab.startswith("L1E")] == [f"L1E{e}" for e in range(E)]
    assert (d.total("head") - d.resid).abs().max() <= 1e-5 and torch.equal(d.total("layer"), d.resid)
    seen = observe(raw, model.to_tokens(TEXT), 1)
    x, idx, w = seen["experts_in"]  # transformers' own inputs to the experts: tokens, chosen ids, weights
    pos = d.pos
    for e in range(E):
        part = d.parts[d.labels.index(f"L1E{e}")]
        slot = (idx[pos] == e).nonzero()
        expect = by_hand(raw, 1, x[pos], e)[1] * w[pos, slot[0, 0]] if len(slot) else torch.zeros_like(part)
        assert torch.allclose(part, expect, atol=1e-6), e
    dla = interp.direct_logit_attribution(model, TEXT, "s")
    assert dla.total("head") == pytest.approx(dla.model_value, abs=1e-5)


def test_expert_load_counts_what_the_router_chose(pair):
    model, raw = pair
    load = interp.experts.expert_load(model, DOCS, batch_size=3)
    E = moe.n_experts(model)
    expect, n = torch.zeros(model.n_layers, E, dtype=torch.int64), 0
    for doc in DOCS:  # one document at a time: no padding to leave out
        toks = model.to_tokens(doc)
        for layer in range(model.n_layers):
            expect[layer] += torch.bincount(observe(raw, toks, layer)["router"][2].flatten(), minlength=E)
        n += toks.shape[1]
    assert load.n_tokens == n and torch.equal(load.counts, expect)
    assert torch.allclose(load.share.sum(-1).double(), torch.ones(model.n_layers, dtype=torch.float64))


def test_expert_neurons_only_see_routed_tokens(pair):
    model, raw = pair
    layer, expert, neuron = 1, 1, 5
    scan = interp.experts.expert_neurons(model, layer, expert, DOCS, k=2)
    best = -float("inf")
    for doc in DOCS:
        seen = observe(raw, model.to_tokens(doc), layer)
        x, idx, _ = seen["experts_in"]
        routed = (idx == expert).any(-1)
        routed[0] = False  # BOS left out, as in the scan
        if routed.any():
            best = max(best, float(by_hand(raw, layer, x, expert)[0][routed, neuron].max()))
    assert float(scan.state.values[neuron, 0]) == pytest.approx(best, abs=1e-5)


def test_ablating_an_expert_equals_removing_its_weight(pair):
    model, raw = pair
    res = interp.experts.ablate(model, TEXT, "s", 0, [2])
    block = raw.model.layers[0].mlp

    def drop(mod, args, out):
        logits, weights, idx = out
        return logits, torch.where(idx == 2, 0.0, weights), idx

    handle = block.gate.register_forward_hook(drop)
    try:
        with torch.no_grad():
            expect = raw(model.to_tokens(TEXT)).logits[0, -1, res.target_id]
    finally:
        handle.remove()
    assert res.rows[0]["ablated_logit"] == pytest.approx(float(expect), abs=1e-5)
    assert res.rows[0]["delta"] != 0
    every = interp.experts.ablate(model, TEXT, "s", 0)
    assert [r["experts"] for r in every.rows] == [[e] for e in range(moe.n_experts(model))]


def test_what_does_not_apply_says_so(pair):
    model, _ = pair
    with pytest.raises(ValueError, match="ROME does not apply.*routed mixtures of 4 experts"):
        interp.rome.edit(model, "{} is located in", "abc", " x", layer=0)
    with pytest.raises(ValueError, match="use interp.experts.expert_neurons"):
        interp.neurons(model, 0)
    from interp.analyses.stats import mlp_key_second_moment
    with pytest.raises(ValueError, match="mixture-of-experts"):
        mlp_key_second_moment(model, 0, n_tokens=10, cache=False)
    with pytest.raises(ValueError, match=r"expert 7 out of range: .* allowed 0\.\.3"):
        interp.experts.expert_neurons(model, 0, 7, DOCS)


def test_dense_models_are_refused_and_sizes_checked(tiny_llama):
    with pytest.raises(ValueError, match="needs a mixture-of-experts model"):
        interp.experts.routing(tiny_llama, TEXT)
    with pytest.raises(ValueError, match=r"top_k=5; allowed: 1\.\.n_experts \(4\)"):
        interp.load_tiny("mixtral", top_k=5)
    with pytest.raises(ValueError, match="arch 'switch' not supported"):
        interp.load_tiny("switch")


def test_tiny_moe_is_deterministic():
    a, b = interp.load_tiny("olmoe", seed=5), interp.load_tiny("olmoe", seed=5)
    toks = a.to_tokens("same seed")
    assert torch.equal(a.run(toks), b.run(toks))
    assert F.cosine_similarity(a.run(toks).flatten(), interp.load_tiny("olmoe", seed=6).run(toks).flatten(), 0) < 0.99
