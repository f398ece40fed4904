"""Why do latents die in the second half of training: crowded out of the top k, or switched off? (see README.md)

The restarts study left a reading untested: the trained latents' encoders grow and push the rare ones out of the
top k. This reads the cached dictionaries of the restart runs (layers 0 and 5; run.py trained them, `today`'s are
no longer cached) over the whole dev split, and asks of each latent that never fires:
- is its pre-activation ever positive, and how close does it come to its token's k-th largest pre-activation (the
  margin: crowded out means positive pre-activations that stay below the others');
- is the top k full at all (how many tokens have fewer than k positive pre-activations);
- its encoder bias and encoder column's norm against those of the latents that fire (crowding by the others'
  growth would show as alive encoders grown larger than the dead ones').
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
from interp.core.provenance import provenance

from run import CONFIGS, LAYERS

HERE = Path(__file__).resolve().parent
CACHED = ("resample_200k", "resample_100k_to_0.9")


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


def quartiles(v: torch.Tensor) -> list | None:
    return [round(float(q), 4) for q in torch.quantile(v.float(), torch.tensor([.25, .5, .75]))] if v.numel() else None


def layer_row(d, z, y) -> dict:
    k, width, n = d.k, d.width, z.shape[0]
    fired = torch.zeros(width, dtype=torch.long)
    positive = torch.zeros(width, dtype=torch.long)
    best = torch.full((width,), -float("inf"))            # each latent's largest pre-activation over dev
    margin = torch.full((width,), -float("inf"))          # max over tokens of pre - (the token's k-th largest pre)
    kth, unfilled, l0, err = [], 0, 0, 0.0
    for lo in range(0, n, 4096):
        zz, yy = z[lo:lo + 4096], y[lo:lo + 4096]
        pre = d.pre(zz)                                    # [b, width]
        vals, idx = pre.topk(k, dim=-1)                    # [b, k] sorted, descending
        on = torch.zeros_like(pre, dtype=torch.bool).scatter_(1, idx, vals > 0)
        fired += on.sum(0)
        positive += (pre > 0).sum(0)
        best = torch.maximum(best, pre.max(0).values)
        margin = torch.maximum(margin, (pre - vals[:, -1:]).max(0).values)
        kth.append(vals[:, -1])
        unfilled += int((vals[:, -1] <= 0).sum())          # tokens with fewer than k positive pre-activations
        l0 += int(on.sum())
        err += float((d.decode_sparse(*d.sparse(pre), zz) - yy).double().pow(2).sum())
    dead = fired == 0
    yd = y.double()
    return {"tokens": n, "width": width, "k": k, "l0": round(l0 / n, 3), "fvu": round(err / float((yd - yd.mean(0)).pow(2).sum()), 5),
            "kth_pre_quartiles": quartiles(torch.cat(kth)), "tokens_with_k_not_filled": round(unfilled / n, 4),
            "dead": int(dead.sum()), "dead_ever_positive": int((dead & (positive > 0)).sum()),
            "dead_max_pre_quartiles": quartiles(best[dead]),
            "dead_margin_to_kth_quartiles": quartiles(margin[dead]),
            "b_enc_quartiles_dead": quartiles(d.b_enc[dead]), "b_enc_quartiles_alive": quartiles(d.b_enc[~dead]),
            "encoder_norm_quartiles_dead": quartiles(d.W_enc.norm(dim=0)[dead]),
            "encoder_norm_quartiles_alive": quartiles(d.W_enc.norm(dim=0)[~dead]),
            "alive_firing_rate_quartiles": quartiles(fired[~dead].double() / n)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=157_268)     # the whole dev split (run.py's rows and context)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = interp.load("gemma3-270m")
    ran = provenance(f"python studies/features_gemma_dead/crowding.py --tokens {args.tokens} --threads {args.threads}")
    out = []
    with torch.no_grad():
        for name in CACHED:
            ds = cached_transcoders(model, LAYERS, **CONFIGS[name])      # run.py trained them; nothing is trained here
            if ds is None:
                raise SystemExit(f"{name}'s dictionaries are not in the cache: run.py --only {name} trains them")
            z, y, seen = dev_sites(model, ds, args.tokens)
            for L in LAYERS:
                row = {"config": name, "layer": L, **layer_row(ds[L], z[L], y[L]), "provenance": ran}
                print(json.dumps(row), flush=True)
                out.append(row)
    (HERE / "crowding.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))


if __name__ == "__main__":
    main()
