"""Resampling dead latents during training (after Bricken et al. 2023, "Towards Monosemanticity"), for the trainer
of :mod:`.train` (``TrainSettings.resample_every``).

AuxK pulls a dead latent back only through its pre-activations, so a latent whose encoder has drifted to where
nothing reaches the top k stays dead (Gemma's layer 0, ``studies/features_gemma_dead``). Resampling starts it
again from a token the dictionary explains worst: at a resampling step the dead latents (idle for more than
``dead_tokens``) take, one each, tokens of the current global batch drawn without replacement with probability
proportional to their squared reconstruction error (seeded), and for a drawn token with input z and error e::

    W_dec[j]    = e / |e|                                  # the latent writes what is missing there
    W_enc[:, j] = (z - z̄) / |z - z̄| · mean |W_enc[:, i]|   # reads the token's centred input, at the alive latents'
    b_enc[j]    = -(z̄ - c) · W_enc[:, j]                   #   encoder norm (c = b_dec for an SAE, else 0)

(z̄: the batch's mean input.) Its Adam moments restart: the first moment at zero, the second at the alive latents'
mean, so its first steps are the size of the others' (zeroed second moments would make them ~3x larger at this
β2). Its idle counter restarts at zero. The draw sees the whole global batch, so several ranks resample exactly as
one process does.
"""

from __future__ import annotations

import torch

from ..accumulate import World, all_reduce_sum


@torch.no_grad()
def resample_dead(d, dead: torch.Tensor, z: torch.Tensor, err: torch.Tensor, *, opt: torch.optim.Optimizer,
                  world: World, offset: int, n_global: int, generator: torch.Generator) -> torch.Tensor:
    """Restart the latents ``dead`` [width] bool of dictionary ``d`` from this rank's batch share (normalised inputs
    ``z`` [n, d_in], errors ``err`` [n, d_out], global positions ``offset``...``offset + n``); returns the
    indices restarted (fewer than the dead ones when the batch has fewer tokens with a nonzero error)."""
    weights = torch.zeros(n_global, dtype=torch.float64)
    weights[offset:offset + z.shape[0]] = err.double().pow(2).sum(1)
    sums = torch.cat([weights, z.double().sum(0)])
    sums = all_reduce_sum(sums, world)
    weights, z_mean = sums[:n_global], (sums[n_global:] / n_global).float()
    dead_idx = dead.nonzero().flatten()
    m = min(dead_idx.numel(), int((weights > 0).sum()))
    if m == 0:
        return dead_idx[:0]
    chosen = torch.multinomial(weights, m, replacement=False, generator=generator)      # [m] global positions
    rows = torch.zeros(m, d.d_in + d.d_out, dtype=torch.float32)
    mine = (chosen >= offset) & (chosen < offset + z.shape[0])
    local = chosen[mine] - offset
    rows[mine] = torch.cat([z[local], err[local]], 1).float()
    rows = all_reduce_sum(rows, world)
    idx = dead_idx[:m]
    alive = ~dead
    norm = d.W_enc[:, alive].norm(dim=0).mean() if alive.any() else torch.tensor(1.0)
    enc = rows[:, :d.d_in] - z_mean
    enc = enc / enc.norm(dim=1, keepdim=True).clamp_min(1e-12) * norm                  # [m, d_in]
    dec = rows[:, d.d_in:]
    dec = dec / dec.norm(dim=1, keepdim=True).clamp_min(1e-12)                         # [m, d_out]
    centre = z_mean - d.b_dec if d.kind == "sae" else z_mean
    d.W_enc[:, idx] = enc.T
    d.b_enc[idx] = -(enc @ centre)
    d.W_dec[idx] = dec
    alive_idx = alive.nonzero().flatten()
    for p, dim in ((d.W_enc, 1), (d.b_enc, 0), (d.W_dec, 0)):
        state = opt.state.get(p)
        if not state:
            continue
        state["exp_avg"].index_fill_(dim, idx, 0.0)
        sq = state["exp_avg_sq"]
        if alive_idx.numel():
            ref = sq.index_select(dim, alive_idx).mean(dim, keepdim=True)
            sq.index_copy_(dim, idx, ref.expand_as(sq.index_select(dim, idx)).contiguous())
        else:
            sq.index_fill_(dim, idx, 0.0)
    return idx
