"""Gemma's dead latents on dev: is the encoder bias what switches them off? (see README.md, "Frozen encoder bias")

`crowding.py` found the dead latents of the runs closest to today's switched off by strongly negative encoder
biases. This trains layers 0 and 5 as run.py does (today's settings, 2M train tokens) with one change: the encoder
bias keeps its start (the data start's centring, b_enc = -E[z] W_enc) and is never trained, so each latent's
pre-activation is its direction read from the mean input, (z - E z) · W_enc[:, j], the form of Gao et al. 2024.
It is done here by reading b_enc detached in the pre-activation (no gradient reaches it; Adam skips a parameter
with no gradient), in this process only, with the cache off: a study of one change, not a trainer option, and
nothing it trains can be mistaken for today's cached dictionaries. Scored as run.py scores (dev, FVU, neurons,
dead latents over the whole split); one row appended to results.jsonl ("study": "bias").

    .venv/bin/python studies/features_gemma_dead/frozen_bias.py --threads 2      # about 40 min on the AMD EPYC

`--config frozen_b_enc_resample_200k` adds run.py's `resample_200k` restarts (every 200k tokens in the first half)
to the frozen bias (README.md, "Frozen bias with restarts"); its row has "study": "bias_restarts". A restart
writes the restarted latent's bias (zero at the batch's mean input), and that bias then stays frozen too.
`--config frozen_b_enc_resample_200k_seed1` is the same pair with seed 1 ("study": "seeds").
"""

import argparse
import time

import torch

import interp
from interp.analyses.features.dictionary import Dictionary
from interp.core.provenance import provenance

from run import CONFIGS, LAYERS, score_and_store

FROZEN = {"b_enc": "frozen at the data start"}
VARIANTS = {"frozen_b_enc": ({}, "bias"),
            "frozen_b_enc_resample_200k": (CONFIGS["resample_200k"], "bias_restarts"),
            # README, "Seed noise": the pair again with today_seed1's seed
            "frozen_b_enc_resample_200k_seed1": ({**CONFIGS["resample_200k"], **CONFIGS["today_seed1"]}, "seeds")}


def pre_frozen_bias(self, z: torch.Tensor) -> torch.Tensor:
    if self.kind == "sae":
        z = z - self.b_dec
    return z @ self.W_enc + self.b_enc.detach()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-tokens", type=int, default=200_000)
    ap.add_argument("--config", default="frozen_b_enc", choices=sorted(VARIANTS))
    args = ap.parse_args()
    extra, study = VARIANTS[args.config]
    torch.set_num_threads(args.threads)
    ran = provenance(f"python studies/features_gemma_dead/frozen_bias.py --threads {args.threads} "
                     f"--eval-tokens {args.eval_tokens} --config {args.config}")
    model = interp.load("gemma3-270m")
    Dictionary.pre = pre_frozen_bias
    t = time.time()
    ds = interp.train_transcoders(model, LAYERS, cache=False, progress=True, **extra)
    train_s = time.time() - t
    score_and_store(model, ds, args.config, {**FROZEN, **extra}, study, train_s, ran, args.eval_tokens)


if __name__ == "__main__":
    main()
