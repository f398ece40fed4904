"""Models placed with a device map (interp.load / load_tiny with device_map=): the placement is recorded, the
results equal the un-mapped model's, the analyzers and the editors work, and bad maps are clear errors.

On a CPU-only machine every map is over "cpu" entries (accelerate's dispatch still runs and records
``hf_device_map``); the tests at the end need one or two CUDA GPUs and skip otherwise."""


import pytest
import torch

import interp
from interp import rome
from interp.core import loading, placement
from interp.analyses.attribution import decompose
from interp.editing import rome as editing_rome
from interp.editing.ft import ft_edit
from interp.analyses.stats import mlp_key_second_moment
from interp.analyses.trace import causal_trace

PROMPT = "The Eiffel Tower is located in the city of"
TEXT, SUBJECT = "The Eiffel Tower is in Paris", "Eiffel"  # tiny-model trace prompt (as in test_trace.py)
LAYER = 4  # the embedded model's edit layer


def llama_map(n_layers: int, where) -> dict:
    """An explicit map of a Llama-family model: ``where(i)`` is the device of layer i; the embedding (tied to
    the unembedding on SmolLM2) goes with layer 0, the final norm with the last layer."""
    out = {"model.embed_tokens": where(0)}
    out.update({f"model.layers.{i}": where(i) for i in range(n_layers)})
    out["model.norm"] = where(n_layers - 1)
    out["lm_head"] = where(0)
    return out


def cpu_map(n_layers: int) -> dict:
    return llama_map(n_layers, lambda i: "cpu")


def digest(model) -> str:
    return model.weights_digest()


@pytest.fixture(scope="module")
def tiny_pair():
    """A private tiny Llama loaded twice: plainly, and through an explicit all-"cpu" device map."""
    plain = interp.load_tiny("llama", seed=0)
    mapped = interp.load_tiny("llama", seed=0, device_map=cpu_map(plain.n_layers))
    yield plain, mapped
    assert plain.attached_hook_count() == 0 and mapped.attached_hook_count() == 0


@pytest.fixture(scope="module")
def mapped_embedded(embedded):
    """The embedded model loaded a second time, through an explicit device map over "cpu" entries."""
    model = interp.load(device_map=cpu_map(embedded.n_layers))
    yield model
    assert model.attached_hook_count() == 0


# ----------------------------------------------------------------------------------------------- placement
def test_tiny_map_is_recorded_and_changes_nothing(tiny_pair):
    plain, mapped = tiny_pair
    want = {**cpu_map(plain.n_layers), "model.rotary_emb": "cpu"}  # buffer-only module added, with the input
    assert mapped.hf_model.hf_device_map == want == mapped.device_map
    assert plain.device_map is None
    assert mapped.devices == [torch.device("cpu")] and mapped.device_of(-1) == torch.device("cpu")
    assert mapped.placement_summary() == "cpu: embedding, layers 0-1, final norm, unembedding"
    assert mapped.summary().loc[("architecture", "placement"), "value"] == mapped.placement_summary()
    toks = plain.to_tokens(["device maps", "place layers on devices"])
    assert torch.equal(mapped.run(toks), plain.run(toks))
    assert mapped.generate("abc", 5) == plain.generate("abc", 5)


def test_tied_gpt2_and_auto_strategy():
    plain = interp.load_tiny("gpt2", seed=0)
    names = ["transformer.wte", "transformer.wpe", "transformer.h.0", "transformer.h.1", "transformer.ln_f",
             "lm_head"]  # lm_head is tied to transformer.wte: both on one device
    mapped = interp.load_tiny("gpt2", seed=0, device_map={n: "cpu" for n in names})
    auto = interp.load_tiny("gpt2", seed=0, device_map="auto", max_memory={"cpu": "1GiB"})
    toks = plain.to_tokens("tied embeddings")
    assert torch.equal(mapped.run(toks), plain.run(toks))
    assert torch.equal(auto.run(toks), plain.run(toks))
    assert auto.device_map == {"": "cpu"}  # max_memory names only the CPU: the whole model fits there


def test_embedded_map_matches_the_unmapped_model(embedded, mapped_embedded):
    assert mapped_embedded.device_map == {**cpu_map(30), "model.rotary_emb": "cpu"}
    assert mapped_embedded.module.cfg.device == "cpu"
    toks = embedded.to_tokens([PROMPT, "Paris is the capital of"])
    diff = (mapped_embedded.run(toks) - embedded.run(toks)).abs().max().item()
    assert diff <= 1e-6
    assert mapped_embedded.fingerprint == embedded.fingerprint


# ----------------------------------------------------------------------------------------------- analyzers
def test_lens_and_decomposition_on_the_mapped_model(embedded, mapped_embedded):
    lens = interp.logit_lens(mapped_embedded, PROMPT, targets=[" Paris"], positions=[-1])
    ref = interp.logit_lens(embedded, PROMPT, targets=[" Paris"], positions=[-1])
    assert torch.equal(lens.top_ids, ref.top_ids)
    assert torch.allclose(lens.target_probs, ref.target_probs, atol=1e-6)
    # the final lens row is the model's own prediction
    final = mapped_embedded.run(PROMPT)[0, -1].softmax(-1)
    assert abs(float(lens.target_probs[-1, 0, 0]) - float(final[lens.target_ids[0]])) < 1e-5
    d = decompose(mapped_embedded, PROMPT)
    assert torch.allclose(d.total("head"), d.resid, atol=1e-3)
    assert torch.allclose(d.parts, decompose(embedded, PROMPT).parts, atol=1e-6)


def test_rome_edit_and_revert_on_the_mapped_model(embedded, mapped_embedded):
    stats = mlp_key_second_moment(mapped_embedded, LAYER, n_tokens=1500, cache=False, progress=False)
    ref_stats = mlp_key_second_moment(embedded, LAYER, n_tokens=1500, cache=False, progress=False)
    assert torch.allclose(stats.mom2, ref_stats.mom2, rtol=1e-6, atol=1e-9)
    hp = {"layer": LAYER, "stats": stats, "mom2_ridge": 1e-3, "v_steps": 3, "templates": [[5, 1]]}
    before, digest_before = mapped_embedded.mlp_out_matrix(LAYER).detach().cpu().clone(), digest(mapped_embedded)
    e = rome.edit(mapped_embedded, **hp)
    try:
        ref = rome.edit(embedded, **hp)
        ref.revert()
        assert torch.allclose(e.u, ref.u, rtol=1e-5, atol=1e-7) and torch.allclose(e.v, ref.v, rtol=1e-5, atol=1e-9)
        written = mapped_embedded.mlp_out_matrix(LAYER).detach().cpu()
        assert torch.equal(written, editing_rome.rank_one_update(before, e.u, e.v))
    finally:
        e.revert()
    assert digest(mapped_embedded) == digest_before


def test_trace_and_ft_edit_on_the_mapped_tiny_model(tiny_pair):
    plain, mapped = tiny_pair
    a = causal_trace(mapped, TEXT, SUBJECT, samples=2, kinds=("mlp", "resid"))
    b = causal_trace(plain, TEXT, SUBJECT, samples=2, kinds=("mlp", "resid"))
    for kind in ("mlp", "resid"):
        assert torch.allclose(a.effects[kind], b.effects[kind], atol=1e-6, equal_nan=True)
    original = digest(mapped)
    f = ft_edit(mapped, "{} is in the city of", "Tower", " Rome", 0, steps=3)
    g = ft_edit(plain, "{} is in the city of", "Tower", " Rome", 0, steps=3)
    try:
        assert torch.equal(mapped.mlp_out_matrix(0).detach().cpu(), plain.mlp_out_matrix(0).detach().cpu())
        assert digest(mapped) != original
    finally:
        f.revert()
        g.revert()
    assert digest(mapped) == original


# ----------------------------------------------------------------------------------------------- bad maps
def test_bad_maps_are_clear_errors():
    good = cpu_map(2)
    with pytest.raises(ValueError, match=r"'model\.layer\.0' names no module.*did you mean"):
        interp.load_tiny(device_map={**good, "model.layer.0": "cpu"})
    missing = {k: v for k, v in good.items() if k != "model.layers.1"}
    with pytest.raises(ValueError, match=r"no device to parameter 'model\.layers\.1\..*add 'model\.layers\.1'"):
        interp.load_tiny(device_map=missing)
    with pytest.raises(ValueError, match=r"device='cpu' and device_map=.*pass one"):
        interp.load_tiny(device="cpu", device_map=good)
    with pytest.raises(ValueError, match=r"'disk' is not usable: offloading"):
        interp.load_tiny(device_map={**good, "lm_head": "disk"})
    with pytest.raises(ValueError, match=r"'tpu' is not usable: not a device"):
        interp.load_tiny(device_map={**good, "lm_head": "tpu"})
    with pytest.raises(ValueError, match=r"keys 'model' and 'model\.layers\.0' overlap"):
        interp.load_tiny(device_map={"model": "cpu", "model.layers.0": "cpu", "lm_head": "cpu"})
    with pytest.raises(ValueError, match=r"device_map 'autoo' not understood"):
        interp.load_tiny(device_map="autoo")
    with pytest.raises(ValueError, match=r"max_memory=\{'cpu': '1GB'\} given without device_map"):
        interp.load_tiny(max_memory={"cpu": "1GB"})
    with pytest.raises(ValueError, match=r"max_memory\['cpu'\] = 'lots' is not a size"):
        interp.load_tiny(device_map="auto", max_memory={"cpu": "lots"})


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() > 7, reason="this machine has cuda:7")
def test_missing_cuda_device_is_named():
    with pytest.raises(ValueError, match=r"device_map\['lm_head'\]: 'cuda:7' is not usable"):
        interp.load_tiny(device_map={**cpu_map(2), "lm_head": "cuda:7"})
    with pytest.raises(ValueError, match=r"device_map\['model.norm'\]: 7 is not usable"):
        interp.load_tiny(device_map={**cpu_map(2), "model.norm": 7})


@pytest.fixture
def two_fake_gpus(monkeypatch):
    """Map validation only asks torch whether CUDA exists and how many devices it has: pretend two, so the
    checks on GPU maps run here (nothing is dispatched)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_gpu_map_validation(two_fake_gpus):
    llama = loading.tiny_transformers("llama", 0)[0]
    split = {"model.embed_tokens": "cuda:0", "model.layers.0": 0, "model.layers.1": "cuda:1", "model.norm": 1,
             "lm_head": torch.device("cuda", 1)}
    assert placement.check_device_map(llama, split) == {
        "model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 1, "model.norm": 1, "lm_head": 1,
        "model.rotary_emb": 0}  # normalized to GPU indices; the rotary table goes with the embedding
    with pytest.raises(ValueError, match=r"puts \['model.layers.1'\] on \['cpu'\].*offload"):
        placement.check_device_map(llama, {**split, "model.layers.1": "cpu"})
    with pytest.raises(ValueError, match=r"'cuda:2' is not usable: this machine has 2 CUDA device"):
        placement.check_device_map(llama, {**split, "model.layers.1": "cuda:2"})
    gpt2 = loading.tiny_transformers("gpt2", 0)[0]
    tied = {"transformer.wte": 0, "transformer.wpe": 0, "transformer.h.0": 0, "transformer.h.1": 1,
            "transformer.ln_f": 1, "lm_head": 1}
    with pytest.raises(ValueError, match=r"splits tied parameters.*'lm_head'.*on 1.*'transformer.wte'.*on 0"):
        placement.check_device_map(gpt2, tied)


# ----------------------------------------------------------------------------------------------- GPUs
# References run on ONE GPU (same kernels), so a split model must match them to float32 rounding; the CPU model
# would differ by GPU-vs-CPU summation order instead.
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none on this machine")
def test_cuda_map(tiny_llama):  # pragma: no cover - GPU only
    model = interp.load_tiny("llama", seed=0, device_map=llama_map(2, lambda i: 0))
    assert model.devices == [torch.device("cuda", 0)] and model.device_map["model.layers.1"] == 0
    toks = tiny_llama.to_tokens("abc")
    out = model.run(toks)
    assert out.device.type == "cpu" and (out - tiny_llama.run(toks)).abs().max() < 1e-4


two_gpus = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                              reason="needs two CUDA GPUs")


@pytest.fixture(scope="module")
def one_gpu():  # pragma: no cover - GPU only
    model = interp.load(device="cuda:0")
    yield model
    assert model.attached_hook_count() == 0


@pytest.fixture(scope="module")
def split_embedded():  # pragma: no cover - GPU only
    """The embedded model with layers 0-14 (and the tied embedding/unembedding) on cuda:0, layers 15-29 and
    the final norm on cuda:1."""
    model = interp.load(device_map=llama_map(30, lambda i: 0 if i < 15 else 1))
    yield model
    assert model.attached_hook_count() == 0


@two_gpus
def test_two_gpu_split_matches_one_device(embedded, one_gpu, split_embedded):  # pragma: no cover - GPU only
    m = split_embedded
    assert m.devices == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert m.device == m.device_of(0) == torch.device("cuda", 0) and m.device_of(29) == torch.device("cuda", 1)
    assert m.placement_summary() == ("cuda:0: embedding, layers 0-14, unembedding | "
                                     "cuda:1: layers 15-29, final norm")
    toks = embedded.to_tokens([PROMPT, "Paris is the capital of"])
    out = m.run(toks)
    assert out.device.type == "cpu" and (out - one_gpu.run(toks)).abs().max().item() <= 1e-4
    assert (out - embedded.run(toks)).abs().max().item() <= 1e-2  # and the CPU model, to GPU-vs-CPU rounding
    cache = m.cache(toks, ["blocks.0.hook_resid_post", "blocks.29.hook_resid_post"])
    assert all(v.device.type == "cpu" for v in cache.values())


@two_gpus
def test_two_gpu_lens_trace_and_interventions(one_gpu, split_embedded):  # pragma: no cover - GPU only
    m = split_embedded
    lens = interp.logit_lens(m, PROMPT, targets=[" Paris"])
    ref = interp.logit_lens(one_gpu, PROMPT, targets=[" Paris"])
    assert torch.allclose(lens.target_probs, ref.target_probs, atol=1e-5)
    final = m.run(PROMPT)[0].softmax(-1)[:, lens.target_ids[0]]
    assert torch.allclose(lens.target_probs[-1, :, 0], final, atol=1e-5)
    d = decompose(m, PROMPT)
    assert torch.allclose(d.total("head"), d.resid, atol=1e-3)
    assert torch.allclose(d.parts, decompose(one_gpu, PROMPT).parts, atol=1e-4)
    kw = {"samples": 2, "kinds": ("mlp", "resid"), "window": 3, "positions": ["last_subject"]}
    a = causal_trace(m, PROMPT, "The Eiffel Tower", " Paris", **kw)
    b = causal_trace(one_gpu, PROMPT, "The Eiffel Tower", " Paris", **kw)
    for kind in kw["kinds"]:
        assert torch.allclose(a.effects[kind], b.effects[kind], atol=1e-4, equal_nan=True)
    vec = torch.randn(m.d_model, generator=torch.Generator().manual_seed(0))
    for layer in (3, 20):  # one hook on each device
        with m.steer(vec, layer, scale=4.0), one_gpu.steer(vec, layer, scale=4.0):
            assert (m.run(PROMPT) - one_gpu.run(PROMPT)).abs().max() < 1e-4
        with m.ablate_heads([(layer, 1)], mode="mean", mean_over="Paris is a city"), \
                one_gpu.ablate_heads([(layer, 1)], mode="mean", mean_over="Paris is a city"):
            assert (m.run(PROMPT) - one_gpu.run(PROMPT)).abs().max() < 1e-4


@two_gpus
@pytest.mark.parametrize("layer", [LAYER, 20])  # an edit on each device
def test_two_gpu_rome_edit_and_revert(one_gpu, split_embedded, layer):  # pragma: no cover - GPU only
    m = split_embedded
    stats = mlp_key_second_moment(m, layer, n_tokens=4000, cache=False, progress=False)
    hp = {"layer": layer, "stats": stats, "mom2_ridge": 1e-3}
    original = digest(m)
    e = rome.edit(m, **hp)
    try:
        assert m.mlp_out_matrix(layer).device == m.device_of(layer)
        written = m.mlp_out_matrix(layer).detach().cpu()
        assert torch.equal(written, editing_rome.rank_one_update(e._original, e.u, e.v))
        ref = rome.edit(one_gpu, **hp)
        try:
            assert torch.allclose(e.u, ref.u, rtol=1e-3, atol=1e-5)
            assert torch.allclose(m.run(PROMPT), one_gpu.run(PROMPT), atol=1e-3)
        finally:
            ref.revert()
    finally:
        e.revert()
    assert digest(m) == original


@two_gpus
def test_two_gpu_auto_map_with_max_memory(one_gpu):  # pragma: no cover - GPU only
    # ~540 MB of float32 weights: at most 300 MB on cuda:0 puts the rest on cuda:1
    m = interp.load(device_map="auto", max_memory={0: "300MB", 1: "4GB"})
    assert len(m.devices) == 2 and set(m.device_map.values()) == {0, 1}
    toks = m.to_tokens(PROMPT)
    assert (m.run(toks) - one_gpu.run(toks)).abs().max().item() <= 1e-4
