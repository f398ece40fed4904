"""The full test-split evaluation (464 records, every metric on), run in shards and pooled (the JSON beside it).

One command evaluates ROME with the FT-L baseline on the whole split (``interp eval-edits --split test --editor rome
--baseline ft``), but on this 2-core machine it runs for hours; here the same evaluation is cut into shards of
consecutive records, each written to its own JSON as soon as it is done, so that several processes share the
work and an interrupted session loses at most the shards in progress. ``evaluate(first_index=...)`` seeds every
record as in the one-process run, so the pooled table is that run's (the unedited measurements batch other
neighbours, so values agree to float rounding).

    # claims shards not done yet, one by one:
    OMP_NUM_THREADS=1 .venv/bin/python studies/test_split/test_split_eval.py run
    # one shard elsewhere, then compared with the stored one:
    OMP_NUM_THREADS=1 .venv/bin/python studies/test_split/test_split_eval.py run --dir /tmp/s --only 0
    .venv/bin/python studies/test_split/test_split_eval.py check --dir /tmp/s
    # {rome,ft}.json + the table; the Markdown table of README.md alone:
    .venv/bin/python studies/test_split/test_split_eval.py pool
    .venv/bin/python studies/test_split/test_split_eval.py table

MEMIT edits the whole split in one batch, so it has no shards: its JSON is the CLI's own output, with the
per-record table beside it (``interp eval-edits --split test --editor memit --batch-size 464 --json --csv
studies/test_split/memit.csv > studies/test_split/memit.json``); ``pool`` recomputes that JSON's aggregates
from the table with the current code (checking that every mean is the CLI's), so all three columns share one
CI rule.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
SHARDS = HERE / "shards"
SHARD = 29  # records per shard (464 = 16 x 29)
EDITORS = ("rome", "ft")  # the editor and its baseline, as in ``interp eval-edits --editor rome --baseline ft``


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _claim(i: int, where: Path = SHARDS) -> bool:
    """A shard is claimed by creating its lock file; a lock left by a dead process is taken over."""
    lock = where / f"shard_{i:03d}.lock"
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            if _alive(int(lock.read_text() or 0)):
                return False
        except ValueError:
            return False
        lock.unlink(missing_ok=True)
        return _claim(i, where)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def run(args) -> None:
    import interp
    from interp import rome

    torch.set_num_threads(args.threads)
    where = args.dir
    where.mkdir(parents=True, exist_ok=True)
    records = rome.load_records(split="test")
    n_shards = math.ceil(len(records) / SHARD)
    only = None if args.only is None else {int(x) for x in args.only.split(",")}
    model = None
    for i in range(n_shards):
        out = where / f"shard_{i:03d}.json"
        if (only is not None and i not in only) or out.exists() or not _claim(i, where):
            continue
        try:
            model = model or interp.load(device="cpu")
            start = i * SHARD
            t0 = time.perf_counter()
            res = rome.evaluate(model, records[start: start + SHARD], EDITORS[0], baseline=EDITORS[1],
                                first_index=start, progress=False)
            doc = {"shard": i, "start": start, "n": len(res.frame), "wall_seconds": time.perf_counter() - t0,
                   "command": "OMP_NUM_THREADS=1 .venv/bin/python studies/test_split/test_split_eval.py run",
                   "threads": args.threads}
            for r in (res, res.baseline):
                rows = r.frame.reset_index().to_json(orient="records", double_precision=15)
                doc[r.editor] = {"layer": r.layer, "hparams": r.hparams, "settings": r.settings,
                                 "rows": json.loads(rows)}
            out.write_text(json.dumps(doc) + "\n")
            print(f"shard {i}: records {start}..{start + len(res.frame) - 1} in {doc['wall_seconds']:.0f} s",
                  flush=True)
        finally:
            (where / f"shard_{i:03d}.lock").unlink(missing_ok=True)


def check(args) -> None:
    """Per record, the largest differences between the shards in ``--dir`` and the stored ones (same records,
    same settings): an evaluation changed for speed must give the stored numbers."""
    import pandas as pd

    for path in sorted(args.dir.glob("shard_*.json")):
        new, old = json.loads(path.read_text()), json.loads((SHARDS / path.name).read_text())
        for editor in EDITORS:
            a = pd.DataFrame(new[editor]["rows"]).set_index("case_id")
            b = pd.DataFrame(old[editor]["rows"]).set_index("case_id").loc[a.index]
            nums = [c for c in a.columns if c in b.columns and pd.api.types.is_numeric_dtype(a[c])
                    and not c.endswith("seconds")]
            diff = (a[nums] - b[nums]).abs().max().sort_values(ascending=False)
            scores = [c for c in nums if c.endswith(("_score_post", "_score_pre", "_acc_post", "_acc_pre"))]
            flips = int((a[scores] != b[scores]).to_numpy().sum())
            texts = [c for c in a.columns if c.startswith("gen_text")]
            same_text = int((a[texts] == b[texts]).to_numpy().sum())
            print(f"{path.name} {editor}: {len(a)} records, {new['wall_seconds']:.0f} s (stored run "
                  f"{old['wall_seconds']:.0f} s); score values that differ: {flips}; generation samples equal: "
                  f"{same_text} of {a[texts].size}; largest differences: "
                  + ", ".join(f"{k} {v:.2g}" for k, v in diff.head(6).items()))


def pool(args) -> None:
    import pandas as pd

    from interp import rome
    from interp.core.results import jsonable
    from interp.editing.eval.report import EvalResult, diagnose

    records = rome.load_records(split="test")
    docs = [json.loads(p.read_text()) for p in sorted(SHARDS.glob("shard_*.json"))]
    covered = sorted(r["case_id"] for d in docs for r in d[EDITORS[0]]["rows"])
    wanted = sorted(r.case_id for r in records)
    if covered != wanted:
        print(f"{len(covered)} of {len(wanted)} test records done; pooling what there is", file=sys.stderr)
    for editor in EDITORS:
        kinds = {json.dumps(d[editor]["hparams"], sort_keys=True) for d in docs}
        if len(kinds) > 1:  # a default changed between shards: their rows are not one run's
            raise SystemExit(f"the shards of {editor} were made with {len(kinds)} different hyperparameter sets; "
                             f"delete the stale ones under {SHARDS} and run them again")
        frame = pd.DataFrame([r for d in docs for r in d[editor]["rows"]]).set_index("case_id")
        frame["failure"] = diagnose(frame)
        first = docs[0][editor]
        res = EvalResult(frame=frame, editor=editor, layer=first["layer"], hparams=first["hparams"],
                         settings={**first["settings"], "n_records": len(frame), "first_index": 0},
                         seconds=sum(d["wall_seconds"] for d in docs), layers=[first["layer"]])
        out = res.to_json()
        out.update(split="test", complete=covered == wanted, n_shards=len(docs),
                   wall_seconds_sum=out.pop("seconds"),
                   command="OMP_NUM_THREADS=1 .venv/bin/python studies/test_split/test_split_eval.py run "
                           "(shards), then pool")
        (HERE / f"{editor}.json").write_text(json.dumps(jsonable(out), indent=1) + "\n")
        print(res.summary())
    memit_from_table()
    table(args)


def memit_from_table(path: Path = HERE / "memit.json", csv: Path = HERE / "memit.csv") -> None:
    """Rewrite the CIs in ``memit.json`` from ``memit.csv`` (the same run's per-record rows)."""
    import pandas as pd

    from interp.core.results import jsonable
    from interp.editing.eval.report import EvalResult

    if not (path.exists() and csv.exists()):
        return
    doc = json.loads(path.read_text())
    frame = pd.read_csv(csv, index_col="case_id").drop(columns="editor")
    res = EvalResult(frame=frame, editor=doc["editor"], layer=doc["layer"], hparams=doc["hparams"],
                     settings=doc["settings"], seconds=doc["seconds"], layers=doc["layers"])
    new = res.to_json()
    for key, value in new.items():
        if key.endswith("_ci") or key in ("failures", "failure_counts", "n_failed", "n_records"):
            continue
        old = doc.get(key)
        if isinstance(value, float) and isinstance(old, float) and not math.isclose(value, old, rel_tol=1e-9,
                                                                                     abs_tol=1e-9):
            raise SystemExit(f"memit.csv does not give memit.json's {key}: {value} vs {old}")
    doc.update({k: v for k, v in new.items() if k.endswith("_ci")})
    doc["ci_rule"] = "eval_report.mean_ci (recomputed by studies/test_split/test_split_eval.py pool from " \
                     "memit.csv)"
    path.write_text(json.dumps(jsonable(doc), indent=1) + "\n")


ROWS = (("efficacy", "efficacy"), ("paraphrase", "paraphrase"), ("paraphrase (other forms)", "paraphrase_other"),
        ("neighborhood", "neighborhood"))


def _cell(doc: dict, key: str, digits: int = 1) -> str:
    if key not in doc:
        return "—"
    lo, hi = doc.get(f"{key}_ci") or [None, None]
    if lo is None or hi is None or lo != lo:  # fewer than two measurements (MEMIT's one batch: one drift): no CI
        return f"{doc[key]:.{digits}f} (one measurement)"
    return f"{doc[key]:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def table(args=None) -> None:
    docs = {e: json.loads((HERE / f"{e}.json").read_text()) for e in ("rome", "ft", "memit")
            if (HERE / f"{e}.json").exists()}
    if not docs:
        raise SystemExit(f"nothing pooled yet under {HERE}")
    names = {"rome": "ROME (one edit at a time)", "ft": "FT-L (one at a time)", "memit": "MEMIT (all at once)"}
    first = max(docs.values(), key=lambda d: d["n_records"])  # the unedited scores of the most records
    head = (f"| metric | form | unedited ({first['n_records']}) | "
            + " | ".join(f"{names[e]}, {d['n_records']} records" for e, d in docs.items()) + " |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for label, key in ROWS:
        for form, kind in (("success", "score"), ("strict (top-1)", "acc")):
            k = f"{key}_{kind}"
            before = f"{first[f'{k}_before']:.1f}" if f"{k}_before" in first else "—"
            lines.append(f"| {label} | {form} | {before} | " + " | ".join(_cell(d, k) for d in docs.values()) + " |")
    lines.append("| generation entropy drop % | | | " + " | ".join(_cell(d, "generation_entropy_drop", 2)
                                                           for d in docs.values()) + " |")
    lines.append("| loss drift % | | | " + " | ".join(_cell(d, "loss_drift", 3) for d in docs.values()) + " |")
    lines.append("| edits failing efficacy (diagnosed reasons) | | | " + " | ".join(
        f"{len(d.get('failures', []))}" + (f" ({', '.join(f'{k} {v}' for k, v in d['failure_counts'].items())})"
                                          if d.get("failure_counts") else "") for d in docs.values()) + " |")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--dir", type=Path, default=SHARDS, help="where the shard JSONs go (default: test_split/shards)")
    r.add_argument("--only", default=None, help="comma-separated shard numbers to run (default: every one)")
    c = sub.add_parser("check", help="compare shards in --dir with the stored ones, record by record")
    c.add_argument("--dir", type=Path, required=True)
    sub.add_parser("pool")
    sub.add_parser("table")
    args = ap.parse_args()
    {"run": run, "pool": pool, "table": table, "check": check}[args.cmd](args)


if __name__ == "__main__":
    main()
