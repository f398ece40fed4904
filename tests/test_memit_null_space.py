"""MEMIT's update kept out of the leading directions of the text's keys (``null_space_mass`` q, after AlphaEdit):
the basis against C's eigendecomposition, the edit against an independent least-squares fit within that span, the
leading directions mapped to nothing, q = 0 bit for bit the plain edit, and bad input."""

import math

import pytest
import torch

from interp.editing.memit import memit_edit
from interp.editing.memit_solve import null_space_basis

FAST = {"v_steps": 6, "templates": ((5, 1),)}
REQ = {"prompt": "{} is in the city of", "subject": "Tower", "target_new": " Rome"}


def reverted(m, stats, lam, **hp):
    e = memit_edit(m, [REQ], layers=[1], stats=stats, mom2_update_weight=lam, **hp, **FAST)
    e.revert()
    return e


@pytest.mark.parametrize("mass", [0.0, 0.5, 0.9, 0.99])
def test_the_basis_is_what_is_left_of_c_after_its_leading_share(tiny3, mass):
    """U is orthonormal, spans C's eigenvectors with the smallest eigenvalues, and the directions taken away are
    the fewest leading ones whose eigenvalues reach ``mass`` of the trace."""
    _, stats = tiny3
    c = stats[1].mom2.double()
    u = null_space_basis(c, mass)
    d, m = c.shape[0], u.shape[1]
    assert torch.allclose(u.T @ u, torch.eye(m, dtype=torch.float64), atol=1e-10)
    vals = torch.linalg.eigvalsh(c).flip(0).clamp_min(0)                        # descending
    lead = d - m
    assert torch.allclose(torch.linalg.eigvalsh(u.T @ c @ u).flip(0), vals[lead:], atol=1e-9 * float(vals[0]))
    share = torch.cumsum(vals, 0) / vals.sum()
    if mass == 0:
        assert m == d
    else:
        assert float(share[lead - 1]) >= mass and (lead == 1 or float(share[lead - 2]) < mass)


def test_the_edit_is_the_least_squares_fit_within_the_span_and_leaves_the_leading_keys(tiny3):
    """ΔW = Y Uᵀ with Y minimising |Y Uᵀ k̄ - r|² + λ tr(Y Uᵀ C U Yᵀ), fitted here as one stacked least-squares
    system; the leading directions of C map to nothing, and q = 0 writes the plain edit's bits."""
    m, stats = tiny3
    lam, q = 50.0, 0.9
    plain = reverted(m, stats, lam)
    assert torch.equal(reverted(m, stats, lam, null_space_mass=0.0).delta(1), plain.delta(1))
    e = reverted(m, stats, lam, null_space_mass=q)
    c = stats[1].mom2.double()
    u = null_space_basis(c, q)
    k, r = e.keys[1][0].double(), e.resids[1][0].double()
    evals, evecs = torch.linalg.eigh(u.T @ c @ u)
    c_half = evecs @ torch.diag(evals.clamp_min(0).sqrt()) @ evecs.T
    a = torch.cat([(k @ u)[None], math.sqrt(lam) * c_half])
    b = torch.cat([r[None], torch.zeros(a.shape[0] - 1, r.shape[0], dtype=torch.float64)])
    expected = torch.linalg.lstsq(a, b).solution.T @ u.T                       # [d_model, d_mlp]
    delta = e.delta(1).double()
    assert float((delta - expected).norm() / expected.norm()) < 1e-4
    vals, vecs = torch.linalg.eigh(c)
    lead = vecs[:, vals.shape[0] - (c.shape[0] - u.shape[1]):]                 # the directions taken away
    assert float((delta @ lead).norm()) < 1e-6 * float(delta.norm())
    assert float((plain.delta(1).double() @ lead).norm()) > 1e-2 * float(plain.delta(1).norm())  # it did use them


def test_bad_null_space_mass_is_refused_and_leaves_the_weights(tiny3):
    m, stats = tiny3
    digest = m.weights_digest()
    for bad in (1.0, -0.1, 2, float("nan"), "0.5", True):
        with pytest.raises(ValueError, match=r"null_space_mass=.*allowed: a number in \[0, 1\)"):
            memit_edit(m, [REQ], layers=[0, 1], stats=stats, null_space_mass=bad)
    with pytest.raises(ValueError, match=r"null_space_mass=1\.5; allowed"):
        null_space_basis(stats[1].mom2, 1.5)
    with pytest.raises(ValueError, match=r"null_space_mass=0\.9 takes away every direction of C \(d_mlp 3\)"):
        null_space_basis(torch.eye(3), 0.9)               # shares 1/3, 2/3, 1: 0.9 needs all three
    assert null_space_basis(torch.eye(3), 0.6).shape == (3, 1)
    assert m.weights_digest() == digest
