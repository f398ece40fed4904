"""Restarting dead latents during training (``TrainSettings.resample_every``, ``features/resample.py``): what a
restart writes, checked against the tokens it was drawn from; seeded and resumable bit for bit; the default run
unchanged."""

import pytest
import torch

from interp.analyses.accumulate import World
from interp.analyses.features import Dictionary, train_transcoders
from interp.analyses.features.resample import resample_dead
from interp.analyses.features.train import TrainSettings, _Run, transcoder_sites


def _dictionary(kind_sae: bool):
    g = torch.Generator().manual_seed(3)
    d = Dictionary(6, 6, 8, k=2, skip=not kind_sae)
    with torch.no_grad():
        for p in d.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return d


def _adam_after_one_step(d, seed=4):
    opt = torch.optim.Adam([p for p in d.parameters() if p.requires_grad], lr=1e-3)
    z = torch.randn(5, 6, generator=torch.Generator().manual_seed(seed))
    vals, idx = d.sparse(d.pre(z))
    (d.decode_sparse(vals, idx, z) - z).pow(2).sum().backward()
    opt.step()
    return opt


@pytest.mark.parametrize("sae", [False, True])
def test_a_restart_starts_each_dead_latent_from_a_token_with_error(sae):
    """Three dead latents, two tokens with a nonzero error: exactly two restart, each from one of those tokens —
    decoder row the token's unit error, encoder column its centred input at the alive latents' mean norm, zero
    pre-activation at the batch mean — while every alive latent and every other parameter stays bit for bit; Adam's
    moments restart (first at zero, second at the alive latents' mean)."""
    d = _dictionary(sae)
    opt = _adam_after_one_step(d)
    before = {k: v.clone() for k, v in d.state_dict().items()}
    moments = {id(p): {k: v.clone() for k, v in opt.state[p].items()} for p in (d.W_enc, d.b_enc, d.W_dec)}
    g = torch.Generator().manual_seed(7)
    z = torch.randn(4, 6, generator=g)
    err = torch.zeros(4, 6)
    err[1], err[3] = torch.randn(6, generator=g), torch.randn(6, generator=g)
    dead = torch.zeros(8, dtype=torch.bool)
    dead[[2, 5, 6]] = True
    alive = ~dead
    idx = resample_dead(d, dead, z, err, opt=opt, world=World(), offset=0, n_global=4,
                        generator=torch.Generator().manual_seed(0))
    assert idx.tolist() == [2, 5]
    z_mean = z.mean(0)
    norm = before["W_enc"][:, alive].norm(dim=0).mean()
    used = set()
    for j in idx.tolist():
        t = next(t for t in (1, 3) if torch.allclose(d.W_dec[j], err[t] / err[t].norm(), atol=1e-6))
        used.add(t)
        enc = (z[t] - z_mean) / (z[t] - z_mean).norm() * norm
        torch.testing.assert_close(d.W_enc[:, j], enc, rtol=1e-5, atol=1e-6)
    assert used == {1, 3}
    torch.testing.assert_close(d.pre(z_mean[None])[0, idx], torch.zeros(2), rtol=0, atol=1e-5)
    keep = torch.ones(8, dtype=torch.bool)
    keep[idx] = False
    assert torch.equal(d.W_enc[:, keep], before["W_enc"][:, keep]) and torch.equal(d.W_dec[keep], before["W_dec"][keep])
    assert torch.equal(d.b_enc[keep], before["b_enc"][keep]) and torch.equal(d.b_dec, before["b_dec"])
    if not sae:
        assert torch.equal(d.W_skip, before["W_skip"])
    for p, dim in ((d.W_enc, 1), (d.b_enc, 0), (d.W_dec, 0)):
        st, old = opt.state[p], moments[id(p)]
        assert torch.equal(st["exp_avg"].index_select(dim, idx), torch.zeros_like(st["exp_avg"].index_select(dim, idx)))
        ref = old["exp_avg_sq"].index_select(dim, alive.nonzero().flatten()).mean(dim, keepdim=True)
        for j in idx.tolist():
            torch.testing.assert_close(st["exp_avg_sq"].select(dim, j), ref.squeeze(dim))
        kept = keep.nonzero().flatten()
        assert torch.equal(st["exp_avg"].index_select(dim, kept), old["exp_avg"].index_select(dim, kept))


def test_training_with_restarts_is_seeded_resumes_bit_for_bit_and_leaves_the_default_key(tiny_llama, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    m = tiny_llama
    kw = dict(width=128, k=4, tokens=4000, rows=2, ctx=64, progress=False, dead_tokens=100, resample_every=500,
              resample_until=0.9)
    counts = []
    whole = train_transcoders(m, [0, 1], cache=False, callback=lambda i: counts.append(i.get("resampled", {})), **kw)
    assert sum(whole.settings["resampled"].values()) == sum(sum(c.values()) for c in counts) > 0
    plain = train_transcoders(m, [0, 1], cache=False, **{**kw, "resample_every": 0})
    assert not torch.equal(plain[0].W_dec, whole[0].W_dec)  # the restarts changed the run

    def stop(info):
        if info["step"] == 9:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_transcoders(m, [0, 1], checkpoint_every=2, callback=stop, **kw)
    resumed = train_transcoders(m, [0, 1], checkpoint_every=2, **kw)
    for L in (0, 1):
        for k, v in whole[L].state_dict().items():
            assert torch.equal(v, resumed[L].state_dict()[k]), (L, k)
    assert resumed.settings["resampled"] == whole.settings["resampled"]
    assert m.attached_hook_count() == 0
    sites = transcoder_sites(m, [0, 1])
    # off (0), the two fields leave the key, so every dictionary trained before them keeps its cache folder
    assert TrainSettings(resample_until=0.3).key(sites) == TrainSettings().key(sites)
    assert TrainSettings(resample_every=1000).key(sites) != TrainSettings().key(sites)
    with pytest.raises(ValueError, match=r"resample_every=-1; allowed: an integer >= 0"):
        TrainSettings(resample_every=-1).check(m.d_model)
    with pytest.raises(ValueError, match=r"resample_until=0; allowed: a number in \(0, 1\]"):
        TrainSettings(resample_every=10, resample_until=0).check(m.d_model)


@pytest.mark.parametrize("act", ["relu", "softplus"])
def test_auxk_pulls_a_latent_switched_off_by_its_bias_only_under_softplus(tiny_llama, act):
    """A latent idle past ``dead_tokens`` whose encoder bias keeps its pre-activation below zero on every token: the
    ReLU AuxK term gives its bias no gradient at all; softplus gives it the gradient of the term computed by hand
    (coef · |e - softplus(pre_dead) W_dec|² / Σ|e|², the dead latents' top aux_k pre-activations per token). The
    living latents' gradients are the main loss's either way; relu stays out of the cache key."""
    m = tiny_llama
    sites = transcoder_sites(m, [1])
    s = TrainSettings(width=32, k=4, dead_tokens=100, aux_act=act).check(m.d_model)
    run = _Run(m, sites, s)
    (key, d), = run.dicts.items()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in d.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
        d.b_enc[:3] = -50.0                                   # latents 0-2: below zero on every token
    run.idle[key][:3] = 101               # idle past dead_tokens (100); the others 12 after this batch
    x, y = torch.randn(12, m.d_model, generator=g), torch.randn(12, m.d_model, generator=g)
    moments = torch.cat([torch.tensor([12.0, float(y.double().pow(2).sum())], dtype=torch.float64),
                         y.double().sum(0)])
    run._loss(key, d, x, y, moments)
    grad = d.b_enc.grad.clone()
    # the same loss by hand: main FVU term, plus the aux term over latents 0-2 (all dead, so aux_k = 3 of them)
    d.zero_grad()
    z, yn = x / d.in_scale, y / d.out_scale
    pre = d.pre(z)
    vals, idx = d.sparse(pre)
    err = yn - d.decode_sparse(vals, idx, z)
    total = float(moments[1]) - float(moments[2:].pow(2).sum()) / 12
    loss = err.pow(2).sum() / total
    if act == "softplus":
        e = err.detach()
        aux = (e - torch.nn.functional.softplus(pre[:, :3]) @ d.W_dec[:3]).pow(2).sum() / float(e.pow(2).sum())
        loss = loss + s.aux_coef * aux
    loss.backward()
    torch.testing.assert_close(grad, d.b_enc.grad, rtol=1e-4, atol=1e-7)
    if act == "relu":
        assert torch.equal(grad[:3], torch.zeros(3))
        assert s.key(sites) == TrainSettings(width=32, k=4, dead_tokens=100).key(sites)
    else:
        assert bool((grad[:3] != 0).all())
        assert s.key(sites) != TrainSettings(width=32, k=4, dead_tokens=100).key(sites)
    with pytest.raises(ValueError, match=r"aux_act='exp'; allowed: relu, softplus"):
        TrainSettings(aux_act="exp").check(m.d_model)
