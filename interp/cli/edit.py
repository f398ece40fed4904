"""``interp edit`` (one ROME edit, completions before and after) and ``interp eval-edits`` (the CounterFact-style
evaluation of ROME or FT-L), their text reports, and the ROME demo section."""

from __future__ import annotations

import json
import random

import pandas as pd
import torch

from ..core.generation import sample_text
from ..core.inputs import check_int
from ..editing.evaluate import DEMO_PROMPTS, compare_completions, evaluate
from ..editing.facts import check_prompt, check_target, load_records
from ..editing.ft import FT_DEFAULTS
from ..editing.rome import RomeHparams, default_layer, edit
from .common import add_common, load_model, section

def add_cli(subparsers) -> None:
    p = subparsers.add_parser("edit", help="rewrite one fact with ROME; print completions before and after")
    p.add_argument("--prompt", default="{} is located in the city of", help="template with {} for the subject")
    p.add_argument("--subject", default="The Eiffel Tower")
    p.add_argument("--target", default=" Rome", help="new continuation, with its leading space")
    p.add_argument("--layer", type=int, default=None, help="edit layer (default: chosen on the dev facts)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--also", action="append", default=[], metavar="TEXT",
                   help="another prompt to complete before/after (repeatable)")
    p.add_argument("--tokens", type=int, default=8, help="tokens per completion")
    p.add_argument("--save", default=None, metavar="FILE", help="write FILE.safetensors + FILE.json")
    p.add_argument("--mom2-tokens", type=int, default=RomeHparams.mom2_n_tokens,
                   help="Wikipedia tokens for the key statistics C (cached on disk)")
    p.add_argument("--hparam", action="append", default=[], metavar="KEY=VALUE",
                   help="override a ROME hyperparameter (JSON value), e.g. kl_factor=0.1 (repeatable)")
    add_common(p)
    p.set_defaults(func=cli_edit)

    p = subparsers.add_parser("eval-edits", help="evaluate ROME (or FT-L) edits on fact records, before/after")
    p.add_argument("--split", choices=["dev", "test", "all"], default="test")
    p.add_argument("--n", type=int, default=None, help="only the first N records")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="a random subset of N records (drawn with --sample-seed, kept in file order)")
    p.add_argument("--sample-seed", type=int, default=0)
    p.add_argument("--editor", choices=["rome", "ft"], default="rome")
    p.add_argument("--baseline", choices=["ft", "rome", "none"], default="none",
                   help="also evaluate this editor on the same records (reported under 'baseline')")
    p.add_argument("--records", default=None, metavar="FILE", help="JSON-lines records (default data/facts.jsonl)")
    p.add_argument("--layer", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gen-tokens", type=int, default=40, help="tokens per generation sample (entropy)")
    p.add_argument("--no-generation", action="store_true", help="skip generation entropy")
    p.add_argument("--no-drift", action="store_true", help="skip the Wikipedia loss drift")
    p.add_argument("--no-lens", action="store_true", help="skip the logit lens before/after")
    p.add_argument("--out", default=None, metavar="PNG", help="save the before/after plot")
    p.add_argument("--csv", default=None, metavar="FILE", help="save the per-record table")
    p.add_argument("--mom2-tokens", type=int, default=RomeHparams.mom2_n_tokens,
                   help="Wikipedia tokens for the key statistics C (cached on disk)")
    p.add_argument("--hparam", action="append", default=[], metavar="KEY=VALUE",
                   help="override a hyperparameter of --editor (JSON value), e.g. kl_factor=0.1 (repeatable)")
    add_common(p)
    p.set_defaults(func=cli_eval_edits)


def parse_hparams(items) -> dict:
    """``["kl_factor=0.1", "templates=[[5,4]]"]`` -> dict (values parsed as JSON, else kept as text)."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--hparam {item!r}: expected KEY=VALUE, e.g. kl_factor=0.1")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def _check_ft_hparams(hparams: dict) -> None:
    bad = sorted(set(hparams) - set(FT_DEFAULTS))
    if bad:
        raise ValueError(f"unknown FT-L hyperparameter(s) {bad}; allowed: {sorted(FT_DEFAULTS)}")


def cli_edit(args, model=None) -> dict:
    """Handler of ``interp edit``; ``model`` lets tests and notebooks pass a model they already hold."""
    # An edit loads the model and may collect key statistics: every flag is checked before either.
    check_int("--tokens", args.tokens, 1)
    check_int("--mom2-tokens", args.mom2_tokens, 1)
    check_prompt(args.prompt, args.subject)
    check_target(args.target)
    hp = {"mom2_n_tokens": args.mom2_tokens, **parse_hparams(getattr(args, "hparam", []))}
    RomeHparams.make(**hp)
    model = model or load_model(args)
    prompts = [args.prompt.replace("{}", args.subject)] + list(args.also)
    before = sample_text(model, prompts, args.tokens, greedy=True)
    e = edit(model, args.prompt, args.subject, args.target, args.layer, seed=args.seed, progress=True, **hp)
    try:
        after = sample_text(model, prompts, args.tokens, greedy=True)
        saved = str(e.save(args.save)) if args.save else None
    finally:
        e.revert()
    completions = [{"prompt": p, "before": b, "after": a} for p, b, a in zip(prompts, before, after)]
    return {**e.to_json(), "completions": completions, "saved": saved, "_text": edit_report(e, completions, saved)}


def edit_report(e, completions: list[dict], saved: str | None) -> str:
    lines = [e.summary()] + [f"  {c['prompt']!r}\n    before: {c['before']!r}\n    after:  {c['after']!r}"
                             for c in completions]
    if saved:
        lines.append(f"saved to {saved} (+ .json)")
    return "\n".join(lines)


def _select_records(args) -> list:
    split = None if args.split == "all" else args.split
    records = load_records(args.records, split=split)
    if args.n is not None:
        check_int("--n", args.n, 1)
        records = records[: args.n]
    if getattr(args, "sample", None) is not None:
        check_int("--sample", args.sample, 1)
        keep = set(random.Random(args.sample_seed).sample(range(len(records)), min(args.sample, len(records))))
        records = [r for i, r in enumerate(records) if i in keep]
    return records


def cli_eval_edits(args, model=None) -> dict:
    """Handler of ``interp eval-edits``; ``model`` lets tests and notebooks pass a model they already hold."""
    # An evaluation runs for minutes: records, counts and hyperparameters are checked before the model loads.
    records = _select_records(args)
    check_int("--gen-tokens", args.gen_tokens, 1)
    check_int("--mom2-tokens", args.mom2_tokens, 1)
    extra = parse_hparams(getattr(args, "hparam", []))
    hp = {"mom2_n_tokens": args.mom2_tokens}
    hparams = {**hp, **extra} if args.editor == "rome" else extra
    for name, given in ((args.editor, hparams), (args.baseline, hp if args.baseline == "rome" else {})):
        if name == "rome":
            RomeHparams.make(**given)
        elif name == "ft":
            _check_ft_hparams(given)
    model = model or load_model(args)
    res = evaluate(model, records, args.editor, layer=args.layer, seed=args.seed, hparams=hparams,
                   baseline_hparams=hp if args.baseline == "rome" else None,
                   baseline=None if args.baseline == "none" else args.baseline,
                   generation=not args.no_generation, gen_tokens=args.gen_tokens, drift=not args.no_drift,
                   lens=not getattr(args, "no_lens", False), progress=True)
    out = res.to_json()
    out["split"] = args.split
    out["case_ids"] = [r.case_id for r in records]
    out["records"] = str(args.records or "data/facts.jsonl")
    if args.out:
        res.plot(out=args.out)
        out["plot"] = args.out
    if args.csv:
        frames = [res] + ([res.baseline] if res.baseline is not None else [])
        table = pd.concat([r.to_frame().assign(editor=r.editor) for r in frames])
        table.insert(0, "editor", table.pop("editor"))
        table.to_csv(args.csv)
        out["csv"] = args.csv
    out["_text"] = f"{len(records)} records ({args.split}), {out['seconds']:.0f} s\n{res.table().to_string()}"
    return out


def demo(model) -> None:
    """Rewrite "The Eiffel Tower is located in the city of" -> " Rome", show completions of the prompt, a
    paraphrase and a neighbouring landmark before and after, then revert (bit for bit)."""
    section("ROME: rewrite the Eiffel Tower's city to Rome with one rank-one edit, then revert")
    layer = default_layer(model)
    original = model.mlp_out_matrix(layer).detach().cpu().clone()
    e = edit(model)
    try:
        print(e.summary())
        table = compare_completions(model, e, list(DEMO_PROMPTS), n_tokens=6)
        for row in table.itertuples():
            print(f"  {row.prompt!r}\n    before: {row.before!r}\n    after:  {row.after!r}")
    finally:
        e.revert()
    same = torch.equal(original, model.mlp_out_matrix(layer).detach().cpu())
    print(f"reverted; layer {layer} weights bit-identical to the original: {same}")
