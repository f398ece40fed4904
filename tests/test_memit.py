"""MEMIT mass edits: the per-layer solve against an independent least-squares fit, the layer-by-layer writes,
bit-exact revert / apply / save / load, rollback on failure, bad input, determinism, and real dev facts flipping.

The mechanics run on 3-layer tiny models (both MLP orientations: Llama Linear, GPT-2 Conv1D; editable layers 0-1);
the embedded model edits a few dev facts at once with a small key sample."""

import json
import math
from pathlib import Path

import pytest
import torch

import interp
from interp.analyses.stats import mlp_key_second_moment, mlp_key_second_moments
from interp.core import arch
from interp.editing import memit_solve
from interp.editing.eval.measure import target_nll
from interp.editing.matrices import restore_matrices
from interp.editing.facts import load_records
from interp.editing.defaults import default_layers, hparams_for
from interp.editing.hparams import MemitHparams
from interp.editing.memit import MemitEdit, load_memit_edit, memit_edit
from interp.editing.memit_solve import as_requests
from interp.editing.vstar import edit_batch

FAST = {"v_steps": 6, "templates": ((5, 1),)}
REQUESTS = [{"prompt": "{} is in the city of", "subject": "Tower", "target_new": " Rome"},
            {"prompt": "{} plays the", "subject": "Anna", "target_new": " piano"},
            {"prompt": "{} was born in", "subject": "Bob", "target_new": " Oslo"}]


def matrices(model, layers) -> dict:
    return {l: model.mlp_out_matrix(l).detach().cpu().clone() for l in layers}


def same(model, saved: dict) -> bool:
    return all(torch.equal(model.mlp_out_matrix(l).detach().cpu(), m) for l, m in saved.items())


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def tiny3(request):
    m = interp.load_tiny(request.param, seed=0, n_layers=3)
    return m, mlp_key_second_moments(m, [0, 1], n_tokens=3000, cache=False, progress=False)


@pytest.fixture(scope="module")
def tiny_batch(tiny3):
    """Three facts over layers 0-1 of a tiny model, reverted at the end of the module."""
    m, stats = tiny3
    before, digest = matrices(m, range(m.n_layers)), m.weights_digest()
    e = memit_edit(m, REQUESTS, layers=[0, 1], stats=stats, **FAST)
    yield m, stats, e, before, digest
    if e.applied:
        e.revert()
    assert same(m, before) and m.weights_digest() == digest


# ----------------------------------------------------------------------------------------------- the solve
def template_states(m, e, req, layer):
    """Per template row (unedited forwards): the key at ``layer`` and the residual after it, at the subject."""
    keys, resid = [], []
    for tpl in e.templates:
        text = tpl.replace("{}", req["prompt"]).replace("{}", req["subject"])
        pos = m.to_tokens(text[: text.index(req["subject"]) + len(req["subject"])]).shape[1] - 1
        c = m.cache(text, [f"blocks.{layer}.mlp.hook_post", f"blocks.{layer}.hook_resid_post"])
        keys.append(c[f"blocks.{layer}.mlp.hook_post"][0, pos].double())
        resid.append(c[f"blocks.{layer}.hook_resid_post"][0, pos].double())
    return torch.stack(keys), torch.stack(resid)


def test_one_fact_one_layer_is_the_least_squares_solution(tiny3):
    """ΔW minimises |ΔW k - r|² + λ tr(ΔW C ΔWᵀ): solved here as an ordinary least-squares problem with the
    stacked system [k; √λ C^½] ΔWᵀ = [r; 0], with k and r read from independent forwards of the unedited model."""
    m, stats = tiny3
    before = matrices(m, [1])
    lam = 50.0
    e = memit_edit(m, REQUESTS[:1], layers=[1], stats=stats, mom2_update_weight=lam, **FAST)
    try:
        written = matrices(m, [1])[1]
    finally:
        e.revert()
    k_rows, h_rows = template_states(m, e, REQUESTS[0], 1)
    k, h = k_rows.mean(0), h_rows.mean(0)
    r = e.z[0].double() - h
    assert torch.allclose(e.keys[1][0], k, rtol=1e-4, atol=1e-6)
    evals, evecs = torch.linalg.eigh(stats[1].mom2)
    c_half = evecs @ torch.diag(evals.clamp_min(0).sqrt()) @ evecs.T
    a = torch.cat([k[None], math.sqrt(lam) * c_half])
    b = torch.cat([r[None], torch.zeros(m.d_mlp, m.d_model, dtype=torch.float64)])
    expected = torch.linalg.lstsq(a, b).solution.T                                  # [d_model, d_mlp]
    # k and h come from other forwards (other batch shapes): they agree with the edit's to float32 noise
    assert float((e.delta(1) - expected).norm() / expected.norm()) < 1e-4
    assert torch.equal(written, (before[1].double() + e.delta(1)).to(written.dtype))
    assert float(expected.norm()) > 0


@pytest.mark.parametrize("beta", [1.0, 4.0])
def test_key_spread_weight_solves_for_every_templated_key(tiny3, beta):
    """With β = key_spread_weight the update minimises Σ_r (1/n)|ΔW k_r - r|² (β = 1: every templated key asks
    for the residual share) or in general |ΔW k̄ - r|² + β Σ_r (1/n)|ΔW (k_r - k̄)|², + λ tr(ΔW C ΔWᵀ): solved
    here as a stacked least-squares system from independent forwards. ``key_match`` is the bare prompt's MLP
    output change over the mean key's, read from forwards before and after the edit."""
    m, stats = tiny3
    lam, req = 50.0, REQUESTS[0]
    plain = memit_edit(m, [req], layers=[1], stats=stats, mom2_update_weight=lam, **FAST)
    plain.revert()
    k_rows, h_rows = template_states(m, plain, req, 1)
    text = req["prompt"].replace("{}", req["subject"])
    pos = m.to_tokens(req["subject"]).shape[1] - 1  # bare prompt: the subject's last token
    out_before = m.cache(text, ["blocks.1.hook_mlp_out"])["blocks.1.hook_mlp_out"][0, pos].double()
    e = memit_edit(m, [req], layers=[1], stats=stats, mom2_update_weight=lam, key_spread_weight=beta, **FAST)
    try:
        out_after = m.cache(text, ["blocks.1.hook_mlp_out"])["blocks.1.hook_mlp_out"][0, pos].double()
    finally:
        e.revert()
    n = len(k_rows)
    k, h = k_rows.mean(0), h_rows.mean(0)
    r = e.z[0].double() - h
    evals, evecs = torch.linalg.eigh(stats[1].mom2)
    c_half = evecs @ torch.diag(evals.clamp_min(0).sqrt()) @ evecs.T
    zeros = torch.zeros(m.d_mlp, m.d_model, dtype=torch.float64)
    if beta == 1.0:
        a = torch.cat([k_rows / math.sqrt(n), math.sqrt(lam) * c_half])
        b = torch.cat([r.expand(n, -1) / math.sqrt(n), zeros])
    else:
        a = torch.cat([k[None], (k_rows - k) * math.sqrt(beta / n), math.sqrt(lam) * c_half])
        b = torch.cat([r[None], torch.zeros(n, m.d_model, dtype=torch.float64), zeros])
    expected = torch.linalg.lstsq(a, b).solution.T
    assert float((e.delta(1) - expected).norm() / expected.norm()) < 1e-4
    assert float((e.delta(1) - plain.delta(1)).norm() / plain.delta(1).norm()) > 1e-3   # β changed the update
    change = out_after - out_before                                     # ΔW k_0: the bias is not edited
    mean_change = e.delta(1) @ k
    share = float(change @ mean_change / mean_change.norm() ** 2)
    assert math.isclose(e.facts_info[0]["key_match"], share, rel_tol=1e-3, abs_tol=1e-4)
    assert e.facts_info[0]["key_match_layers"] == {"1": e.facts_info[0]["key_match"]}
    assert e.hparams["key_spread_weight"] == beta


@pytest.mark.parametrize("gamma", [0.5, 3.0])
def test_bare_key_weight_adds_the_bare_prompt_key_as_a_row(tiny3, gamma):
    """``bare_key_weight`` γ with ``bare_key_when="always"``: ΔW minimises |ΔW k̄ - r|² + γ |ΔW k_0 - r|² +
    λ tr(ΔW C ΔWᵀ), with k_0 the bare rewrite prompt's key (template row 0), solved here as a stacked
    least-squares system from independent forwards. With "mismatch" the row is added only where the bare key's
    share under the plain solve is below KEY_MATCH: forced off (bound 0) the update is the plain one bit for bit,
    forced on (bound ∞) it is the "always" one."""
    m, stats = tiny3
    lam, req = 50.0, REQUESTS[0]
    plain = memit_edit(m, [req], layers=[1], stats=stats, mom2_update_weight=lam, **FAST)
    plain.revert()
    e = memit_edit(m, [req], layers=[1], stats=stats, mom2_update_weight=lam, bare_key_weight=gamma,
                   bare_key_when="always", **FAST)
    e.revert()
    k_rows, h_rows = template_states(m, e, req, 1)
    k, h = k_rows.mean(0), h_rows.mean(0)
    r = e.z[0].double() - h
    evals, evecs = torch.linalg.eigh(stats[1].mom2)
    c_half = evecs @ torch.diag(evals.clamp_min(0).sqrt()) @ evecs.T
    a = torch.cat([k[None], math.sqrt(gamma) * k_rows[:1], math.sqrt(lam) * c_half])
    b = torch.cat([r[None], math.sqrt(gamma) * r[None], torch.zeros(m.d_mlp, m.d_model, dtype=torch.float64)])
    expected = torch.linalg.lstsq(a, b).solution.T
    assert float((e.delta(1) - expected).norm() / expected.norm()) < 1e-4
    assert float((e.delta(1) - plain.delta(1)).norm() / plain.delta(1).norm()) > 1e-3   # the row changed it
    assert e.facts_info[0]["key_match"] > plain.facts_info[0]["key_match"]   # the bare prompt gets more of it
    assert e.norms["layers"]["1"]["bare_rows"] == 1 and plain.norms["layers"]["1"]["bare_rows"] == 0
    for bound, like in ((0.0, plain), (math.inf, e)):
        for when in ("mismatch", "alone"):
            f = memit_edit(m, [req], layers=[1], stats=stats, mom2_update_weight=lam, bare_key_weight=gamma,
                           bare_key_when=when, bare_key_threshold=bound, **FAST)
            f.revert()
            assert torch.equal(f.delta(1), like.delta(1))


def test_bare_key_when_alone_decides_by_each_facts_own_edit(tiny3):
    """"alone" gives the row to the facts whose bare key gets less than the bound of the update *of their own edit*
    (each fact edited by itself, an independent run), whatever else is in the batch; "mismatch" decides by the
    batch's joint solve, whose shares differ."""
    m, stats = tiny3
    lam, reqs = 50.0, REQUESTS[:2]
    own = []
    for req in reqs:
        e = memit_edit(m, [req], layers=[1], stats=stats, mom2_update_weight=lam, **FAST)
        e.revert()
        own.append(e.facts_info[0]["key_match"])
    joint = memit_edit(m, reqs, layers=[1], stats=stats, mom2_update_weight=lam, **FAST)
    joint.revert()
    assert max(abs(f["key_match"] - s) for f, s in zip(joint.facts_info, own)) > 1e-3   # the batch moves them
    lo, hi = sorted(own)
    for bound, rows in ((lo - 1e-6, 0), ((lo + hi) / 2, 1), (hi + 1e-6, 2)):
        f = memit_edit(m, reqs, layers=[1], stats=stats, mom2_update_weight=lam, bare_key_weight=2.0,
                       bare_key_when="alone", bare_key_threshold=bound, **FAST)
        f.revert()
        assert f.norms["layers"]["1"]["bare_rows"] == rows
        if rows == 0:
            assert torch.equal(f.delta(1), joint.delta(1))
        if rows == 1:   # the row went to the fact whose own share is the lower: its bare prompt gets more now
            low = own.index(lo)
            assert f.facts_info[low]["key_match"] > joint.facts_info[low]["key_match"] + 1e-3


def test_every_layer_is_written_as_w_plus_its_delta(tiny_batch):
    m, _, e, before, _ = tiny_batch
    assert e.layers == [0, 1] and e.layer == 1 and e.applied and e.applied_model is m
    for l in e.layers:
        expected = (before[l].double() + e.resids[l].double().T @ e.adjs[l].double()).to(before[l].dtype)
        assert torch.allclose(m.mlp_out_matrix(l).detach().cpu().double(), expected.double(), rtol=0, atol=1e-6)
        assert torch.equal(m.mlp_out_matrix(l).detach().cpu(), (before[l].double() + e.delta(l)).to(before[l].dtype))
        assert not torch.equal(m.mlp_out_matrix(l).detach().cpu(), before[l])
    assert torch.equal(m.mlp_out_matrix(2).detach().cpu(), before[2])  # above the range: untouched
    # the residual share of each layer: the last layer takes all the error left, the first half of it at the start
    assert all(f["z_error"] < 1.0 for f in e.facts_info)


def test_revert_and_reapply_are_bit_exact(tiny_batch):
    m, _, e, before, digest = tiny_batch
    edited = matrices(m, e.layers)
    e.revert()
    assert same(m, before) and m.weights_digest() == digest and not e.applied
    with pytest.raises(ValueError, match="not applied"):
        e.revert()
    e.apply(m)
    assert same(m, edited)
    with pytest.raises(ValueError, match="already applied"):
        e.apply(m)


def test_save_load_round_trip(tiny_batch, tmp_path):
    m, _, e, before, _ = tiny_batch
    edited = matrices(m, e.layers)
    path = e.save(tmp_path / "batch")
    loaded = load_memit_edit(path)
    assert loaded.layers == e.layers and loaded.requests == e.requests and loaded.fingerprint == e.fingerprint
    for l in e.layers:
        assert torch.equal(loaded.delta(l), e.delta(l))
    e.revert()
    try:
        loaded.apply(m)
        assert same(m, edited)
        loaded.revert()
        assert same(m, {l: before[l] for l in e.layers})
    finally:
        e.apply(m)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="altered"):
        load_memit_edit(path)
    with pytest.raises(FileNotFoundError):
        load_memit_edit(tmp_path / "nothing")


def test_result_protocol(tiny_batch, tmp_path):
    _, _, e, _, _ = tiny_batch
    frame = e.to_frame()
    assert len(frame) == len(REQUESTS) * len(e.layers)
    assert {"nll_final", "clamp_bound", "key_norm", "resid_norm", "z_error"} <= set(frame.columns)
    info = json.loads(json.dumps(e.to_json()))
    assert info["layers"] == [0, 1] and len(info["facts_info"]) == 3 and info["applied"]
    assert "3 fact(s)" in e.summary()
    assert set(e.norms["layers"]) == {"0", "1"}
    fig = e.plot(out=tmp_path / "memit.png")
    assert (tmp_path / "memit.png").stat().st_size > 0 and len(fig.axes) == 2


def test_refuses_another_model(tiny_batch):
    _, _, e, _, _ = tiny_batch
    other = interp.load_tiny("llama", seed=1, n_layers=3)
    snapshot = matrices(other, [0, 1])
    e2 = MemitEdit(requests=e.requests, layers=e.layers, resids=e.resids, adjs=e.adjs, keys=e.keys, z=e.z,
                   hparams=e.hparams, seed=e.seed, templates=e.templates, fingerprint=e.fingerprint)
    with pytest.raises(ValueError, match="fingerprint"):
        e2.apply(other)
    assert same(other, snapshot)


# ----------------------------------------------------------------------------------------------- failures
def test_failure_in_a_later_layer_leaves_every_weight_unchanged(tiny3):
    m, stats = tiny3
    before, digest = matrices(m, range(m.n_layers)), m.weights_digest()
    # layer 1's statistics are singular: λC + KᵀK has rank 1, so its solve fails after layer 0 was written
    bad = {0: stats[0], 1: torch.zeros(m.d_mlp, m.d_mlp, dtype=torch.float64)}
    with pytest.raises(ValueError, match="not positive definite"):
        memit_edit(m, REQUESTS[:1], layers=[0, 1], stats=bad, **FAST)
    assert same(m, before) and m.weights_digest() == digest

    def interrupt(event):
        if event.get("stage") == "update" and event.get("layer") == 0:
            assert not torch.equal(m.mlp_out_matrix(0).detach().cpu(), before[0])  # layer 0 is written by now
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        memit_edit(m, REQUESTS[:1], layers=[0, 1], stats=stats, progress=interrupt, **FAST)
    assert same(m, before) and m.weights_digest() == digest


def test_apply_failing_in_a_later_layer_restores_the_earlier_ones(tiny_batch):
    m, _, e, _, _ = tiny_batch
    current = matrices(m, range(m.n_layers))
    resids = dict(e.resids)
    resids[1] = resids[1].clone()
    resids[1][0, 0] = float("nan")
    broken = MemitEdit(requests=e.requests, layers=e.layers, resids=resids, adjs=e.adjs, keys=e.keys, z=e.z,
                       hparams=e.hparams, seed=e.seed, templates=e.templates, fingerprint=e.fingerprint)
    e.revert()
    try:
        reverted = matrices(m, range(m.n_layers))
        with pytest.raises(FloatingPointError, match="layer 1"):
            broken.apply(m)
        assert same(m, reverted) and not broken.applied
    finally:
        e.apply(m)
    assert same(m, current)


def test_bad_input(tiny3):
    m, stats = tiny3
    before = matrices(m, range(m.n_layers))
    dup = [REQUESTS[0], {**REQUESTS[1], "subject": "Tower", "case_id": "c7"}]
    with pytest.raises(ValueError, match=r"'Tower'.*record 0.*' Rome'.*record 1.*'c7'.*' piano'"):
        memit_edit(m, dup, layers=[0, 1], stats=stats)
    for layers in ([0, 2], [1, 0], [2], [-1], [], [0, 0], "01", [0.5]):
        with pytest.raises(ValueError, match=r"allowed: consecutive increasing MLP layers within 0\.\.1"):
            memit_edit(m, REQUESTS, layers=layers, stats=stats)
    many = [{"prompt": "{} is in", "subject": f"S{i}", "target_new": " x"} for i in range(m.d_mlp + 1)]
    with pytest.raises(ValueError, match=rf"{m.d_mlp + 1} facts .* d_mlp={m.d_mlp}.*linearly dependent"):
        memit_edit(m, many, layers=[0, 1], stats=stats)
    with pytest.raises(ValueError, match="unknown MEMIT hyperparameter"):
        memit_edit(m, REQUESTS, layers=[0, 1], stats=stats, v_stepz=3)
    for bad in (-1.0, float("inf"), float("nan"), "1", True):
        with pytest.raises(ValueError, match=r"key_spread_weight=.*allowed: a finite number >= 0"):
            memit_edit(m, REQUESTS, layers=[0, 1], stats=stats, key_spread_weight=bad)
    for bad in (-1.0, float("inf"), "1", True):
        with pytest.raises(ValueError, match=r"bare_key_weight=.*allowed: a finite number >= 0"):
            memit_edit(m, REQUESTS, layers=[0, 1], stats=stats, bare_key_weight=bad)
    with pytest.raises(ValueError, match=r"bare_key_when='sometimes'; allowed: 'mismatch', 'alone', 'always'"):
        memit_edit(m, REQUESTS, layers=[0, 1], stats=stats, bare_key_when="sometimes")
    for bad in (-0.1, float("nan"), "0.5", True):
        with pytest.raises(ValueError, match=r"bare_key_threshold=.*allowed: a number >= 0"):
            memit_edit(m, REQUESTS, layers=[0, 1], stats=stats, bare_key_threshold=bad)
    with pytest.raises(ValueError, match=r"no statistics for layer\(s\) \[1\]"):
        memit_edit(m, REQUESTS, layers=[0, 1], stats={0: stats[0]})
    with pytest.raises(ValueError, match="missing keys"):
        memit_edit(m, [{"prompt": "{} is", "subject": "A"}], layers=[0, 1], stats=stats)
    with pytest.raises(ValueError, match="no '\\{\\}'"):
        memit_edit(m, [{"prompt": "Tower is", "subject": "Tower", "target_new": " x"}], layers=[0, 1], stats=stats)
    # a v* optimisation that diverges in a batch is run again fact by fact, so that its error names the record
    with pytest.raises(FloatingPointError, match=r"record 0 \(case_id 0, 'Tower' -> ' Rome'\): .*diverged"):
        memit_edit(m, REQUESTS, layers=[0, 1], stats=stats, v_lr=1e30, **FAST)
    assert same(m, before)
    # the same subject twice with the same target is one fact asked twice: allowed
    assert len(as_requests([REQUESTS[0], dict(REQUESTS[0])])) == 2


def test_moe_models_are_refused():
    m = interp.load_tiny("mixtral", seed=0, n_layers=3)
    digest = m.weights_digest()
    with pytest.raises(ValueError, match="mixtures of .* experts"):
        memit_edit(m, REQUESTS, layers=[0, 1])
    assert m.weights_digest() == digest


# ----------------------------------------------------------------------------------------------- post-norm models
def old_spread_writes(m, e, stats, lam) -> dict:
    """The dense spread as it was before post-norm models were allowed, rebuilt from the module's parts: each
    layer's factor is the residual share itself. Returns {layer: written matrix} (the model is left unedited)."""
    from interp.editing.memit_solve import factor_product, solve_layer, subject_states, updated

    batches = [edit_batch(m, r["prompt"], r["subject"], m.target_tokens(r["target_new"]), e.templates, "{} is a")
               for r in e.requests]
    originals, written = matrices(m, e.layers), {}
    try:
        for j, layer in enumerate(e.layers):
            st = subject_states(m, batches, layer, e.layers[-1])
            share = (e.z - st.resid) / (len(e.layers) - j)
            new = updated(originals[layer], factor_product(share, solve_layer(st.keys, stats[layer].mom2, lam)))
            with torch.no_grad():
                m.mlp_out_matrix(layer).copy_(new)
            written[layer] = new
    finally:
        restore_matrices(m, originals)
    return written


def test_dense_models_write_the_bits_of_the_plain_spread(tiny3):
    """A model without post-norms takes the residual shares as they are: the same bits as the spread before."""
    m, stats = tiny3
    before = matrices(m, [0, 1])
    e = memit_edit(m, REQUESTS, layers=[0, 1], stats=stats, mom2_update_weight=50.0, **FAST)
    try:
        edited = matrices(m, e.layers)
    finally:
        e.revert()
    expected = old_spread_writes(m, e, stats, 50.0)
    assert same(m, before)
    for l in e.layers:
        assert torch.equal(edited[l], expected[l]) and not torch.equal(edited[l], before[l])
        assert torch.equal(e.delta(l), e.resids[l].T @ e.adjs[l])
    assert all("write_reach_mean" not in e.norms["layers"][str(l)] for l in e.layers)


@pytest.fixture(scope="module")
def tiny_gemma():
    m = interp.load_tiny("gemma3", seed=0, n_layers=3)
    return m, mlp_key_second_moments(m, [0, 1], n_tokens=3000, cache=False, progress=False)


def test_post_norm_edit_reaches_its_targets(tiny_gemma, monkeypatch):
    """Gemma's MLP write is ``g ⊙ o / rms(o)``: solving for the residual share as if it were the MLP output
    (the dense spread) overshoots the first layer's step about twice and leaves most of z - h; mapping each share
    through the norm reaches the targets. Reverts bit for bit."""
    m, stats = tiny_gemma
    digest, before = m.weights_digest(), matrices(m, range(m.n_layers))
    e = memit_edit(m, REQUESTS, layers=[0, 1], stats=stats, mom2_update_weight=50.0, **FAST)
    try:
        edited = matrices(m, e.layers)
        assert all(not torch.equal(edited[l], before[l]) for l in e.layers)
        assert torch.equal(m.mlp_out_matrix(2).detach().cpu(), before[2])
    finally:
        e.revert()
    assert m.weights_digest() == digest and same(m, before)
    e.apply(m)
    assert same(m, edited)
    e.revert()
    assert m.weights_digest() == digest

    monkeypatch.setattr(memit_solve, "post_norm_targets",
                        lambda model, layer, resid, outs, owner: (resid, torch.ones(resid.shape[0])))
    plain = memit_edit(m, REQUESTS, layers=[0, 1], stats=stats, mom2_update_weight=50.0, **FAST)
    plain.revert()
    adapted = [f["z_error"] for f in e.facts_info]
    unadapted = [f["z_error"] for f in plain.facts_info]
    assert max(adapted) < 0.5 and min(unadapted) > 0.6, (adapted, unadapted)
    first, last = (e.norms["layers"][str(l)] for l in e.layers)
    assert 0.4 < first["step_reach_mean"] < 1.1 and plain.norms["layers"]["0"]["step_reach_mean"] > 1.5
    assert 0.5 < first["write_reach_mean"] <= 1.0 + 1e-9 and last["residual_error_after"] < first["residual_error_mean"] / 2
    assert e.norms["z_error_mean"] == pytest.approx(sum(adapted) / 3)


def test_post_norm_targets_follow_the_norm(tiny_gemma):
    """Per row, the MLP output change the helper asks for makes the real norm module write the residual step:
    for a small step its part the norm can make (all but the ellipsoid's normal, ``ô / g``), for a large one
    the nearest write the norm can reach (no point of the ellipsoid is nearer)."""
    m, _ = tiny_gemma
    norm = arch.post_norm_module(m, 0, "mlp")
    g = arch.norm_gain(m, norm).double()
    gen = torch.Generator().manual_seed(0)
    outs = torch.randn(4, m.d_model, generator=gen, dtype=torch.float64) * 0.3
    owner = torch.arange(4)

    def write(o):
        with torch.no_grad():
            return norm(o.float()).double()

    for size in (1e-3, 3.0):
        r = torch.randn(4, m.d_model, generator=gen, dtype=torch.float64) * size
        change, reach = memit_solve.post_norm_targets(m, 0, r, outs, owner)
        got = write(outs + change) - write(outs)
        if size < 1:
            normal = (outs / g) / (outs / g).norm(dim=1, keepdim=True)
            tangent = r - (r * normal).sum(1, keepdim=True) * normal
            assert float((got - tangent).norm() / tangent.norm()) < 2e-2
            assert float(reach.min()) > 0.5
        else:
            w, t = write(outs), write(outs) + r
            best = (w + got - t).norm(dim=1)
            for _ in range(200):  # random points of the ellipsoid near the answer are never nearer
                v = (outs + change) * (1 + 0.05 * torch.randn(4, m.d_model, generator=gen, dtype=torch.float64))
                other = (write(v) - t).norm(dim=1)
                assert bool((other >= best * (1 - 1e-5)).all())
            assert float(reach.max()) < 1.0


def test_nearest_write_with_zero_gains():
    """Zero gains (Gemma's layer 4 has 7) are unusable for the write: a reachable target is met exactly with the
    missing norm on them, an unreachable one gets the nearest point; every answer has mean(v²) = 1."""
    gen = torch.Generator().manual_seed(1)
    g = torch.rand(16, generator=gen, dtype=torch.float64) + 0.5
    g[[3, 7]] = 0.0
    v0 = torch.randn(2, 16, generator=gen, dtype=torch.float64)
    v0 = v0 / v0.pow(2).mean(1, keepdim=True).sqrt()
    inside = g * v0 * 0.8                                     # reachable: mean((t/g)²) < 1 on the live gains
    outside = g * v0 * 3.0
    live = g != 0
    for want, exact in ((inside, True), (outside, False)):
        v = memit_solve.nearest_write(g, want, v0)
        assert torch.allclose(v.pow(2).mean(1), torch.ones(2, dtype=torch.float64))
        gap = (g * v - want).norm(dim=1)
        if exact:
            assert float(gap.max()) < 1e-9 and bool((v[:, ~live] != 0).all())
        else:  # the optimality conditions: v = g t / (g² + μ), one μ >= -min g² = 0 per row, nothing on dead gains
            mu = (g * want / v - g ** 2)[:, live]
            assert torch.allclose(mu, mu[:, :1].expand_as(mu), rtol=1e-6) and bool((mu[:, 0] > 0).all())
            assert bool((v[:, ~live] == 0).all()) and float(gap.min()) > 1.0


def test_same_seed_same_edit(tiny3):
    m, stats = tiny3
    a = memit_edit(m, REQUESTS[:2], layers=[0, 1], stats=stats, seed=3, **FAST)
    a.revert()
    b = memit_edit(m, REQUESTS[:2], layers=[0, 1], stats=stats, seed=3, **FAST)
    b.revert()
    assert a.templates == b.templates
    for l in (0, 1):
        assert torch.equal(a.resids[l], b.resids[l]) and torch.equal(a.adjs[l], b.adjs[l])


def test_multi_layer_statistics_equal_the_single_layer_scans():
    m = interp.load_tiny("llama", seed=4, n_layers=3)  # unedited (the module's tiny models carry an edit now)
    stats = mlp_key_second_moments(m, [1, 0], n_tokens=3000, cache=False, progress=False)
    assert sorted(stats) == [0, 1]
    for l in (0, 1):
        one = mlp_key_second_moment(m, l, n_tokens=3000, cache=False, progress=False)
        assert torch.equal(one.moment_sum, stats[l].moment_sum) and one.count == stats[l].count == 3000


# ----------------------------------------------------------------------------------------------- the real model
def test_dev_facts_flip_on_the_embedded_model(embedded):
    facts = load_records(split="dev")[:4]
    layers = default_layers(embedded)[-3:]  # the last three of the chosen range: a cheaper statistics scan
    stats = mlp_key_second_moments(embedded, layers, n_tokens=2500, cache=False, progress=False)

    def probs():  # [fact, (P(new), P(true))] on the rewrite prompts, from the evaluation's own scorer
        nll = target_nll(embedded, [f.text for f in facts] * 2,
                         [f.target_new for f in facts] + [f.target_true for f in facts])
        return torch.exp(-nll).reshape(2, -1).T

    before = probs()
    saved, digest = matrices(embedded, layers), embedded.weights_digest()
    e = memit_edit(embedded, facts, layers=layers, stats=stats, v_steps=12, templates=((5, 1),), mom2_ridge=1e-4)
    try:
        after = probs()
    finally:
        e.revert()
    assert same(embedded, saved) and embedded.weights_digest() == digest
    assert (before[:, 1] > before[:, 0]).all(), before  # the model knew the true answers
    assert (after[:, 0] > after[:, 1]).all(), (after, e.facts_info)


def test_default_layers_and_facade(embedded):
    study = Path(__file__).parents[1] / "studies" / "memit_layers"
    chosen = json.loads((study / "memit_layers.json").read_text())
    assert default_layers(embedded) == chosen["chosen_layers"]
    assert default_layers(embedded)[-1] <= embedded.n_layers - 2
    assert interp.memit.edit is memit_edit and interp.memit.load is load_memit_edit
    assert all(hasattr(interp.memit, name) for name in interp.memit.__all__)


def test_a_fact_the_model_already_answers_keeps_its_residual(embedded):
    """MEMIT (unlike one ROME edit) takes a fact whose target already is the greedy answer: its z is its h."""
    from interp import rome

    layers = [4]
    stats = mlp_key_second_moments(embedded, layers, n_tokens=2500, cache=False, progress=False)
    reqs = [{"prompt": "{} is located in the city of", "subject": "The Eiffel Tower", "target_new": " Paris"},
            {"prompt": "{} is located in the city of", "subject": "The Colosseum", "target_new": " London"}]
    d0 = embedded.weights_digest()
    e = memit_edit(embedded, reqs, layers=layers, stats=stats, v_steps=3, templates=((5, 1),), mom2_ridge=1e-4)
    try:
        assert e.facts_info[0]["answered"] and not e.facts_info[1]["answered"]
        assert e.facts_info[0]["delta_norm"] == 0.0 and e.facts_info[0]["steps"] == 1  # z = h
        assert e.facts_info[1]["delta_norm"] > 0
        # no share of z - h = 0 is missing: the answered fact has no z error and the mean is the other fact's
        assert e.facts_info[0]["z_error"] is None and e.norms["z_error_mean"] == e.facts_info[1]["z_error"]
    finally:
        e.revert()
    assert embedded.weights_digest() == d0
    with pytest.raises(ValueError, match="already the model's answer"):  # one ROME edit still refuses it
        rome.edit(embedded, reqs[0]["prompt"], reqs[0]["subject"], " Paris", 4, stats=stats[4], v_steps=3)


# ----------------------------------------------------------------------------------------------- Gemma 3 270M
def test_gemma_defaults_are_the_studys_choice(gemma):
    chosen = json.loads((Path(__file__).parents[1] / "studies" / "memit_gemma" / "results.json").read_text())["chosen"]
    assert default_layers(gemma) == chosen["layers"]
    hp = hparams_for(gemma, MemitHparams, "memit")
    assert (hp.v_lr, hp.mom2_update_weight, hp.clamp_norm_factor) == (
        chosen["v_lr"], chosen["mom2_update_weight"], chosen["clamp_norm_factor"])
    assert hparams_for(gemma, MemitHparams, "memit", v_lr=0.5).v_lr == 0.5  # an explicit keyword still wins


def test_dev_facts_flip_on_gemma(gemma):
    """Three dev facts at once over Gemma's post-norm layers (a small key sample, so a ridge): each flips, the
    last layer's write delivers most of its step, and the weights come back bit for bit."""
    facts = load_records(split="dev", model=gemma)[:3]
    layers = [3, 4, 5]  # layer 4 has zero post-norm gains
    stats = mlp_key_second_moments(gemma, layers, n_tokens=2500, cache=False, progress=False)

    def probs():
        nll = target_nll(gemma, [f.text for f in facts] * 2,
                         [f.target_new for f in facts] + [f.target_true for f in facts])
        return torch.exp(-nll).reshape(2, -1).T

    before = probs()
    digest = gemma.weights_digest()
    e = memit_edit(gemma, facts, layers=layers, stats=stats, v_steps=12, templates=((5, 1),), mom2_ridge=1e-4)
    try:
        after = probs()
    finally:
        e.revert()
    assert gemma.weights_digest() == digest
    assert (before[:, 1] > before[:, 0]).all(), before
    assert (after[:, 0] > after[:, 1]).all(), (after, e.facts_info)
    last = e.norms["layers"]["5"]
    assert last["step_reach_mean"] > 0.5 and last["write_reach_mean"] > 0.5, e.norms
    assert all(f["z_error"] < 1.0 for f in e.facts_info), e.facts_info
