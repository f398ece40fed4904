"""Sparse features: the dictionary's computation, the trainer (seeded, resumable bit for bit), the file layouts,
interventions, the quality table's arithmetic, the corpus — on tiny models, and one small run on the embedded one."""

import json
import math

import pytest
import torch

from interp.analyses.features import Dictionary, DictionarySet, Site, train_sae, train_transcoders
from interp.analyses.features import formats
from interp.analyses.features.card import FeatureScan, feature_card, scan_features
from interp.analyses.features.data import batches, counted, token_rows
from interp.analyses.features.dictionary import model_info
from interp.analyses.features.quality import evaluate_transcoders
from interp.analyses.features.train import TrainSettings, transcoder_sites
from interp.analyses.features.use import encode, feature_hooks, intervene, run_with_features, splice
from interp.core import texts


def _random(d_in, width, k, *, seed=0, skip=True, site=None, model=None, activation="topk", scales=(1.7, 0.6)):
    g = torch.Generator().manual_seed(seed)
    d = Dictionary(d_in, d_in, width, k=k if activation == "topk" else None, activation=activation, skip=skip,
                   site=site, model=model)
    with torch.no_grad():
        for p in d.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        if d.threshold is not None:
            d.threshold.copy_(torch.rand(width, generator=g) * 0.2)
        d.in_scale.fill_(scales[0])
        d.out_scale.fill_(scales[1])
    return d.eval()


def _perfect_sae(model, hook):
    """An SAE that rebuilds any input exactly: latents relu(x) and relu(-x), k = d of width 2d."""
    n = model.d_model
    d = Dictionary(n, n, 2 * n, k=n, site=Site.sae(model, hook), model=model_info(model))
    eye = torch.eye(n)
    with torch.no_grad():
        d.W_enc.copy_(torch.cat([eye, -eye], 1))
        d.W_dec.copy_(torch.cat([eye, -eye], 0))
    return d.eval()


# ============================================================================================== computation
def test_topk_keeps_exactly_k_and_decodes_through_k_rows():
    d = _random(16, 64, 5)
    with torch.no_grad():
        d.b_enc.fill_(10.0)  # every pre-activation positive: ReLU removes none of the k
    x = torch.randn(30, 16)
    a = d.encode(x)
    assert ((a > 0).sum(-1) == 5).all()
    z = x / d.in_scale
    pre = z @ d.W_enc + d.b_enc
    assert torch.equal(a.topk(5).indices.sort().values, pre.topk(5).indices.sort().values)
    dense = (a @ d.W_dec + d.b_dec + z @ d.W_skip) * d.out_scale  # the independent, dense computation
    torch.testing.assert_close(d(x), dense, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(d.decode(a, x), dense, rtol=1e-5, atol=1e-5)


def test_perfect_dictionary_spliced_leaves_the_logits_unchanged(tiny_llama):
    m = tiny_llama
    toks = m.to_tokens("The Eiffel Tower is in Paris")
    clean = m.forward(toks)
    for hook in ("blocks.0.hook_mlp_out", "blocks.1.hook_resid_mid"):
        d = _perfect_sae(m, hook)
        with splice(m, d):
            spliced = m.forward(toks)
        torch.testing.assert_close(spliced, clean, rtol=1e-5, atol=1e-5)
    # an imperfect one does change them (the splice is live)
    bad = _random(m.d_model, 128, 8, site=Site.transcoder(m, 0), model=model_info(m))
    with splice(m, bad):
        assert (m.forward(toks) - clean).abs().max() > 1e-3
    assert m.attached_hook_count() == 0


# ============================================================================================== checks
def test_bad_input_gets_clear_errors(tiny_llama, tiny_gpt2):
    m = tiny_llama
    with pytest.raises(ValueError, match="k=64 with width=64"):
        Dictionary(8, 8, 64, k=64)
    with pytest.raises(ValueError, match="k=64 with width=64"):
        train_transcoders(m, [0], width=64, k=64, cache=False, progress=False)
    with pytest.raises(ValueError, match="layer"):
        train_transcoders(m, [7], cache=False, progress=False)
    with pytest.raises(ValueError, match="unknown hook 'blocks.0.hook_resid_pst'.*did you mean"):
        train_sae(m, "blocks.0.hook_resid_pst", cache=False, progress=False)
    with pytest.raises(TypeError, match="unknown training settings"):
        train_transcoders(m, [0], widht=8, cache=False, progress=False)
    d = _random(m.d_model, 128, 8, site=Site.transcoder(m, 0), model=model_info(m))
    with pytest.raises(ValueError, match="trained on model .* the model given is"):
        d.check(tiny_gpt2)
    other = _random(32, 64, 4, site=Site("transcoder", 0, "blocks.0.mlp.hook_in", "blocks.0.hook_mlp_out"))
    with pytest.raises(ValueError, match="d_in is 32; the model's d_model is 64"):
        other.check(m)
    with pytest.raises(ValueError, match="feature 999"):
        feature_hooks(m, d, [(0, 999, "ablate", 0.0, None)])
    with pytest.raises(ValueError, match="mode='zero'"):
        feature_hooks(m, d, [(0, 1, "zero", 0.0, None)])
    with pytest.raises(ValueError, match="split='test'"):
        texts.text_documents("test")


# ============================================================================================== files
def test_save_load_is_bit_exact_and_an_altered_file_is_refused(tiny_llama, tmp_path):
    m = tiny_llama
    d = _random(m.d_model, 96, 6, site=Site.transcoder(m, 1), model=model_info(m))
    d.save(tmp_path / "d")
    back = Dictionary.load(tmp_path / "d")
    for k, v in d.state_dict().items():
        assert torch.equal(v, back.state_dict()[k]), k
    assert back.config() == d.config()
    side = json.loads((tmp_path / "d.json").read_text())
    side["meta"]["k"] = 7
    (tmp_path / "d.json").write_text(json.dumps(side))
    with pytest.raises(ValueError, match="disagree"):
        Dictionary.load(tmp_path / "d")


def test_sparsify_layout_round_trip(tiny_llama, tmp_path):
    m = tiny_llama
    ds = DictionarySet({L: _random(m.d_model, 96, 6, seed=L, site=Site.transcoder(m, L), model=model_info(m))
                        for L in (0, 1)})
    formats.save_dictionaries(ds, tmp_path / "sp", layout="sparsify")
    sub = tmp_path / "sp" / "layers.1.mlp"
    cfg = json.loads((sub / "cfg.json").read_text())
    assert cfg["transcode"] and cfg["skip_connection"] and cfg["num_latents"] == 96 and cfg["k"] == 6
    from safetensors.torch import load_file

    t = load_file(str(sub / "sae.safetensors"))
    assert t["encoder.weight"].shape == (96, 64) and t["W_dec"].shape == (96, 64) and t["W_skip"].shape == (64, 64)
    # sparsify's own forward, written out: relu, top-k, k decoder rows, x @ W_skip.T
    x = torch.randn(20, 64) * 2
    pre = torch.relu(x @ t["encoder.weight"].T + t["encoder.bias"])
    v, i = pre.topk(6)
    ref = (v[..., None] * t["W_dec"][i]).sum(1) + t["b_dec"] + x @ t["W_skip"].T
    torch.testing.assert_close(ds[1](x), ref, rtol=1e-4, atol=1e-4)
    back = formats.load_dictionaries(tmp_path / "sp", m)
    assert back.layers == [0, 1] and back[1].site == ds[1].site
    torch.testing.assert_close(back[1](x), ds[1](x), rtol=1e-4, atol=1e-4)
    # published folders are named model.layers.N.mlp and may carry sparsify's in_norm / out_norm
    from safetensors.torch import save_file

    pub = tmp_path / "pub" / "model.layers.0.mlp"
    pub.mkdir(parents=True)
    t0 = load_file(str(tmp_path / "sp" / "layers.0.mlp" / "sae.safetensors"))
    save_file({**t0, "in_norm": torch.tensor([8.0]), "out_norm": torch.tensor([8.0])}, str(pub / "sae.safetensors"))
    (pub / "cfg.json").write_text((tmp_path / "sp" / "layers.0.mlp" / "cfg.json").read_text())
    scaled = formats.load_sparsify(tmp_path / "pub", m)[0]
    # √64 / 8 = 1: the norms cancel here, so the outputs agree with the unnormalised file
    torch.testing.assert_close(scaled(x), ds[0](x), rtol=1e-4, atol=1e-4)


def test_saelens_and_gemmascope_layouts_round_trip(tiny_llama, tmp_path):
    m = tiny_llama
    x = torch.randn(20, 64)
    sae = _random(64, 128, 8, skip=False, site=Site.sae(m, "blocks.1.hook_resid_pre"), model=model_info(m),
                  scales=(1.3, 1.3))
    formats.save_saelens(sae, tmp_path / "sl", model_name="tiny")
    cfg = json.loads((tmp_path / "sl" / "cfg.json").read_text())
    assert cfg["architecture"] == "topk" and cfg["d_sae"] == 128 and cfg["metadata"]["hook_name"] == sae.site.read
    back = formats.load_dictionaries(tmp_path / "sl", m)
    torch.testing.assert_close(back(x), sae(x), rtol=1e-4, atol=1e-4)
    jr = _random(64, 128, None, activation="jumprelu", site=Site.transcoder(m, 1), model=model_info(m))
    formats.save_saelens(jr, tmp_path / "sl2")
    torch.testing.assert_close(formats.load_saelens(tmp_path / "sl2", m)(x), jr(x), rtol=1e-4, atol=1e-4)
    formats.save_dictionaries(jr, tmp_path / "gs" / "layer_1_width_128_l0_small_affine", layout="gemmascope")
    from safetensors.torch import load_file

    t = load_file(str(tmp_path / "gs" / "layer_1_width_128_l0_small_affine" / "params.safetensors"))
    assert set(t) == {"w_enc", "w_dec", "b_enc", "b_dec", "threshold", "affine_skip_connection"}
    # Gemma Scope's forward, written out: JumpReLU, then x @ affine_skip_connection (untransposed)
    pre = x @ t["w_enc"] + t["b_enc"]
    ref = (torch.relu(pre) * (pre > t["threshold"])) @ t["w_dec"] + t["b_dec"] + x @ t["affine_skip_connection"]
    torch.testing.assert_close(jr(x), ref, rtol=1e-4, atol=1e-4)
    gs = formats.load_dictionaries(tmp_path / "gs", m)
    torch.testing.assert_close(gs[1](x), jr(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="no topk transcoder architecture"):
        formats.save_saelens(_random(64, 96, 6, site=Site.transcoder(m, 0)), tmp_path / "bad")
    with pytest.raises(ValueError, match="layout='safetensors'; allowed: interp, sparsify"):
        formats.save_dictionaries(jr, tmp_path / "bad2", layout="safetensors")
    ds = DictionarySet({1: jr})
    formats.save_dictionaries(ds, tmp_path / "own")      # interp's own layout, read back by load_dictionaries
    torch.testing.assert_close(formats.load_dictionaries(tmp_path / "own", m)[1](x), jr(x), rtol=0, atol=0)


# ============================================================================================== training
def test_fused_adam_takes_the_foreach_steps_up_to_rounding(tiny_llama):
    """``adam="fused"`` is the same optimiser in one kernel: after 16 steps every weight agrees with the foreach
    run's to float32 rounding, the two runs have different cache keys, and a bad name is refused."""
    kw = dict(width=128, k=8, tokens=2500, rows=2, ctx=64, progress=False, cache=False)
    a = train_transcoders(tiny_llama, [1], **kw)
    b = train_transcoders(tiny_llama, [1], adam="fused", **kw)
    assert a.settings["steps"] == b.settings["steps"] >= 12 and b.settings["adam"] == "fused"
    for k, v in a[1].state_dict().items():
        torch.testing.assert_close(b[1].state_dict()[k], v, rtol=1e-4, atol=1e-5)
    assert not torch.equal(a[1].W_enc, a.start[1].W_enc)  # it trained, so the agreement is not two starts
    sites = transcoder_sites(tiny_llama, [1])
    assert TrainSettings(adam="fused").key(sites) != TrainSettings().key(sites)
    with pytest.raises(ValueError, match=r"adam='sgd'; allowed: foreach, fused"):
        TrainSettings(adam="sgd").check(tiny_llama.d_model)


def test_training_is_seeded_and_resumes_to_the_same_weights(tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    m = tiny_llama
    kw = dict(width=128, k=8, tokens=2500, rows=2, ctx=64, progress=False)
    whole = train_transcoders(m, [0, 1], cache=False, **kw)
    steps = []

    def stop(info):
        steps.append(info["step"])
        if info["step"] == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_transcoders(m, [0, 1], checkpoint_every=3, callback=stop, **kw)
    resumed = train_transcoders(m, [0, 1], checkpoint_every=3, **kw)
    for L in (0, 1):
        for k, v in whole[L].state_dict().items():
            assert torch.equal(v, resumed[L].state_dict()[k]), (L, k)
            assert torch.equal(whole.start[L].state_dict()[k], resumed.start[L].state_dict()[k]), ("start", L, k)
    assert whole.settings["steps"] == resumed.settings["steps"] > 7
    assert not torch.equal(whole.start[0].W_enc, whole[0].W_enc)  # the start is kept, not the end twice
    # cached: the same call loads instead of training; the decoder rows stay unit norm
    again = train_transcoders(m, [0, 1], callback=lambda i: pytest.fail("trained again"), **kw)
    assert torch.equal(again[1].W_enc, whole[1].W_enc) and torch.equal(again.start[1].W_dec, whole.start[1].W_dec)
    torch.testing.assert_close(whole[0].W_dec.norm(dim=1), torch.ones(128), rtol=1e-5, atol=1e-5)
    assert m.attached_hook_count() == 0


def test_an_interrupt_inside_a_step_keeps_the_last_checkpoint(tiny_llama, tmp_path, monkeypatch):
    """Ctrl-C after Adam's update but before the step is counted: writing that state would make the resumed run
    take the batch twice. The periodic checkpoint stands instead, and the resumed weights equal a whole run's."""
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    kw = dict(width=128, k=8, tokens=2500, rows=2, ctx=64, progress=False)
    whole = train_transcoders(tiny_llama, [0, 1], cache=False, **kw)
    adam_step, calls = torch.optim.Adam.step, []

    def step_then_interrupt(self, *a, **k):
        out = adam_step(self, *a, **k)
        calls.append(1)
        if len(calls) == 8:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(torch.optim.Adam, "step", step_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        train_transcoders(tiny_llama, [0, 1], checkpoint_every=3, **kw)
    monkeypatch.setattr(torch.optim.Adam, "step", adam_step)
    resumed = train_transcoders(tiny_llama, [0, 1], checkpoint_every=3, **kw)
    for L in (0, 1):
        for k, v in whole[L].state_dict().items():
            assert torch.equal(v, resumed[L].state_dict()[k]), (L, k)


def test_training_lowers_fvu_below_initialisation_on_tiny(tiny_llama):
    m = tiny_llama
    ds = train_transcoders(m, [1], width=128, k=8, tokens=6000, rows=2, ctx=64, lr=3e-3, cache=False,
                           progress=False)
    q = evaluate_transcoders(m, ds, tokens=1500, ce_tokens=400, rows=2, ctx=64, split="dev", progress=False)
    row = q.rows[0]
    assert row["fvu"] < row["fvu_init"]
    assert 0 <= row["dead_frac"] <= 1 and row["l0"] <= 8
    assert f"transcoders on {q.settings['tokens']:,} dev tokens" in q.summary()  # says which split it read
    s = q.stack
    assert s["positions"] > 0 and 0 <= s["top1_agreement"] <= 1
    assert s["top1_agreed"] / s["positions"] == s["top1_agreement"]
    # Wilson's bounds, independently: the shares p0 from which the observed share lies 1.96 standard errors of p0
    for p0 in s["top1_ci"]:
        assert abs(abs(s["top1_agreement"] - p0) - 1.96 * math.sqrt(p0 * (1 - p0) / s["positions"])) < 1e-9, s
    assert s["top1_ci"][0] <= s["top1_agreement"] <= s["top1_ci"][1]
    assert 400 <= q.settings["ce_tokens"] < 400 + 64  # the CE pass stops within one row of its budget
    # FVU, independently: every counted dev position of the same batches, one float64 sum
    d, ys, yh = ds[1], [], []
    seen = 0
    from interp.core.hooks import capture

    for toks in batches(m, "dev", rows=2, ctx=64):
        if seen >= 1500:
            break
        mask = counted(toks, m.bos_token_id)
        st, _ = capture(m, toks, [d.site.read, d.site.write], stop=True)
        x, y = st[d.site.read][mask], st[d.site.write][mask]
        ys.append(y.double())
        yh.append(d(x).double().detach())
        seen += int(mask.sum())
    y, h = torch.cat(ys), torch.cat(yh)
    fvu = float((y - h).pow(2).sum() / (y - y.mean(0)).pow(2).sum())
    assert abs(fvu - row["fvu"]) < 1e-6 * max(1, fvu)
    # dictionaries whose settings name BOS rows are scored on BOS rows: the same sum over those batches
    from dataclasses import replace

    qb = evaluate_transcoders(m, replace(ds, settings={**ds.settings, "bos_rows": True}), tokens=1500, ce_tokens=0,
                              rows=2, ctx=64, split="dev", baselines=False, progress=False)
    ys, yh, seen = [], [], 0
    for toks in batches(m, "dev", rows=2, ctx=64, bos_rows=True):
        if seen >= 1500:
            break
        assert bool((toks[:, 0] == m.bos_token_id).all())
        mask = counted(toks, m.bos_token_id)
        st, _ = capture(m, toks, [d.site.read, d.site.write], stop=True)
        ys.append(st[d.site.write][mask].double())
        yh.append(d(st[d.site.read][mask]).double().detach())
        seen += int(mask.sum())
    y, h = torch.cat(ys), torch.cat(yh)
    fvu_b = float((y - h).pow(2).sum() / (y - y.mean(0)).pow(2).sum())
    assert qb.settings["bos_rows"] is True and "bos_rows" not in q.settings
    assert abs(fvu_b - qb.rows[0]["fvu"]) < 1e-6 * max(1, fvu_b) and fvu_b != fvu
    back = type(q).from_json(json.loads(json.dumps(q.to_json())))   # a stored run's quality.json, read back
    assert back.summary() == q.summary() and back.to_frame().equals(q.to_frame())
    with pytest.raises(ValueError, match="not a DictionaryQuality"):
        type(q).from_json({"result": "LogitLens"})
    q.plot()


def test_cross_entropy_figures_equal_plain_forwards_with_the_writes_replaced(tiny_llama):
    """The CE pass (run from each layer on recorded blocks, only the counted targets unembedded) against whole
    forwards with the MLP write replaced by a hook at counted positions: clean CE, each layer's spliced and
    mean-ablated CE, and the top-1 agreement with both layers replaced."""
    import torch.nn.functional as F

    m = tiny_llama
    ds = train_transcoders(m, [0, 1], width=128, k=8, tokens=3000, rows=2, ctx=64, lr=3e-3, cache=False,
                           progress=False)
    q = evaluate_transcoders(m, ds, tokens=600, ce_tokens=150, rows=2, ctx=64, split="dev", progress=False)
    dicts = {L: ds[L].eval() for L in (0, 1)}
    # the mean ablation's write: each MLP write's mean over the counted positions of the first pass
    sums, seen = {L: 0.0 for L in dicts}, 0
    from interp.core.hooks import capture

    for toks in batches(m, "dev", rows=2, ctx=64):
        if seen >= 600:
            break
        mask = counted(toks, m.bos_token_id)
        st, _ = capture(m, toks, [dicts[L].site.write for L in dicts], stop=True)
        for L in dicts:
            sums[L] = sums[L] + st[dicts[L].site.write][mask].double().sum(0)
        seen += int(mask.sum())
    means = {L: (sums[L] / seen).float() for L in dicts}

    def run(toks, mask, replace):  # replace: {layer: fn(x [n, d]) -> write [n, d]} at counted positions
        xs, hooks = {}, []
        for L, fn in replace.items():
            d = dicts[L]
            hooks.append((d.site.read, lambda t, hook, L=L: xs.__setitem__(L, t.detach().clone())))

            def write(t, hook, L=L, fn=fn):
                t = t.clone()
                t[mask] = fn(xs[L][mask]).to(t.dtype)
                return t
            hooks.append((d.site.write, write))
        with torch.no_grad(), m.hooks(hooks):
            return m.forward(toks).float()

    ce, top = {}, {}
    ce_seen = 0
    for toks in batches(m, "dev", rows=2, ctx=64):
        if ce_seen >= 150:
            break
        toks = toks[: -(-(150 - ce_seen) // 63)]
        mask = counted(toks, m.bos_token_id)
        ok = mask[:, :-1] & (toks[:, 1:] != m.bos_token_id)
        variants = {"clean": {}, "all": {L: dicts[L] for L in dicts}}
        for L in dicts:
            variants[(L, "tc")] = {L: dicts[L]}
            variants[(L, "mean")] = {L: lambda x, L=L: means[L].expand(x.shape[0], -1)}
        for key, replace in variants.items():
            logits = run(toks, mask, replace)[:, :-1][ok]
            nll = F.cross_entropy(logits, toks[:, 1:][ok], reduction="sum")
            old = ce.get(key, (0.0, 0))
            ce[key] = (old[0] + float(nll), old[1] + int(ok.sum()))
            top.setdefault(key, []).append(logits.argmax(-1))
        ce_seen += int(mask.sum())
    c = {k: v[0] / v[1] for k, v in ce.items()}
    for row in q.rows:
        L = row["layer"]
        assert row["ce_clean"] == pytest.approx(c["clean"], rel=1e-5)
        assert row["ce_spliced"] == pytest.approx(c[(L, "tc")], rel=1e-5)
        assert row["ce_mean_ablated"] == pytest.approx(c[(L, "mean")], rel=1e-5)
        # the score from those three (on a tiny model mean - clean is small, so it is not compared across runs)
        want = (row["ce_mean_ablated"] - row["ce_spliced"]) / (row["ce_mean_ablated"] - row["ce_clean"])
        assert row["ce_score"] == pytest.approx(want, rel=1e-12)
    agreed = int((torch.cat(top["all"]) == torch.cat(top["clean"])).sum())
    assert (q.stack["top1_agreed"], q.stack["positions"]) == (agreed, ce["clean"][1])
    assert q.stack["ce_all_replaced"] == pytest.approx(c["all"], rel=1e-5)


def test_small_budget_run_on_the_embedded_model(embedded):
    m = embedded
    info = []
    ds = train_transcoders(m, [2], width=256, k=16, tokens=4000, cache=False, progress=False,
                           callback=info.append)
    assert len(info) == 4 and info[-1]["fvu"] < info[0]["fvu"]
    fa = encode(m, ds, "The Eiffel Tower is located in the city of")
    assert ((fa.acts[2] > 0).sum(-1) <= 16).all() and len(fa.tokens) == fa.acts[2].shape[0]


# ============================================================================================== using features
def test_interventions_keep_the_error_and_never_leak(tiny_llama):
    m = tiny_llama
    d = _random(m.d_model, 128, 8, site=Site.transcoder(m, 1), model=model_info(m))
    ds = DictionarySet({1: d})
    toks = m.to_tokens("Paris is the capital of France")
    clean = m.forward(toks)
    with intervene(m, ds, [(1, 3, "steer", 0.0, None)]):
        torch.testing.assert_close(m.forward(toks), clean, rtol=0, atol=0)
    fa = encode(m, ds, toks)
    feat = fa.active(1, 4)[0][0]
    # ablating one active feature at position 4 moves the MLP write by exactly -a·W_dec[f]·out_scale there
    _, cache = run_with_features(m, ds, toks, names=["blocks.1.hook_mlp_out"])
    a = cache["features.1"][0, 4, feat]
    with intervene(m, ds, [(1, feat, "ablate", 0.0, [4])]):
        _, changed = m.run_with_cache(toks, ["blocks.1.hook_mlp_out"])
    diff = changed["blocks.1.hook_mlp_out"][0] - cache["blocks.1.hook_mlp_out"][0]
    torch.testing.assert_close(diff[4], -a * d.W_dec[feat].detach() * d.out_scale, rtol=1e-4, atol=1e-5)
    assert diff[:4].abs().max() == 0 and diff[5:].abs().max() == 0
    before = m.attached_hook_count()
    with pytest.raises(RuntimeError, match="boom"):
        with intervene(m, ds, [(1, feat, "clamp", 9.0, None)]):
            raise RuntimeError("boom")
    assert m.attached_hook_count() == before == 0



def test_every_single_ablation_matches_its_own_intervention(tiny_llama):
    """ablation_effects runs its ablations as one batch with a per-row edit; each row must be what one ablation
    through intervene() (features) or a hook zeroing one hidden unit (neurons) gives, run alone."""
    from interp.analyses.features.ablation import ablation_effects

    m = tiny_llama
    d = _random(m.d_model, 128, 8, site=Site.transcoder(m, 1), model=model_info(m))
    ds = DictionarySet({1: d})
    text = "Paris is the capital of France"
    toks = m.to_tokens(text)
    fx = ablation_effects(m, ds, 1, text, batch=7)
    clean = m.forward(toks)[0, -1].detach()
    ans, riv = clean.topk(2).indices.tolist()
    assert fx.clean_margin == pytest.approx(float(clean[ans] - clean[riv]), abs=1e-5)
    n_active = int((encode(m, ds, text).acts[1][1:] > 0).sum())
    assert len(fx.frame) == n_active and fx.frame["margin_change"].is_monotonic_increasing
    for row in fx.frame.sample(6, random_state=0).itertuples():
        with intervene(m, ds, [(1, int(row.unit), "ablate", 0.0, [int(row.pos)])]), torch.no_grad():
            lg = m.forward(toks)[0, -1]
        assert row.margin_change == pytest.approx(float(lg[ans] - lg[riv]) - fx.clean_margin, abs=1e-4)
        assert row.flipped == (int(lg.argmax()) != ans)
    nx = ablation_effects(m, ds, 1, text, units="neurons")
    assert len(nx.frame) == (toks.shape[1] - 1) * d.k
    row = nx.frame.iloc[0]

    def zero(t, hook):
        t = t.clone()
        t[0, int(row.pos), int(row.unit)] = 0
        return t
    with m.hooks([("blocks.1.mlp.hook_post", zero)]), torch.no_grad():
        lg = m.forward(toks)[0, -1]
    assert row.margin_change == pytest.approx(float(lg[ans] - lg[riv]) - nx.clean_margin, abs=1e-4)
    assert m.attached_hook_count() == 0
    with pytest.raises(ValueError, match="units='heads'"):
        ablation_effects(m, ds, 1, text, units="heads")
    with pytest.raises(ValueError, match="not one token"):
        ablation_effects(m, ds, 1, text, answer=" the capital of France and Paris")

def test_feature_scan_merges_exactly_and_the_card_reads_it(tiny_llama):
    m = tiny_llama
    d = _random(m.d_model, 96, 6, site=Site.transcoder(m, 0), model=model_info(m))
    docs = [texts.render(m, x)[:200] for x in texts.text_documents("dev", seed=None)[:12]]
    whole = scan_features(m, d, 0, docs=docs, n_tokens=10_000, k=4)
    from interp.analyses.accumulate import scan

    # Split where scan's batches of 8 split, so each half runs the very batches `whole` ran: a batch of another
    # shape may differ in its last bits (MKL blocks by shape on some CPUs), and this tests the merge, not that.
    a = scan(m, docs[:8], FeatureScan.empty(d, None, 4), max_len=256)
    b = scan(m, docs[8:], FeatureScan.empty(d, None, 4), max_len=256, doc_offset=8)
    merged = a.merge(b)
    assert merged.topk.equal(whole.topk)
    assert torch.equal(merged.fires, whole.fires) and torch.equal(merged.hist, whole.hist)
    assert whole.n_tokens == sum(len(m.encode(t, prepend_bos=False)) for t in docs)
    f = int(whole.fires.argmax())
    card = feature_card(m, d, 0, f, docs=docs, scan_state=whole)
    assert card.density == pytest.approx(float(whole.fires[f]) / whole.n_tokens)
    assert len(card.to_frame()) == 4 and (card.to_frame()["activation"].diff().dropna() <= 0).all()
    assert sum(card.hist) == int(whole.fires[f])
    back = FeatureScan.from_state_dict(whole.state_dict(), d)
    assert back.topk.equal(whole.topk)
    card.to_json()
    card.plot()


# ============================================================================================== corpus
def test_training_text_splits_are_disjoint_deduplicated_and_stable(embedded):
    counts = texts.describe()
    assert set(counts) == set(texts.SPLITS)
    n = {s: sum(v["documents"] for v in counts[s].values()) for s in counts}
    total = sum(n.values())
    assert 0.06 < n["heldout"] / total < 0.08 and 0.04 < n["dev"] / total < 0.06
    # data/README.md's data card quotes these counts: each split's total and its wiki / gutenberg / chat parts
    import re
    from pathlib import Path

    card = (Path(__file__).parent.parent / "data" / "README.md").read_text()
    for split in texts.SPLITS:
        m = re.search(rf"^\| {split} \| ([\d,]+) \(([\d,]+) / ([\d,]+) / ([\d,]+)\)", card, re.M)
        assert m, f"data/README.md has no row for the {split} split"
        shown = [int(x.replace(",", "")) for x in m.groups()]
        assert shown == [n[split]] + [counts[split].get(src, {}).get("documents", 0)
                                      for src in ("wiki", "gutenberg", "chat")], (split, shown)
    ids = {s: {d.id for d in texts.text_documents(s, seed=None)} for s in texts.SPLITS}
    assert not (ids["train"] & ids["dev"]) and not (ids["train"] & ids["heldout"]) and not (ids["dev"] & ids["heldout"])
    contents = [texts._norm(d.content) for s in texts.SPLITS for d in texts.text_documents(s, seed=None)]
    assert len(contents) == len(set(contents))
    assert {d.source for d in texts.text_documents("train")} == set(texts.SOURCES)
    chat = next(d for d in texts.text_documents("dev") if d.is_chat)
    rendered = texts.render(embedded, chat)
    assert "<|im_start|>user" in rendered and chat.messages[-1][1] in rendered
    # the token stream resumes at a row with the same rows
    rows = [r for _, r in zip(range(6), token_rows(embedded, "dev", ctx=32))]
    later = [r for _, r in zip(range(2), token_rows(embedded, "dev", ctx=32, start_row=4))]
    assert torch.equal(rows[4], later[0]) and torch.equal(rows[5], later[1])


def test_the_data_card_token_counts_are_the_splits(embedded):
    """data/README.md's token column (each document as BOS + its rendered text, SmolLM2's tokenizer) and its count
    of the Wikipedia leads alone (text only, no BOS), tokenized here."""
    import re
    from pathlib import Path

    card = " ".join((Path(__file__).parent.parent / "data" / "README.md").read_text().split())
    tok = embedded.tokenizer

    def n_tokens(text):
        return len(tok(text, add_special_tokens=False).input_ids)

    for split in texts.SPLITS:
        m = re.search(rf"\| {split} \| [\d,]+ \([\d, /]+\) \| ([\d,]+) \|", card)
        assert m, f"data/README.md has no token count for the {split} split"
        docs = texts.text_documents(split, seed=None)
        assert int(m.group(1).replace(",", "")) == sum(1 + n_tokens(texts.render(embedded, d)) for d in docs), split
    m = re.search(r"The Wikipedia leads alone are ([\d,]+) tokens \(([\d,]+) documents, text only, no BOS", card)
    assert m, "data/README.md no longer gives the Wikipedia leads' token count"
    from interp.core.corpus import wiki_documents

    wiki = wiki_documents()  # the package's paragraphs as shipped (the splits keep 7,456 of them as plain text)
    assert int(m.group(2).replace(",", "")) == len(wiki)
    assert int(m.group(1).replace(",", "")) == sum(n_tokens(d.text) for d in wiki)


# ============================================================================================== ranks
def test_two_ranks_end_with_the_weights_of_one_process(embedded, tmp_path):
    """``python -m interp.dist features --nproc 2``: two gloo ranks, each running half the rows of every batch,
    end with the weights of one process given the same global batch (float tolerance: sums in another order),
    dead latents restarted from the global batch's tokens included."""
    import os
    import subprocess
    import sys

    out = tmp_path / "ranks"
    args = ["--layers", "1,4", "--width", "768", "--k", "12", "--tokens", "4000", "--rows", "4", "--ctx", "128",
            "--dead-tokens", "1", "--resample-every", "500"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "INTERP_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "interp.dist", "features", *args, "--no-cache", "--out", str(out),
                           "--nproc", "2"], capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("{")))
    assert info["world_size"] == 2 and info["steps"] >= 6 and sum(info["resampled"].values()) > 0
    ranks = DictionarySet.load(out)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = train_transcoders(embedded, [1, 4], width=768, k=12, tokens=4000, rows=4, ctx=128, cache=False,
                                progress=False, dead_tokens=1, resample_every=500)
    finally:
        torch.set_num_threads(before)
    assert one.settings["steps"] == info["steps"] and one.settings["resampled"] == info["resampled"]
    for L in (1, 4):
        for k, v in one[L].state_dict().items():
            diff = (ranks[L].state_dict()[k] - v).abs().max()
            assert diff <= 1e-5 + 1e-4 * v.abs().max(), (L, k, float(diff), float(v.abs().max()))
        for k, v in one.start[L].state_dict().items():
            assert (ranks.start[L].state_dict()[k] - v).abs().max() <= 1e-6 * (1 + v.abs().max()), ("start", L, k)


def test_gemma_transcoders_read_and_write_where_gemma_scope_does(gemma):
    """On Gemma 3 a transcoder reads the pre-feedforward norm's output and predicts the post-feedforward norm's
    output (what the residual receives): the same points as Gemma Scope 2's hf_hook_point_in / _out."""
    from interp.core.hooks import capture

    site = Site.transcoder(gemma, 3)
    blk, seen = gemma.hf_model.model.layers[3], {}
    handles = [blk.pre_feedforward_layernorm.register_forward_hook(lambda m, i, o: seen.__setitem__("in", o)),
               blk.post_feedforward_layernorm.register_forward_hook(lambda m, i, o: seen.__setitem__("out", o))]
    try:
        st, _ = capture(gemma, gemma.to_tokens("The Eiffel Tower is in Paris"), [site.read, site.write])
    finally:
        for h in handles:
            h.remove()
    assert torch.equal(st[site.read], seen["in"].detach()) and torch.equal(st[site.write], seen["out"].detach())


def test_bos_rows_start_every_row_with_bos_and_keep_the_stream(embedded):
    """``bos_rows``: every row starts with BOS; without the BOS tokens the rows hold the plain rows' tokens in the
    same order (nothing dropped or repeated); a resumed stream gives the same rows; the cache key of settings
    without it is the key they had before the field existed, and differs with it."""
    from dataclasses import asdict
    import hashlib
    import json


    bos = embedded.bos_token_id
    plain_rows = [r for _, r in zip(range(12), token_rows(embedded, "dev", ctx=32))]
    assert sum(int(r[0] != bos) for r in plain_rows) >= 5                    # plain rows do start mid-document
    plain = torch.cat(plain_rows)
    rows = [r for _, r in zip(range(12), token_rows(embedded, "dev", ctx=32, bos_rows=True))]
    assert all(int(r[0]) == bos and len(r) == 32 for r in rows)
    text = torch.cat(rows)
    a, b = plain[plain != bos], text[text != bos]
    assert torch.equal(a[: len(b)], b) and len(b) > 0.9 * len(a)
    later = [r for _, r in zip(range(2), token_rows(embedded, "dev", ctx=32, start_row=4, bos_rows=True))]
    assert torch.equal(rows[4], later[0]) and torch.equal(rows[5], later[1])
    sites = transcoder_sites(embedded, [3])
    s = TrainSettings()
    later_fields = ("bos_rows", "adam", "resample_every", "resample_until", "aux_act")
    old = {k: v for k, v in asdict(s).items() if k not in later_fields}
    blob = json.dumps({"settings": old, "sites": {str(k): asdict(v) for k, v in sites.items()}}, sort_keys=True,
                      default=str).encode()
    assert s.key(sites).endswith(hashlib.sha256(blob).hexdigest()[:10])
    assert TrainSettings(bos_rows=True).key(sites) != s.key(sites)
    with pytest.raises(ValueError, match=r"bos_rows=1; allowed: True or False"):
        TrainSettings(bos_rows=1).check(embedded.d_model)
