"""Is `replacement_attention`'s clean-run difference a TopK selection flipped by rounding? (a check; about 2 min)

    .venv/bin/python studies/graphs_faithfulness/topk_flips.py [--model NAME] [--threads 2]

`freeze_parts.py --check-only` put SmolLM2's worst clean-run difference (2.3e-3) in ``replacement_attention``
alone. For each of the same 50 prompts this runs the clean forward of ``replacement_exact`` and of
``replacement_attention``, records every transcoder's activations in both, and counts the positions (BOS left
out, as the graph zeroes it) whose set of active features differs between the two. Prints the prompts with the
largest differences and the largest difference among prompts with no changed set. Writes nothing.
"""

import argparse

import torch

import interp
from interp.analyses.graphs.replacement import LocalReplacement
from interp.cli.features import add_dictionary_options, dictionaries_for

from freeze_parts import condition_hooks, logit_value
from run import known_facts


def clean_run(model, lrm, toks, tid, condition):
    """(logit, {layer: activations [1, pos, width]}) of ``condition``'s clean forward."""
    acts = {}
    for i, d in lrm.dicts.items():
        def encode(x, i=i, f=type(d).encode.__get__(d)):
            a = f(x)
            acts[i] = a.detach().clone()
            return a
        d.encode = encode                          # an instance attribute over the class's method, removed below
    try:
        return logit_value(model, toks, tid, condition_hooks(lrm, condition, None, [])), acts
    finally:
        for d in lrm.dicts.values():
            del d.encode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    add_dictionary_options(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = interp.load(args.model)
    tc = dictionaries_for(args, model)
    pairs = interp.patching.fact_pairs(model, known_facts(model, "test"), n=args.n, seed=args.seed)
    found = []
    for prompt, answer in zip(pairs.clean, pairs.answers):
        lrm = LocalReplacement(model, tc, prompt)
        toks, tid = lrm.tokens, model.to_single_token(answer)
        real = logit_value(model, toks, tid, [])
        v0, a0 = clean_run(model, lrm, toks, tid, "replacement_exact")
        v1, a1 = clean_run(model, lrm, toks, tid, "replacement_attention")
        flips = sum(int(((a0[i][0, 1:] != 0) != (a1[i][0, 1:] != 0)).any(-1).sum()) for i in a0)
        found.append((abs(v1 - real), abs(v0 - real), flips, prompt))
    found.sort(reverse=True)
    for d1, d0, flips, prompt in found[:5]:
        print(f"replacement_attention {d1:.2e}, replacement_exact {d0:.2e}, positions with a changed set {flips}: "
              f"{prompt!r}")
    print(f"prompts with a changed set: {sum(f[2] > 0 for f in found)} of {len(found)}; largest difference without "
          f"one: {max([f[0] for f in found if f[2] == 0], default=float('nan')):.2e}")


if __name__ == "__main__":
    main()
