"""Which keys should a ROME update answer to? Dev split only (``key_rule.json``).

ROME's update ``M' = M + u v^T`` is solved so that ``v . k* = 1`` for ``k*``, the subject key averaged over the
prompt in several sampled contexts; the v* optimisation assumed ``u`` arrives in full in every context. A
context whose key is far from ``k*`` gets only ``v . k`` of it (``key_match`` for the bare rewrite prompt). This
study edits each dev record under every :data:`interp.editing.hparams.KEY_RULES` ("mean": ROME; "each": ``v . k =
1`` for every templated key, the bare prompt included; "auto": "each" only where "mean" leaves the bare prompt
less than ``KEY_MATCH`` of the update) and scores rewrite, paraphrase and neighbourhood prompts in
both forms (no generation, drift or lens). The v* optimisation does not depend on the rule, so it runs once: the
"each" edit is the "mean" edit's ``u`` with ``v`` solved for the templated keys read in a forward of their own
(what ``rome.edit(key_rule="each")`` writes, up to float rounding of those keys).

    OMP_NUM_THREADS=1 .venv/bin/python studies/key_rule/key_rule_study.py --n 60 [--records FILE --out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

import interp
from interp import rome
from interp.editing.eval.measure import fact_scores, measure_probs
from interp.editing.eval.report import mean_ci
from interp.core.hooks import capture
from interp.editing.defaults import hparams_for
from interp.editing.hparams import KEY_MATCH, KEY_RULES, RomeHparams
from interp.editing.keys import key_stats
from interp.editing.rome import update_direction
from interp.editing.vstar import edit_batch


def templated_keys(model, e) -> torch.Tensor:
    """[n_rewrite, d_mlp] float64: the edited layer's key at the subject token of every templated prompt."""
    hp = hparams_for(model, RomeHparams, "rome", **{k: v for k, v in e.hparams.items() if k == "subject_token"})
    r = e.request
    b = edit_batch(model, r["prompt"], r["subject"], model.target_tokens(r["target"]), e.templates, hp.kl_prompt,
                   hp.subject_token)
    rows, pos = torch.arange(b.n_rewrite), b.subject_pos[: b.n_rewrite]
    name = f"blocks.{e.layer}.mlp.hook_post"  # the edited matrix's input: the edit does not change it
    store, _ = capture(model, b.tokens[: b.n_rewrite], [name], stop=True, description="templated keys",
                       keep=lambda n, t: t.detach()[rows, pos].to("cpu", torch.float64))
    return store[name]


def with_rule(model, e, rule: str, stats):
    """``e`` (reverted, key_rule "mean") with ``v`` solved under ``rule`` ("auto": "each" when e's key_match is
    below KEY_MATCH)."""
    if rule == "mean" or (rule == "auto" and e.norms["key_match"] >= KEY_MATCH):
        return e
    keys = templated_keys(model, e)
    v, key_dot, _ = update_direction(stats, keys, hparams_for(model, RomeHparams, "rome", key_rule="each"))
    w = float(model.mlp_out_matrix(e.layer).detach().double().norm())
    norms = {**e.norms, "key_dot": key_dot, "key_match": float(keys[0] @ v),
             "relative_update": float(e.u.norm() * v.norm()) / w}
    return replace(e, v=v, hparams={**e.hparams, "key_rule": rule}, norms=norms)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60, help="N records")
    ap.add_argument("--start", type=int, default=0, help="skip the first START records")
    ap.add_argument("--records", default=None, help="a JSON-lines file (default: the dev split of facts.jsonl)")
    ap.add_argument("--rules", default=",".join(KEY_RULES), help="comma-separated key rules to compare")
    ap.add_argument("--out", default=str(Path(__file__).with_name("key_rule.json")))
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = interp.load(device="cpu")
    layer = rome.default_layer(model)
    stats = key_stats(model, layer, rome.RomeHparams.mom2_n_tokens, progress=False)
    records = rome.load_records(args.records) if args.records else rome.load_records(split="dev")
    records = records[args.start: args.start + args.n]
    rules = args.rules.split(",")
    rows, t0 = [], time.perf_counter()
    for f in records:
        base = {"case_id": f.case_id, "relation": f.relation, "subject": f.subject}
        try:
            made = rome.edit(model, f.prompt, f.subject, f.target_new, layer, stats=stats, key_rule="mean")
        except ValueError as err:  # the target is already the model's answer
            rows += [{**base, "rule": rule, "error": str(err)} for rule in rules]
            continue
        made.revert()
        for rule in rules:
            e = with_rule(model, made, rule, stats).apply(model)
            try:
                pr = measure_probs(model, [f])[0]
            finally:
                e.revert()
            rows.append({**base, "rule": rule, **fact_scores(pr["probs"], pr["hits"]),
                         **{k: e.norms[k] for k in ("key_match", "key_dot", "relative_update", "nll_final")},
                         "steps": len(e.losses)})
        print(f"{len(rows) // len(rules)}/{len(records)} {f.subject}: " + ", ".join(
            f"{r['rule']} ES {r['efficacy_score']:.2f} NS {r['neighborhood_score']:.2f}" for r in rows[-len(rules):]),
            flush=True)
    summary = {}
    for rule in rules:
        ok = [r for r in rows if r["rule"] == rule and "error" not in r]
        summary[rule] = {m: mean_ci(m, [100 * r[m] for r in ok], bounds=(0, 100)) for m in
                         ("efficacy_score", "paraphrase_score", "neighborhood_score", "efficacy_acc", "paraphrase_acc",
                          "neighborhood_acc")}
        summary[rule]["key_match_median"] = sorted(r["key_match"] for r in ok)[len(ok) // 2]
        summary[rule]["n"] = len(ok)
    doc = {"command": "OMP_NUM_THREADS=1 .venv/bin/python studies/key_rule/key_rule_study.py "
                      + " ".join(sys.argv[1:]),
           "layer": layer, "wall_seconds": time.perf_counter() - t0, "summary": summary, "rows": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    for rule, s in summary.items():
        print(rule, {k: (round(v["mean"], 1) if isinstance(v, dict) else v) for k, v in s.items()})


if __name__ == "__main__":
    main()
