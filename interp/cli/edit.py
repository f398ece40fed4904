"""``interp edit`` (one ROME / FT-L / MEMIT edit, or every record of a file; completions before and after) and
``interp eval-edits`` (the CounterFact-style evaluation of ROME, FT-L or MEMIT, one record or a batch at a time),
their text reports, and the ROME demo section."""

from __future__ import annotations

import json
import random
from dataclasses import fields

import pandas as pd
import torch

from ..core.generation import sample_text
from ..core.inputs import check_int
from ..editing.compare import compare_completions, compare_edit
from ..editing.defaults import default_layer
from ..editing.eval.measure import score_prompts
from ..editing.eval.run import DEMO_PROMPTS, evaluate
from ..editing.facts import Request, load_records, records_file
from ..editing.hparams import VStarHparams
from ..editing.registry import EDITORS, bind, editor_spec
from ..editing.rome import edit
from .common import add_common, add_html, html_path, load_model, save_view, section

def add_cli(subparsers) -> None:
    p = subparsers.add_parser("edit", help="rewrite one fact (or every record of --records) with ROME, FT-L or "
                                           "MEMIT; print completions before and after")
    p.add_argument("--prompt", default="{} is located in the city of", help="template with {} for the subject")
    p.add_argument("--subject", default="The Eiffel Tower")
    p.add_argument("--target", default=" Rome", help="new continuation, with its leading space")
    p.add_argument("--layer", type=int, default=None, help="edit layer (default: chosen on the dev facts)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--also", action="append", default=[], metavar="TEXT",
                   help="another prompt to complete before/after (repeatable)")
    p.add_argument("--tokens", type=int, default=8, help="tokens per completion")
    p.add_argument("--editor", choices=list(EDITORS), default="rome")
    p.add_argument("--records", default=None, metavar="FILE",
                   help="edit every record of this JSON-lines file instead of --prompt/--subject/--target (MEMIT: "
                        "in one batch; ROME / FT-L: one after another)")
    p.add_argument("--save", default=None, metavar="FILE",
                   help="write FILE.safetensors + FILE.json (several edits: FILE_<i> per edit)")
    p.add_argument("--mom2-tokens", type=int, default=VStarHparams.mom2_n_tokens,
                   help="Wikipedia tokens for the key statistics C (cached on disk)")
    p.add_argument("--hparam", action="append", default=[], metavar="KEY=VALUE",
                   help="override a hyperparameter of --editor (JSON value), e.g. kl_factor=0.1 (repeatable)")
    add_html(p, "completions and target probabilities before / after (paraphrase and neighbourhood prompts "
                "from the fact records when the subject and prompt are one of them)")
    add_common(p)
    p.set_defaults(func=cli_edit)

    p = subparsers.add_parser("eval-edits", help="evaluate ROME (or FT-L) edits on fact records, before/after")
    p.add_argument("--split", choices=["dev", "test", "all"], default="test")
    p.add_argument("--n", type=int, default=None, help="only the first N records")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="a random subset of N records (drawn with --sample-seed, kept in file order)")
    p.add_argument("--sample-seed", type=int, default=0)
    p.add_argument("--editor", choices=list(EDITORS), default="rome")
    p.add_argument("--batch-size", type=int, default=1, metavar="N",
                   help="edit N records together (MEMIT in one call, ROME / FT-L one after another) and score them "
                        "with the whole batch applied (default 1: one record at a time)")
    p.add_argument("--baseline", choices=[*EDITORS, "none"], default="none",
                   help="also evaluate this editor on the same records (reported under 'baseline')")
    p.add_argument("--records", default=None, metavar="FILE",
                   help="JSON-lines records (default: the model's, shipped in interp/editing/records/: "
                        "facts.jsonl or facts_gemma.jsonl)")
    p.add_argument("--layer", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gen-tokens", type=int, default=40, help="tokens per generation sample (entropy)")
    p.add_argument("--no-generation", action="store_true", help="skip generation entropy")
    p.add_argument("--no-drift", action="store_true", help="skip the Wikipedia loss drift")
    p.add_argument("--no-lens", action="store_true", help="skip the logit lens before/after")
    p.add_argument("--out", default=None, metavar="PNG", help="save the before/after plot")
    p.add_argument("--csv", default=None, metavar="FILE", help="save the per-record table")
    add_html(p, "the per-record table")
    p.add_argument("--mom2-tokens", type=int, default=VStarHparams.mom2_n_tokens,
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


def editor_hparams(editor: str, mom2_tokens: int, extra: dict) -> dict:
    """The keyword overrides ``editor`` gets from the flags, checked (ValueError) before any model loads; an editor
    with key statistics gets ``--mom2-tokens``. A ``layers`` entry names the layers to write."""
    spec = editor_spec(editor)
    names = {f.name for f in fields(spec.hparams)}
    hp = {"mom2_n_tokens": mom2_tokens, **extra} if "mom2_n_tokens" in names else dict(extra)
    spec.hparams.make(**{k: v for k, v in hp.items() if k != "layers"})
    return hp


def cli_edit(args, model=None) -> dict:
    """Handler of ``interp edit``; ``model`` lets tests and notebooks pass a model they already hold."""
    # An edit loads the model and may collect key statistics: every flag is checked before either.
    check_int("--tokens", args.tokens, 1)
    check_int("--mom2-tokens", args.mom2_tokens, 1)
    editor = getattr(args, "editor", "rome")
    hp = editor_hparams(editor, args.mom2_tokens, parse_hparams(getattr(args, "hparam", [])))
    records = getattr(args, "records", None)
    facts = load_records(records) if records else [Request(args.prompt, args.subject, args.target)]
    html = html_path(args)
    if html is not None and (records or editor_spec(editor).one is None):
        raise ValueError("--html shows one edit of one fact; drop --html, or --records / an editor of many facts")
    model = model or load_model(args)
    prompts = [f.text for f in facts] + list(args.also)
    before = sample_text(model, prompts, args.tokens, greedy=True)
    p_before = _rewrite_probs(model, facts)
    ed = bind(model, editor, layer=args.layer, seed=args.seed, hparams=hp, progress=True)
    handles, saved, report = [], [], None
    try:
        if ed.many is not None:
            handles.append(ed.many(facts))
        for f in facts if ed.many is None else ():
            handles.append(ed.one(f))
        after = sample_text(model, prompts, args.tokens, greedy=True)
        p_after = _rewrite_probs(model, facts)
        if args.save:
            saved = [str(h.save(args.save if len(handles) == 1 else f"{args.save}_{i}"))
                     for i, h in enumerate(handles)]
        if html is not None:
            rec = record_for(args.prompt, args.subject, model)
            report = compare_edit(model, handles[0], paraphrases=rec.paraphrase_prompts if rec else (),
                                  neighbours=rec.neighborhood_prompts if rec else (),
                                  target_true=handles[0].request.get("target_true") or (rec.target_true if rec else None),
                                  prompts=prompts,
                                  n_tokens=args.tokens)
    finally:
        for h in reversed(handles):
            h.revert()
    completions = [{"prompt": p, "before": b, "after": a} for p, b, a in zip(prompts, before, after)]
    probs = [{"prompt": f.text, "target_new": f.target_new, "target_true": f.target_true, "p_new_before": nb,
              "p_new_after": na, **({"p_true_before": tb, "p_true_after": ta} if f.target_true else {})}
             for f, (nb, tb), (na, ta) in zip(facts, p_before, p_after)]
    data = {**(handles[0].to_json() if len(handles) == 1 else {}), "editor": editor, "n_edits": len(handles),
            "edits": [h.summary() for h in handles], "completions": completions, "probabilities": probs,
            "saved": (saved[0] if len(saved) == 1 else saved) or None,
            "_text": edit_report(handles, completions, probs, saved)}
    return save_view(report, html, data) if report is not None else data


def _rewrite_probs(model, facts) -> list[tuple[float, float]]:
    """(P(target_new), P(target_true)) on each fact's rewrite prompt (NaN without a target_true)."""
    prompts = [f.text for f in facts for _ in (0, 1)]
    targets = [t for f in facts for t in (f.target_new, f.target_true or f.target_new)]
    p = torch.exp(-score_prompts(model, prompts, targets)[0]).reshape(-1, 2).tolist()
    return [(new, true if f.target_true else float("nan")) for f, (new, true) in zip(facts, p)]


def record_for(prompt: str, subject: str, model=None):
    """The fact record with this prompt template and subject (its paraphrases and neighbours), or None."""
    try:
        records = load_records(model=model)
    except FileNotFoundError:  # an installed package without the records file
        return None
    return next((r for r in records if r.prompt == prompt and r.subject == subject), None)


def edit_report(handles, completions: list[dict], probs: list[dict], saved: list[str]) -> str:
    lines = [h.summary() for h in handles]
    for c, p in zip(completions, probs + [None] * (len(completions) - len(probs))):
        lines.append(f"  {c['prompt']!r}\n    before: {c['before']!r}\n    after:  {c['after']!r}")
        if p is not None:
            true = (f", P({p['target_true'].strip()}) {p['p_true_before']:.3f} -> {p['p_true_after']:.3f}"
                    if p["target_true"] else "")
            lines.append(f"    P({p['target_new'].strip()}) {p['p_new_before']:.3f} -> {p['p_new_after']:.3f}{true}")
    if saved:
        lines.append("saved to " + ", ".join(saved) + " (+ .json)")
    return "\n".join(lines)


def _select_records(args) -> list:
    split = None if args.split == "all" else args.split
    records = load_records(args.records, split=split,
                           model=getattr(args, "source", None) or getattr(args, "model_option", None))
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
    batch_size = getattr(args, "batch_size", 1)
    check_int("--batch-size", batch_size, 1)
    hparams = editor_hparams(args.editor, args.mom2_tokens, parse_hparams(getattr(args, "hparam", [])))
    baseline = None if args.baseline == "none" else args.baseline
    base_hp = None if baseline is None else editor_hparams(baseline, args.mom2_tokens, {})
    html = html_path(args)
    model = model or load_model(args)
    res = evaluate(model, records, args.editor, layer=args.layer, hparams=hparams, baseline=baseline,
                   baseline_hparams=base_hp, seed=args.seed, batch_size=batch_size,
                   generation=not args.no_generation, gen_tokens=args.gen_tokens, drift=not args.no_drift,
                   lens=not getattr(args, "no_lens", False))
    out = res.to_json()
    out["split"] = args.split
    out["case_ids"] = [r.case_id for r in records]
    out["records"] = str(args.records or f"interp/editing/records/{records_file(getattr(args, 'source', None))}")
    if args.out:
        res.plot(out=args.out)
        out["plot"] = args.out
    if args.csv:
        frames = [res] + ([res.baseline] if res.baseline is not None else [])
        table = pd.concat([r.to_frame().assign(editor=r.editor) for r in frames])
        table.insert(0, "editor", table.pop("editor"))
        table.to_csv(args.csv)
        out["csv"] = args.csv
    out["batch_size"] = batch_size
    out["_text"] = (f"{len(records)} records ({args.split}), batch size {batch_size}, {out['seconds']:.0f} s\n"
                    f"{res.table().to_string()}")
    return save_view(res, html, out)


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
