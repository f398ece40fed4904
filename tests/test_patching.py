"""Activation, attribution and path patching: invariants, hand-written patches as the independent check, and the
hand-set induction toy (previous-token head -> induction head) as ground truth."""

import json

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

import interp
from interp.analyses.induction import handmade_induction_model
from interp.analyses.patching import PatchingResult, kl_to_clean, logit_diff, prob
from interp.core.model import Model

CLEAN = ["The cat sat on the mat", "A bird flew over"]
CORRUPT = ["The dog sat on the mat", "A bird drew over"]


@pytest.fixture(scope="module")
def toy():
    return Model.from_module(handmade_induction_model())


def toy_pairs(n=4, half=6, seed=0):
    """[BOS] R R[:-1] -> R[-1]; corrupted: the token before R[-1]'s first occurrence replaced by a token x found
    nowhere else, so the induction head has nothing to match and rests on BOS. Denoising either head of the
    circuit restores the answer completely: L1H0 carries the copy, and L0H0's output is the only thing that
    differs at the answer's earlier position."""
    g = torch.Generator().manual_seed(seed)
    clean, corr, ans, wrong = [], [], [], []
    for _ in range(n):
        perm = torch.randperm(15, generator=g)[:half + 1] + 1  # distinct ordinary tokens (0 is BOS)
        r, x = perm[:half], perm[half]
        rc = r.clone()
        rc[half - 2] = x
        clean.append(torch.cat([torch.tensor([0]), r, r[:-1]]))
        corr.append(torch.cat([torch.tensor([0]), rc, r[:-1]]))
        ans.append(int(r[-1]))
        wrong.append(int(x))
    return torch.stack(clean), torch.stack(corr), ans, wrong


def last_metric(model, logits_fn, tokens, a, w):
    """logit(a) - logit(w) at each row's last token, from a plain model.run (the independent computation)."""
    logits = logits_fn(tokens)
    lengths = torch.tensor(model.lengths(tokens)) if isinstance(tokens, list) else None
    last = (lengths - 1) if lengths is not None else torch.full((logits.shape[0],), logits.shape[1] - 1)
    rows = logits[torch.arange(logits.shape[0]), last]
    return rows[:, a] - rows[:, w]


# ---------------------------------------------------------------------------------------------- bad input
def test_bad_input_errors_name_the_value_and_what_is_allowed(tiny_llama):
    m = tiny_llama
    with pytest.raises(ValueError, match=r"answer ' a' is 2 tokens \[' ', 'a'\]"):
        interp.activation_patching(m, CLEAN, CORRUPT, logit_diff(" a", "b"))
    with pytest.raises(ValueError, match=r"pair 1: the clean prompt is 17 tokens and the corrupted one 16 "
                                         r"\(first differing token at position 8\)"):
        interp.activation_patching(m, CLEAN, ["The dog sat on the mat", "A bird ran over"], logit_diff("a", "b"))
    with pytest.raises(ValueError, match="over='neurons' not known; allowed: resid_pre, resid_mid.*head_k"):
        interp.activation_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), over="neurons")
    with pytest.raises(ValueError, match="unknown hook name 'blocks.0.hook_resid_pr'"):
        interp.activation_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), over=["blocks.0.hook_resid_pr"])
    with pytest.raises(ValueError, match=r"one value per prompt, shape \[2\]"):
        interp.activation_patching(m, CLEAN, CORRUPT, lambda logits, b: logits[:, :2], positions="last")
    with pytest.raises(ValueError, match="returned float"):
        interp.activation_patching(m, CLEAN, CORRUPT, lambda logits, b: 1.0, positions="last")
    with pytest.raises(ValueError, match="positions='each' needs prompts of one length"):
        interp.activation_patching(m, ["ab", "abc"], ["cb", "cbc"], logit_diff("a", "b"))
    with pytest.raises(ValueError, match="direction 'sideways' not known"):
        interp.activation_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), direction="sideways")
    with pytest.raises(ValueError, match="logit_diff needs answer tokens"):
        interp.activation_patching(m, CLEAN, CORRUPT, positions="last")
    with pytest.raises(ValueError, match="3 answers for 2 prompt pairs"):
        interp.activation_patching(m, CLEAN, CORRUPT, prob(["a", "b", "c"]), positions="last")
    assert m.attached_hook_count() == 0


def test_a_metric_failing_mid_run_leaves_no_hook(toy):
    clean, corr, _, _ = toy_pairs(2)
    calls = []

    def bad(logits, batch):
        calls.append(1)
        if len(calls) > 2:
            raise RuntimeError("boom")
        return logits[:, 0]
    with pytest.raises(RuntimeError, match="boom"):
        interp.activation_patching(toy, clean, corr, bad, over="heads", batch_size=2)
    assert toy.attached_hook_count() == 0


# ---------------------------------------------------------------------------------------------- invariants
def test_whole_residual_gives_one_and_unchanged_activations_give_zero(tiny_llama):
    m, met = tiny_llama, logit_diff("a", "b")
    r = interp.activation_patching(m, CLEAN, CORRUPT, met, over="resid_pre", positions="all", layers=[0])
    assert float(r.values[0, 0]) == pytest.approx(1.0, abs=1e-6)
    r = interp.activation_patching(m, CLEAN, CORRUPT, met, over="resid_post", positions="last",
                                   layers=[m.n_layers - 1])
    assert float(r.values[0, 0]) == pytest.approx(1.0, abs=1e-6)
    # Position 0 (BOS) and the tokens before the first difference are the same in both runs.
    r = interp.activation_patching(m, CLEAN[:1], CORRUPT[:1], met, over="resid_pre")
    assert r.values.shape == (m.n_layers, 23) and r.col_labels[5] == "c/d"
    assert torch.equal(r.values[:, :5], torch.zeros(m.n_layers, 5))
    assert torch.equal(r.raw[:, 0, 0], r.corrupted.expand(m.n_layers))
    # Heads patched only at positions where both runs agree (BOS and the first token)
    r = interp.activation_patching(m, CLEAN, CORRUPT, met, over="heads", positions=[0, 1])
    assert torch.equal(r.values, torch.zeros(m.n_layers, m.n_heads))
    r = interp.activation_patching(m, CLEAN, CORRUPT, met, over="pattern", positions=[0])
    assert torch.equal(r.values, torch.zeros(m.n_layers, m.n_heads))
    # Noising: the clean run with nothing changed scores 1.
    r = interp.activation_patching(m, CLEAN[:1], CORRUPT[:1], met, over="resid_mid", direction="noise")
    assert torch.equal(r.values[:, 0], torch.ones(m.n_layers))


def test_clean_equal_to_corrupted_gives_nan_with_a_note(tiny_llama):
    r = interp.activation_patching(tiny_llama, CLEAN, CLEAN, logit_diff("a", "b"), over="heads")
    assert torch.isnan(r.values).all()
    assert "undefined" in r.note and "undefined" in r.summary()
    assert torch.equal(r.raw, r.clean.expand_as(r.raw))  # every patched run scores the clean value
    assert r.top(3) == []
    json.dumps(r.to_json())


# ---------------------------------------------------------------------------------------------- independent checks
@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_grid_equals_a_hand_written_patch(tiny_llama, direction):
    m, a, w = tiny_llama, 97, 98  # "a", "b"
    r = interp.activation_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), over="resid_pre", positions="last",
                                   direction=direction)
    r2 = interp.activation_patching(m, CLEAN[:1], CORRUPT[:1], logit_diff("a", "b"), over="attn_out",
                                    direction=direction)
    rh = interp.activation_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), over="heads", direction=direction)
    src, base = (CLEAN, CORRUPT) if direction == "denoise" else (CORRUPT, CLEAN)
    lengths = m.lengths(CLEAN)
    clean_v = last_metric(m, m.run, CLEAN, a, w).mean()
    corr_v = last_metric(m, m.run, CORRUPT, a, w).mean()
    for layer in (0, 1):
        name = f"blocks.{layer}.hook_resid_pre"
        acts = m.cache(src, [name])[name]

        def put(t, hook):
            out = t.clone()
            for i, n in enumerate(lengths):
                out[i, n - 1] = acts[i, n - 1]
            return out
        with m.hooks([(name, put)]):
            patched = last_metric(m, m.run, base, a, w).mean()
        expect = (patched - corr_v) / (clean_v - corr_v)
        assert float(r.values[layer, 0]) == pytest.approx(float(expect), abs=1e-4)

        # one head of one layer, all positions
        z = f"blocks.{layer}.attn.hook_z"
        zs = m.cache(src, [z])[z]
        for head in (0, 3):
            def put_head(t, hook):
                out = t.clone()
                out[:, :, head] = zs[:, :, head].to(t.dtype)
                return out
            with m.hooks([(z, put_head)]):
                patched = last_metric(m, m.run, base, a, w).mean()
            expect = (patched - corr_v) / (clean_v - corr_v)
            assert float(rh.values[layer, head]) == pytest.approx(float(expect), abs=1e-4)

    # one position of attn_out, one pair
    name = "blocks.1.hook_attn_out"
    acts = m.cache(src[:1], [name])[name]

    def put7(t, hook):
        out = t.clone()
        out[:, 7] = acts[:, 7]
        return out
    with m.hooks([(name, put7)]):
        patched = float(last_metric(m, m.run, base[:1], a, w))
    c1, x1 = float(last_metric(m, m.run, CLEAN[:1], a, w)), float(last_metric(m, m.run, CORRUPT[:1], a, w))
    assert float(r2.values[1, 7]) == pytest.approx((patched - x1) / (c1 - x1), abs=1e-4)
    assert float(r2.raw[1, 7, 0]) == pytest.approx(patched, abs=1e-5)


def test_grouped_query_keys_are_patched_per_kv_group(tiny_llama):
    m = tiny_llama  # 4 query heads, 2 KV groups
    r = interp.activation_patching(m, CLEAN[:1], CORRUPT[:1], prob("a"), over="head_k")
    assert r.values.shape == (m.n_layers, 2) and r.col_name == "kv_group"
    assert r.kv_readers == {0: [0, 1], 1: [2, 3]}
    name = "blocks.0.attn.hook_k"
    ks = m.cache(CLEAN[:1], [name])[name]

    def put(t, hook):
        out = t.clone()
        out[:, :, 1] = ks[:, :, 1]
        return out
    p = lambda x: torch.softmax(m.run(x)[0, -1], -1)[97]
    with m.hooks([(name, put)]):
        patched = p(CORRUPT[:1])
    expect = (patched - p(CORRUPT[:1])) / (p(CLEAN[:1]) - p(CORRUPT[:1]))
    assert float(r.values[0, 1]) == pytest.approx(float(expect), abs=1e-4)


def test_kl_metric_and_prompt_pairs_input(tiny_llama):
    from interp.analyses.patching import induction_pairs

    pp = induction_pairs(tiny_llama, 3, seq_len=5, seed=1)
    r = interp.activation_patching(tiny_llama, pp, over="resid_pre", positions="all", layers=[0])
    assert float(r.values[0, 0]) == pytest.approx(1.0, abs=1e-6)
    assert r.metric == "logit_diff"
    k = interp.activation_patching(tiny_llama, pp, metric=kl_to_clean(), over="resid_pre", positions=[0, -1])
    assert float(k.clean.abs().max()) < 1e-6 and float(k.corrupted.min()) > 0
    assert torch.equal(k.values[:, 0], torch.zeros(tiny_llama.n_layers))  # BOS: nothing changes


# ---------------------------------------------------------------------------------------------- the result object
def test_result_protocol(tiny_llama, tmp_path):
    r = interp.activation_patching(tiny_llama, CLEAN, CORRUPT, logit_diff("a", "b"), over="heads")
    assert isinstance(r, PatchingResult)
    frame = r.to_frame()
    assert len(frame) == tiny_llama.n_layers * tiny_llama.n_heads
    assert list(frame.columns) == ["layer", "head", "label", "value", "raw"]
    top = r.top(3)
    assert len(top) == 3 and abs(top[0][2]) >= abs(top[1][2]) >= abs(top[2][2])
    assert abs(top[0][2]) == pytest.approx(float(r.values.abs().max()))
    doc = json.loads(json.dumps(r.to_json()))
    assert np.allclose(doc["values"], r.values.numpy())
    fig = r.plot(out=tmp_path / "p.png")
    assert isinstance(fig, Figure) and (tmp_path / "p.png").stat().st_size > 0
    lo, hi = fig.axes[0].images[0].get_clim()
    assert lo == -hi  # diverging, centred at 0
    assert r.summary() in repr(r)


# ---------------------------------------------------------------------------------------------- ground truth: toy
def test_toy_exhaustive_head_patching_finds_exactly_the_circuit(toy):
    clean, corr, a, w = toy_pairs()
    r = interp.activation_patching(toy, clean, corr, logit_diff(a, w), over="heads")
    assert float(r.clean.mean()) > 4.5 and float(r.corrupted.abs().max()) < 1e-3
    expect = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    assert torch.allclose(r.values, expect, atol=1e-3)
    assert {(row, col) for row, col, _ in r.top(2)} == {(0, 0), (1, 0)}
    noised = interp.activation_patching(toy, clean, corr, logit_diff(a, w), over="heads", direction="noise")
    assert torch.allclose(noised.values, 1 - expect, atol=1e-3)


def test_toy_path_patching_shows_k_composition(toy):
    clean, corr, a, w = toy_pairs()
    r = interp.path_patching(toy, clean, corr, (0, 0), [("q", 1, 0), ("k", 1, 0), ("v", 1, 0)], logit_diff(a, w),
                             separately=True)
    q, k, v, together = r.values.tolist()
    assert k == pytest.approx(0.0, abs=1e-3)  # noising the previous-token head's path into L1H0's key kills it
    assert q == pytest.approx(1.0, abs=1e-3) and v == pytest.approx(1.0, abs=1e-3)
    assert together == pytest.approx(0.0, abs=1e-3)
    assert r.receivers[1] == "('k', 1, 0)" and isinstance(r.plot(), Figure)
    d = interp.path_patching(toy, clean, corr, (0, 0), [("k", 1, 0)], logit_diff(a, w), direction="denoise")
    assert d.value == pytest.approx(1.0, abs=1e-3)
    # A head that rests on BOS carries nothing, whatever the receiver.
    n = interp.path_patching(toy, clean, corr, (0, 1), ["final"], logit_diff(a, w))
    assert n.value == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="must sit in a later layer"):
        interp.path_patching(toy, clean, corr, (1, 0), [("k", 1, 0)], logit_diff(a, w))
    with pytest.raises(ValueError, match=r"receiver \('z', 1, 0\) not understood"):
        interp.path_patching(toy, clean, corr, (0, 0), [("z", 1, 0)], logit_diff(a, w))
    assert toy.attached_hook_count() == 0


# ---------------------------------------------------------------------------------------------- attribution patching
def test_atp_is_exact_where_the_model_is_linear(toy):
    # After the last layer's attention the toy is linear (no final norm): AtP must equal exhaustive patching.
    clean, corr, a, w = toy_pairs()
    for over in ("resid_post", "attn_out"):
        e = interp.activation_patching(toy, clean, corr, logit_diff(a, w), over=over, layers=[1])
        t = interp.attribution_patching(toy, clean, corr, logit_diff(a, w), over=over, layers=[1])
        assert torch.allclose(t.values, e.values, atol=1e-4), over
        assert torch.allclose(t.raw, e.raw, atol=1e-4)


def test_atp_qk_fix_sees_through_a_saturated_softmax(toy):
    clean, corr, a, w = toy_pairs()
    exact = interp.activation_patching(toy, clean, corr, logit_diff(a, w), over="head_k")
    fixed = interp.attribution_patching(toy, clean, corr, logit_diff(a, w), over="head_k")
    plain = interp.attribution_patching(toy, clean, corr, logit_diff(a, w), over="head_k", qk_fix=False)
    assert fixed.method == "atp+qk" and plain.method == "atp"
    assert float(exact.values[1, 0]) == pytest.approx(1.0, abs=1e-3)
    assert torch.allclose(fixed.values, exact.values, atol=1e-3)
    assert abs(float(plain.values[1, 0])) < 0.05  # the softmax gradient is ~0 at a sharp pattern
    # and plain AtP on head outputs misses the previous-token head for the same reason
    heads = interp.attribution_patching(toy, clean, corr, logit_diff(a, w), over="heads")
    assert float(heads.values[1, 0]) == pytest.approx(1.0, abs=1e-3) and abs(float(heads.values[0, 0])) < 0.05


def test_atp_tracks_exhaustive_patching_on_a_tiny_llama(tiny_llama):
    m, met = tiny_llama, logit_diff("a", "b")
    for over, tol in (("head_q", 0.01), ("head_k", 0.01), ("pattern", 0.01), ("resid_pre", 1.0)):
        pos = "last" if over == "resid_pre" else "each"
        for direction in ("denoise", "noise"):
            e = interp.activation_patching(m, CLEAN, CORRUPT, met, over=over, positions=pos, direction=direction)
            t = interp.attribution_patching(m, CLEAN, CORRUPT, met, over=over, positions=pos, direction=direction)
            assert torch.allclose(t.values, e.values, atol=tol), (over, direction)
    t = interp.attribution_patching(m, CLEAN, CORRUPT, met, over="heads")
    e = interp.activation_patching(m, CLEAN, CORRUPT, met, over="heads")
    c = t.compare(e, k=3)
    assert c.spearman > 0.8 and 0 <= c.topk_recall <= 1
    assert isinstance(c.plot(), Figure) and len(c.to_frame()) == 8
    json.dumps(c.to_json())


def test_compare_against_an_independent_computation():
    def grid(vals, method):
        v = torch.tensor(vals, dtype=torch.float32).reshape(2, 3)
        return PatchingResult(v, v[..., None], torch.ones(1), torch.zeros(1), [0, 1], [0, 1, 2], "layer", "head",
                              ["H0", "H1", "H2"], "heads", "denoise", "m", "all", method=method)
    est = grid([0.1, 0.5, -0.2, 0.9, 0.3, 0.0], "atp")
    truth = grid([0.2, 0.4, -0.9, 0.8, 0.1, 0.05], "exhaustive")
    c = est.compare(truth, k=2)
    e, t = est.values.flatten().numpy(), truth.values.flatten().numpy()
    rank = lambda x: np.argsort(np.argsort(x))
    assert c.pearson == pytest.approx(np.corrcoef(e, t)[0, 1], abs=1e-6)
    assert c.spearman == pytest.approx(np.corrcoef(rank(e), rank(t))[0, 1], abs=1e-6)
    assert c.topk_recall == 0.5  # truth's top-2 |.|: -0.9, 0.8; estimate's: 0.9, 0.5
    with pytest.raises(ValueError, match="cannot compare grids"):
        est.compare(grid([0] * 6, "x").__class__(torch.zeros(1, 1), torch.zeros(1, 1, 1), torch.ones(1),
                                                 torch.zeros(1), [0], [0], "layer", "head", ["H0"], "heads",
                                                 "denoise", "m", "all"))


# ---------------------------------------------------------------------------------------------- embedded model
@pytest.mark.slow
def test_embedded_ioi_patching_and_atp(embedded):
    from interp.analyses.patching import ioi

    pp = ioi(embedded, 4, seed=0)
    r = interp.activation_patching(embedded, pp, over="resid_pre", positions="last", layers=[0, 15, 29])
    assert float(r.clean.mean()) > float(r.corrupted.mean())
    e = interp.activation_patching(embedded, pp, over="heads", layers=[20, 21])
    t = interp.attribution_patching(embedded, pp, over="heads", layers=[20, 21])
    assert e.values.shape == t.values.shape == (2, 9)
    assert t.compare(e).spearman > 0.3
    s = interp.attribution_patching(embedded, pp, over="head_k", layers=[20])
    x = interp.activation_patching(embedded, pp, over="head_k", layers=[20])
    assert s.values.shape == (1, 3) and s.kv_readers == {0: [0, 1, 2], 1: [3, 4, 5], 2: [6, 7, 8]}
    assert torch.allclose(s.values, x.values, atol=0.05)


# ---------------------------------------------------------------------------------------------- resuming a forward
@pytest.mark.parametrize("arch", ["llama", "gpt2", "toy"])
def test_resumed_forward_equals_the_full_one(arch, toy):
    from interp.core.resume import record_blocks, run_from

    m = toy if arch == "toy" else interp.load_tiny(arch, seed=1)
    toks = toy_pairs(3)[0] if arch == "toy" else m.to_tokens(CLEAN + ["xyz"])
    names = [f"blocks.{layer}.hook_resid_pre" for layer in range(m.n_layers)]
    store, calls = record_blocks(m, toks, names)
    final = store[f"blocks.{m.n_layers - 1}.hook_resid_post"]
    for layer in range(m.n_layers):
        assert torch.allclose(run_from(m, calls, layer, store[names[layer]]), final, atol=1e-5)
    # a hook during the resumed part acts as in a full forward
    name = f"blocks.{m.n_layers - 1}.hook_resid_pre"
    with m.hooks([(name, lambda t, hook: t * 2)]):
        full = m.run(toks, stop_at_layer=m.n_layers)
    assert torch.allclose(run_from(m, calls, 0, store[names[0]], [(name, lambda t, hook: t * 2)]), full, atol=1e-4)
    assert all(len(b._forward_pre_hooks) == 0 for b in m.module.blocks) and m.attached_hook_count() == 0
    with pytest.raises(ValueError, match="resid has 2 rows; the recorded forward had 3"):
        run_from(m, calls, 0, store[names[0]][:2])


def test_resume_changes_nothing_but_the_cost(tiny_llama):
    kw = {"over": "heads", "batch_size": 6}
    a = interp.activation_patching(tiny_llama, CLEAN, CORRUPT, logit_diff("a", "b"), **kw)
    b = interp.activation_patching(tiny_llama, CLEAN, CORRUPT, logit_diff("a", "b"), resume=False, **kw)
    assert torch.allclose(a.raw, b.raw, atol=1e-5)


# ---------------------------------------------------------------------------------------------- command line
def test_cli_patch_flags_are_checked_before_the_model_loads(capsys, monkeypatch):
    from interp import cli
    from interp.cli import patch

    monkeypatch.setattr(patch, "load_model", lambda args: pytest.fail("the model loaded before the flag check"))
    for argv, msg in ((["--clean", "a"], "--clean and --corrupted go together"),
                      (["--clean", "a", "--corrupted", "b"], "needs --answer"),
                      (["--clean", "a", "--corrupted", "b", "--answer", "x"], "needs --wrong"),
                      (["--dataset", "ioi", "--clean", "a"], "not both"),
                      (["--dataset", "ioi", "--over", "nope"], "--over 'nope' not known; allowed: resid_pre"),
                      (["--dataset", "ioi", "--n", "0"], "--n"),
                      (["--dataset", "ioi", "--layers", "1,x"], "--layers '1,x'"),
                      (["--dataset", "ioi", "--method", "path"], "needs --sender"),
                      (["--dataset", "ioi", "--method", "path", "--sender", "0.0", "--receivers", "z:1.0"],
                       "--receivers item 'z:1.0'")):
        assert cli.main(["patch", *argv, "--json"]) == 2
        assert msg in json.loads(capsys.readouterr().out)["error"]


def test_cli_patch_runs_each_method(capsys, monkeypatch, tiny_llama, tmp_path):
    from interp import cli
    from interp.cli import patch

    monkeypatch.setattr(patch, "load_model", lambda args: tiny_llama)
    base = ["patch", "--clean", CLEAN[0], "--corrupted", CORRUPT[0], "--answer", "a", "--wrong", "b"]
    assert cli.main([*base, "--over", "heads", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    direct = interp.activation_patching(tiny_llama, CLEAN[0], CORRUPT[0], logit_diff("a", "b"), over="heads")
    assert np.allclose(doc["values"], direct.values.numpy(), atol=1e-6)
    assert cli.main([*base, "--method", "atp", "--over", "head_k", "--out", str(tmp_path / "a.png")]) == 0
    assert "atp+qk denoise patching over head_k" in capsys.readouterr().out and (tmp_path / "a.png").exists()
    assert cli.main([*base, "--method", "path", "--sender", "0.1", "--receivers", "k:1.2,final", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"] == "PathPatchingResult" and len(doc["rows"]) == 3
    assert tiny_llama.attached_hook_count() == 0


def test_path_patching_to_the_final_residual_is_the_direct_effect(tiny_llama):
    # Independent computation: a last-layer head's path to the final residual alone is its direct effect, the
    # change of its output z @ W_O added to the clean final residual (the last MLP frozen at its clean value).
    m, layer, head = tiny_llama, 1, 2
    r = interp.path_patching(m, CLEAN, CORRUPT, (layer, head), ["final"], logit_diff("a", "b"))
    z, fin = f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.hook_resid_post"
    clean, corr = m.cache(CLEAN, [z, fin]), m.cache(CORRUPT, [z])
    delta = (corr[z][:, :, head] - clean[z][:, :, head]) @ m.W_O(layer)[head]
    last = torch.tensor(m.lengths(CLEAN)) - 1
    rows = torch.arange(len(CLEAN))
    logits = m.unembed(m.final_norm((clean[fin] + delta)[rows, last]))
    patched = (logits[:, 97] - logits[:, 98]).mean()
    c, x = last_metric(m, m.run, CLEAN, 97, 98).mean(), last_metric(m, m.run, CORRUPT, 97, 98).mean()
    assert float(r.raw[-1].mean()) == pytest.approx(float(patched), abs=1e-5)
    # the normalisation divides by a tiny clean-corrupted gap on this random model: compare it loosely
    assert r.value == pytest.approx(float((patched - x) / (c - x)), rel=1e-3)
    # MLPs as sender and receiver
    mlp = interp.path_patching(m, CLEAN, CORRUPT, ("mlp", 0), [("mlp", 1), ("q", 1, 0)], logit_diff("a", "b"),
                               separately=True)
    assert mlp.values.shape == (3,) and torch.isfinite(mlp.values).all()
    with pytest.raises(ValueError, match="reads the residual before the sender"):
        interp.path_patching(m, CLEAN, CORRUPT, ("mlp", 1), [("mlp", 0)], logit_diff("a", "b"))


# ---------------------------------------------------------------------------------------------- AtP*: GradDrop
@pytest.fixture(scope="module")
def tiny3():
    return interp.load_tiny("llama", seed=0, n_layers=3)


def detached_terms(m, src, base, names, layer, metric, patterns=None):
    """Independent GradDrop term: a plain forward of ``base`` with layer ``layer``'s attention and MLP writes
    detached (forward values unchanged, no gradient through them), d(summed metric at the last token)/d(named
    activations) by autograd from the full logits, times (source - base) activations -> {name: [b, ...] products}.
    With ``patterns`` ({pattern name: P' from a patched forward}), the pattern's (P' - P) replaces the
    activation difference (the QK fix)."""
    kept = {}

    def keep(name):
        def fn(t, hook):
            kept[name] = t
            return t
        return fn

    def root(t, hook):
        return t.detach().requires_grad_(True)

    wanted = list(patterns) if patterns else list(names)
    hooks = [("hook_embed", root)] + [(n, keep(n)) for n in wanted] + [
        (f"blocks.{layer}.hook_attn_out", lambda t, hook: t.detach()),
        (f"blocks.{layer}.hook_mlp_out", lambda t, hook: t.detach())]
    with m.hooks(hooks):
        logits = m.run(base, grad=True)
        last = torch.tensor(m.lengths(base)) - 1 if isinstance(base, list) else torch.full((logits.shape[0],),
                                                                                            logits.shape[1] - 1)
        values = metric(logits[torch.arange(logits.shape[0]), last])
        grads = torch.autograd.grad(values.sum(), [kept[n] for n in wanted], allow_unused=True)
    out = {}
    for n, g in zip(wanted, grads):
        g = torch.zeros_like(kept[n]) if g is None else g
        if patterns:
            out[n] = (patterns[n] - kept[n].detach()) * g
        else:
            out[n] = (m.cache(src, [n])[n] - kept[n].detach()) * g
    return out


def test_grad_drop_terms_equal_an_independent_detached_gradient(tiny3):
    # Every per-layer term AtP_GD_l (signed, metric units, per pair) against autograd on a forward whose layer-l
    # writes are detached: head outputs, MLP outputs, and keys through the QK fix (P' from a patched forward).
    m, a, w = tiny3, 97, 98
    ld = lambda rows: rows[:, a] - rows[:, w]
    gd = interp.attribution_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), over="heads", grad_drop=True)
    terms = gd.extra["grad_drop_terms"]  # [L, layers, heads, pairs]
    assert terms.shape == (3, 3, 4, 2) and gd.method == "atp+gd" and gd.signed is False
    z = [f"blocks.{i}.attn.hook_z" for i in range(3)]
    for layer in range(3):
        prods = detached_terms(m, CLEAN, CORRUPT, z, layer, ld)
        expect = torch.stack([prods[n].sum((1, 3)).T for n in z])  # [layers, heads, pairs]
        assert torch.allclose(terms[layer], expect, rtol=1e-5, atol=1e-5 * float(expect.abs().max())), layer
        assert float(terms[layer, layer].abs().max()) == 0.0  # a head's only way out is its layer's write
    plain = interp.attribution_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), over="heads")
    est = plain.raw - plain.corrupted  # denoising: the plain AtP estimate per pair
    assert torch.allclose(terms[0, 1:], est[1:], atol=1e-6)  # dropping a lower layer changes nothing
    assert not torch.allclose(terms[2, 0], est[0], atol=1e-3)  # the drop did reach the graph

    mlp = interp.attribution_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), over="mlp_out", positions="last",
                                      layers=[1, 2], grad_drop=True).extra["grad_drop_terms"]
    names = ["blocks.1.hook_mlp_out", "blocks.2.hook_mlp_out"]
    last = torch.tensor(m.lengths(CLEAN)) - 1
    for layer in range(3):
        prods = detached_terms(m, CLEAN, CORRUPT, names, layer, ld)
        expect = torch.stack([prods[n][torch.arange(2), last].sum(-1) for n in names])[:, None]
        assert torch.allclose(mlp[layer], expect, rtol=1e-5, atol=1e-5 * float(expect.abs().max())), layer

    # keys, QK fix: P' = the pattern of a forward with that KV group's keys patched in from the clean run
    gk = interp.attribution_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), over="head_k", grad_drop=True)
    assert gk.method == "atp*" and gk.extra["grad_drop_terms"].shape == (3, 3, 2, 2)
    for layer, group in ((0, 1), (1, 0)):
        kn, pn = f"blocks.{layer}.attn.hook_k", f"blocks.{layer}.attn.hook_pattern"
        ks = m.cache(CLEAN, [kn])[kn]

        def put(t, hook, group=group, ks=ks):
            out = t.clone()
            out[:, :, group] = ks[:, :, group].to(t.dtype)
            return out
        with m.hooks([(kn, put)]):
            patched = m.cache(CORRUPT, [pn])[pn]
        for drop in range(3):
            prod = detached_terms(m, CLEAN, CORRUPT, [pn], drop, ld, patterns={pn: patched})[pn]
            expect = prod[:, 2 * group:2 * group + 2].flatten(1).sum(1)
            got = gk.extra["grad_drop_terms"][drop, layer, group]
            # 1e-4 here: P' - P is ~1e-3 of P on this random model and both sides hold q, k, P in float32
            assert torch.allclose(got, expect, rtol=1e-4, atol=1e-4 * float(expect.abs().max())), (layer, drop)
    assert m.active_hooks() == [] and m.attached_hook_count() == 0


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_grad_drop_is_the_mean_over_pairs_of_summed_absolute_terms(tiny3, direction):
    m, a, w = tiny3, 97, 98
    ld = lambda rows: rows[:, a] - rows[:, w]
    gd = interp.attribution_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), over="heads", direction=direction,
                                     grad_drop=True)
    src, base = (CLEAN, CORRUPT) if direction == "denoise" else (CORRUPT, CLEAN)
    z = [f"blocks.{i}.attn.hook_z" for i in range(3)]
    terms = torch.stack([torch.stack([detached_terms(m, src, base, z, drop, ld)[n].sum((1, 3)).T for n in z])
                         for drop in range(3)])  # [L, layers, heads, pairs], independent
    clean = last_metric(m, m.run, CLEAN, a, w).mean()
    corr = last_metric(m, m.run, CORRUPT, a, w).mean()
    per_pair = terms.abs().sum(0) / (3 - 1)
    expect = per_pair.mean(-1) / (clean - corr).abs()
    assert torch.allclose(gd.raw, per_pair, rtol=1e-5, atol=1e-7)
    assert torch.allclose(gd.values, expect, rtol=1e-4, atol=1e-6)
    assert gd.method == "atp+gd" and not gd.signed and bool((gd.values >= 0).all())
    # |.| per pair, not of the mean: with pairs that disagree in sign the two differ
    assert float((per_pair.mean(-1) - (terms.mean(-1).abs().sum(0) / 2)).max()) > 1e-4


def test_grad_drop_runs_on_every_kind_and_normalises_by_the_gap_magnitude(tiny3):
    m = tiny3
    for over in ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "heads", "head_q", "head_k",
                 "head_v", "pattern"):
        pos = "last" if over in ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out") else "each"
        e = interp.attribution_patching(m, CLEAN, CORRUPT, prob("a"), over=over, positions=pos, layers=[1, 2])
        r = interp.attribution_patching(m, CLEAN, CORRUPT, prob("a"), over=over, positions=pos, layers=[1, 2],
                                        grad_drop=True)
        assert r.values.shape == e.values.shape and bool(torch.isfinite(r.values).all()), over
        assert r.method == ("atp*" if over in ("head_q", "head_k") else "atp+gd"), over
        terms = r.extra["grad_drop_terms"]
        gap = float(r.clean.mean() - r.corrupted.mean())
        assert torch.allclose(r.values, (terms.abs().sum(0) / 2).mean(-1) / abs(gap), rtol=1e-5), over
        assert torch.allclose(terms[0, 0], (e.raw - e.corrupted)[0], atol=1e-6), over  # below layer 1: plain AtP
    # kl_to_clean: clean scores 0, corrupted more, so the gap is negative; magnitudes stay >= 0
    k = interp.attribution_patching(m, CLEAN, CORRUPT, kl_to_clean(), over="heads", grad_drop=True)
    assert float(k.clean.mean() - k.corrupted.mean()) < 0 and bool((k.values >= 0).all())
    assert float(k.values.max()) > 0
    assert m.active_hooks() == [] and m.attached_hook_count() == 0


@torch.no_grad()
def cancelling_model(beta=10.0, gamma=1.0):
    """Two one-head layers, no norms, set by hand. L0H0 reads the token at position 1 (clean: x = 1, corrupted:
    x = 0) and writes x to a direction u and a * x to logit(A) (its direct effect). L1H0's query reads u, its key
    marks position 2: from the last of 5 positions it attends there with weight w(x) = e^(beta x) / (e^(beta x) + 4)
    and writes -gamma * w(x) to logit(A) (the indirect effect). With a = gamma * w'(0) = 0.16 beta gamma the two
    cancel in the gradient at the corrupted run: plain AtP of L0H0 is 0, yet patching it restores everything
    (w saturates). GradDrop's term with layer 1 dropped keeps only the direct effect a."""
    from interp.analyses.induction.toy import AttnOnlyTransformer, ToyConfig

    V, N = 8, 8
    cfg = ToyConfig(n_layers=2, d_model=V + N + 1, n_heads=1, d_vocab=V, n_ctx=N)
    net = AttnOnlyTransformer(cfg, seed=None)
    for p in net.parameters():
        p.zero_()
    pos, u, A, root = V, V + N, 3, cfg.d_head ** 0.5
    net.W_E[:, :V], net.W_pos[:, pos:pos + N], net.W_U[:V, :] = torch.eye(V), torch.eye(N), torch.eye(V)
    h, g = net.blocks[0].attn, net.blocks[1].attn
    h.W_Q[0, pos:pos + N, 0] = 40 * root  # every position attends to position 1 ...
    h.W_K[0, pos + 1, 0] = 1.0
    h.W_V[0, 1, 0] = 1.0  # ... and reads x = 1 from token 1 (clean), 0 from token 2 (corrupted)
    h.W_O[0, 0, u], h.W_O[0, 0, A] = 1.0, gamma * beta * 0.2 * 0.8
    g.W_Q[0, u, 0] = beta * root
    g.W_K[0, pos + 2, 0] = 1.0
    g.W_V[0, pos + 2, 1] = 1.0
    g.W_O[0, 1, A] = -gamma
    return Model.from_module(net)


def test_grad_drop_sees_through_a_cancellation():
    m = cancelling_model()
    clean, corr, met = torch.tensor([[0, 1, 5, 5, 5]]), torch.tensor([[0, 2, 5, 5, 5]]), logit_diff(3, 4)
    exact = interp.activation_patching(m, clean, corr, met, over="heads")
    plain = interp.attribution_patching(m, clean, corr, met, over="heads")
    gd = interp.attribution_patching(m, clean, corr, met, over="heads", grad_drop=True)
    a, w1 = 1.6, 1 / (1 + 4 * np.exp(-10.0))
    gap = a - (w1 - 0.2)  # m(x) = a x - w(x): clean x = 1, corrupted x = 0
    assert float(exact.clean - exact.corrupted) == pytest.approx(gap, rel=1e-5)
    assert float(exact.values[0, 0]) == pytest.approx(1.0, abs=1e-4)  # L0H0 alone restores the clean run
    assert abs(float(plain.values[0, 0])) < 1e-4  # ... and plain AtP sees nothing
    terms = gd.extra["grad_drop_terms"][:, 0, 0, 0]
    assert float(terms[0]) == 0.0 and float(terms[1]) == pytest.approx(a, rel=1e-4)  # layer 1 dropped: direct only
    assert float(gd.values[0, 0]) == pytest.approx(a / gap, rel=1e-4) and float(gd.values[0, 0]) > 1.5
    assert gd.top(1)[0][:2] == (0, 0) and plain.top(1)[0][:2] == (1, 0)
    assert gd.compare(exact, k=1).topk_recall == 1.0 and plain.compare(exact, k=1).topk_recall == 0.0


def test_grad_drop_leaves_no_hook_and_checks_its_argument(tiny3, monkeypatch):
    m = tiny3
    for bad in ("yes", 1, None):
        with pytest.raises(ValueError, match=rf"grad_drop={bad!r}: allowed: True .* or False"):
            interp.attribution_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), grad_drop=bad)
    interp.attribution_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), over="head_q", grad_drop=True)
    assert m.active_hooks() == [] and m.attached_hook_count() == 0

    def boom(logits, batch):
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        interp.attribution_patching(m, CLEAN, CORRUPT, boom, grad_drop=True)
    assert m.active_hooks() == [] and m.attached_hook_count() == 0
    # a failure inside the forward, while the drop gates are attached
    from interp.analyses.patching import graddrop

    def fail(*args):
        raise RuntimeError("gate failed")
    monkeypatch.setattr(graddrop._Drop, "apply", fail)
    with pytest.raises(RuntimeError, match="gate failed"):
        interp.attribution_patching(m, CLEAN, CORRUPT, logit_diff("a", "b"), grad_drop=True)
    assert m.active_hooks() == [] and m.attached_hook_count() == 0
    one = interp.load_tiny("llama", seed=0, n_layers=1)
    with pytest.raises(ValueError, match="needs at least 2 layers"):
        interp.attribution_patching(one, CLEAN, CORRUPT, logit_diff("a", "b"), grad_drop=True)


def test_compare_ranks_an_unsigned_estimate_against_magnitudes():
    def grid(vals, method, direction="denoise", signed=True):
        v = torch.tensor(vals, dtype=torch.float32).reshape(2, 3)
        return PatchingResult(v, v[..., None], torch.ones(1), torch.zeros(1), [0, 1], [0, 1, 2], "layer", "head",
                              ["H0", "H1", "H2"], "heads", direction, "m", "all", method=method, signed=signed)
    est = grid([0.1, 0.5, 0.2, 0.9, 0.3, 0.0], "atp+gd", signed=False)
    rank = lambda x: np.argsort(np.argsort(x))
    for direction, base in (("denoise", 0.0), ("noise", 1.0)):
        truth = grid([0.2, 0.4, -0.95, 0.8, 0.1, 0.05], "exhaustive", direction)
        c = est.compare(truth, k=2)
        t = np.abs(truth.values.flatten().numpy() - base)
        e = est.values.flatten().numpy()
        assert c.spearman == pytest.approx(np.corrcoef(rank(e), rank(t))[0, 1], abs=1e-6), direction
        assert c.pearson == pytest.approx(np.corrcoef(e, t)[0, 1], abs=1e-6)
        assert np.allclose(c.truth.numpy(), t) and c.names == ("atp+gd", "|exhaustive|")
    assert est.compare(grid([0.2, 0.4, -0.95, 0.8, 0.1, 0.05], "exhaustive"), k=2).topk_recall == 0.5
    assert json.loads(json.dumps(est.to_json()))["signed"] is False
