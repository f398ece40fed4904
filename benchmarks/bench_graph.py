"""Attribution-graph speed and memory, as ratios against a plain forward timed in the same run (issue 34).

    OMP_NUM_THREADS=1 python benchmarks/bench_graph.py [--rows 3000] [--full]

Transcoders of the default width and k at every layer, seeded starts (the speed does not depend on training);
a 20-token prompt (with BOS).

graph_rows_seconds: seconds for the logit rows and ``--rows`` influence-ordered feature rows (target <= 60 s, one
thread). graph_peak_rss_gb: the process's peak resident memory by then (target <= 2 GB).
graph_rows_flop_efficiency: rows per second against the floor: one row is one vector-Jacobian product through the
frozen model, about a forward of the prompt (2 FLOPs per weight per token), at the FLOP rate a plain no-grad
forward of 64 copies of the prompt reaches in the same run (target >= 0.5). The floor is generous: a row's
backward starts at its target's layer and never passes through a real MLP (the frozen model's MLP paths are the
transcoders' linear skip terms), so a row costs well under a forward and the figure can exceed 1.
graph_full_seconds (with ``--full``): every active feature's row (target <= 300 s).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch

PROMPT = "The Eiffel Tower, built in 1889, is located in the city of"          # 20 tokens with BOS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--full", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import interp
    from interp.analyses.features import Dictionary, DictionarySet, Site, TrainSettings
    from interp.analyses.features.dictionary import model_info
    from interp.analyses.features.cost import forward_flops_per_token

    model = interp.load(device="cpu")
    s = TrainSettings()
    tc = DictionarySet({L: Dictionary(model.d_model, model.d_model, s.width, k=s.k, skip=True,
                                      site=Site.transcoder(model, L), model=model_info(model)).init_(L)
                        for L in range(model.n_layers)})
    toks = model.to_tokens(PROMPT)
    n_tok = toks.shape[1]
    fwd = []
    with torch.no_grad():
        batch = toks.expand(args.batch, -1)
        model.forward(batch)
        for _ in range(3):
            t = time.perf_counter()
            model.forward(batch)
            fwd.append(time.perf_counter() - t)
    rate = forward_flops_per_token(model, model.n_layers, n_tok) * batch.numel() / statistics.median(fwd)
    t = time.perf_counter()
    g = interp.attribution_graph(model, tc, PROMPT, batch=args.batch, max_feature_nodes=args.rows)
    secs = time.perf_counter() - t
    rows = g.meta["feature_rows"] + int((g.nodes["kind"] == "logit").sum())
    floor = rows * forward_flops_per_token(model, model.n_layers, n_tok) * n_tok / rate
    print(f"prompt_tokens: {n_tok}")
    print(f"active_features: {g.meta['active_features']}")
    print(f"graph_rows: {rows}")
    print(f"graph_rows_seconds: {secs:.1f}")
    print(f"graph_rows_flop_efficiency: {floor / secs:.3f}")
    print(f"graph_peak_rss_gb: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f}")
    if args.full:
        t = time.perf_counter()
        interp.attribution_graph(model, tc, PROMPT, batch=args.batch)
        print(f"graph_full_seconds: {time.perf_counter() - t:.1f}")


if __name__ == "__main__":
    main()
