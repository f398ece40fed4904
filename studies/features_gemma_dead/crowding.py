"""Why do latents die in the second half of training: crowded out of the top k, or switched off? (see README.md)

The restarts study left a reading untested: the trained latents' encoders grow and push the rare ones out of the
top k. This reads the cached dictionaries of the restart runs (layers 0 and 5; run.py trained them, `today`'s are
no longer cached) over the whole dev split, and asks of each latent that never fires:
- is its pre-activation ever positive (it would fire but for the top k), and how close does it come to its token's
  k-th largest pre-activation (the margin, in units of the median k-th value);
- its encoder column's norm against the latents that fire;
- would it fire if the same dictionary were read with one threshold for every token (BatchTopK's inference rule:
  the threshold that keeps the mean L0 at k over dev), and what that does to FVU at the same mean L0.
It chooses nothing; one JSON line per configuration and layer in crowding.jsonl.

    .venv/bin/python studies/features_gemma_dead/crowding.py [--threads 2]
"""

import argparse
import json
from pathlib import Path

import torch

import interp
from interp.analyses.features.data import batches, counted
from interp.analyses.features.train import cached_transcoders
from interp.core.hooks import capture

from run import CONFIGS, LAYERS

HERE = Path(__file__).resolve().parent
CACHED = ("resample_200k", "resample_100k_to_0.9")
TOP = 64   # pre-activations kept per token to place the shared threshold (a token rarely holds more above it)


def dev_sites(model, ds, tokens: int):
    """Inputs z (normalised) and targets y (normalised) at each layer's site, over the first ``tokens`` counted
    dev tokens (the quality table's rows and context)."""
    names = sorted({n for L in LAYERS for n in (ds[L].site.read, ds[L].site.write)})
    zs, ys, seen = {L: [] for L in LAYERS}, {L: [] for L in LAYERS}, 0
    with torch.no_grad():
        for toks in batches(model, "dev", rows=4, seed=0, ctx=256):
            if seen >= tokens:
                break
            flat = counted(toks, model.bos_token_id).reshape(-1)
            store, _ = capture(model, toks, names, stop=True, description="crowding")
            for L in LAYERS:
                d = ds[L]
                zs[L].append(d.normalise(store[d.site.read].reshape(-1, model.d_model)[flat].float()))
                ys[L].append(store[d.site.write].reshape(-1, model.d_model)[flat].float() / d.out_scale)
            seen += int(flat.sum())
    return {L: torch.cat(zs[L]) for L in LAYERS}, {L: torch.cat(ys[L]) for L in LAYERS}, seen


def layer_row(d, z, y) -> dict:
    k, width, n = d.k, d.width, z.shape[0]
    fired = torch.zeros(width, dtype=torch.long)
    positive = torch.zeros(width, dtype=torch.long)
    margin = torch.full((width,), -float("inf"))          # max over tokens of pre - (token's k-th largest pre)
    tops, kth = [], []
    for lo in range(0, n, 4096):
        pre = d.pre(z[lo:lo + 4096])                       # [b, width]
        vals, idx = pre.topk(TOP, dim=-1)                  # sorted, descending
        kv = vals[:, k - 1:k]                              # [b, 1] the k-th largest
        on = torch.zeros_like(pre, dtype=torch.bool).scatter_(1, idx[:, :k], vals[:, :k] > 0)
        fired += on.sum(0)
        positive += (pre > 0).sum(0)
        margin = torch.maximum(margin, (pre - kv).max(0).values)
        tops.append(vals)
        kth.append(kv.flatten())
    dead = fired == 0
    kth = torch.cat(kth)
    # one threshold for every token, keeping k actives a token on average (BatchTopK at inference)
    allv = torch.cat(tops).flatten()
    theta = float(allv.kthvalue(allv.numel() - n * k + 1).values)
    fired_t, l0_t = torch.zeros(width, dtype=torch.long), 0
    err_topk = err_thr = 0.0
    for lo in range(0, n, 4096):
        zz, yy = z[lo:lo + 4096], y[lo:lo + 4096]
        pre = d.pre(zz)
        v, i = d.sparse(pre)
        err_topk += float((d.decode_sparse(v, i, zz) - yy).pow(2).sum())
        keep = pre > max(theta, 0.0)
        fired_t += keep.sum(0)
        l0_t += int(keep.sum())
        dense = torch.where(keep, pre, torch.zeros_like(pre))
        err_thr += float((dense @ d.W_dec + d.b_dec + zz @ d.W_skip - yy).pow(2).sum())
    var = float((y.double() - y.double().mean(0)).pow(2).sum())
    enc = d.W_enc.norm(dim=0)
    med_kth = float(kth.median())
    return {"tokens": n, "width": width, "k": k, "dead": int(dead.sum()),
            "dead_ever_positive": int((dead & (positive > 0)).sum()),
            "dead_margin_over_median_kth_quartiles": [round(float(q) / med_kth, 3) for q in
                                                      torch.quantile(margin[dead], torch.tensor([.25, .5, .75]))]
            if dead.any() else None,
            "median_kth_pre": round(med_kth, 4),
            "encoder_norm_median_dead_alive": [round(float(enc[dead].median()), 4) if dead.any() else None,
                                               round(float(enc[~dead].median()), 4)],
            "b_enc_median_dead_alive": [round(float(d.b_enc[dead].median()), 4) if dead.any() else None,
                                        round(float(d.b_enc[~dead].median()), 4)],
            "shared_threshold": round(theta, 4), "shared_threshold_mean_l0": round(l0_t / n, 3),
            "dead_with_shared_threshold": int((fired_t == 0).sum()),
            "of_topk_dead_firing_with_shared_threshold": int((dead & (fired_t > 0)).sum()),
            "fvu_topk": round(err_topk / var, 5), "fvu_shared_threshold": round(err_thr / var, 5)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=157_268)     # the whole dev split (run.py's rows and context)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = interp.load("gemma3-270m")
    out = []
    with torch.no_grad():
        for name in CACHED:
            ds = cached_transcoders(model, LAYERS, **CONFIGS[name])      # run.py trained them; nothing is trained here
            if ds is None:
                raise SystemExit(f"{name}'s dictionaries are not in the cache: run.py --only {name} trains them")
            z, y, seen = dev_sites(model, ds, args.tokens)
            for L in LAYERS:
                row = {"config": name, "layer": L, **layer_row(ds[L], z[L], y[L])}
                print(json.dumps(row), flush=True)
                out.append(row)
    (HERE / "crowding.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))


if __name__ == "__main__":
    main()
