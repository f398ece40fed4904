"""ROME on the same facts in both packaged models: test facts that SmolLM2-135M and Gemma 3 270M both know.

Run from the repository root::

    OMP_NUM_THREADS=1 .venv/bin/python studies/rome_eval_shared/rome_eval_shared.py --n 30  # -> its JSON
    # or one process per model, in parallel (each adds its model to the JSON):
    OMP_NUM_THREADS=1 .venv/bin/python studies/rome_eval_shared/rome_eval_shared.py --n 30 \
        --model SmolLM2-135M &
    OMP_NUM_THREADS=1 .venv/bin/python studies/rome_eval_shared/rome_eval_shared.py --n 30 \
        --model "Gemma 3 270M"

``studies/rome_eval_test/rome_eval_test.json`` and ``rome_eval_test_gemma.json`` score each model on its own
test records, so their difference mixes the models with the record sets. Here both models edit the same facts:
test records of ``facts.jsonl`` and ``facts_gemma.jsonl`` (``interp/editing/records/``) with the same
relation, subject, target_true and target_new (test in both files, so neither model's dev split, used for its
layer choice, is touched). Up to ``--n`` of them are drawn with ``random.Random(seed)`` and sorted by
SmolLM2's case_id. Each model gets its own record of the fact: the rewrite prompt, targets and both paraphrase
sets are the same, but the neighbourhood prompts are the ones that model was checked to know
(data/build/build_facts.py's neighbourhood filter runs per model).

Each model runs ``interp.editing.eval.run.evaluate(model, records, "rome", generation=False, drift=False,
lens=False)`` at its default layer and hyperparameters (chosen on its own dev split, ``studies/rome_layer/``).
The JSON holds, per model, the aggregates with 95% CIs (``EvalResult.to_json``), one row per record, the
seconds, and the command.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {"SmolLM2-135M": (None, "facts.jsonl"), "Gemma 3 270M": ("gemma3-270m", "facts_gemma.jsonl")}
KEY = ("relation", "subject", "target_true", "target_new")


def read(name: str) -> list[dict]:
    from interp.editing.facts import default_path  # the records shipped with the package

    with open(default_path(name), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def shared_test_facts(n: int, seed: int) -> tuple[dict[str, list[dict]], int]:
    """({model name: its records of the chosen facts}, number of shared test facts); the same facts in the same
    order for every model."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r}; allowed: an integer >= 1 (facts to evaluate)")
    by_model = {}
    for name, (_, path) in MODELS.items():
        by_model[name] = {tuple(r[k] for k in KEY): r for r in read(path) if r["split"] == "test"}
    first = next(iter(by_model))
    shared = [k for k in by_model[first] if all(k in recs for recs in by_model.values())]
    if not shared:
        raise ValueError("no test fact is shared by " + " and ".join(MODELS))
    chosen = random.Random(seed).sample(shared, min(n, len(shared)))
    chosen.sort(key=lambda k: by_model[first][k]["case_id"])
    return {name: [recs[k] for k in chosen] for name, recs in by_model.items()}, len(shared)


def _plain(v):
    """JSON-safe: numpy / torch scalars as Python numbers, NaN and infinities as null (strict JSON)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=40, help="facts to evaluate (default 40)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the draw of the facts (default 0)")
    ap.add_argument("--model", choices=list(MODELS), action="append",
                    help="evaluate only this model (repeatable; default: all). The other models' results already in "
                         "--out are kept if they are for the same facts, so the models can run in parallel processes")
    ap.add_argument("--out", default=os.path.join(HERE, "rome_eval_shared.json"))
    args = ap.parse_args(argv)
    import torch

    import interp
    from interp.editing.eval.run import evaluate

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    records, n_shared = shared_test_facts(args.n, args.seed)
    first = next(iter(records))
    facts = [{k: r[k] for k in KEY} | {"case_id": {name: records[name][i]["case_id"] for name in records}}
             for i, r in enumerate(records[first])]
    command = ("OMP_NUM_THREADS=1 .venv/bin/python studies/rome_eval_shared/rome_eval_shared.py"
               + (f" --n {args.n}" if args.n != 40 else "") + (f" --seed {args.seed}" if args.seed else ""))
    for name in args.model or list(MODELS):
        source = MODELS[name][0]
        t1 = time.time()
        model = interp.load() if source is None else interp.load(source)
        res = evaluate(model, records[name], "rome", generation=False, drift=False, lens=False)
        frame = res.to_frame().reset_index()
        result = {"source": source or "default", "aggregates": _plain(res.to_json()),
                  "rows": _plain(frame.to_dict(orient="records")), "seconds": round(time.time() - t1, 1),
                  "command": command + f" --model '{name}'"}
        print(f"{name}: {res.summary()}  ({time.time() - t1:.0f} s)", flush=True)
        del model
        # read-modify-write at the end, so a parallel process for the other model keeps its result
        out = {}
        if os.path.isfile(args.out):
            with open(args.out, encoding="utf-8") as f:
                out = json.load(f)
        if out.get("facts") != facts:
            out = {}
        out.update(command=command, n_shared_test_facts=n_shared, n_records=len(facts), seed=args.seed, facts=facts)
        out.setdefault("models", {})[name] = result
        out["models"] = {m: out["models"][m] for m in MODELS if m in out["models"]}
        out["seconds"] = round(sum(m["seconds"] for m in out["models"].values()), 1)
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, ensure_ascii=False, allow_nan=False)
            f.write("\n")
        print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
