"""MEMIT on Gemma 3 270M (post-norm MLP writes): the dev-split choice of its layer range, λ and clamp.

Dev split only (``data/facts_gemma.jsonl``): the first ``--n`` dev facts of distinct subjects in file order (a
second fact of a subject needs a second MEMIT round). Stage 1 of MEMIT (the per-fact residual targets z at the
range's last layer, ROME's v* loop) depends only on that last layer and the v* settings (clamp among them), not on
λ nor on where the range starts nor on which facts share the batch, so it runs once per (last layer, v* settings)
and is kept in ``--work`` in chunks of 16 facts (a chunk is optimised exactly as ``optimize_targets`` does it); a
sweep run is then the spread over the layers and the scoring, after which the weights are put back and checked.

    OMP_NUM_THREADS=1 python studies/memit_gemma/run.py targets --end 5 --n 100
    OMP_NUM_THREADS=1 python studies/memit_gemma/run.py sweep --end 5 --n 100 --starts 1,3,5 --lambdas 2500 \
        --out part.json
    python studies/memit_gemma/run.py merge part1.json part2.json ...   # -> results.json, applies the rule

Scoring: CounterFact's success form and strict form (efficacy, paraphrase, neighbourhood), no generation, drift or
lens (``interp.editing.scale.record_scores``). ``--batch`` splits the facts into batches edited one at a time
(each scored with its batch applied, then reverted): ``--batch 10`` is "10 facts at once". Each run also records
the spread's diagnostics: per layer the residual error left and the share of its residual step the layer's write
delivered, and each fact's final ``z_error``.

Choice rule (stated before the runs): the (layers, λ, clamp) with the highest harmonic mean of the three
success-form scores with all ``--n`` facts in one batch; a tie goes to the shorter range, then the larger λ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this worktree's interp, not another checkout's

import interp
from interp.core import arch
from interp.editing import memit_solve
from interp.editing.eval_report import SCORES
from interp.editing.facts import load_records
from interp.editing.memit import memit_stats
from interp.editing.memit_solve import (
    TARGET_CHUNK,
    MemitHparams,
    Targets,
    as_requests,
    optimize_targets,
    second_moment,
    spread,
    subject_rounds,
)
from interp.editing.rome import context_templates
from interp.editing.scale import aggregate_scores, record_scores
from interp.editing.vstar import edit_batch

WORK = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "interp" / "memit_gemma"
TARGET_KEYS = ("clamp_norm_factor", "v_lr", "v_steps")  # v* settings the study may change (they make new targets)


def git_commit() -> str:
    """HEAD, marked when the code that ran (interp, this script) differs from it."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    head = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--", "interp", "studies/memit_gemma/run.py")
    return head + (" (uncommitted changes)" if dirty else "")


def load_gemma():
    torch.set_num_threads(1)
    return interp.load("gemma3-270m", device="cpu")


def dev_facts(model, n: int) -> list:
    records = load_records(split="dev", model=model)
    return [records[i] for i in subject_rounds(records)[0]][:n]


def target_hp(args) -> MemitHparams:
    return MemitHparams.make(**{k: v for k, v in (("clamp_norm_factor", args.clamp), ("v_lr", args.v_lr),
                                                   ("v_steps", args.v_steps)) if v is not None})


def target_dir(args, hp: MemitHparams) -> Path:
    tag = "_".join(f"{k}{getattr(hp, k):g}" for k in TARGET_KEYS)
    return Path(args.work) / f"end{args.end}_{tag}"


# ============================================================================================ stage 1
def run_targets(args) -> None:
    model = load_gemma()
    hp = target_hp(args)
    facts = dev_facts(model, args.n)
    requests = as_requests(facts)
    templates = context_templates(model, seed=0, spec=hp.templates)
    out = target_dir(args, hp)
    out.mkdir(parents=True, exist_ok=True)
    for c in range(0, len(requests), TARGET_CHUNK):
        path = out / f"chunk{c:04d}"
        if path.with_suffix(".json").exists():
            continue
        t0 = time.perf_counter()
        tg = optimize_targets(model, requests[c: c + TARGET_CHUNK], args.end, hp, templates, seed=0)
        save_file({"z": tg.z.contiguous(), "init": tg.init.contiguous()}, str(path.with_suffix(".safetensors")))
        meta = {"case_ids": [r["case_id"] for r in tg.requests], "info": tg.info, "losses": tg.losses,
                "templates": templates, "layer": args.end, "hparams": hp.to_dict(),
                "fingerprint": model.fingerprint, "seconds": time.perf_counter() - t0}
        path.with_suffix(".json").write_text(json.dumps(meta))
        nll = [i["nll_final"] for i in tg.info]
        print(f"facts {c}-{c + len(tg.requests) - 1}: {meta['seconds']:.0f} s, final NLL mean {sum(nll) / len(nll):.3f}"
              f" max {max(nll):.3f}, |delta| mean {sum(i['delta_norm'] for i in tg.info) / len(nll):.1f}, clamp "
              f"bound {sum(i['clamp_bound'] for i in tg.info)}", flush=True)


def load_targets(model, facts, directory: Path, hp: MemitHparams) -> tuple[Targets, float]:
    """The saved chunks of the first ``len(facts)`` facts, joined in fact order, with each fact's template rows
    rebuilt (deterministic)."""
    requests = as_requests(facts)
    z, init, info, losses, seconds = [], [], [], [], 0.0
    for c in range(0, len(requests), TARGET_CHUNK):
        path = directory / f"chunk{c:04d}"
        if not path.with_suffix(".json").exists():
            raise SystemExit(f"{path}.json is missing: run the 'targets' stage for these facts first")
        meta = json.loads(path.with_suffix(".json").read_text())
        want = [r["case_id"] for r in requests[c: c + TARGET_CHUNK]]
        if meta["fingerprint"] != model.fingerprint or meta["hparams"] != hp.to_dict() or meta["case_ids"][:len(want)] != want:
            raise SystemExit(f"{path} was made with another model, other settings or other facts")
        t = load_file(str(path.with_suffix(".safetensors")))
        k = len(want)
        z.append(t["z"][:k])
        init.append(t["init"][:k])
        info += meta["info"][:k]
        losses += meta["losses"][:k]
        seconds += meta["seconds"] * k / len(meta["case_ids"])
    templates = meta["templates"]
    batches = [edit_batch(model, r["prompt"], r["subject"], model.target_tokens(r["target_new"]), templates,
                          hp.kl_prompt, hp.subject_token) for r in requests]
    return Targets(meta["layer"], requests, torch.cat(z), torch.cat(init), batches, info, losses, templates, 0), seconds


def subset(tg: Targets, lo: int, hi: int) -> Targets:
    return Targets(tg.layer, tg.requests[lo:hi], tg.z[lo:hi], tg.init[lo:hi], tg.batches[lo:hi], tg.info[lo:hi],
                   tg.losses[lo:hi], tg.templates, tg.seed)


# ============================================================================================ ablations
def linear_targets(model, layer, resid, outs, owner):
    """The norm's first-order inverse ``Δo = r / mean_r(g / rms(o_r))`` (no reach limit; 0 where g = 0)."""
    mult = arch.frozen_post_norm(model, layer, "mlp", outs)                       # [rows, d] g / rms(o_r)
    n = resid.shape[0]
    counts = torch.bincount(owner, minlength=n).to(torch.float64)[:, None]
    mean = torch.zeros(n, outs.shape[1], dtype=torch.float64).index_add_(0, owner, mult) / counts
    return torch.where(mean == 0, 0.0, resid / torch.where(mean == 0, 1.0, mean)), torch.full((n,), float("nan"))


def plain_targets(model, layer, resid, outs, owner):
    """The dense spread's factor: the residual share as if the MLP output were added as it is."""
    return resid, torch.full((resid.shape[0],), float("nan"))


MAPPINGS = {"nearest": memit_solve.post_norm_targets, "linear": linear_targets, "none": plain_targets}


# ============================================================================================ stage 2 + scores
def harmonic(a: dict) -> float:
    v = [a[f"{s}_score"]["mean"] for s in SCORES]
    return len(v) / sum(1 / max(x, 1e-9) for x in v)


def one_run(model, facts, tg: Targets, layers: list[int], stats: dict, hp: MemitHparams, batch: int,
            digest: str) -> dict:
    t0 = time.perf_counter()
    rows, z_err, per_layer = [], [], []
    for lo in range(0, len(facts), batch):
        part = subset(tg, lo, lo + batch)
        res = spread(model, part, layers, stats, hp)
        try:
            rows += record_scores(model, facts[lo: lo + batch])
        finally:
            with torch.no_grad():
                for l, m in res["originals"].items():
                    model.mlp_out_matrix(l).copy_(m)
        if model.weights_digest() != digest:
            raise SystemExit("the weights did not come back after a run")
        z_err += [None if i["answered"] else e for i, e in zip(part.info, res["z_error"])]
        per_layer.append({str(l): v for l, v in res["norms"].items()})
    for r, f, e in zip(rows, facts, z_err):
        r.update(case_id=f.case_id, relation=f.relation, subject_first=f.prompt.startswith("{}"), z_error=e)
    a = aggregate_scores(rows)
    a["harmonic_mean"] = harmonic(a)
    errs = [e for e in z_err if e is not None]
    a["z_error_mean"] = sum(errs) / len(errs) if errs else None
    a["efficacy_failures"] = sum(r["efficacy_score"] == 0 for r in rows)
    return {"layers": layers, "mom2_update_weight": hp.mom2_update_weight, "batch": batch, "n": len(facts),
            "aggregates": a, "layer_norms": per_layer if batch < len(facts) else per_layer[0],
            "seconds": time.perf_counter() - t0, "rows": rows}


def run_sweep(args) -> None:
    commit = git_commit()  # the code as the run imports it
    model = load_gemma()
    hp0 = target_hp(args)
    facts = dev_facts(model, args.n)
    tg, target_seconds = load_targets(model, facts, target_dir(args, hp0), hp0)
    starts = [int(s) for s in args.starts.split(",")]
    lambdas = [float(w) for w in args.lambdas.split(",")]
    batches = [len(facts) if b == "all" else int(b) for b in args.batch.split(",")]
    needed = sorted(set(range(min(starts), args.end + 1)))
    stats = {l: second_moment(s, l, model.d_mlp) for l, s in memit_stats(model, needed, hp0.mom2_n_tokens).items()}
    digest = model.weights_digest()
    memit_solve.post_norm_targets = MAPPINGS[args.mapping]  # spread looks the helper up at call time
    runs = []
    for batch in batches:
        for start in starts:
            for lam in lambdas:
                hp = MemitHparams.make(**{**{k: getattr(hp0, k) for k in TARGET_KEYS}, "mom2_update_weight": lam})
                run = one_run(model, facts, tg, list(range(start, args.end + 1)), stats, hp, batch, digest)
                run.update({k: getattr(hp, k) for k in TARGET_KEYS}, mapping=args.mapping)
                runs.append(run)
                a = run["aggregates"]
                print(f"layers {start}-{args.end} λ={lam:g} clamp={hp.clamp_norm_factor:g} v_lr={hp.v_lr:g} "
                      f"batch={batch} mapping={args.mapping}: "
                      f"ES {a['efficacy_score']['mean']:.1f} PS {a['paraphrase_score']['mean']:.1f} "
                      f"NS {a['neighborhood_score']['mean']:.1f} HM {a['harmonic_mean']:.2f} | strict "
                      f"{a['efficacy_acc']['mean']:.1f}/{a['paraphrase_acc']['mean']:.1f}/"
                      f"{a['neighborhood_acc']['mean']:.1f} | z_error {a['z_error_mean']:.3f} "
                      f"({run['seconds']:.0f} s)", flush=True)
    unedited = aggregate_scores(record_scores(model, facts)) if args.unedited else None
    out = {"model": f"Gemma 3 270M (fingerprint {model.fingerprint})", "split": "dev",
           "facts": f"{len(facts)} dev facts: the first fact of every subject, in file order, the first {len(facts)}",
           "commit": commit, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "command": "OMP_NUM_THREADS=1 python studies/memit_gemma/run.py " + " ".join(sys.argv[1:]),
           "end": args.end, "target_hparams": hp0.to_dict(), "target_seconds": target_seconds,
           "target_info": tg.info, "unedited": unedited, "runs": runs}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"-> {args.out}")


# ============================================================================================ which scale
def run_scales(args) -> None:
    """Per layer, how much the scale of the MLP output differs between a fact's template rows: the rms of the
    template-mean output and the rows' arithmetic mean rms, each over their harmonic mean (the first-order scale
    the mapping uses), and the rows' coefficient of variation; unedited model, the first ``--n`` dev facts."""
    model = load_gemma()
    hp = MemitHparams.make()
    templates = context_templates(model, seed=0, spec=hp.templates)
    requests = as_requests(dev_facts(model, args.n))
    batches = [edit_batch(model, r["prompt"], r["subject"], model.target_tokens(r["target_new"]), templates,
                          hp.kl_prompt, hp.subject_token) for r in requests]
    n = len(batches)
    for layer in range(args.end + 1):
        st = memit_solve.subject_states(model, batches, layer, args.end, with_outputs=True)
        rms = (st.outs.pow(2).mean(1) + 1e-6).sqrt()
        count = torch.bincount(st.owner, minlength=n).to(torch.float64)
        owner = st.owner
        per_fact = lambda x, o=owner: torch.zeros(n, *x.shape[1:], dtype=torch.float64).index_add_(0, o, x)
        harmonic_rms = count / per_fact(1 / rms)
        arithmetic = per_fact(rms) / count
        mean_out = per_fact(st.outs) / count[:, None]
        cv = (per_fact((rms - arithmetic[owner]).pow(2)) / count).sqrt() / arithmetic
        of_mean = mean_out.pow(2).mean(1).add(1e-6).sqrt()
        print(f"layer {layer}: rms(template-mean output) / harmonic {float((of_mean / harmonic_rms).mean()):.3f}, "
              f"arithmetic / harmonic {float((arithmetic / harmonic_rms).mean()):.3f}, rows' CV {float(cv.mean()):.3f}")


# ============================================================================================ merge + rule
def choose(runs: list[dict], n: int) -> dict:
    """The run the rule picks (module docstring) among those with all ``n`` facts in one batch and the adapted
    target mapping."""
    full = [r for r in runs if r["batch"] == r["n"] == n and r.get("mapping", "nearest") == "nearest"]
    if not full:
        raise SystemExit(f"no run edits all {n} facts at once with the 'nearest' mapping; nothing to choose from")
    return max(full, key=lambda r: (round(r["aggregates"]["harmonic_mean"], 6), -len(r["layers"]),
                                    r["mom2_update_weight"]))


def target_summary(doc: dict) -> dict:
    info = doc["target_info"]
    nll = [i["nll_final"] for i in info]
    return {"end": doc["end"], **{k: doc["target_hparams"][k] for k in TARGET_KEYS}, "facts": len(info),
            "seconds": round(doc["target_seconds"], 1), "nll_final_mean": sum(nll) / len(nll),
            "nll_final_max": max(nll), "nll_final_above_0.5": sum(x > 0.5 for x in nll),
            "delta_norm_mean": sum(i["delta_norm"] for i in info) / len(info),
            "resid_norm_mean": sum(i["resid_norm"] for i in info) / len(info),
            "clamp_bound": sum(bool(i["clamp_bound"]) for i in info), "answered": sum(bool(i["answered"]) for i in info)}


def run_merge(args) -> None:
    """Join several ``sweep`` outputs (same facts) into ``--out``, apply the rule and keep the per-fact rows of
    the chosen run and of the runs that do not compete (batches of 10, mapping ablations) only."""
    docs = [json.loads(Path(p).read_text()) for p in args.files]
    if len({d["facts"] for d in docs}) != 1:
        raise SystemExit("these files were not made from the same facts")
    runs, targets, parts = [], {}, []
    for p, d in zip(args.files, docs):
        parts.append({"file": Path(p).name, "command": d["command"], "commit": d["commit"], "date_utc": d["date_utc"]})
        t = target_summary(d)
        targets[f"end{t['end']} v_lr {t['v_lr']:g} clamp {t['clamp_norm_factor']:g}"] = t
        runs += [{**r, "end": d["end"], "part": Path(p).name} for r in d["runs"]]
    n = max(r["n"] for r in runs)
    chosen = choose(runs, n)
    for r in runs:
        a = r["aggregates"]
        r["efficacy_failed_case_ids"] = [x["case_id"] for x in r["rows"] if x["efficacy_score"] == 0]
        r["subject_first_failures"] = sum(x["subject_first"] for x in r["rows"] if x["efficacy_score"] == 0)
        competes = r["batch"] == r["n"] == n and r.get("mapping", "nearest") == "nearest"
        if competes and r is not chosen:
            r.pop("rows")
        a["harmonic_mean"] = round(a["harmonic_mean"], 4)
    unedited = next((d["unedited"] for d in docs if d.get("unedited")), None)
    out = {"model": docs[0]["model"], "split": "dev", "facts": docs[0]["facts"],
           "rule": "the (layers, λ, v* settings) with the highest harmonic mean of the success-form efficacy, "
                   "paraphrase and neighbourhood scores with all facts in one batch (target mapping 'nearest'); "
                   "a tie goes to the shorter range, then the larger λ",
           "chosen": {"layers": chosen["layers"], "mom2_update_weight": chosen["mom2_update_weight"],
                      **{k: chosen[k] for k in TARGET_KEYS}, "harmonic_mean": chosen["aggregates"]["harmonic_mean"]},
           "merge_command": "python studies/memit_gemma/run.py merge " + " ".join(Path(p).name for p in args.files),
           "parts": parts, "targets": targets, "unedited": unedited, "runs": runs}
    Path(args.out).write_text(json.dumps(out, indent=1))
    for r in sorted(runs, key=lambda r: (r["batch"], r.get("mapping", "nearest"), r["v_lr"], r["end"],
                                         r["layers"][0], r["mom2_update_weight"])):
        a = r["aggregates"]
        print(f"end {r['end']} layers {r['layers'][0]}-{r['layers'][-1]} λ={r['mom2_update_weight']:g} "
              f"v_lr={r['v_lr']:g} batch={r['batch']} {r.get('mapping', 'nearest')}: ES "
              f"{a['efficacy_score']['mean']:.1f} PS {a['paraphrase_score']['mean']:.1f} NS "
              f"{a['neighborhood_score']['mean']:.1f} HM {a['harmonic_mean']:.2f}")
    print(f"chosen: {out['chosen']} -> {args.out}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="stage", required=True)
    for name in ("targets", "sweep"):
        s = sub.add_parser(name)
        s.add_argument("--end", type=int, required=True, help="the range's last layer (where the targets live)")
        s.add_argument("--n", type=int, default=100)
        s.add_argument("--clamp", type=float, default=None, help="clamp_norm_factor of the v* loop")
        s.add_argument("--v-lr", type=float, default=None)
        s.add_argument("--v-steps", type=int, default=None)
        s.add_argument("--work", default=str(WORK))
    sw = sub.choices["sweep"]
    sw.add_argument("--starts", required=True, help="comma-separated first layers of the ranges")
    sw.add_argument("--lambdas", default="2500")
    sw.add_argument("--batch", default="all", help="comma-separated batch sizes ('all': every fact at once)")
    sw.add_argument("--unedited", action="store_true", help="also score the unedited model")
    sw.add_argument("--mapping", choices=sorted(MAPPINGS), default="nearest",
                    help="how a residual share becomes the MLP-output target (ablations: linear, none)")
    sw.add_argument("--out", required=True)
    sc = sub.add_parser("scales")
    sc.add_argument("--end", type=int, default=5)
    sc.add_argument("--n", type=int, default=100)
    mg = sub.add_parser("merge")
    mg.add_argument("files", nargs="+")
    mg.add_argument("--out", default=str(Path(__file__).with_name("results.json")))
    args = p.parse_args(argv)
    {"targets": run_targets, "sweep": run_sweep, "scales": run_scales, "merge": run_merge}[args.stage](args)


if __name__ == "__main__":
    main()
