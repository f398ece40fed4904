"""Edit-evaluation benchmark on the embedded model (CPU). Prints ``name: value`` lines:

- ``eval_overhead_ratio``: (evaluation seconds per record - edit seconds per record) / edit seconds per record,
  ``interp.rome.evaluate`` with every metric on (generation, drift, lens) over ``--records`` test records with
  ROME, cached key statistics (loaded before timing; the context templates are sampled by an untimed warm-up
  edit, as in any session that makes more than one edit). Both terms come from the same run: the edit seconds
  are the evaluation's own per-record ``edit_seconds``. The default, 16 records, is one chunk of the evaluation
  (``BEFORE_CHUNK``): its records are measured unedited together and, after their edits were made, kept and
  reverted, edited together (each row under its own edit's matrices), as in a whole-split run.
- ``edit_seconds``: ROME's mean seconds per edit in that run (its share of the chunk's edits, which are optimised
  together: ``interp.rome.edits_together``).
- ``single_edit_seconds``: ``interp.rome.edit`` made alone, mean over the first 4 records (what one edit costs a
  user; the evaluation's edits share their forwards and cost less each).
- ``measurement_floor_ratio``: the issue's floor of the measurements taken one record at a time — per record
  two probability forwards (before, after), 3 x 40 KV-cached sampled tokens twice and one drift forward (the
  unedited drift is measured once per evaluation), plus the two logit-lens rows — each timed alone on the
  unedited model over the same records, divided by ``edit_seconds``. Its parts are printed as
  ``floor_*_seconds``. On this CPU the record-at-a-time floor is above the edit (a decode step of 3 rows costs
  nearly what one of 50 does; the drift forward is compute-bound); the evaluation batches its records' before
  and after measurements and so runs below it: ``eval_overhead_ratio`` < ``measurement_floor_ratio``.
- ``flop_overhead_ratio``: the same ratio counted in arithmetic instead of seconds (``torch.utils.flop_counter``:
  every matrix product, forward and backward) over the first ``--flop-records`` test records (default:
  ``--records``, so that the unedited drift is shared alike): (the evaluation's FLOPs - the FLOPs of the same
  records' edits, made together as the evaluation makes them) / the edits' FLOPs. Printed with its parts
  ``edit_gflop`` and ``measurement_gflop`` (per record) and each part's rate in the timed run, ``edit_gflops``
  and ``measurement_gflops`` (GFLOP per second). The seconds ratio falls below this one only as far as the
  measurements run at a higher rate than the edit.
- ``memit_seconds_per_fact``: wall seconds of one ``memit_edit`` of the first ``--n`` test records with distinct
  subjects (default 100) divided by ``--n``, with cached statistics (an untimed warm-up edit of 2 records loads
  them); skipped with a message when ``interp.editing.memit`` is absent.

    OMP_NUM_THREADS=1 python benchmarks/bench_edit_eval.py [--records 16] [--flop-records N] [--n 100] [--threads 1]
        [--skip-memit] [--skip-overhead]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import interp  # noqa: E402
from interp import rome  # noqa: E402
from interp.editing.keys import key_stats  # noqa: E402


def overhead(model, records, layer: int, stats) -> dict:
    t0 = time.perf_counter()
    res = rome.evaluate(model, records, "rome", layer=layer, stats=stats, progress=False)
    wall = time.perf_counter() - t0
    edit_s = float(res.to_frame()["edit_seconds"].mean())
    per_record = wall / len(records)
    return {"eval_seconds_per_record": per_record, "edit_seconds": edit_s,
            "eval_overhead_ratio": (per_record - edit_s) / edit_s}


def single_edit(model, records, layer: int, stats) -> float:
    t0 = time.perf_counter()
    for r in records:
        rome.edit(model, r.prompt, r.subject, r.target_new, layer, stats=stats).revert()
    return (time.perf_counter() - t0) / len(records)


def measurement_floor(model, records, edit_s: float) -> dict:
    from interp.editing import drift
    from interp.editing.eval import measure as em

    texts = drift.drift_set(model, drift.drift_texts(16))
    parts = {"probs": lambda f, i: em.measure_probs(model, [f]),
             "generation": lambda f, i: em.generation_entropies(model, [f.generation_prompts], n_tokens=40,
                                                                seeds=[i]),
             "drift": lambda f, i: drift.text_nll(model, texts),
             "lens": lambda f, i: em.lens_rows(model, f)}
    times = dict.fromkeys(parts, 0.0)
    for i, fact in enumerate(records):
        for name, fn in parts.items():
            t0 = time.perf_counter()
            fn(fact, i)
            times[name] += (time.perf_counter() - t0) / len(records)
    floor = 2 * times["probs"] + 2 * times["generation"] + times["drift"] + 2 * times["lens"]
    return {**{f"floor_{k}_seconds": v for k, v in times.items()}, "floor_seconds_per_record": floor,
            "measurement_floor_ratio": floor / edit_s}


def flop_counts(model, records, layer: int, stats) -> dict:
    """GFLOP per record of the evaluation and of its edits alone (see ``flop_overhead_ratio``)."""
    from torch.utils.flop_counter import FlopCounterMode

    def gflop(fn) -> float:
        counter = FlopCounterMode(display=False)
        with counter:
            fn()
        return counter.get_total_flops() / 1e9 / len(records)

    edit = gflop(lambda: rome.edits_together(model, [(r.prompt, r.subject, r.target_new) for r in records], layer,
                                             stats=stats))
    whole = gflop(lambda: rome.evaluate(model, records, "rome", layer=layer, stats=stats, progress=False))
    return {"edit_gflop": edit, "measurement_gflop": whole - edit, "flop_overhead_ratio": (whole - edit) / edit}


def memit_seconds(model, records, n: int) -> float | None:
    if importlib.util.find_spec("interp.editing.memit") is None:
        return None
    from interp.editing.memit import memit_edit

    seen, distinct = set(), []
    for r in records:  # one MEMIT solve needs distinct subjects (the test split has 17 subjects with two facts)
        if r.subject not in seen:
            seen.add(r.subject)
            distinct.append(r)
    records = distinct[:n]
    warm = memit_edit(model, records[:2])
    warm.revert()
    t0 = time.perf_counter()
    e = memit_edit(model, records)
    wall = time.perf_counter() - t0
    e.revert()
    return wall / len(records)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=16, help="test records in the overhead run")
    ap.add_argument("--n", type=int, default=100, help="records in the timed MEMIT batch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--flop-records", type=int, default=None, help="test records whose arithmetic is counted "
                    "(default: --records)")
    ap.add_argument("--skip-memit", action="store_true")
    ap.add_argument("--skip-overhead", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = interp.load(device="cpu")
    layer = rome.default_layer(model)
    test = rome.load_records(split="test")
    if not args.skip_overhead:
        stats = key_stats(model, layer, rome.RomeHparams.mom2_n_tokens, progress=False)  # disk cache
        warm = rome.edit(model, test[0].prompt, test[0].subject, test[0].target_new, layer, stats=stats)
        warm.revert()
        out = overhead(model, test[: args.records], layer, stats)
        print(f"eval_records: {args.records}")
        print(f"eval_seconds_per_record: {out['eval_seconds_per_record']:.2f}")
        print(f"edit_seconds: {out['edit_seconds']:.2f}")
        print(f"eval_overhead_ratio: {out['eval_overhead_ratio']:.3f}", flush=True)
        print(f"single_edit_seconds: {single_edit(model, test[:4], layer, stats):.2f}", flush=True)
        for k, v in measurement_floor(model, test[: args.records], out["edit_seconds"]).items():
            print(f"{k}: {v:.3f}", flush=True)
        flops = flop_counts(model, test[: args.flop_records or args.records], layer, stats)
        flops["edit_gflops"] = flops["edit_gflop"] / out["edit_seconds"]
        flops["measurement_gflops"] = flops["measurement_gflop"] / (out["eval_seconds_per_record"]
                                                                     - out["edit_seconds"])
        for k, v in flops.items():
            print(f"{k}: {v:.3f}", flush=True)
    if not args.skip_memit:
        per_fact = memit_seconds(model, test, args.n)
        if per_fact is None:
            print("memit: skipped (interp.editing.memit is not there yet)")
        else:
            print(f"memit_facts: {args.n}")
            print(f"memit_seconds_per_fact: {per_fact:.3f}", flush=True)


if __name__ == "__main__":
    main()
