"""The wrapper: residual reads against independent computations, writes, hook hygiene, weights, bad input."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interp

PROMPT = "The Eiffel Tower is located in the city of"
OTHER = "The Colosseum is located in the city of"


def manual_final_norm(model, x):
    """RMSNorm / LayerNorm written out from the weights, independent of the model's modules."""
    ln = model.module.ln_final.original_component
    if model.norm == "rms":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + ln.variance_epsilon) * ln.weight.detach()
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + ln.eps) * ln.weight.detach() + ln.bias.detach()


def manual_unembed(model, x):
    head = model.hf_model.get_output_embeddings()
    out = x @ head.weight.detach().T
    return out if head.bias is None else out + head.bias.detach()


@pytest.mark.parametrize("fixture", ["embedded", "tiny_llama", "tiny_gpt2"])
def test_last_resid_post_through_norm_and_unembed_is_logits(fixture, request):
    model = request.getfixturevalue(fixture)
    text = PROMPT if fixture == "embedded" else "residual stream"
    last = model.resid(text, model.n_layers - 1, "post")
    logits = model.run(text)[0]
    assert (manual_unembed(model, manual_final_norm(model, last)) - logits).abs().max() <= 1e-4
    # the wrapper's own helpers agree with the written-out computation
    assert (model.unembed(model.final_norm(last)) - logits).abs().max() <= 1e-4


def test_resid_stack_is_consistent_with_single_reads(tiny_llama):
    stack = tiny_llama.resid_stack("abcdef")
    assert stack.shape == (tiny_llama.n_layers + 1, 7, tiny_llama.d_model)
    for layer in range(tiny_llama.n_layers):
        assert torch.equal(stack[layer], tiny_llama.resid("abcdef", layer, "pre"))
        # resid_post(l) == resid_pre(l + 1), and pre + attn + mlp == post
        pre, mid, post = (tiny_llama.resid("abcdef", layer, p) for p in ("pre", "mid", "post"))
        assert torch.allclose(pre + tiny_llama.attn_out("abcdef", layer), mid, atol=1e-5)
        assert torch.allclose(mid + tiny_llama.mlp_out("abcdef", layer), post, atol=1e-5)
        assert torch.equal(post, stack[layer + 1])
    assert torch.equal(tiny_llama.resid("abcdef", 1, "pre", pos=-1), stack[1, -1])


def test_embedding_is_the_first_residual(embedded):
    toks = embedded.to_tokens(PROMPT)
    assert torch.equal(embedded.resid(PROMPT, 0, "pre"), embedded.W_E[toks[0]])


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_gpt2"])
def test_heads_sum_to_attention_output(fixture, request):
    model = request.getfixturevalue(fixture)
    heads = model.head_out("attention heads", 1)
    bias = model.b_O(1)
    total = heads.sum(1) + (0 if bias is None else bias)
    assert heads.shape[1] == model.n_heads
    assert (total - model.attn_out("attention heads", 1)).abs().max() <= 1e-5


def test_stop_at_layer_returns_the_residual(tiny_llama):
    toks = tiny_llama.to_tokens("stop here")
    assert torch.equal(tiny_llama.run(toks, stop_at_layer=1), tiny_llama.cache(toks, ["blocks.1.hook_resid_pre"])
                       ["blocks.1.hook_resid_pre"])
    end = tiny_llama.run(toks, stop_at_layer=tiny_llama.n_layers)
    assert torch.equal(end[0], tiny_llama.resid(toks, tiny_llama.n_layers - 1, "post"))
    with pytest.raises(ValueError, match="layer 5 out of range"):
        tiny_llama.run(toks, stop_at_layer=5)


def test_cache_only_holds_what_was_asked(tiny_llama):
    c = tiny_llama.cache("abc", ["blocks.0.attn.hook_pattern", "blocks.1.hook_resid_post"])
    assert set(c) == {"blocks.0.attn.hook_pattern", "blocks.1.hook_resid_post"}
    assert c["blocks.0.attn.hook_pattern"].shape == (1, tiny_llama.n_heads, 4, 4)
    c2 = tiny_llama.cache("abc", lambda n: n.endswith("hook_resid_mid"))
    assert sorted(c2) == [f"blocks.{i}.hook_resid_mid" for i in range(tiny_llama.n_layers)]
    with pytest.raises(ValueError, match="unknown hook name 'blocks.0.hook_resid_middle'"):
        tiny_llama.cache("abc", ["blocks.0.hook_resid_middle"])


# ------------------------------------------------------------------------------------------------- writes
def test_patching_own_value_is_bit_identical(embedded):
    toks = embedded.to_tokens(PROMPT)
    clean = embedded.run(toks)
    for layer, point in [(0, "pre"), (12, "mid"), (29, "post")]:
        own = embedded.resid(toks, layer, point)
        with embedded.patch(layer, point, None, own):
            assert torch.equal(embedded.run(toks), clean)
        with embedded.patch(layer, point, 4, own[4]):
            assert torch.equal(embedded.run(toks), clean)


def test_patching_another_prompts_residual_changes_logits(embedded):
    toks, other = embedded.to_tokens(PROMPT), embedded.to_tokens(OTHER)
    assert toks.shape == other.shape
    clean = embedded.run(toks)
    donor = embedded.resid(other, 15, "pre")
    with embedded.patch(15, "pre", None, donor):
        patched = embedded.run(toks)
    # the whole residual swapped at layer 15: the prediction follows the donor prompt exactly
    assert torch.allclose(patched, embedded.run(other), atol=1e-4)
    assert not torch.allclose(patched, clean, atol=1e-2)
    with embedded.patch(15, "pre", 4, donor[4]):  # the subject's last token only
        assert not torch.equal(embedded.run(toks), clean)


def test_patch_with_a_function(tiny_llama):
    toks = tiny_llama.to_tokens("function patch")
    with tiny_llama.patch(1, "pre", 2, lambda r: r * 0):
        seen = tiny_llama.resid(toks, 1, "pre")
    assert torch.all(seen[2] == 0) and torch.equal(seen[3], tiny_llama.resid(toks, 1, "pre")[3])


def test_steering_vector_appears_exactly_in_the_next_read(embedded):
    toks = embedded.to_tokens(PROMPT)
    vec = torch.randn(embedded.d_model, generator=torch.Generator().manual_seed(0))
    before = embedded.resid(toks, 10, "pre")
    with embedded.steer(vec, 10, scale=3.0, pos=5):
        after = embedded.resid(toks, 10, "pre")
        logits = embedded.run(toks)
    assert torch.equal(after[5], before[5] + 3.0 * vec)
    others = [i for i in range(toks.shape[1]) if i != 5]
    assert torch.equal(after[others], before[others])
    assert not torch.equal(logits, embedded.run(toks))


def test_contexts_nest_and_compose(tiny_llama):
    toks = tiny_llama.to_tokens("nest")
    v = torch.ones(tiny_llama.d_model)
    base = tiny_llama.resid(toks, 1, "pre")
    with tiny_llama.steer(v, 1, scale=1.0):
        with tiny_llama.steer(v, 1, scale=2.0):
            assert len(tiny_llama.active_hooks()) == 2
            both = tiny_llama.resid(toks, 1, "pre")
        one = tiny_llama.resid(toks, 1, "pre")
    assert torch.allclose(both, base + 3.0, atol=1e-6) and torch.allclose(one, base + 1.0, atol=1e-6)
    assert tiny_llama.active_hooks() == []


def test_head_ablation_zero_and_mean(tiny_llama):
    toks = tiny_llama.to_tokens("ablate a head")
    with tiny_llama.ablate_heads([(1, 2)], mode="zero"):
        z = tiny_llama.cache(toks, ["blocks.1.attn.hook_z"])["blocks.1.attn.hook_z"][0]
        heads = tiny_llama.head_out(toks, 1)
    assert torch.all(z[:, 2] == 0) and torch.all(heads[:, 2] == 0) and torch.any(z[:, 1] != 0)
    ref = tiny_llama.to_tokens(["some reference text", "more of it here"])
    with tiny_llama.ablate_heads([(1, 2)], mode="mean", mean_over=ref):
        zm = tiny_llama.cache(toks, ["blocks.1.attn.hook_z"])["blocks.1.attn.hook_z"][0]
    expected = tiny_llama.cache(ref, ["blocks.1.attn.hook_z"])["blocks.1.attn.hook_z"].reshape(-1, 4, 16).mean(0)
    assert torch.allclose(zm[:, 2], expected[2].expand_as(zm[:, 2]), atol=1e-6)


def test_neuron_ablation(tiny_gpt2):
    toks = tiny_gpt2.to_tokens("neurons")
    with tiny_gpt2.ablate_neurons(0, [3, 7]):
        post = tiny_gpt2.cache(toks, ["blocks.0.mlp.hook_post"])["blocks.0.mlp.hook_post"][0]
        out = tiny_gpt2.run(toks)
    assert torch.all(post[:, [3, 7]] == 0) and not torch.equal(out, tiny_gpt2.run(toks))


def test_neuron_ablation_to_given_values(tiny_gpt2):
    toks = tiny_gpt2.to_tokens("neurons")
    name = "blocks.0.mlp.hook_post"
    clean = tiny_gpt2.cache(toks, [name])[name][0]
    with tiny_gpt2.ablate_neurons(0, [7, 3], mode="mean", values=[0.5, -2.0]):
        post = tiny_gpt2.cache(toks, [name])[name][0]
    assert torch.all(post[:, 7] == 0.5) and torch.all(post[:, 3] == -2.0)  # in the order the neurons were given
    keep = [i for i in range(post.shape[1]) if i not in (3, 7)]
    assert torch.equal(post[:, keep], clean[:, keep])
    assert tiny_gpt2.active_hooks() == []
    with pytest.raises(ValueError, match="one finite number per ablated neuron"):
        tiny_gpt2.ablate_neurons(0, [3, 7], mode="mean", values=[1.0])
    with pytest.raises(ValueError, match="mode='mean'"):
        tiny_gpt2.ablate_neurons(0, [3], mode="zero", values=[1.0])
    with pytest.raises(ValueError, match="mode='mean'"):
        tiny_gpt2.ablate_neurons(0, [3], mode="mean", mean_over="text", values=[1.0])


# ------------------------------------------------------------------------------------------------- hygiene
class Boom(Exception):
    pass


def test_exception_in_hook_removes_everything(tiny_llama):
    def bad(t, hook):
        raise Boom

    with pytest.raises(Boom):
        with tiny_llama.hooks([("blocks.0.hook_resid_pre", bad)]):
            tiny_llama.run("x")
    assert tiny_llama.attached_hook_count() == 0 and tiny_llama.active_hooks() == []


def test_exception_and_keyboard_interrupt_in_body(tiny_llama):
    for exc in (Boom, KeyboardInterrupt):
        with pytest.raises(exc):
            with tiny_llama.steer(torch.ones(tiny_llama.d_model), 0):
                with tiny_llama.ablate_heads([(0, 0)]):
                    assert tiny_llama.attached_hook_count() == 2
                    raise exc
        assert tiny_llama.attached_hook_count() == 0


def test_failure_while_attaching_detaches_what_was_attached(tiny_llama, monkeypatch):
    hs = tiny_llama._hookset
    real_add, calls = hs._add, []

    def flaky(name, fn, desc):
        calls.append(name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_add(name, fn, desc)

    monkeypatch.setattr(hs, "_add", flaky)
    with pytest.raises(KeyboardInterrupt):
        with tiny_llama.hooks([("blocks.0.hook_resid_pre", lambda t, hook: None),
                               ("blocks.1.hook_resid_pre", lambda t, hook: None)]):
            pass
    assert tiny_llama.attached_hook_count() == 0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["enter", "raise", "exit", "run"]), st.integers(0, 3)), max_size=12))
def test_random_enter_raise_exit_sequences_leave_no_hooks(tiny_llama, script):
    names = ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_mid", "blocks.0.attn.hook_z", "blocks.1.mlp.hook_post"]
    toks = tiny_llama.to_tokens("hyp")

    def nest(steps):
        if not steps:
            return
        action, i = steps[0]
        if action == "raise":
            raise Boom
        if action == "run":
            tiny_llama.run(toks)
            return nest(steps[1:])
        if action == "exit":
            return
        with tiny_llama.hooks([(names[i], lambda t, hook: None)]):
            nest(steps[1:])

    try:
        nest(script)
    except Boom:
        pass
    assert tiny_llama.attached_hook_count() == 0 and tiny_llama.active_hooks() == []


# ------------------------------------------------------------------------------------------------- weights
def test_snapshot_restore_is_bit_exact(tiny_llama, tiny_gpt2):
    for model in (tiny_llama, tiny_gpt2):
        snap = model.snapshot()
        before = {k: v.clone() for k, v in model.named_params().items()}
        with torch.no_grad():
            for p in model.named_params().values():
                p.add_(torch.randn_like(p))
        assert not all(torch.equal(before[k], p) for k, p in model.named_params().items())
        model.restore(snap)
        assert all(torch.equal(before[k], p) for k, p in model.named_params().items())


def test_mlp_weights_and_orientation(tiny_llama, tiny_gpt2):
    for model in (tiny_llama, tiny_gpt2):
        m = model.mlp_out_matrix(1)
        assert m.shape == (model.d_model, model.d_mlp)
        toks = model.to_tokens("weights")
        c = model.cache(toks, ["blocks.1.mlp.hook_post", "blocks.1.hook_mlp_out"])
        bias = getattr(model.mlp_out_module(1), "bias", None)
        out = c["blocks.1.mlp.hook_post"] @ m.T + (0 if bias is None else bias.detach())
        assert torch.allclose(out, c["blocks.1.hook_mlp_out"], atol=1e-5)
        name = model.param_name(model.mlp_out_weight(1))
        assert name in model.snapshot([name])
    assert set(tiny_llama.mlp_in_weights(0)) == {"gate", "in"} and set(tiny_gpt2.mlp_in_weights(0)) == {"in"}
    # the view writes through to the model
    snap = tiny_llama.snapshot([tiny_llama.param_name(tiny_llama.mlp_out_weight(0))])
    tiny_llama.mlp_out_matrix(0)[0, 0] += 1.0
    assert not torch.equal(tiny_llama.mlp_out_weight(0), next(iter(snap.values())))
    tiny_llama.restore(snap)


# ------------------------------------------------------------------------------------------------- bad input
def test_bad_input_errors_name_the_value(embedded):
    with pytest.raises(ValueError, match=r"layer 31 out of range: this model has 30 layers"):
        embedded.resid(PROMPT, 31)
    with pytest.raises(ValueError, match=r"layer -31 out of range"):
        embedded.resid(PROMPT, -31)
    assert torch.equal(embedded.resid(PROMPT, -1), embedded.resid(PROMPT, 29))
    with pytest.raises(ValueError, match=r"position 11 out of range for a sequence of 11 tokens"):
        embedded.resid(PROMPT, 3, pos=11)
    with pytest.raises(ValueError, match="empty text"):
        embedded.run("")
    with pytest.raises(ValueError, match=r"shape \(100,\); its last dimension must be d_model=576"):
        embedded.steer(torch.ones(100), 3)
    with pytest.raises(ValueError, match="residual point 'middle'"):
        embedded.resid(PROMPT, 3, "middle")
    with pytest.raises(ValueError, match=r"head 9 out of range: this model has 9 heads"):
        embedded.ablate_heads([(0, 9)])
    with pytest.raises(ValueError, match=r"neuron 1536 out of range"):
        embedded.ablate_neurons(0, [1536])
    with pytest.raises(ValueError, match=r"' Eiffel Tower' is 3 tokens"):
        embedded.to_single_token(" Eiffel Tower")
    with pytest.raises(ValueError, match="target '' is empty"):
        embedded.target_tokens("")
    with pytest.raises(ValueError, match="ablation mode 'half'"):
        embedded.ablate_heads([(0, 0)], mode="half")
    assert embedded.attached_hook_count() == 0


def test_patch_position_beyond_sequence_fails_inside_forward_without_leaking(tiny_llama):
    with pytest.raises(ValueError, match="position 50 out of range"):
        with tiny_llama.patch(0, "pre", 50, torch.zeros(tiny_llama.d_model)):
            tiny_llama.run("short")
    assert tiny_llama.attached_hook_count() == 0


def test_weights_untouched_by_failed_interventions(tiny_llama):
    before = tiny_llama.snapshot()
    for bad in (lambda: tiny_llama.steer(torch.ones(3), 0), lambda: tiny_llama.patch(9, "pre", 0, torch.ones(64))):
        with pytest.raises(ValueError):
            bad()
    assert all(torch.equal(before[k], p) for k, p in tiny_llama.named_params().items())


def test_from_module_rejects_plain_modules():
    with pytest.raises(ValueError, match="HookedRootModule"):
        interp.Model.from_module(torch.nn.Linear(2, 2))


def test_integer_scalars_of_numpy_and_torch_are_layers_and_heads(tiny_llama):
    import numpy as np

    assert tiny_llama.check_layer(np.int64(1)) == 1 and tiny_llama.check_layer(torch.tensor(-1)) == 1
    assert tiny_llama.check_head(np.int32(3)) == 3
    for bad in (True, 1.0, np.int64(2), np.float64(0.0)):
        with pytest.raises(ValueError, match="out of range"):
            tiny_llama.check_layer(bad)


def test_norm_weights_are_the_named_transformers_parameters(embedded, tiny_gpt2):
    # the embedded model's norm scales differ per layer and per norm (random tiny ones are all 1)
    params = embedded.named_params()
    for layer in (0, 7, 29):
        for which, hf in (("ln1", "input_layernorm"), ("ln2", "post_attention_layernorm")):
            assert torch.equal(embedded.norm_weight(layer, which), params[f"model.layers.{layer}.{hf}.weight"])
    assert not torch.equal(embedded.norm_weight(0, "ln1"), embedded.norm_weight(0, "ln2"))
    assert torch.equal(tiny_gpt2.norm_weight(-1, "ln2"), tiny_gpt2.named_params()["transformer.h.1.ln_2.weight"])
    with pytest.raises(ValueError, match="which='ln3'"):
        embedded.norm_weight(0, "ln3")
