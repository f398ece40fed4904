"""Why do MEMIT's edits fail on prompts that start with the subject, and what fixes it? Dev split only
(``memit_key_rule.json``).

On the test split (all 464 facts at once, λ = 5000) 36 of the 258 facts whose rewrite prompt starts with the
subject (right after BOS) failed against 6 of 206 others (``test_split/memit.csv``), which looked like ROME's
key mismatch (fixed there by ``key_rule="auto"``). Two remedies are compared, each fact's ``key_match`` and
``bare_reach`` (the share of its residual target ``delta`` the edit carries to the bare rewrite prompt's
residual at the last layer; v* assumed all of it) recorded beside the scores:

- ``MemitHparams.key_spread_weight`` β: the solve also answers to every templated key of a fact
  (:mod:`interp.editing.memit_solve`), the MEMIT analogue of ROME's "each";
- ``mom2_update_weight`` λ below the 5000 of ``memit_layers.json`` (whose 20-fact grid did not go lower): a
  weaker prior on the Wikipedia keys lets the update reach more of each target.

The dev facts are edited at once for every (N, λ, β) and scored on rewrite, paraphrase and neighbourhood prompts
in both forms (no generation, drift or lens). The residual targets (stage 1, ROME's v* loop per fact) depend on
none of N, λ or β, so they are optimised once, in parts that can run side by side, and kept in ``--work``; each
run is the spread over the layers and the scoring, after which the weights are put back and checked. Facts: the
dev split, the first fact of every subject (a second fact of a subject needs a second MEMIT round, whose targets
depend on the first round's edit).

    OMP_NUM_THREADS=1 .venv/bin/python studies/memit_key_rule/memit_key_rule.py targets --part 0 --parts 2 &
    # and --part 1; then
    OMP_NUM_THREADS=1 .venv/bin/python studies/memit_key_rule/memit_key_rule.py compare --n all \
        --betas 0,4,16,64,256,1024 --out beta.json
    OMP_NUM_THREADS=1 .venv/bin/python studies/memit_key_rule/memit_key_rule.py compare --n all --betas 0 \
        --lambdas 1000,2500,5000 --out lambda.json
    .venv/bin/python studies/memit_key_rule/memit_key_rule.py merge beta.json lambda.json ...
    # -> memit_key_rule.json

Choice rule (stated before the runs): the (λ, β, γ) with the highest harmonic mean of the three success-form scores
(efficacy, paraphrase, neighbourhood) with all dev facts at once; a tie goes to the smaller β, then the smaller
γ, then the larger λ. ``--records`` runs the same on another records file (its targets kept apart; the second fact
set's study, ``studies/memit_shared``, added the bare-key row γ, ``--gammas`` / ``--bare-when``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import interp
from interp.core.hooks import capture
from interp.core.inputs import pad_rows
from interp.editing.eval.report import SCORES
from interp.editing.facts import load_records
from interp.editing.defaults import default_layers, hparams_for
from interp.editing.hparams import BARE_KEY_WHEN, KEY_MATCH
from interp.editing.keys import layer_stats as memit_stats
from interp.editing.memit_solve import (
    MemitHparams,
    Targets,
    as_requests,
    optimize_targets,
    second_moment,
    spread,
    subject_rounds,
)
from interp.editing.preserve import preserve_terms, vstar_neighbours
from interp.editing.vstar import context_templates
from interp.editing.vstar import edit_batch
from interp.editing.eval.run import batch_prompts
from interp.editing.eval.scale import aggregate_scores, record_scores

OUT = Path(__file__).with_name("memit_key_rule.json")
WORK = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "interp" / "memit_key_rule"
# hyperparameters the targets do not use
SPREAD_ONLY = ("mom2_update_weight", "key_spread_weight", "mom2_ridge", "bare_key_weight", "bare_key_when",
               "bare_key_threshold", "preserve_weight", "preserve_count", "preserve_select", "neighbour_mean_weight",
               "null_space_mass")


def target_hparams(hp: dict) -> dict:
    """The settings a set of targets depends on. Targets stored before the v* neighbour rows existed have none
    (``vstar_neighbours`` 0), and without them their share and weight do not matter."""
    hp = {"vstar_neighbours": 0, **hp}
    out = {k: v for k, v in hp.items() if k not in SPREAD_ONLY and not k.startswith("vstar_neighbour_")}
    if hp["vstar_neighbours"]:
        out.update({k: hp[k] for k in ("vstar_neighbour_share", "vstar_neighbour_weight")})
    return out


def dev_facts(limit: int | None = None, split: str = "dev", records_path: str | None = None,
              model: str | None = None) -> list:
    records = load_records(records_path, split=split, model=model)
    return [records[i] for i in subject_rounds(records)[0]][:limit]


def layer_range(model, spec: str | None) -> list[int]:
    """``--layers A-B`` (inclusive), else the model's default range. v* is taken at the range's last layer."""
    if spec is None:
        return default_layers(model)
    try:
        lo, hi = (int(x) for x in spec.split("-"))
    except ValueError:
        raise SystemExit(f"--layers {spec!r}: expected A-B, two layer numbers such as 0-5") from None
    if not 0 <= lo <= hi < model.n_layers:
        raise SystemExit(f"--layers {spec!r}: need 0 <= A <= B < {model.n_layers}")
    return list(range(lo, hi + 1))


def part_path(work: Path, part: int, parts: int) -> Path:
    return work / f"targets_{part}of{parts}"


def vstar_overrides(spec: str | None) -> dict:
    """``--vstar KEY=VALUE,...``: v* hyperparameters (those the targets use) other than the model's row."""
    if not spec:
        return {}
    out = {}
    for item in spec.split(","):
        key, _, value = item.partition("=")
        if key not in MemitHparams.__dataclass_fields__ or key in SPREAD_ONLY or not value:
            raise SystemExit(f"--vstar {item!r}: expected KEY=VALUE with KEY a v* hyperparameter of MemitHparams")
        out[key] = int(value) if isinstance(MemitHparams.__dataclass_fields__[key].default, int) else float(value)
    return out


def run_targets(args) -> None:
    model = interp.load(args.model, device="cpu")
    hp = hparams_for(model, MemitHparams, "memit", **vstar_overrides(args.vstar))
    layers = layer_range(model, args.layers)
    facts = dev_facts(args.limit, args.split, args.records, args.model)
    lo, hi = len(facts) * args.part // args.parts, len(facts) * (args.part + 1) // args.parts
    requests = as_requests(facts[lo:hi])
    templates = context_templates(model, seed=0, spec=hp.templates)
    t0 = time.perf_counter()
    tg = optimize_targets(model, requests, layers[-1], hp, templates, seed=0,
                          neighbours=vstar_neighbours(model, requests, layers[-1], hp))
    path = part_path(Path(args.work), args.part, args.parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"z": tg.z.contiguous(), "init": tg.init.contiguous()}, str(path.with_suffix(".safetensors")))
    meta = {"case_ids": [r["case_id"] for r in requests], "info": tg.info, "losses": tg.losses,
            "templates": templates, "layer": layers[-1], "hparams": hp.to_dict(), "fingerprint": model.fingerprint,
            "seconds": time.perf_counter() - t0}
    path.with_suffix(".json").write_text(json.dumps(meta))
    print(f"part {args.part}/{args.parts}: {len(requests)} facts, {meta['seconds']:.0f} s -> {path}")


def load_targets(model, facts, work: Path, hp: MemitHparams, layer: int) -> tuple[Targets, float]:
    """The saved parts, joined in fact order, with each fact's template rows rebuilt (deterministic)."""
    parts = sorted(work.glob("targets_*of*.json"))
    if not parts:
        raise SystemExit(f"no targets in {work}; run the 'targets' stage first")
    counts = {p.stem.split("of")[1] for p in parts}
    if len(counts) != 1 or len(parts) != int(counts.pop()):
        raise SystemExit(f"targets in {work} are incomplete or from different splits: {[p.name for p in parts]}")
    z, init, info, losses, ids, seconds = [], [], [], [], [], 0.0
    for p in sorted(parts, key=lambda p: int(p.stem.split("_")[1].split("of")[0])):
        meta = json.loads(p.read_text())
        t = load_file(str(p.with_suffix(".safetensors")))
        if meta["fingerprint"] != model.fingerprint or target_hparams(meta["hparams"]) != target_hparams(hp.to_dict()):
            raise SystemExit(f"{p} was made with another model or other hyperparameters")
        if meta["layer"] != layer:
            raise SystemExit(f"{p} holds targets at layer {meta['layer']}, not at {layer} (the range's last layer)")
        z.append(t["z"])
        init.append(t["init"])
        info += meta["info"]
        losses += meta["losses"]
        ids += meta["case_ids"]
        seconds += meta["seconds"]
    requests = as_requests(facts)
    if ids != [r["case_id"] for r in requests]:
        raise SystemExit("the saved targets are not the dev facts of this facts.jsonl")
    templates = meta["templates"]
    batches = [edit_batch(model, r["prompt"], r["subject"], model.target_tokens(r["target_new"]), templates,
                          hp.kl_prompt, hp.subject_token) for r in requests]
    return Targets(meta["layer"], requests, torch.cat(z), torch.cat(init), batches, info, losses, templates, 0), seconds


def subset(tg: Targets, n: int) -> Targets:
    return Targets(tg.layer, tg.requests[:n], tg.z[:n], tg.init[:n], tg.batches[:n], tg.info[:n], tg.losses[:n],
                   tg.templates, tg.seed)


def bare_residuals(model, tg: Targets) -> torch.Tensor:
    """[n, d_model] float64: the residual after the targets' layer at the subject of each bare rewrite prompt."""
    name = f"blocks.{tg.layer}.hook_resid_post"
    rows = [b.tokens[0, : int(b.subject_pos[0]) + 1].tolist() for b in tg.batches]
    toks, _ = pad_rows(model, rows)
    pos = torch.tensor([len(r) - 1 for r in rows])
    store, _ = capture(model, toks, [name], stop=True, description="bare residuals",
                       keep=lambda n, t: t.detach()[torch.arange(len(rows)), pos.to(t.device)].to("cpu", torch.float64))
    return store[name]


def aggregate(rows: list[dict], facts) -> dict:
    out = aggregate_scores(rows)
    hm = [out[f"{s}_score"]["mean"] for s in SCORES]
    out["harmonic_mean"] = len(hm) / sum(1 / max(v, 1e-9) for v in hm)
    bos = [r for r, f in zip(rows, facts) if f.prompt.startswith("{}")]
    mid = [r for r, f in zip(rows, facts) if not f.prompt.startswith("{}")]
    for label, part in (("subject_first", bos), ("subject_inside", mid)):
        out[f"efficacy_fail_{label}"] = {"failed": sum(r["efficacy_score"] == 0 for r in part), "of": len(part)}
    return out


def run_compare(args) -> None:
    torch.set_num_threads(1)
    model = interp.load(args.model, device="cpu")
    facts = dev_facts(args.limit, args.split, args.records, args.model)
    layers = layer_range(model, args.layers)
    vstar = vstar_overrides(args.vstar)
    base = hparams_for(model, MemitHparams, "memit", **vstar)  # the model's row: its λ, v_lr (the grid overrides)
    stats = {l: second_moment(s, l, model.d_mlp) for l, s in memit_stats(model, layers, base.mom2_n_tokens).items()}
    tg, target_seconds = load_targets(model, facts, Path(args.work), base, layers[-1])
    n_parts = len(list(Path(args.work).glob("targets_*of*.json")))
    parts = {"main": len(facts)}
    if args.also:    # a second records file's dev facts in the same batch, after the first's (their own targets)
        more = dev_facts(None, args.split, args.also, args.model)
        tg2, s2 = load_targets(model, more, Path(args.work_root).joinpath(*work_parts(args, args.also)), base,
                               layers[-1])
        if tg2.templates != tg.templates or tg2.layer != tg.layer:
            raise SystemExit("the two records files' targets were made with other templates or at another layer")
        tg = Targets(tg.layer, tg.requests + tg2.requests, torch.cat([tg.z, tg2.z]), torch.cat([tg.init, tg2.init]),
                     tg.batches + tg2.batches, tg.info + tg2.info, tg.losses + tg2.losses, tg.templates, tg.seed)
        facts, target_seconds, parts = facts + more, target_seconds + s2, {"main": len(facts), "also": len(more)}
    digest = model.weights_digest()
    sizes = [len(facts) if s == "all" else int(s) for s in args.n.split(",")]
    betas = [float(b) for b in args.betas.split(",")]
    lambdas = [float(w) for w in args.lambdas.split(",")] if args.lambdas else [base.mom2_update_weight]
    gammas = [float(g) for g in args.gammas.split(",")]
    mus = [float(u) for u in args.preserve_weights.split(",")]
    taus = [float(t) for t in args.thresholds.split(",")]
    nus = [float(v) for v in args.neighbour_means.split(",")]
    qs = [float(v) for v in args.null_space.split(",")]
    unedited = record_scores(model, facts)
    bare0 = bare_residuals(model, tg)
    runs = []
    grid = ((n, lam, beta, g, mu, tau, nu, q) for n in sizes for lam in lambdas for beta in betas for g in gammas
            for mu in mus for tau in taus for nu in nus for q in qs)
    for n, lam, beta, gamma, mu, tau, nu, q_mass in grid:
        t0 = time.perf_counter()
        hp = hparams_for(model, MemitHparams, "memit", key_spread_weight=beta, mom2_update_weight=lam, bare_key_weight=gamma,
                               bare_key_when=args.bare_when, bare_key_threshold=tau, preserve_weight=mu, preserve_count=args.preserve_count,
                               preserve_select=args.preserve_select, neighbour_mean_weight=nu,
                               null_space_mass=q_mass, **vstar)
        part = subset(tg, n)
        res = spread(model, part, layers, stats, hp,
                     preserve=preserve_terms(model, part.requests, layers, hp, part.templates))
        try:
            rows = record_scores(model, facts[:n], [batch_prompts(facts[:n])] * n)  # the batch's own: apart
            moved = bare_residuals(model, part) - bare0[:n]
        finally:
            with torch.no_grad():
                for l, m in res["originals"].items():
                    model.mlp_out_matrix(l).copy_(m)
        if model.weights_digest() != digest:
            raise SystemExit("the weights did not come back after a run")
        match = [sum(res["key_match"][l][i] for l in layers) / len(layers) for i in range(n)]
        delta = part.z - part.init
        # how much of delta the edit carries to the bare prompt's residual (v* assumed all of it)
        reach = ((moved * delta).sum(1) / (delta * delta).sum(1).clamp_min(1e-12)).tolist()
        for r, f, m, q, info in zip(rows, facts[:n], match, reach, part.info):
            r.update(case_id=f.case_id, relation=f.relation, subject_first=f.prompt.startswith("{}"), key_match=m,
                     bare_reach=None if info["answered"] else q)
        run = {"n": n, "key_spread_weight": beta, "mom2_update_weight": lam, "bare_key_weight": gamma,
               "bare_key_when": args.bare_when, "bare_key_threshold": tau, "preserve_weight": mu, "preserve_count": args.preserve_count,
               "preserve_select": args.preserve_select, "neighbour_mean_weight": nu, "bare_rows": {str(l): v["bare_rows"] for l, v in res["norms"].items()},
               "null_space_mass": q_mass, "vstar": vstar, "update_dims": {str(l): v["update_dims"] for l, v in res["norms"].items()},
               "aggregates": aggregate(rows, facts[:n]),
               **({"aggregates_main": aggregate(rows[:parts["main"]], facts[:parts["main"]]),
                   "aggregates_also": aggregate(rows[parts["main"]:], facts[parts["main"]:n])}
                  if args.also and n == len(facts) else {}),
               "relative_update": {str(l): v["relative_update"] for l, v in res["norms"].items()},
               "seconds": time.perf_counter() - t0, "rows": rows}
        runs.append(run)
        a = run["aggregates"]
        print(f"n={n} λ={lam:g} β={beta:g} γ={gamma:g} ({args.bare_when} < {tau:g}) μ={mu:g} ν={nu:g} q={q_mass:g}: ES {a['efficacy_score']['mean']:.1f} PS {a['paraphrase_score']['mean']:.1f} "
              f"NS {a['neighborhood_score']['mean']:.1f} HM {a['harmonic_mean']:.1f} | strict "
              f"{a['efficacy_acc']['mean']:.1f}/{a['paraphrase_acc']['mean']:.1f}/"
              f"{a['neighborhood_acc']['mean']:.1f} | subject-first fails "
              f"{a['efficacy_fail_subject_first']} ({run['seconds']:.0f} s)", flush=True)
        for part in ("main", "also"):
            if f"aggregates_{part}" in run:
                b = run[f"aggregates_{part}"]
                print(f"  {part}: ES {b['efficacy_score']['mean']:.1f} PS {b['paraphrase_score']['mean']:.1f} "
                      f"NS {b['neighborhood_score']['mean']:.1f} HM {b['harmonic_mean']:.2f}", flush=True)
    chosen = choose(runs, len(facts)) if args.split == "dev" else None  # the test split checks, never chooses
    out = {"model": f"embedded SmolLM2-135M-Instruct (fingerprint {model.fingerprint})", "split": args.split,
           "facts": f"{len(facts)} {args.split} facts: the first fact of every subject, in file order",
           "rule": "highest harmonic mean of the success-form efficacy, paraphrase and neighbourhood scores with "
                   "all dev facts at once; a tie goes to the smaller β, then the smaller γ, then the larger λ",
           "chosen_key_spread_weight": chosen["key_spread_weight"] if chosen else None,
           "chosen_mom2_update_weight": chosen["mom2_update_weight"] if chosen else None,
           "chosen_bare_key_weight": chosen.get("bare_key_weight", 0.0) if chosen else None,
           "layers": layers, "hparams": base.to_dict(), "target_seconds": target_seconds,
           "unedited": aggregate(unedited, facts),
           "command": "OMP_NUM_THREADS=1 .venv/bin/python studies/memit_key_rule/memit_key_rule.py targets "
                      f"--part P --parts {n_parts} (each P; side by side) ... compare --n {args.n} --betas {args.betas}"
                      + (f" --lambdas {args.lambdas}" if args.lambdas else "")
                      + f" --gammas {args.gammas} --bare-when {args.bare_when}"
                      + (f" --thresholds {args.thresholds}" if args.thresholds != str(KEY_MATCH) else "")
                      + (f" --preserve-weights {args.preserve_weights} --preserve-count {args.preserve_count}"
                         f" --preserve-select {args.preserve_select}" if args.preserve_weights != "0" else "")
                      + (f" --records {args.records}" if args.records else "")
                      + (f" --also {args.also}" if args.also else "")
                      + (f" --neighbour-means {args.neighbour_means}" if args.neighbour_means != "0" else "")
                      + (f" --null-space {args.null_space}" if args.null_space != "0" else "")
                      + (f" --vstar {args.vstar}" if args.vstar else "")
                      + (f" --model {args.model}" if args.model else "")
                      + (f" --layers {args.layers}" if args.layers else "")
                      + (f" --split {args.split}" if args.split != "dev" else "")
                      + (f" --limit {args.limit}" if args.limit else ""),
           "runs": runs}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"chosen β = {out['chosen_key_spread_weight']}, λ = {out['chosen_mom2_update_weight']} -> {args.out}")


def choose(runs: list[dict], n_all: int) -> dict | None:
    """The run the choice rule picks (module docstring) among those with all dev facts at once."""
    full = [r for r in runs if r["n"] == n_all]
    return max(full, key=lambda r: (round(r["aggregates"]["harmonic_mean"], 6), -r["key_spread_weight"],
                                    -r.get("bare_key_weight", 0.0), -r.get("preserve_weight", 0.0),
                                    r["mom2_update_weight"])) if full else None


def run_merge(args) -> None:
    """Join the runs of several ``compare`` outputs (same facts and targets) into ``--out`` and apply the rule."""
    docs = [json.loads(Path(p).read_text()) for p in args.files]
    if len({(d["facts"], d["target_seconds"], json.dumps(target_hparams(d["hparams"]), sort_keys=True))
            for d in docs}) != 1:
        raise SystemExit("these files were not made from the same facts, targets and base hyperparameters")
    runs = [{"mom2_update_weight": d["hparams"]["mom2_update_weight"], **r} for d in docs for r in d["runs"]]
    for r in runs:  # older outputs averaged z_error over answered facts too (divisor 0): not kept
        r.pop("z_error_mean", None)
    n_all = int(docs[0]["facts"].split()[0])
    chosen = choose(runs, n_all)
    out = {**docs[0], "runs": runs, "command": " ; ".join(d["command"] for d in docs) + " ; ... merge "
           + " ".join(args.files), "chosen_key_spread_weight": chosen["key_spread_weight"],
           "chosen_mom2_update_weight": chosen["mom2_update_weight"],
           "chosen_bare_key_weight": chosen.get("bare_key_weight", 0.0),
           "chosen_bare_key_when": chosen.get("bare_key_when"),
           "chosen_preserve_weight": chosen.get("preserve_weight", 0.0),
           "chosen_preserve_select": chosen.get("preserve_select", "first") if chosen.get("preserve_weight") else None}
    Path(args.out).write_text(json.dumps(out, indent=1))
    for r in sorted(runs, key=lambda r: (r["n"], r["mom2_update_weight"], r["key_spread_weight"],
                                         r.get("bare_key_weight", 0.0))):
        a = r["aggregates"]
        print(f"n={r['n']} λ={r['mom2_update_weight']:g} β={r['key_spread_weight']:g} "
              f"γ={r.get('bare_key_weight', 0.0):g} ({r.get('bare_key_when', '-')}): HM {a['harmonic_mean']:.2f}")
    print(f"chosen β = {out['chosen_key_spread_weight']}, λ = {out['chosen_mom2_update_weight']}, "
          f"γ = {out['chosen_bare_key_weight']} ({out['chosen_bare_key_when']}), μ = {out['chosen_preserve_weight']} "
          f"({out['chosen_preserve_select']}) -> {args.out}")


def work_parts(args, records: str | None) -> list[str]:
    """The targets' folder under the work root: model, records file, split, then a layer range not the default."""
    return (([args.model] if args.model else []) + ([Path(records).stem] if records else [])
            + ([args.split] if args.split != "dev" else []) + ([f"layers{args.layers}"] if args.layers else [])
            + ([f"vstar_{args.vstar}"] if args.vstar else []))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="stage", required=True)
    t = sub.add_parser("targets", help="optimise the residual targets of one part of the dev facts")
    t.add_argument("--part", type=int, default=0)
    t.add_argument("--parts", type=int, default=1)
    c = sub.add_parser("compare", help="spread and score every (N, β)")
    c.add_argument("--n", default="100,all", help="comma-separated batch sizes (the first N facts; 'all')")
    c.add_argument("--betas", default="0,4,16,64,256,1024", help="comma-separated key_spread_weight values")
    c.add_argument("--lambdas", default=None,
                   help="comma-separated mom2_update_weight (λ) values")
    c.add_argument("--gammas", default="0", help="comma-separated bare_key_weight (γ) values")
    c.add_argument("--bare-when", default="mismatch", choices=BARE_KEY_WHEN, help="bare_key_when")
    c.add_argument("--thresholds", default=str(KEY_MATCH), help="comma-separated bare_key_threshold values")
    c.add_argument("--preserve-weights", default="0", help="comma-separated preserve_weight (μ) values")
    c.add_argument("--preserve-count", type=int, default=MemitHparams.preserve_count, help="preserve_count")
    c.add_argument("--preserve-select", default="first", choices=["first", "nearest"], help="preserve_select")
    c.add_argument("--neighbour-means", default="0", help="comma-separated neighbour_mean_weight (ν) values")
    c.add_argument("--null-space", default="0", help="comma-separated null_space_mass (q) values")
    c.add_argument("--also", default=None, metavar="RECORDS",
                   help="add this records file's dev facts (targets from its own --work) after the first's, one batch")
    c.add_argument("--out", default=str(OUT))
    m = sub.add_parser("merge", help="join several compare outputs and apply the choice rule")
    m.add_argument("files", nargs="+")
    m.add_argument("--out", default=str(OUT))
    for p in (t, c):
        p.add_argument("--work", default=str(WORK), help="where the targets are kept")
        p.add_argument("--limit", type=int, default=None, help="only the first LIMIT facts")
        p.add_argument("--split", choices=["dev", "test"], default="dev",
                       help="test: only to check a choice already made on dev, never to make one")
        p.add_argument("--records", default=None, help="a records file (default: the model's own facts.jsonl)")
        p.add_argument("--model", default=None, help="a model interp.load knows (default: the embedded SmolLM2)")
        p.add_argument("--layers", default=None, metavar="A-B",
                       help="MEMIT's layer range, inclusive (default: the model's row); targets at B, kept apart")
        p.add_argument("--vstar", default=None, metavar="KEY=VALUE,...",
                       help="v* hyperparameters other than the model's row (e.g. v_loss_stop=0.5); targets kept apart")
    args = ap.parse_args()
    args.work_root = args.work if args.stage != "merge" else None
    if args.stage != "merge" and args.work == str(WORK):  # each records file, split and range keeps its targets
        args.work = str(WORK.joinpath(*work_parts(args, args.records)))
    if args.stage == "targets":
        if not 0 <= args.part < args.parts:
            raise SystemExit(f"--part {args.part} must be in 0..{args.parts - 1}")
        torch.set_num_threads(1)
        run_targets(args)
    elif args.stage == "merge":
        run_merge(args)
    else:
        run_compare(args)


if __name__ == "__main__":
    main()
