"""Are the latents that never fire on dev dead in training too, or alive but rare? (see README.md)

For each configuration's cached dictionaries (layers 0 and 5; run.py trained them), every latent's firing count
over the first N counted tokens of the dev split and of the train split (the text it was trained on), same rows
and context as the quality table. Prints one JSON line per configuration and layer.

    .venv/bin/python studies/features_gemma_dead/diagnose.py [--tokens 157268] [--threads 2]
"""

import argparse
import json

import torch

import interp
from interp.analyses.features.data import batches, counted
from interp.core.hooks import capture

from run import CONFIGS, LAYERS


def fire_counts(model, ds, split: str, tokens: int) -> dict:
    names = [ds[L].site.read for L in LAYERS]
    counts = {L: torch.zeros(ds[L].width, dtype=torch.long) for L in LAYERS}
    seen = 0
    with torch.no_grad():
        for toks in batches(model, split, rows=4, seed=0, ctx=256):
            if seen >= tokens:
                break
            flat = counted(toks, model.bos_token_id).reshape(-1)
            store, _ = capture(model, toks, names, stop=True, description="diagnose")
            for L in LAYERS:
                x = store[ds[L].site.read].reshape(-1, model.d_model)[flat].float()
                counts[L] += (ds[L].encode(x) > 0).sum(0)
            seen += int(flat.sum())
    return {"tokens": seen, "counts": counts}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=157_268)     # the dev split's counted tokens (run.py's rows)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = interp.load("gemma3-270m")
    for name, overrides in CONFIGS.items():
        ds = interp.train_transcoders(model, LAYERS, progress=False, **overrides)   # cached by run.py
        dev, train = fire_counts(model, ds, "dev", args.tokens), fire_counts(model, ds, "train", args.tokens)
        for L in LAYERS:
            d, t = dev["counts"][L], train["counts"][L]
            dead = d == 0
            print(json.dumps({"config": name, "layer": L, "dev_tokens": dev["tokens"], "train_tokens": train["tokens"],
                              "dead_on_dev": int(dead.sum()), "of_those_dead_on_train": int((dead & (t == 0)).sum()),
                              "of_those_firing_on_train_at_most_5": int((dead & (t > 0) & (t <= 5)).sum()),
                              "dead_on_train": int((t == 0).sum()), "width": int(d.numel())}), flush=True)


if __name__ == "__main__":
    main()
