"""Second-moment statistics of MLP keys (interp.stats), checked against direct computations from model.cache."""

import json

import pytest
import torch

from interp.analyses.stats import KeyStats, mlp_key_second_moment
from interp.core.paths import file_sha256

TEXTS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris.",
    "Rome is the capital city of Italy.",
    "A short one.",
    "Photosynthesis converts light energy into chemical energy in plants and algae.",
    "The violin is a wooden string instrument.",
    "Mount Everest is the highest mountain above sea level, in the Himalayas.",
    "Jazz originated in New Orleans.",
    "The Pacific Ocean is the largest and deepest of the oceans.",
    "Chess is a board game for two players.",
    "Tokyo is the capital of Japan and its most populous city.",
    "Water boils at one hundred degrees Celsius at sea level.",
]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))


def direct_moments(model, layer, texts, max_len=128):
    """Σ k kᵀ, Σ k, n from model.cache over every non-BOS, non-padding token (independent of interp.stats)."""
    name = f"blocks.{layer}.mlp.hook_post"
    rows = []
    for text in texts:  # one text at a time: no padding involved at all
        toks = model.to_tokens(text)[:, :max_len]
        rows.append(model.cache(toks, [name])[name][0, 1:].double())
    k = torch.cat(rows)
    return k.T @ k, k.sum(0), k.shape[0]


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_gpt2"])
def test_mom2_equals_direct_computation(fixture, request):
    model = request.getfixturevalue(fixture)
    stats = mlp_key_second_moment(model, 1, n_tokens=None, corpus=TEXTS, batch_size=4, cache=False, progress=False)
    mom, s, n = direct_moments(model, 1, TEXTS)
    assert stats.count == n
    assert stats.mom2.dtype == torch.float64 and stats.mom2.shape == (model.d_mlp, model.d_mlp)
    # the batched float32 forward differs from one-text forwards only by float32 rounding
    torch.testing.assert_close(stats.mom2, mom / n, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(stats.sum, s, rtol=1e-5, atol=1e-7)
    assert torch.allclose(stats.mom2, stats.mom2.T)
    torch.testing.assert_close(stats.covariance(), mom / n - torch.outer(s / n, s / n), rtol=1e-4, atol=1e-9)


def test_gpt2_key_is_activation_of_pre(tiny_gpt2):
    """On GPT-2 the key is act(pre) = GELU(x W_in + b): check the hook against the module's own activation."""
    name_pre, name_post = "blocks.0.mlp.hook_pre", "blocks.0.mlp.hook_post"
    c = tiny_gpt2.cache(tiny_gpt2.to_tokens(TEXTS[0]), [name_pre, name_post])
    act = tiny_gpt2.hf_model.config.activation_function
    from transformers.activations import ACT2FN

    torch.testing.assert_close(c[name_post], ACT2FN[act](c[name_pre]))


def test_token_budget_is_exact_and_bos_excluded(tiny_llama):
    stats = mlp_key_second_moment(tiny_llama, 0, n_tokens=100, corpus=TEXTS, batch_size=4, cache=False,
                                  progress=False)
    assert stats.count == 100
    # the first 100 non-BOS tokens in document order
    lengths = [n - 1 for n in tiny_llama.lengths(TEXTS)]
    rows, left = [], 100
    for text, n in zip(TEXTS, lengths):
        take = min(n, left)
        if take == 0:
            break
        rows.append(tiny_llama.cache(tiny_llama.to_tokens(text), ["blocks.0.mlp.hook_post"])
                    ["blocks.0.mlp.hook_post"][0, 1:1 + take].double())
        left -= take
    k = torch.cat(rows)
    torch.testing.assert_close(stats.sum, k.sum(0), rtol=1e-5, atol=1e-7)


def test_shards_merge_to_one_pass(tiny_llama):
    one = mlp_key_second_moment(tiny_llama, 1, n_tokens=None, n_docs=24, batch_size=4, cache=False,
                                progress=False)
    a = mlp_key_second_moment(tiny_llama, 1, n_tokens=None, offset=0, n_docs=12, batch_size=4, cache=False,
                              progress=False)
    b = mlp_key_second_moment(tiny_llama, 1, n_tokens=None, offset=12, n_docs=12, batch_size=4, cache=False,
                              progress=False)
    merged = a.merge(b)
    assert merged.count == one.count == a.count + b.count
    # shard boundaries on batch boundaries: same activations, only the float64 summation order differs
    torch.testing.assert_close(merged.moment_sum, one.moment_sum, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(merged.sum, one.sum, rtol=1e-12, atol=1e-12)
    assert len(merged.meta["shards"]) == 2
    with pytest.raises(ValueError, match="layer 0"):
        merged.merge(mlp_key_second_moment(tiny_llama, 0, n_tokens=50, n_docs=2, cache=False, progress=False))


def test_cache_roundtrip_and_truncated_file_recomputed(tiny_llama, tmp_path):
    kw = {"n_tokens": 300, "batch_size": 4, "progress": False}
    first = mlp_key_second_moment(tiny_llama, 1, **kw)
    files = sorted((tmp_path / "cache" / "stats").rglob("*.safetensors"))
    assert len(files) == 1 and files[0].with_suffix(".json").exists()
    assert json.loads(files[0].with_suffix(".json").read_text())["meta"]["layer"] == 1
    again = mlp_key_second_moment(tiny_llama, 1, **kw)
    assert torch.equal(again.moment_sum, first.moment_sum) and again.count == first.count
    # truncate the tensor file: detected, recomputed (with a warning), file rewritten whole
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning, match="truncated"):
        redone = mlp_key_second_moment(tiny_llama, 1, **kw)
    assert torch.equal(redone.moment_sum, first.moment_sum)
    # rewritten whole: the file loads, holds the same sums and matches its sidecar's hash (its size can differ
    # from the first file's by a few bytes, since the header's metadata holds a wall time)
    reread = KeyStats.load(files[0])
    assert torch.equal(reread.moment_sum, first.moment_sum) and reread.count == first.count
    sidecar = json.loads(files[0].with_suffix(".json").read_text())
    assert sidecar["sha256"] == file_sha256(files[0]) and sidecar["bytes"] == files[0].stat().st_size
    with pytest.raises(ValueError, match="truncated"):
        files[0].write_bytes(data[:-8])
        KeyStats.load(files[0])


def test_resume_after_interrupt_equals_uninterrupted(tiny_llama, tmp_path, monkeypatch):
    kw = {"n_tokens": 4000, "batch_size": 4, "progress": False, "checkpoint_every": 2}
    calls = []

    def interrupt_after_5(info):
        calls.append(info)
        if info["batches"] == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        mlp_key_second_moment(tiny_llama, 1, callback=interrupt_after_5, **kw)
    partial = list((tmp_path / "cache" / "stats").rglob("*.partial.safetensors"))
    assert len(partial) == 1
    saved = KeyStats.load(partial[0])
    assert saved.meta["docs_consumed"] == calls[-1]["docs_consumed"] == 20 and saved.count == calls[-1]["count"]

    seen = []
    resumed = mlp_key_second_moment(tiny_llama, 1, callback=seen.append, **kw)
    assert seen[0]["docs_consumed"] == 24  # continued after the 20 documents already consumed
    assert not list((tmp_path / "cache" / "stats").rglob("*.partial.*"))

    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "other"))
    straight = mlp_key_second_moment(tiny_llama, 1, **kw)
    assert resumed.count == straight.count == 4000
    assert torch.equal(resumed.moment_sum, straight.moment_sum)
    assert torch.equal(resumed.sum, straight.sum)


def test_state_dict_roundtrip_and_solve(tiny_llama, tmp_path):
    stats = mlp_key_second_moment(tiny_llama, 0, n_tokens=2000, cache=False, progress=False)
    back = KeyStats.from_state_dict(stats.state_dict())
    assert torch.equal(back.moment_sum, stats.moment_sum) and back.count == stats.count
    json.dumps(stats.state_dict()["meta"])
    saved = KeyStats.load(stats.save(tmp_path / "s.safetensors"))
    assert torch.equal(saved.moment_sum, stats.moment_sum) and saved.layer == 0
    k = torch.randn(3, tiny_llama.d_mlp, dtype=torch.float64)
    x = stats.solve(k)
    torch.testing.assert_close(x @ stats.mom2.T, k, rtol=1e-8, atol=1e-8)
    ridge = float(stats.mom2.diagonal().mean())
    xr = stats.solve(k[0], ridge=ridge)
    torch.testing.assert_close(stats.mom2 @ xr + ridge * xr, k[0], rtol=1e-8, atol=1e-8)
    ev = torch.linalg.eigvalsh(stats.mom2)
    assert stats.condition_number() == pytest.approx(float(ev[-1] / ev[0]), rel=1e-6)
    frame = stats.to_frame()
    assert len(frame) == tiny_llama.d_mlp
    torch.testing.assert_close(torch.tensor(frame["second_moment"].to_numpy()), stats.mom2.diagonal())
    assert stats.plot(out=tmp_path / "c.png") is not None and (tmp_path / "c.png").stat().st_size > 0


def test_singular_c_asks_for_ridge(tiny_llama):
    stats = mlp_key_second_moment(tiny_llama, 0, n_tokens=20, cache=False, progress=False)  # 20 < d_mlp
    with pytest.raises(ValueError, match="ridge"):
        stats.solve(torch.ones(tiny_llama.d_mlp))
    assert stats.solve(torch.ones(tiny_llama.d_mlp), ridge=1e-3).isfinite().all()


@pytest.mark.parametrize("kwargs, word", [
    ({"layer": 7}, "layer 7"),
    ({"layer": 0, "n_tokens": 0}, "n_tokens=0"),
    ({"layer": 0, "corpus": "books"}, "'books'"),
    ({"layer": 0, "batch_size": 0}, "batch_size=0"),
    ({"layer": 0, "corpus": []}, "corpus"),
    ({"layer": 0, "offset": 10**6}, "offset=1000000"),
])
def test_bad_input(tiny_llama, kwargs, word):
    with pytest.raises(ValueError, match=word):
        mlp_key_second_moment(tiny_llama, cache=False, progress=False, **kwargs)


def test_stats_on_embedded_model_small(embedded):
    """The real model: hook_post is silu(gate) * up, and the collected moments match model.cache."""
    name = "blocks.3.mlp.hook_post"
    c = embedded.cache(embedded.to_tokens(TEXTS[1]), ["blocks.3.mlp.hook_pre", "blocks.3.mlp.hook_pre_linear", name])
    torch.testing.assert_close(c[name], torch.nn.functional.silu(c["blocks.3.mlp.hook_pre"])
                               * c["blocks.3.mlp.hook_pre_linear"], rtol=1e-5, atol=1e-5)
    stats = mlp_key_second_moment(embedded, 3, n_tokens=None, corpus=TEXTS[:4], cache=False, progress=False)
    mom, _, n = direct_moments(embedded, 3, TEXTS[:4])
    assert stats.count == n
    torch.testing.assert_close(stats.mom2, mom / n, rtol=1e-4, atol=1e-7)
