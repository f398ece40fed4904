"""Tuned lens: every number checked against an independent computation — the logit lens and the model's own logits,
translators applied by hand to residuals read through the core API, KL and perplexity recomputed from
``model.run`` — plus training determinism, resume after interruption, save / load, and refusal of a lens that does
not belong to the model or whose file was altered."""

import argparse
import json
import math
import warnings

import pytest
import torch

import interp
from interp import cli
from interp.analyses.lens import logit_lens
from interp.analyses.tuned_lens import (
    TunedLens,
    evaluate_lens,
    load_tuned_lens,
    prediction_depth,
    split_documents,
    train_tuned_lens,
    tuned_lens,
)
from interp.analyses.tuned_lens.evaluate import heldout_positions

TEXT = "The cat sat on the mat."
PROMPT = "The Eiffel Tower is located in the city of"
# a small, quick training run on a tiny model (~1 s)
SMALL = {"tokens": 768, "kl_tokens": 256, "steps": 3, "batch_size": 64, "max_len": 96, "progress": False}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Every test trains into and reads from its own cache folder."""
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))


def random_lens(model, seed=0, scale=0.05) -> TunedLens:
    gen = torch.Generator().manual_seed(seed)
    lens = TunedLens.identity(model)
    lens.weight = torch.randn(lens.weight.shape, generator=gen) * scale
    lens.bias = torch.randn(lens.bias.shape, generator=gen) * scale
    lens.baseline = torch.randn(lens.baseline.shape, generator=gen) * scale
    return lens


def same_lens_result(a, b):
    for name in ("top_ids", "top_probs", "target_logits", "target_probs", "target_ranks"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def same_translators(a: TunedLens, b: TunedLens):
    for name in ("weight", "bias", "baseline", "history"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


# ============================================================================================== the lens itself
@pytest.mark.parametrize("fixture", ["embedded", "tiny_llama", "tiny_gpt2"])
def test_identity_lens_is_exactly_the_logit_lens(fixture, request):
    model = request.getfixturevalue(fixture)
    text = PROMPT if fixture == "embedded" else TEXT
    targets = [" Paris"] if fixture == "embedded" else [" "]
    pos = [0, -2, -1] if fixture == "embedded" else None  # every position of the tiny models
    logit = logit_lens(model, text, targets=targets, k=5, positions=pos)
    tuned = tuned_lens(model, text, targets=targets, k=5, positions=pos, lens=TunedLens.identity(model))
    same_lens_result(logit, tuned)
    assert tuned.tuned and not logit.tuned
    assert tuned.to_json()["lens"] == "tuned" and tuned.summary().startswith("tuned lens")


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_gpt2"])
def test_rows_are_translated_residuals_and_the_final_row_is_the_model(fixture, request):
    model = request.getfixturevalue(fixture)
    lens = random_lens(model)
    res = tuned_lens(model, TEXT, targets=[3, 100], k=4, lens=lens)
    logits = model.run(TEXT)[0]
    assert torch.equal(res.target_logits[-1], logit_lens(model, TEXT, targets=[3, 100], k=4).target_logits[-1])
    assert (res.target_logits[-1] - logits[:, [3, 100]]).abs().max() <= 1e-5
    for layer in range(model.n_layers):
        h = model.resid(TEXT, layer, "pre")  # [pos, d]: read through the core API, not the lens
        x = h + h @ lens.weight[layer].T + lens.bias[layer]  # the translator written out
        probs = model.unembed(model.final_norm(x)).softmax(-1)
        top = probs.topk(4, -1)
        assert torch.equal(res.top_ids[layer], top.indices)
        assert (res.top_probs[layer] - top.values).abs().max() <= 1e-5
        assert (res.target_probs[layer] - probs[:, [3, 100]]).abs().max() <= 1e-5
        assert torch.allclose(lens.translate(h, layer, which="bias"), h + lens.baseline[layer])


def test_translate_checks_its_arguments(tiny_llama):
    lens = TunedLens.identity(tiny_llama)
    h = torch.zeros(3, tiny_llama.d_model)
    with pytest.raises(ValueError, match="which='nope'; allowed: 'tuned', 'bias', 'logit'"):
        lens.translate(h, 0, which="nope")
    with pytest.raises(ValueError, match=r"layer 2 out of range: allowed 0\.\.1"):
        lens.translate(h, 2)
    with pytest.raises(ValueError, match="one per layer"):
        lens.translate(h)
    with pytest.raises(TypeError, match="lens=int"):
        tuned_lens(tiny_llama, TEXT, lens=3)
    with pytest.raises(FileNotFoundError, match="no tuned lens cached .*interp train-lens"):
        tuned_lens(tiny_llama, TEXT)


# ============================================================================================== training
def test_training_is_seeded_and_beats_the_logit_lens_on_held_out_text(tiny_llama):
    a = train_tuned_lens(tiny_llama, cache=False, **SMALL)
    b = train_tuned_lens(tiny_llama, cache=False, **SMALL)
    same_translators(a, b)
    assert a.path is None and a.meta["tokens"] == SMALL["tokens"] and a.meta["kl_tokens"] == SMALL["kl_tokens"]
    c = train_tuned_lens(tiny_llama, cache=False, **{**SMALL, "seed": 1, "steps": 0})
    assert not torch.equal(a.weight, c.weight)
    assert a.history.shape == (SMALL["steps"] + 1, 2, tiny_llama.n_layers)
    ev = evaluate_lens(tiny_llama, a, tokens=96, max_len=96, progress=False)
    kl = ev.kl_bits
    assert (kl["tuned"][:-1] < kl["logit"][:-1]).all() and (kl["bias"][:-1] <= kl["logit"][:-1]).all()
    assert kl["tuned"][-1] == 0 and ev.ratio_max()[0] < 1
    for frame in (a.to_frame(), ev.to_frame()):
        assert len(frame) >= tiny_llama.n_layers
    # training and held-out KL share one unit: the history is kept in nats, shown in bits
    assert a.to_frame()["train_kl_tuned_bits"].tolist() == pytest.approx((a.history[-1, 0] / math.log(2)).tolist())
    assert json.dumps(interp.core.results.jsonable(ev.to_json())) and "held-out KL" in ev.summary()


def test_identity_init_without_steps_is_the_logit_lens(tiny_gpt2):
    lens = train_tuned_lens(tiny_gpt2, cache=False, init="identity", **{**SMALL, "steps": 0})
    same_lens_result(tuned_lens(tiny_gpt2, TEXT, lens=lens), logit_lens(tiny_gpt2, TEXT))


def test_cache_save_load_and_identical_outputs(tiny_llama, tmp_path):
    lens = train_tuned_lens(tiny_llama, **SMALL)
    assert lens.path is not None and lens.path.exists() and lens.path.with_suffix(".json").exists()
    assert not list(lens.path.parent.glob("*.partial.*")) and not list(lens.path.parent.glob("*.capture.*"))
    again = train_tuned_lens(tiny_llama, **SMALL)  # from the cache: no training
    same_translators(lens, again)
    assert again.meta["finished_at"] == lens.meta["finished_at"]
    newest = load_tuned_lens(tiny_llama)
    assert newest.path == lens.path
    copy = lens.save(tmp_path / "copy")
    loaded = TunedLens.load(copy)
    same_translators(lens, loaded)
    same_lens_result(tuned_lens(tiny_llama, TEXT, lens=lens), tuned_lens(tiny_llama, TEXT, lens=str(copy)))
    assert loaded.meta == json.loads(json.dumps(lens.meta, default=str))
    folder = newest.path.parent  # the cache (``lens`` itself now points at its copy)
    ev = evaluate_lens(tiny_llama, newest, tokens=8, max_len=64, progress=False)
    assert len(list(folder.glob("*.eval_*.json"))) == 1
    again = evaluate_lens(tiny_llama, newest, tokens=8, max_len=64, progress=False)  # read back from the cache
    assert all(torch.equal(ev.kl_bits[k], again.kl_bits[k]) for k in ev.kl_bits)
    train_tuned_lens(tiny_llama, retrain=True, **SMALL)
    assert not list(folder.glob("*.eval_*.json"))  # the replaced lens's evaluations are gone


def test_a_lens_for_another_model_or_dtype_is_refused_naming_both(tiny_llama):
    lens = TunedLens.identity(tiny_llama)
    other = interp.load_tiny("llama", seed=1)
    with pytest.raises(ValueError) as e:
        tuned_lens(other, TEXT, lens=lens)
    assert tiny_llama.fingerprint in str(e.value) and other.fingerprint in str(e.value)
    half = interp.load_tiny("llama", seed=0, dtype=torch.float16)
    with pytest.raises(ValueError, match="float16") as e:
        lens.check(half)
    assert tiny_llama.fingerprint in str(e.value) and half.fingerprint in str(e.value)


def test_a_corrupted_file_is_refused_and_the_cache_retrains(tiny_llama):
    lens = train_tuned_lens(tiny_llama, **SMALL)
    raw = bytearray(lens.path.read_bytes())
    raw[-7] ^= 0xFF
    lens.path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="truncated or altered"):
        TunedLens.load(lens.path)
    with pytest.raises(ValueError, match="truncated or altered"):
        tuned_lens(tiny_llama, TEXT, lens=lens.path)
    with pytest.warns(UserWarning, match="unusable .* retraining"):
        again = train_tuned_lens(tiny_llama, **SMALL)
    same_translators(lens, again)  # retrained to the same (seeded) lens
    lens.path.write_bytes(lens.path.read_bytes()[:-100])  # truncated
    with pytest.raises(ValueError, match="truncated or altered"):
        load_tuned_lens(tiny_llama)


RESUME = {**SMALL, "steps": 4, "checkpoint_every": 1, "capture_batch": 2}


@pytest.fixture(scope="module")
def uninterrupted(tiny_llama):
    return train_tuned_lens(tiny_llama, cache=False, **RESUME)


@pytest.mark.parametrize("stop_at", [("capture", 2), ("kl", 2)])
def test_resume_after_interruption_gives_the_uninterrupted_lens(tiny_llama, uninterrupted, stop_at):
    settings, reference = RESUME, uninterrupted
    seen = []

    def interrupt(info):
        seen.append(info)
        if (info["phase"], info.get("batches", info.get("step"))) == stop_at:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_tuned_lens(tiny_llama, callback=interrupt, **settings)
    seen.clear()
    resumed = train_tuned_lens(tiny_llama, callback=seen.append, **settings)
    same_translators(reference, resumed)
    first = seen[0]
    if stop_at[0] == "capture":
        assert first == {"phase": "capture", "batches": 3, "tokens": first["tokens"]}
    else:
        assert first["phase"] == "kl" and first["step"] == 3


def test_bad_settings_are_named(tiny_llama):
    for kwargs, match in [({"tokens": 0}, "tokens=0; allowed: an integer >= 16"),
                          ({"init": "zeros"}, "init='zeros'; allowed: 'lstsq', 'identity'"),
                          ({"lr": -1.0}, "lr=-1.0; allowed: a finite number > 0"),
                          ({"max_len": 100_000}, "max_len=100000 exceeds the model's context"),
                          ({"corpus": "books"}, "corpus 'books' not known; allowed: 'wiki'")]:
        with pytest.raises(ValueError, match=match):
            train_tuned_lens(tiny_llama, cache=False, **{**SMALL, **kwargs})


def test_split_is_by_document_and_ignores_the_seed():
    train0, held0, _ = split_documents("wiki", seed=0)
    train1, held1, _ = split_documents("wiki", seed=1)
    assert held0 == held1 and {d.text for d in train0} == {d.text for d in train1}
    assert not {d.text for d in held0} & {d.text for d in train0}
    assert 0.05 < len(held0) / (len(held0) + len(train0)) < 0.15


# ============================================================================================== evaluation
def test_held_out_kl_and_perplexity_match_an_independent_computation(tiny_llama):
    lens = random_lens(tiny_llama, scale=0.2)
    ev = evaluate_lens(tiny_llama, lens, tokens=40, per_doc=8, max_len=64, progress=False)
    _, held, _ = split_documents("wiki")
    items = heldout_positions(tiny_llama, held, tokens=40, per_doc=8, max_len=64, seed=0)
    L = tiny_llama.n_layers
    kl = {k: torch.zeros(L, dtype=torch.float64) for k in ("logit", "tuned", "bias")}
    ce_final, n = 0.0, 0
    for ids, pick in items:
        toks = torch.tensor([ids])
        logp = torch.log_softmax(tiny_llama.run(toks)[0, pick].double(), -1)  # the model's own output
        nxt = torch.tensor([ids[p + 1] for p in pick])
        ce_final += float(-logp.gather(1, nxt[:, None]).sum())
        for layer in range(L):
            h = tiny_llama.resid(toks, layer, "pre")[pick]
            for k, x in (("logit", h), ("tuned", h + h @ lens.weight[layer].T + lens.bias[layer]),
                         ("bias", h + lens.baseline[layer])):
                logq = torch.log_softmax(tiny_llama.unembed(tiny_llama.final_norm(x)).double(), -1)
                kl[k][layer] += (logp.exp() * (logp - logq)).sum()
        n += len(pick)
    assert ev.tokens == n == 40
    for k, total in kl.items():
        assert torch.allclose(ev.kl_bits[k][:L], total / n / math.log(2), rtol=1e-3, atol=1e-6), k
    assert math.isclose(float(ev.perplexity["tuned"][-1]), math.exp(ce_final / n), rel_tol=1e-4)


def test_prediction_depth_agrees_with_the_lens_results(tiny_llama):
    lens = random_lens(tiny_llama, scale=0.3)
    texts = ["The cat sat on the", "Paris is the capital of"]
    records = [texts[0], {"prompt": "{} is the capital of", "subject": "Paris", "target_true": " France"}]
    depth = prediction_depth(tiny_llama, records, lens, progress=False)
    for i, text in enumerate(texts):
        final = int(tiny_llama.run(text)[0, -1].argmax())
        assert depth.final_ids[i] == final
        for kind, res in (("logit", logit_lens(tiny_llama, text, targets=[final], positions=[-1])),
                          ("tuned", tuned_lens(tiny_llama, text, targets=[final], positions=[-1], lens=lens))):
            assert int(depth.depth(kind)[i]) == res.first_top1(final, stable=True)
    assert depth.targets == [None, " France"] and len(depth.to_frame()) == 2
    assert "prediction depth" in depth.summary()
    with pytest.raises(TypeError, match="'prompt' and 'subject'"):
        prediction_depth(tiny_llama, [{"subject": "x"}], lens, progress=False)


def test_result_plots(tiny_llama, tmp_path):
    lens = train_tuned_lens(tiny_llama, cache=False, **SMALL)
    ev = evaluate_lens(tiny_llama, lens, tokens=16, max_len=64, progress=False)
    depth = prediction_depth(tiny_llama, [TEXT], lens, progress=False)
    for name, res in (("lens", lens), ("eval", ev), ("depth", depth),
                      ("tuned", tuned_lens(tiny_llama, TEXT, lens=lens))):
        fig = res.plot(out=tmp_path / f"{name}.png")
        assert fig.axes and (tmp_path / f"{name}.png").stat().st_size > 1000
        assert res.summary() and json.dumps(interp.core.results.jsonable(res.to_json()))


# ============================================================================================== embedded model
def test_a_small_lens_on_the_embedded_model_beats_the_logit_lens(embedded):
    # least squares only (the KL steps are exercised on the tiny models and, at full size, by the benchmark)
    lens = train_tuned_lens(embedded, tokens=192, steps=0, max_len=48, capture_batch=4, progress=False,
                            cache=False)
    assert lens.meta["model_fingerprint"] == embedded.fingerprint and lens.meta["tokens"] == 192
    # layers read through the least-squares translators are far closer to the final distribution than the
    # logit lens, even after 192 training positions (the paper's effect)
    logp = torch.log_softmax(embedded.run(PROMPT)[0, -1].double(), -1)
    store = embedded.cache(PROMPT, [f"blocks.{i}.hook_resid_pre" for i in (4, 12, 20)])
    for layer in (4, 12, 20):
        h = store[f"blocks.{layer}.hook_resid_pre"][0, -1]
        kls = {}
        for kind in ("logit", "tuned"):
            logq = torch.log_softmax(embedded.unembed(embedded.final_norm(
                lens.translate(h, layer, which=kind))).double(), -1)
            kls[kind] = float((logp.exp() * (logp - logq)).sum())
        assert kls["tuned"] < 0.5 * kls["logit"], (layer, kls)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_kl_step_loss_and_gradient_match_autograd(tiny_llama, dtype, tol):
    """The hand-written KL and its gradient, in either W_U precision, against float64 autograd of the definition."""
    from interp.analyses.tuned_lens.train import KLStep

    kls = KLStep(tiny_llama, dtype=dtype)
    assert kls.dtype is dtype and kls.W.dtype is dtype
    gen = torch.Generator().manual_seed(0)
    h_final = torch.randn(6, tiny_llama.d_model, generator=gen)
    xn = tiny_llama.final_norm(torch.randn(6, tiny_llama.d_model, generator=gen))
    loss, grad = kls.loss_grad(xn, kls.target(h_final))
    W_U, b_U = tiny_llama.unembedding()
    W, b = W_U.detach().double(), (0 if b_U is None else b_U.detach().double())
    logp = torch.log_softmax(tiny_llama.final_norm(h_final).double() @ W + b, -1)
    x = xn.detach().double().requires_grad_(True)
    ref = (logp.exp() * (logp - torch.log_softmax(x @ W + b, -1))).sum(-1)
    ref.sum().backward()
    assert torch.allclose(loss.double(), ref.detach(), atol=tol, rtol=tol), (loss, ref)
    assert torch.allclose(grad.double(), x.grad, atol=tol, rtol=tol), (grad - x.grad).abs().max()


def test_the_unembedding_precision_follows_the_hardware(monkeypatch, tiny_llama):
    """bfloat16 only where the CPU multiplies in it natively: emulated, one KL step of the embedded model takes
    minutes instead of seconds (a notebook cell timed out after 900 s on a CPU without AVX512-BF16)."""
    from interp.core.placement import fast_matmul_dtype

    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    for flags, want in (({"avx512_bf16": True}, torch.bfloat16), ({"amx_bf16": True}, torch.bfloat16),
                        ({"avx512_bf16": False, "avx2": True}, torch.float32), ({}, torch.float32)):
        monkeypatch.setattr(torch.cpu, "get_capabilities", lambda flags=flags: flags)
        assert fast_matmul_dtype("cpu") is want, flags
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"avx512_bf16": True})
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # oneDNN told not to use the BF16 instructions
    assert fast_matmul_dtype("cpu") is torch.float32
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    assert fast_matmul_dtype("cpu") is torch.bfloat16
    lens = train_tuned_lens(tiny_llama, **{**SMALL, "steps": 1}, cache=False)
    assert lens.meta["unembed_dtype"] == "bfloat16"
    monkeypatch.setattr(torch.cpu, "get_capabilities", dict)
    lens = train_tuned_lens(tiny_llama, **{**SMALL, "steps": 1}, cache=False)
    assert lens.meta["unembed_dtype"] == "float32"


# ============================================================================================== command line
def test_cli_train_lens_then_lens_tuned(tiny_llama, capsys):
    from interp.cli.lens import cli_lens
    from interp.cli.tuned_lens import cli_train_lens

    parser = cli.build_parser()
    args = parser.parse_args(["train-lens", "--tokens", "512", "--kl-tokens", "128", "--steps", "1",
                              "--batch-size", "32", "--eval-tokens", "16", "--json"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = cli_train_lens(args, model=tiny_llama)
    assert out["path"] and "KL logit" in out["_text"] and out["evaluation"]["tokens"] == 16
    args = parser.parse_args(["lens", TEXT, "--tuned", "--target", " ", "--json"])
    res = cli_lens(args, model=tiny_llama)
    assert res["lens"] == "tuned" and res["_text"].startswith("tuned lens")
    args = parser.parse_args(["lens", TEXT, "--tuned", "--lens", out["path"]])
    assert cli_lens(args, model=tiny_llama)["lens"] == "tuned"


def test_cli_flag_errors_come_before_the_model_loads(capsys, monkeypatch):
    def no_load(*a, **k):
        raise AssertionError("the model must not load")

    monkeypatch.setattr(cli, "load_model", no_load)
    monkeypatch.setattr("interp.cli.lens.load_model", no_load)
    monkeypatch.setattr("interp.cli.tuned_lens.load_model", no_load)
    for argv, match in [(["train-lens", "--tokens", "0"], "--tokens=0"),
                        (["train-lens", "--eval-tokens", "-1"], "--eval-tokens=-1"),
                        (["lens", TEXT, "--lens", "x.safetensors"], "read only with --tuned"),
                        (["lens", TEXT, "--tuned", "--lens", "missing.safetensors"], "no such tuned lens")]:
        code = cli.main([*argv, "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert code == 2 and match in doc["error"], (argv, doc)
    assert isinstance(cli.build_parser().parse_args(["train-lens"]), argparse.Namespace)
