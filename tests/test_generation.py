"""One generation path (interp.core.generation): hooks act on sampled text in Model.generate and in the editing
layer's sampler (the KV-cached twin is used only when no hook is attached), and both paths give the same tokens."""

import contextlib

import pytest
import torch

from interp.core import generation
from interp.editing.eval import measure as ev

PROMPTS = ["Hello there my", "The cat"]


def greedy_by_run(model, text, n):
    """Independent greedy decoding: full logits from model.run, one step at a time (hooks act on model.run)."""
    toks = model.to_tokens(text)
    for _ in range(n):
        toks = torch.cat([toks, model.run(toks)[:, -1].argmax(-1, keepdim=True)], 1)
    return toks[0, -n:].tolist()


def strong_vector(model, seed=0):
    return torch.randn(model.d_model, generator=torch.Generator().manual_seed(seed)) * 20


def test_fast_path_only_without_hooks(tiny_llama):
    assert generation.fast_path(tiny_llama) is not None  # the tiny Llama has a matching twin
    with tiny_llama.steer(strong_vector(tiny_llama), 0):
        assert generation.fast_path(tiny_llama) is None
        with pytest.raises(ValueError, match="not available"):
            generation.sample_ids(tiny_llama, [tiny_llama.encode("Hi")], 2, lambda l: l.argmax(-1), fast=True)
    assert generation.fast_path(tiny_llama) is not None


@pytest.mark.parametrize("name", ["tiny_llama", "embedded"])
def test_fast_and_hooked_paths_give_the_same_greedy_tokens(request, name):
    model = request.getfixturevalue(name)
    rows = [model.encode(p) for p in PROMPTS]
    choose = lambda logits: logits.argmax(-1)  # noqa: E731
    fast = generation.sample_ids(model, rows, 6, choose, fast=True)
    hooked = generation.sample_ids(model, rows, 6, choose, fast=False)
    assert fast == hooked
    assert hooked[0] == greedy_by_run(model, PROMPTS[0], 6)


def test_the_fast_path_is_taken_without_hooks_and_never_with_them(tiny_llama, monkeypatch):
    calls = []
    real_cached, real_hooked = generation._cached_steps, generation._hooked_steps
    monkeypatch.setattr(generation, "_cached_steps", lambda *a: calls.append("cached") or real_cached(*a))
    monkeypatch.setattr(generation, "_hooked_steps", lambda *a: calls.append("hooked") or real_hooked(*a))
    tiny_llama.generate("Hello there", 3)
    generation.sample_text(tiny_llama, PROMPTS, 3)
    assert calls == ["cached", "cached"]
    calls.clear()
    with tiny_llama.steer(strong_vector(tiny_llama), 0):
        tiny_llama.generate("Hello there", 3)
        generation.sample_text(tiny_llama, PROMPTS, 3)
    assert calls == ["hooked", "hooked"]


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_gpt2"])
def test_steering_changes_model_generate(request, name):
    model = request.getfixturevalue(name)
    plain = model.generate("Hello there", 6, stop_at_eos=False)
    with model.steer(strong_vector(model), 0):
        steered = model.generate("Hello there", 6, stop_at_eos=False)
        expected = model.tokenizer.decode(greedy_by_run(model, "Hello there", 6))
    assert steered != plain
    assert steered == expected


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_gpt2"])
def test_steering_changes_the_evaluation_sampler(request, name):
    model = request.getfixturevalue(name)
    plain = generation.sample_text(model, PROMPTS, 6, greedy=True)
    plain_entropy = ev.generation_entropy(model, PROMPTS, n_tokens=6, seed=1)[1]
    with model.steer(strong_vector(model), 0):
        steered = generation.sample_text(model, PROMPTS, 6, greedy=True)
        expected = [model.tokenizer.decode(greedy_by_run(model, p, 6)) for p in PROMPTS]
        steered_entropy = ev.generation_entropy(model, PROMPTS, n_tokens=6, seed=1)[1]
    assert steered != plain and steered == expected
    assert steered_entropy != plain_entropy


def test_sampling_is_seeded_and_checked(tiny_llama):
    a = tiny_llama.generate("Hello", 5, n=3, temperature=1.0, top_k=5, seed=2, stop_at_eos=False)
    assert a == tiny_llama.generate("Hello", 5, n=3, temperature=1.0, top_k=5, seed=2, stop_at_eos=False)
    assert len(a) == 3 and a != tiny_llama.generate("Hello", 5, n=3, temperature=1.0, top_k=5, seed=3,
                                                    stop_at_eos=False)
    for kwargs, match in [(dict(max_new_tokens=0), "max_new_tokens"), (dict(temperature=-1), "temperature"),
                          (dict(n=0), "n=")]:
        with pytest.raises(ValueError, match=match):
            tiny_llama.generate("Hello", **{"max_new_tokens": 3, **kwargs})


def test_pick_greedy_temperature_and_top_k():
    logits = torch.tensor([[0.0, 5.0, 1.0, -2.0]])
    assert generation.pick(logits).tolist() == [1]
    gen = torch.Generator().manual_seed(0)
    draws = {int(generation.pick(logits, gen, temperature=1.0, top_k=2)) for _ in range(200)}
    assert draws <= {1, 2} and 1 in draws


@pytest.mark.parametrize("steered", [False, True])
def test_sample_text_groups_give_each_group_its_own_samples(tiny_llama, steered):
    """One batch of several prompt groups, each with its own seed, samples what one call per group samples —
    on the cached path and (steered) on the hooked one."""
    groups = [["Hello there my", "The cat"], ["A much longer prompt than the others here"], []]
    seeds = [3, 8, 1]
    with tiny_llama.steer(strong_vector(tiny_llama), 0) if steered else contextlib.nullcontext():
        got = generation.sample_text_groups(tiny_llama, groups, 5, seeds=seeds)
        want = [generation.sample_text(tiny_llama, g, 5, seed=s) for g, s in zip(groups, seeds)]
    assert got == want and len(got[0]) == 2 and got[2] == []
    assert got != generation.sample_text_groups(tiny_llama, groups, 5, seeds=[4, 8, 1])
    with pytest.raises(ValueError, match="seeds"):
        generation.sample_text_groups(tiny_llama, groups, 5, seeds=[3])
