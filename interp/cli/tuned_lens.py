"""``interp train-lens``: train (or load from the cache) the tuned lens of a model, and show how it compares with
the logit lens on held-out text (and, with ``--facts N``, prediction depth on fact records)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..analyses.tuned_lens import DEFAULTS, INITS, evaluate_lens, prediction_depth, train_tuned_lens
from ..core.inputs import check_int
from ..editing.facts import load_records
from .common import add_common, load_model


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("train-lens", help="train the tuned lens (cached) and compare it with the logit lens")
    p.add_argument("--tokens", type=int, default=DEFAULTS["tokens"],
                   help=f"training positions captured from the Wikipedia text (default {DEFAULTS['tokens']})")
    p.add_argument("--steps", type=int, default=DEFAULTS["steps"],
                   help=f"KL optimisation steps after the least-squares start (default {DEFAULTS['steps']})")
    p.add_argument("--kl-tokens", type=int, default=DEFAULTS["kl_tokens"],
                   help=f"captured positions kept for the KL steps (default {DEFAULTS['kl_tokens']})")
    p.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"],
                   help=f"positions per KL step (default {DEFAULTS['batch_size']})")
    p.add_argument("--init", choices=INITS, default=DEFAULTS["init"],
                   help="lstsq: least-squares start (default); identity: start from the logit lens, as the paper")
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    p.add_argument("--retrain", action="store_true", help="ignore a cached lens with the same settings")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's; on a busy 2-core machine 1 is often faster)")
    p.add_argument("--eval-tokens", type=int, default=512,
                   help="held-out positions for the KL / perplexity table (default 512; 0 skips it)")
    p.add_argument("--facts", type=int, default=0,
                   help="prediction depth on the first N test-split fact records (default 0: skip)")
    p.add_argument("--out", default=None,
                   help="save the held-out KL / perplexity plot as this PNG (prediction depth: <stem>_depth.png)")
    add_common(p)
    p.set_defaults(func=cli_train_lens)


def cli_train_lens(args, model=None) -> dict:
    """Handler of ``interp train-lens``; ``model`` lets tests pass a model they already hold."""
    check_int("--tokens", args.tokens, 16)
    check_int("--steps", args.steps, 0)
    check_int("--kl-tokens", args.kl_tokens, 1)
    check_int("--batch-size", args.batch_size, 1)
    check_int("--seed", args.seed, 0)
    check_int("--eval-tokens", args.eval_tokens, 0)
    check_int("--facts", args.facts, 0)
    check_int("--threads", args.threads, 1, allow_none=True)
    if args.out and not Path(args.out).parent.is_dir():
        raise FileNotFoundError(f"--out {args.out}: folder {str(Path(args.out).parent)!r} does not exist")
    records = load_records(split="test")[: args.facts] if args.facts else []
    if args.threads:
        torch.set_num_threads(args.threads)
    if model is None:
        model = load_model(args)
    lens = train_tuned_lens(model, tokens=args.tokens, steps=args.steps, kl_tokens=args.kl_tokens,
                            batch_size=args.batch_size, init=args.init, seed=args.seed, retrain=args.retrain,
                            progress=True)
    data = {"lens": lens.to_json(), "path": str(lens.path) if lens.path else None, "figures": []}
    lines = [lens.summary(), f"saved at {lens.path}" if lens.path else "not saved (cache off)"]
    if args.eval_tokens:
        ev = evaluate_lens(model, lens, tokens=args.eval_tokens, progress=True)
        data["evaluation"] = ev.to_json()
        lines += [ev.summary(), eval_table(ev)]
        if args.out:
            ev.plot(out=args.out)
            data["figures"].append(str(args.out))
    if records:
        depth = prediction_depth(model, records, lens, progress=True)
        data["prediction_depth"] = depth.to_json()
        lines.append(depth.summary())
        if args.out:
            out = Path(args.out)
            dpath = out.with_name(f"{out.stem}_depth{out.suffix or '.png'}")
            depth.plot(out=dpath)
            data["figures"].append(str(dpath))
    data["_text"] = "\n".join(lines)
    return data


def eval_table(ev) -> str:
    """The held-out table as text: KL (bits) and perplexity per layer, three lenses."""
    f = ev.to_frame()
    head = f"{'layer':>7}  {'KL logit':>9} {'KL tuned':>9} {'KL bias':>9} {'ratio':>6}   " \
           f"{'ppl logit':>10} {'ppl tuned':>10} {'ppl bias':>10}"
    rows = [head]
    for r, rec in f.iterrows():
        ratio = "" if r == ev.n_layers else f"{rec['kl_ratio_tuned_logit']:.3f}"
        rows.append(f"{rec['label']:>7}  {rec['kl_logit_bits']:9.3f} {rec['kl_tuned_bits']:9.3f} "
                    f"{rec['kl_bias_bits']:9.3f} {ratio:>6}   {rec['ppl_logit']:10.4g} {rec['ppl_tuned']:10.4g} "
                    f"{rec['ppl_bias']:10.4g}")
    return "\n".join(rows)
