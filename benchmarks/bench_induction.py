"""Benchmark of interp.induction (not a timed test). Prints `name: value` lines:

  induction_scan_ratio  time to score every head of the embedded model on a batch of [BOS] + R + R
                        (one forward capturing only the attention patterns, plus the scores)
                        / one plain forward of the same batch (target <= 1.2)
  detect_head_ratio     that scan / TransformerLens `detect_head(bridge, strings, "induction_head")`
                        for all heads on the same sequences (detect_head takes text, so R is drawn
                        from word tokens that survive decode -> encode, checked token for token)
  reproduce_seconds     wall clock of the full demonstration (2-layer run + 1-layer control)
  transition_step       the 2-layer run's transition step
  reproduce_workers_over_serial
                        wall clock of notebook 04's demonstration (3 seeds + control, --workers-steps steps)
                        with reproduce(workers=--workers) / the same one run after another (target < 1 on a
                        machine with that many free cores); `workers_same_weights` checks every run's weights
                        are bit-identical between the two

Both timings of a ratio are measured in this run, interleaved, median of --repeats, with
torch threads fixed (--threads). Wall-clock numbers grow when other processes share the cores;
the `_cpu` lines give the same ratios / durations in process CPU time, which does not.

    python benchmarks/bench_induction.py [--batch 8] [--repeats 3] [--threads 1] [--skip-reproduce]
                                         [--workers 2] [--workers-steps 1400]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def word_token_pool(model) -> torch.Tensor:
    """Ordinary ids that decode to ' word' and encode back to themselves, so that text built from them
    tokenizes to exactly the same ids (detect_head only accepts strings)."""
    from interp.analyses.induction import ordinary_token_ids

    tok = model.tokenizer
    pool = []
    for i in ordinary_token_ids(model).tolist():
        s = tok.decode([i])
        if len(s) > 2 and s[0] == " " and s[1:].isalpha() and tok.encode(s, add_special_tokens=False) == [i]:
            pool.append(i)
    return torch.tensor(pool)


def same_sequences(model, seq_len: int, batch: int, seed: int):
    """[BOS] + R + R token batch and the matching strings (checked to re-tokenize identically)."""
    pool = word_token_pool(model)
    gen = torch.Generator().manual_seed(seed)
    rows = [pool[torch.randperm(len(pool), generator=gen)[:seq_len]] for _ in range(batch)]
    tokens = torch.stack([torch.cat([torch.tensor([model.bos_token_id]), r, r]) for r in rows])
    strings = [model.tokenizer.decode(t[1:].tolist()) for t in tokens]
    for s, t in zip(strings, tokens):
        assert torch.equal(model.module.to_tokens(s)[0].cpu(), t), "sequence does not round-trip"
    return tokens, strings


def detect_head_all(model, strings):
    """TransformerLens's detect_head on the bridge; if it cannot run, the same computation
    re-implemented (run_with_cache per string, "mul" score) and say so."""
    try:
        from transformer_lens.head_detector import detect_head

        return detect_head(model.module, strings, "induction_head"), "transformer_lens.head_detector.detect_head"
    except Exception as e:  # noqa: BLE001 - any failure of detect_head on the bridge means: fall back
        from transformer_lens.head_detector import (
            compute_head_attention_similarity_score,
            get_induction_head_detection_pattern,
        )

        scores = []
        for s in strings:
            toks = model.module.to_tokens(s)
            _, cache = model.module.run_with_cache(toks, remove_batch_dim=True)
            det = get_induction_head_detection_pattern(toks.cpu())
            scores.append(torch.tensor([[compute_head_attention_similarity_score(
                cache["pattern", layer, "attn"][head].cpu(), det, exclude_bos=False,
                exclude_current_token=False, error_measure="mul")
                for head in range(model.n_heads)] for layer in range(model.n_layers)]))
        return torch.stack(scores).mean(0), f"RE-IMPLEMENTATION of detect_head (it raised {e!r})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-reproduce", action="store_true")
    ap.add_argument("--workers", type=int, default=2, help="0: skip the workers comparison")
    ap.add_argument("--workers-steps", type=int, default=1400)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import interp
    from interp.analyses.induction import induction_scores, reproduce

    model = interp.load(device="cpu")
    tokens, strings = same_sequences(model, args.seq_len, args.batch, seed=0)
    print(f"# embedded model, batch {args.batch} x {tokens.shape[1]} tokens ([BOS] + R + R, R = {args.seq_len} "
          f"word tokens), {args.threads} thread(s), median of {args.repeats}")

    model.run(tokens[:1])  # warm-up
    plain, scan = [], []
    for _ in range(args.repeats):  # interleaved, so background load hits both alike
        plain.append(timed(lambda: model.run(tokens))[1:])
        result, *t = timed(lambda: induction_scores(model, tokens=tokens, seq_len=args.seq_len))
        scan.append(t)
    med = lambda xs, i: statistics.median(x[i] for x in xs)
    print(f"plain_forward_seconds: {med(plain, 0):.3f}")
    print(f"scan_seconds: {med(scan, 0):.3f}")
    print(f"induction_scan_ratio: {med(scan, 0) / med(plain, 0):.3f}")
    print(f"induction_scan_ratio_cpu: {med(scan, 1) / med(plain, 1):.3f}")

    (tl_scores, how), tl_wall, tl_cpu = timed(lambda: detect_head_all(model, strings))
    print(f"# detect_head: {how}, one string at a time with a full run_with_cache")
    print(f"detect_head_seconds: {tl_wall:.3f}")
    print(f"detect_head_ratio: {med(scan, 0) / tl_wall:.3f}")
    print(f"detect_head_ratio_cpu: {med(scan, 1) / tl_cpu:.3f}")
    ours = result["induction"]
    best = tuple(int(i) for i in divmod(int(ours.argmax()), model.n_heads))
    expected = args.seq_len / (2 * args.seq_len + 1)
    print(f"# best head L{best[0]}H{best[1]}: induction score {float(ours[best]):.3f}, detect_head 'mul' "
          f"{float(tl_scores[best]):.3f} (a perfect head caps at L/(2L+1) = {expected:.3f}); same top head: "
          f"{int(tl_scores.argmax()) == int(ours.argmax())}")

    if not args.skip_reproduce:
        with tempfile.TemporaryDirectory() as out:
            rep, wall, cpu = timed(lambda: reproduce(out, layers=2, seeds=1, threads=args.threads))
        print(f"reproduce_seconds: {wall:.1f}")
        print(f"reproduce_cpu_seconds: {cpu:.1f}")
        print(f"transition_step: {rep.main.transition_step}")
        s = rep.main.summary_dict()
        print(f"# induction score {s['induction_score_before']:.2f} -> {s['induction_score_after']:.2f}, control max "
              f"{rep.control.summary_dict()['max_induction_score']:.2f}")

    if args.workers > 1:
        kw = dict(layers=2, seeds=3, steps=args.workers_steps, log_every=100, eval_batch=128, threads=args.threads)
        serial, serial_wall, _ = timed(lambda: reproduce(**kw))
        parallel, parallel_wall, _ = timed(lambda: reproduce(workers=args.workers, **kw))
        runs = lambda r: [*r.runs, r.control]  # noqa: E731
        same = all(torch.equal(a, b) for x, y in zip(runs(serial), runs(parallel))
                   for a, b in zip(x.model.state_dict().values(), y.model.state_dict().values()))
        print(f"# notebook 04's demonstration: 3 seeds + control, {args.workers_steps} steps, {args.threads} "
              f"thread(s) a run; serial {serial_wall:.1f} s, {args.workers} workers {parallel_wall:.1f} s")
        print(f"reproduce_workers_over_serial: {parallel_wall / serial_wall:.3f}")
        print(f"workers_same_weights: {same}")


if __name__ == "__main__":
    main()
