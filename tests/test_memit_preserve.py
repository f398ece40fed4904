"""MEMIT's preserved subject keys (``preserve_weight`` μ, :mod:`interp.editing.preserve`): the solve against an
independent stacked least-squares fit with the preserved keys read from their own forwards, μ = 0 bit for bit
the plain edit, bad input, and the shipped subject list against its builder and the records it must avoid."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from interp.editing.memit import memit_edit
from interp.editing.preserve import SUBJECTS_FILE, preserve_subjects, subject_list

BUILD = Path(__file__).resolve().parents[1] / "data" / "build"
FAST = {"v_steps": 6, "templates": ((5, 1),)}
REQ = {"prompt": "{} is in the city of", "subject": "Tower", "target_new": " Rome"}


def keys_of(m, prompt, subject, templates, layer):
    """[templates, d_mlp] the key at ``layer`` at the subject's last token, one plain forward per template."""
    out = []
    for tpl in templates:
        text = tpl.replace("{}", prompt).replace("{}", subject)
        end = text.index("{}") if "{}" in text else None
        assert end is None
        cut = text[: text.rindex(subject) + len(subject)]
        c = m.cache(cut, [f"blocks.{layer}.mlp.hook_post"])
        out.append(c[f"blocks.{layer}.mlp.hook_post"][0, -1].double())
    return torch.stack(out)


def reverted(m, stats, lam, **hp):
    """A one-fact MEMIT edit at layer 1, reverted (its delta, keys and residual shares kept)."""
    e = memit_edit(m, [REQ], layers=[1], stats=stats, mom2_update_weight=lam, **hp, **FAST)
    e.revert()
    return e


def plain_edit(m, stats, lam, weight: str):
    """The plain edit, checked to be what the ``weight`` hyperparameter at 0 writes, bit for bit."""
    plain = reverted(m, stats, lam)
    assert torch.equal(reverted(m, stats, lam, **{weight: 0.0}).delta(1), plain.delta(1))
    return plain


def stacked_fit(k, r, stats, lam, rows):
    """ΔW [d_model, d_mlp] minimising |ΔW k - r|² + λ tr(ΔW C ΔWᵀ) + Σ_j |ΔW row_j|², as one least-squares system
    (C's square root from its eigendecomposition): the independent computation the solve is checked against."""
    evals, evecs = torch.linalg.eigh(stats[1].mom2)
    c_half = evecs @ torch.diag(evals.clamp_min(0).sqrt()) @ evecs.T
    a = torch.cat([k[None], math.sqrt(lam) * c_half, rows])
    b = torch.cat([r[None], torch.zeros(a.shape[0] - 1, r.shape[0], dtype=torch.float64)])
    return torch.linalg.lstsq(a, b).solution.T


def test_preserved_keys_are_rows_asked_to_keep_their_outputs(tiny3):
    """ΔW minimises |ΔW k̄ - r|² + λ tr(ΔW C ΔWᵀ) + μ mean_j |ΔW p_j|² over the preserved subjects' keys p_j (every
    context template), solved as a stacked least-squares system; the preserved keys' outputs move less than under
    the plain edit, and μ = 0 writes the plain edit's bits."""
    m, stats = tiny3
    lam, mu, count = 50.0, 200.0, 6
    plain = plain_edit(m, stats, lam, "preserve_weight")
    e = reverted(m, stats, lam, preserve_weight=mu, preserve_count=count)
    subjects = preserve_subjects(count, exclude=[REQ["subject"]])
    p = torch.cat([keys_of(m, REQ["prompt"], s, e.templates, 1) for s in subjects])          # [rows, d_mlp]
    k = keys_of(m, REQ["prompt"], REQ["subject"], e.templates, 1).mean(0)
    assert torch.allclose(e.keys[1][0], k, rtol=1e-4, atol=1e-6)
    expected = stacked_fit(k, e.resids[1][0], stats, lam, math.sqrt(mu / len(p)) * p)
    assert float((e.delta(1) - expected).norm() / expected.norm()) < 1e-4
    moved = lambda d: float((p @ d.T).norm())
    assert moved(e.delta(1)) < 0.5 * moved(plain.delta(1))


def test_preserve_subjects_skip_the_batch_and_check_the_count():
    pool = subject_list()
    first = preserve_subjects(3)
    assert first == list(pool[:3])
    assert preserve_subjects(3, exclude=[first[1].upper()]) == [pool[0], pool[2], pool[3]]
    for bad in (0, -1, len(pool) + 1, 2.5, True, "3"):
        with pytest.raises(ValueError, match=rf"preserve_count={bad!r}; allowed: an integer in 1\.\.{len(pool)}"):
            preserve_subjects(bad)


def test_the_mean_neighbour_key_is_one_row_per_prompt_asked_to_keep_its_output(tiny3):
    """``neighbour_mean_weight`` ν: ΔW minimises |ΔW k̄ - r|² + λ tr(ΔW C ΔWᵀ) + ν |ΔW m|², m the mean key of the
    preserved subjects read bare (no context template) under the prompt, read here from their own forwards; a large
    ν leaves m's output nearly unmoved, ν = 0 writes the plain edit's bits, and μ and ν together add their terms."""
    m, stats = tiny3
    lam, nu, count = 50.0, 400.0, 6
    plain = plain_edit(m, stats, lam, "neighbour_mean_weight")
    subjects = preserve_subjects(count, exclude=[REQ["subject"]])
    mean = torch.cat([keys_of(m, REQ["prompt"], s, ["{}"], 1) for s in subjects]).mean(0)          # [d_mlp]
    k = keys_of(m, REQ["prompt"], REQ["subject"], plain.templates, 1).mean(0)
    for n in (nu, 1e6):
        e = reverted(m, stats, lam, neighbour_mean_weight=n, preserve_count=count)
        expected = stacked_fit(k, e.resids[1][0], stats, lam, math.sqrt(n) * mean[None])
        assert float((e.delta(1) - expected).norm() / expected.norm()) < 1e-4
    assert float((e.delta(1) @ mean).norm()) < 0.01 * float((plain.delta(1) @ mean).norm())
    assert float((e.delta(1) @ k).norm()) > 0.5 * float((plain.delta(1) @ k).norm())   # the edit itself stays
    both = reverted(m, stats, lam, neighbour_mean_weight=nu, preserve_weight=200.0, preserve_count=count)
    p = torch.cat([keys_of(m, REQ["prompt"], s, both.templates, 1) for s in subjects])
    expected = stacked_fit(k, both.resids[1][0], stats, lam,
                           torch.cat([math.sqrt(200.0 / len(p)) * p, math.sqrt(nu) * mean[None]]))
    assert float((both.delta(1) - expected).norm() / expected.norm()) < 1e-4


def test_bad_preserve_hparams_are_refused(tiny3):
    m, stats = tiny3
    digest = m.weights_digest()
    for bad in (-1.0, float("inf"), float("nan"), "1", True):
        with pytest.raises(ValueError, match=r"preserve_weight=.*allowed: a finite number >= 0"):
            memit_edit(m, [REQ], layers=[0, 1], stats=stats, preserve_weight=bad)
    for bad in (-1.0, float("inf"), "1"):
        with pytest.raises(ValueError, match=r"neighbour_mean_weight=.*allowed: a finite number >= 0 \(0: no mean"):
            memit_edit(m, [REQ], layers=[0, 1], stats=stats, neighbour_mean_weight=bad)
    with pytest.raises(ValueError, match=r"preserve_count"):
        memit_edit(m, [REQ], layers=[0, 1], stats=stats, preserve_weight=1.0, preserve_count=0)
    with pytest.raises(ValueError, match=r"preserve_count=99999999; allowed: an integer in 1\.\."):
        memit_edit(m, [REQ], layers=[0, 1], stats=stats, preserve_weight=1.0, preserve_count=99_999_999, **FAST)
    assert m.weights_digest() == digest


def test_the_subject_list_is_its_builders_and_names_no_record_subject():
    sys.path.insert(0, str(BUILD))
    try:
        import build_preserve_subjects as build
    finally:
        sys.path.remove(str(BUILD))
    doc = json.loads(SUBJECTS_FILE.read_text(encoding="utf-8"))
    assert build.build() == doc                                      # the shipped file is the builder's output
    named = build.named_subjects()
    assert len(named) > 1000 and len(doc["subjects"]) > 5000
    assert not {s.lower() for s in doc["subjects"]} & named          # no record or pool subject is preserved
    assert not any("(" in s for s in doc["subjects"])


def test_nearest_subjects_are_the_most_alike_bare_keys(tiny3, monkeypatch):
    """``preserve_select="nearest"``: per prompt, the list's subjects whose bare key (centred on the list's mean)
    has the highest cosine with one of the batch's, recomputed here from one plain forward per subject; the
    batch's own subjects are never picked; an edit with it solves with those subjects' keys."""
    from interp.editing import preserve
    m, stats = tiny3
    pool = subject_list()[:30] + ("Tower",)
    monkeypatch.setattr(preserve, "subject_list", lambda: pool)
    batch = ["Tower", pool[3]]
    got = preserve.nearest_subjects(m, REQ["prompt"] + " ", batch, 5, 1)
    keys = torch.cat([keys_of(m, REQ["prompt"], s, ["{}"], 1) for s in pool])
    ours = torch.cat([keys_of(m, REQ["prompt"], s, ["{}"], 1) for s in batch])
    mean = keys.mean(0)
    unit = lambda x: (x - mean) / (x - mean).norm(dim=1, keepdim=True)
    score = (unit(keys) @ unit(ours).T).max(1).values
    score[[pool.index(s) for s in batch]] = -math.inf
    assert got == [pool[i] for i in score.topk(5).indices.tolist()]
    assert not set(got) & set(batch)
    e = memit_edit(m, [REQ], layers=[1], stats=stats, mom2_update_weight=50.0, preserve_weight=200.0,
                   preserve_count=4, preserve_select="nearest", **FAST)
    e.revert()
    near = preserve.nearest_subjects(m, REQ["prompt"], [REQ["subject"]], 4, 1)
    f = memit_edit(m, [REQ], layers=[1], stats=stats, mom2_update_weight=50.0, preserve_weight=200.0,
                   preserve_count=4, **FAST)
    f.revert()
    assert near != preserve_subjects(4, exclude=[REQ["subject"]])
    assert float((e.delta(1) - f.delta(1)).norm()) > 0
    with pytest.raises(ValueError, match=r"preserve_select='all'; allowed: 'first', 'nearest'"):
        memit_edit(m, [REQ], layers=[1], stats=stats, preserve_weight=1.0, preserve_select="all")
