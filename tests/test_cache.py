"""model.run_with_cache / Cache / activation_grads, each checked against an independent computation."""

import pytest
import torch

import interp
from interp.core.cache import Cache, act_name, activation_grads


@pytest.fixture(scope="module")
def llama():
    return interp.load_tiny("llama", seed=1)


@pytest.fixture(scope="module")
def gpt2_64():
    # float64 GPT-2: LayerNorm stays in float64 (Llama's RMSNorm computes in float32), so finite differences
    # converge to ~1e-8 and can check the gradient tightly.
    return interp.load_tiny("gpt2", seed=2, dtype="float64")


def test_shorthand_names():
    assert act_name("resid_pre", 3) == "blocks.3.hook_resid_pre"
    assert act_name(("pattern", 17)) == "blocks.17.attn.hook_pattern"
    assert act_name("scale", 4, "ln2") == "blocks.4.ln2.hook_scale"
    assert act_name("embed") == "hook_embed"
    assert act_name("blocks.0.hook_mlp_out") == "blocks.0.hook_mlp_out"
    with pytest.raises(KeyError, match="not known"):
        act_name("resid_sideways", 1)


def test_cache_matches_plain_reads(llama):
    logits, cache = llama.run_with_cache("hello there")
    assert torch.equal(logits, llama.run("hello there"))
    assert torch.equal(cache["resid_pre", 1][0], llama.resid("hello there", 1))
    assert torch.equal(cache["blocks.1.hook_resid_pre"], cache["resid_pre", 1])
    assert ("pattern", 0) in cache and ("pattern", 9) not in cache
    pattern = cache["pattern", 1]
    assert torch.allclose(pattern.sum(-1), torch.ones(pattern.shape[:-1]), atol=1e-5)
    with pytest.raises(KeyError, match="not in this cache"):
        cache["blocks.0.ln1.hook_scale"]


def test_batch_of_different_lengths_keeps_the_mask(llama):
    texts = ["a much longer prompt here", "short"]
    logits, cache = llama.run_with_cache(texts, names=[("resid_post", 1)])
    n0, n1 = len(llama.encode(texts[0])), len(llama.encode(texts[1]))
    assert cache.lengths.tolist() == [n0, n1]
    assert cache.mask.sum(1).tolist() == [n0, n1]
    # Right padding under causal attention: the real positions equal the text run alone.
    for row, text in enumerate(texts):
        alone = llama.resid(text, 1, "post")
        assert torch.allclose(cache["resid_post", 1][row, : len(alone)], alone, atol=1e-5)
        assert torch.allclose(cache.at(("resid_post", 1), -1)[row], alone[-1], atol=1e-5)
    assert torch.allclose(logits[1, n1 - 1], llama.run("short")[0, -1], atol=1e-4)


def test_accumulated_resid_last_row_is_the_logits(llama):
    logits, cache = llama.run_with_cache("the cat sat")
    stack, labels = cache.accumulated_resid(return_labels=True)
    assert stack.shape[0] == llama.n_layers + 1 and labels[0] == "0_pre" and labels[-1] == "final"
    assert torch.allclose(llama.unembed(llama.final_norm(stack[-1])), logits, atol=1e-4)
    assert cache.accumulated_resid(1).shape[0] == 1


def test_head_results_sum_to_attention_output(llama):
    _, cache = llama.run_with_cache("the cat sat", names=[("z", 0), ("attn_out", 0)])
    heads, labels = cache.stack_head_results(1, return_labels=True)
    assert heads.shape[0] == llama.n_heads and labels[1] == "L0H1"
    b_o = llama.b_O(0)
    total = heads.sum(0) + (0 if b_o is None else b_o)
    assert torch.allclose(total, cache["attn_out", 0], atol=1e-5)


def test_save_load_round_trip(llama, tmp_path):
    _, cache = llama.run_with_cache(["ab", "abcd"], names=[("resid_pre", 0), ("pattern", 1)])
    path = cache.save(tmp_path / "c.safetensors")
    back = Cache.load(path, model=llama)
    assert set(back) == set(cache)
    assert all(torch.equal(back[k], cache[k]) for k in cache)
    assert torch.equal(back.tokens, cache.tokens) and torch.equal(back.lengths, cache.lengths)
    other = interp.load_tiny("llama", seed=7)
    with pytest.raises(ValueError, match="was made by model"):
        Cache.load(path, model=other)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        cache.save(tmp_path / "no" / "such" / "c.safetensors")
    from safetensors.torch import save_file
    save_file({"x": torch.zeros(1)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not an interp cache"):
        Cache.load(tmp_path / "other.safetensors")


def _logit_metric(token: int):
    def metric(logits, cache):
        return logits[torch.arange(logits.shape[0]), cache.last.to(logits.device), token]
    return metric


@pytest.mark.parametrize("short", ["resid_pre", "z", "v"])
def test_activation_grads_match_finite_differences(gpt2_64, short):
    model, text, name = gpt2_64, "gradients", act_name(short, 1)
    metric = _logit_metric(7)
    values, acts, grads = activation_grads(model, text, [name], metric)
    assert torch.allclose(values, model.run(text)[:, -1, 7].double().float(), atol=1e-5)
    g = torch.Generator().manual_seed(0)
    direction = torch.randn(acts[name].shape, generator=g, dtype=torch.float64)
    eps = 1e-5

    def shifted(sign):
        with torch.no_grad(), model.hooks([(name, lambda t, hook: t + sign * eps * direction.to(t.dtype))]):
            return float(model.forward(text)[0, -1, 7])  # float64 logits: run() would round them to float32

    numeric = (shifted(+1) - shifted(-1)) / (2 * eps)
    analytic = float((grads[name].double() * direction).sum())
    assert abs(numeric - analytic) <= 1e-5 * max(1.0, abs(numeric))


def test_activation_grads_batched_and_with_frozen_weights(llama):
    names = [act_name("resid_pre", 1), act_name("z", 0)]
    texts = ["one prompt", "two"]
    values, _, grads = activation_grads(llama, texts, names, _logit_metric(3))
    for row, text in enumerate(texts):
        v1, _, g1 = activation_grads(llama, text, names, _logit_metric(3))
        n = len(llama.encode(text))
        assert torch.allclose(values[row], v1[0], atol=1e-5)
        for name in names:
            assert torch.allclose(grads[name][row, :n], g1[name][0], atol=1e-5)
            assert torch.all(grads[name][row, n:] == 0)  # padding after the prompt never reaches its last token
    frozen = interp.load_tiny("llama", seed=1)
    for p in frozen.named_params().values():
        p.requires_grad_(False)
    _, _, g2 = activation_grads(frozen, texts, names, _logit_metric(3))
    assert all(torch.allclose(g2[n], grads[n], atol=1e-6) for n in names)
    assert all(p.grad is None for p in llama.named_params().values())


def test_metric_errors(llama):
    with pytest.raises(ValueError, match="one value per prompt"):
        activation_grads(llama, ["ab", "cd"], [("resid_pre", 0)], lambda logits, c: logits.sum())
    with pytest.raises(ValueError, match="must return a tensor"):
        activation_grads(llama, "ab", [("resid_pre", 0)], lambda logits, c: 1.0)


def test_run_with_grad_keeps_the_graph(llama):
    logits = llama.run("ab", grad=True)
    assert logits.requires_grad
    with pytest.raises(ValueError, match="stop_at_layer"):
        llama.run("ab", grad=True, stop_at_layer=1)
