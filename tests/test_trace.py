"""Causal tracing (interp.trace), checked against restorations written out by hand with model.hooks."""

import json

import pytest
import torch

from interp.analyses.trace import FactTraceResult, fact_prompt, prompt_and_subject, trace_facts
from interp.analyses.trace.corrupt import noise_draws
from interp.analyses.trace.trace import (
    _baseline,
    _Corrupted,
    _grow_probs,
    _last_logits,
    _plain_probs,
    causal_trace,
)

TEXT = "The Eiffel Tower is in Paris"
SUBJECT = "Eiffel"


def _sharpened(arch):
    """A private tiny model whose weight matrices are scaled x8, so that its next-token distribution is peaked
    enough for the noise and the restorations to move probabilities by ~1e-2 (random tiny models are near
    uniform, where every check would pass trivially)."""
    import interp

    model = interp.load_tiny(arch, seed=0)
    with torch.no_grad():
        for p in model.hf_model.parameters():
            if p.ndim >= 2:
                p.mul_(8)
    return model


@pytest.fixture(scope="module")
def sharp_llama():
    model = _sharpened("llama")
    yield model
    assert model.attached_hook_count() == 0


@pytest.fixture(scope="module")
def sharp_gpt2():
    model = _sharpened("gpt2")
    yield model
    assert model.attached_hook_count() == 0


def manual_restored_prob(model, text, subject, draws, target_id, restore: dict[str, list[int]]):
    """Independent computation: a plain forward per noise draw, with model.hooks adding the noise at the subject
    and writing clean states (from a separate clean model.cache) at the given positions; mean p(target)."""
    toks = model.to_tokens(text)
    s0, s1 = prompt_and_subject(model, text, subject)[1]
    clean = model.cache(toks, list(restore)) if restore else {}
    probs = []
    for d in draws:
        def corrupt(t, hook, d=d):
            t = t.clone()
            t[0, s0:s1] += d
            return t

        def put(name, positions):
            def fn(t, hook):
                t = t.clone()
                t[0, positions] = clean[name][0, positions]
                return t
            return fn

        with model.hooks([("hook_embed", corrupt)] + [(n, put(n, p)) for n, p in restore.items()]):
            logits = model.run(toks)
        probs.append(float(logits[0, -1].softmax(-1)[target_id]))
    return sum(probs) / len(probs)


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_gpt2"])
def test_shapes_and_fields(fixture, request, tmp_path):
    model = request.getfixturevalue(fixture)
    tr = causal_trace(model, TEXT, SUBJECT, samples=3)
    n = len(model.to_str_tokens(TEXT))
    assert tr.tokens == model.to_str_tokens(TEXT) and len(tr.tokens) == n
    assert tr.subject_range == (5, 11)  # byte tokens: BOS, "The ", then "Eiffel"
    for kind in ("resid", "mlp", "attn"):
        assert tr.effects[kind].shape == (model.n_layers, n)
        assert torch.isfinite(tr.effects[kind]).all()
        assert (tr.effects[kind][:, :5] == 0).all()  # before the subject nothing can change
        torch.testing.assert_close(tr.effects[kind], tr.restored[kind] - tr.corrupted_prob)
    assert tr.corrupted_probs.shape == (3,)
    assert tr.target_id == int(model.run(TEXT)[0, -1].argmax())
    frame = tr.to_frame()
    assert len(frame) == 3 * model.n_layers * n and frame["subject"].sum() == 3 * model.n_layers * 6
    pk = tr.peak("mlp", "last_subject")
    assert pk["token"] == 10 and pk["effect"] == float(tr.effects["mlp"][:, 10].max())
    fig = tr.plot(out=tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0 and len(fig.axes) == 6
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[5].endswith("*") and not labels[4].endswith("*")
    json.dumps(tr.to_json())


def test_clean_prob_matches_plain_run(tiny_llama):
    tr = causal_trace(tiny_llama, TEXT, SUBJECT, target=" ", samples=2, kinds=("resid",))
    p = float(tiny_llama.run(TEXT)[0, -1].softmax(-1)[tr.target_id])
    assert tr.clean_prob == pytest.approx(p, abs=1e-6)


def test_noise_zero_changes_nothing(sharp_gpt2):
    tr = causal_trace(sharp_gpt2, TEXT, SUBJECT, samples=3, noise=0.0)
    assert tr.corrupted_prob == pytest.approx(tr.clean_prob, abs=1e-6)
    for kind in tr.effects:
        assert tr.effects[kind].abs().max() < 1e-6


def test_restoring_everything_gives_clean_prob(sharp_llama, sharp_gpt2):
    for model in (sharp_llama, sharp_gpt2):
        toks, subj = prompt_and_subject(model, TEXT, SUBJECT)
        n, L = toks.shape[1], model.n_layers
        draws = noise_draws(4, subj[1] - subj[0], model.d_model, 1.0, seed=1)
        names = [f"blocks.{l}.{h}" for l in range(L) for h in ("hook_resid_post", "hook_mlp_out", "hook_attn_out")]
        corrupted = _Corrupted(subj, draws=draws)
        probs, clean, target = _baseline(model, toks, corrupted, None, names)
        assert probs[1:].sub(probs[0]).abs().max() > 1e-3  # the noise does change the answer's probability
        every_resid = tuple(f"blocks.{l}.hook_resid_post" for l in range(L))
        configs = [(every_resid, p) for p in range(n)]  # one config per position, all layers restored
        per_pos = _grow_probs(model, toks, corrupted, target, configs, clean, chunk_tokens=10**6,
                              progress=False, desc="")
        # every layer's residual at the last position: the final state is the clean one
        assert per_pos[n - 1].sub(probs[0]).abs().max() < 1e-6
        # at one subject position only, the other subject positions stay corrupted
        assert per_pos[subj[0]].sub(probs[0]).abs().max() > 1e-4
        # all layers, all positions: exactly the clean run
        batch, hooks = corrupted.batch(toks, 1)
        for l in range(L):
            name = f"blocks.{l}.hook_resid_post"
            hooks.append((name, lambda t, hook, c=clean[name]: c.expand_as(t).clone()))
        logits = _last_logits(model, batch, hooks)
        assert logits.softmax(-1)[:, target].sub(probs[0]).abs().max() < 1e-6
        # every MLP and attention output at the last position: the last token's residual is clean again
        outs = tuple(f"blocks.{l}.{h}" for l in range(L) for h in ("hook_mlp_out", "hook_attn_out"))
        last = _plain_probs(model, toks, corrupted, target, [(outs, n - 1)], clean, chunk_tokens=10**6,
                            progress=False, desc="")
        assert last.sub(probs[0]).abs().max() < 1e-6


@pytest.mark.parametrize("fixture", ["sharp_llama", "sharp_gpt2"])
def test_grow_engine_equals_plain_engine(fixture, request):
    """The growing-batch engine against the one-full-row-per-restoration engine, every kind, layer and token."""
    model = request.getfixturevalue(fixture)
    grow = causal_trace(model, TEXT, SUBJECT, samples=2, window=2, method="grow", chunk_tokens=600)  # 2 chunks
    carrier = _grow_probs.last_carrier
    plain = causal_trace(model, TEXT, SUBJECT, samples=2, window=2, method="plain")
    for kind in grow.effects:
        torch.testing.assert_close(grow.restored[kind], plain.restored[kind], rtol=0, atol=2e-6)
        assert grow.effects[kind].abs().max() > 1e-4
    torch.testing.assert_close(carrier, grow.corrupted_probs, rtol=0, atol=2e-6)


@pytest.mark.parametrize("kind, layer, pos", [("resid", 0, 7), ("resid", 1, 28), ("mlp", 0, 10), ("attn", 1, 28)])
def test_effects_match_hand_written_restoration(sharp_llama, kind, layer, pos):
    tiny_llama = sharp_llama
    tr = causal_trace(tiny_llama, TEXT, SUBJECT, samples=3, window=1, seed=5, kinds=(kind,))
    s0, s1 = tr.subject_range
    draws = noise_draws(3, s1 - s0, tiny_llama.d_model, tr.noise, seed=5)
    hook = {"resid": "hook_resid_post", "mlp": "hook_mlp_out", "attn": "hook_attn_out"}[kind]
    expect = manual_restored_prob(tiny_llama, TEXT, SUBJECT, draws, tr.target_id, {f"blocks.{layer}.{hook}": [pos]})
    assert float(tr.restored[kind][layer, pos]) == pytest.approx(expect, abs=2e-6)
    corrupted = manual_restored_prob(tiny_llama, TEXT, SUBJECT, draws, tr.target_id, {})
    assert tr.corrupted_prob == pytest.approx(corrupted, abs=2e-6)
    assert abs(expect - corrupted) > 1e-4  # a restoration that matters


def test_window_restores_neighbouring_layers(sharp_llama):
    model = sharp_llama  # 2 layers: window 2 around layer 1 is layers 0..1 (range(l - 1, l + 1))
    tr = causal_trace(model, TEXT, SUBJECT, samples=2, window=2, kinds=("mlp",), positions=["last_subject"])
    draws = noise_draws(2, 6, model.d_model, tr.noise, seed=0)
    both = {"blocks.0.hook_mlp_out": [10], "blocks.1.hook_mlp_out": [10]}
    assert float(tr.restored["mlp"][1, 10]) == pytest.approx(
        manual_restored_prob(model, TEXT, SUBJECT, draws, tr.target_id, both), abs=2e-6)
    assert torch.isnan(tr.effects["mlp"][:, 12]).all()  # not asked for
    one = causal_trace(model, TEXT, SUBJECT, samples=2, window=2, kinds=("mlp",), positions=[10], layers=[1])
    assert float(one.restored["mlp"][1, 10]) == pytest.approx(float(tr.restored["mlp"][1, 10]), abs=2e-6)
    assert torch.isnan(one.effects["mlp"][0, 5:]).all() and one.peak("mlp")["layer"] == 1


def test_seed_determinism(tiny_llama):
    a = causal_trace(tiny_llama, TEXT, SUBJECT, samples=2, kinds=("mlp",), seed=3)
    b = causal_trace(tiny_llama, TEXT, SUBJECT, samples=2, kinds=("mlp",), seed=3)
    c = causal_trace(tiny_llama, TEXT, SUBJECT, samples=2, kinds=("mlp",), seed=4)
    assert torch.equal(a.effects["mlp"], b.effects["mlp"])
    assert not torch.equal(a.corrupted_probs, c.corrupted_probs)


@pytest.mark.parametrize("kwargs, word", [
    ({"subject": "Louvre"}, "'Louvre'"),
    ({"subject": ""}, "subject ''"),
    ({"text": ""}, "text ''"),
    ({"samples": 0}, "samples=0"),
    ({"window": 0}, "window=0"),
    ({"kinds": ("mlp", "heads")}, "heads"),
    ({"noise": -1.0}, "noise=-1.0"),
    ({"positions": [99]}, "99"),
    ({"layers": [5]}, "layer 5"),
    ({"method": "fast"}, "'fast'"),
])
def test_bad_input(tiny_llama, kwargs, word):
    args = {"text": TEXT, "subject": SUBJECT, **kwargs}
    with pytest.raises(ValueError, match=word):
        causal_trace(tiny_llama, args.pop("text"), args.pop("subject"), **args)


def test_trace_facts(tiny_llama):
    records = [{"case_id": 1, "prompt": "{} is in Paris", "subject": "The Eiffel Tower", "target_true": " is"},
               {"case_id": 2, "prompt": "Rome is the capital of Italy", "subject": "Rome"}]
    res = trace_facts(tiny_llama, records, samples=2, kinds=("mlp", "resid"), progress=False)
    assert isinstance(res, FactTraceResult)
    assert res.effects["mlp"].shape == (2, tiny_llama.n_layers)
    # each row equals the single-prompt trace at that prompt's last subject token
    tr = causal_trace(tiny_llama, "The Eiffel Tower is in Paris", "The Eiffel Tower", " is", samples=2,
                      kinds=("mlp",), positions=["last_subject"])
    torch.testing.assert_close(res.effects["mlp"][0], tr.effects["mlp"][:, tr.last_subject])
    torch.testing.assert_close(res.mean("mlp"), res.effects["mlp"].mean(0))
    assert res.peak_layer("mlp") == int(res.effects["mlp"].mean(0).argmax())
    assert len(res.to_frame()) == 2 * tiny_llama.n_layers
    assert res.plot() is not None
    assert fact_prompt({"prompt": "{} plays", "subject": "X", "target_true": {"str": "jazz"}}) == ("X plays", "X",
                                                                                                  " jazz")
    with pytest.raises(ValueError, match="'prompt'"):
        trace_facts(tiny_llama, [{"subject": "x"}], progress=False)
    with pytest.raises(ValueError, match="not found"):
        trace_facts(tiny_llama, [{"prompt": "{} is", "subject": "Rome"}, {"prompt": "Paris", "subject": "Rome"}],
                    progress=False)


def test_cli_handler(tiny_llama, tmp_path):
    import argparse

    from interp.cli import trace

    parser = argparse.ArgumentParser()
    trace.add_cli(parser.add_subparsers())
    args = parser.parse_args(["trace", TEXT, "--subject", SUBJECT, "--samples", "2", "--kinds", "mlp",
                              "--out", str(tmp_path / "tr.png"), "--json"])
    out = args.func(args, model=tiny_llama)
    json.dumps(out)
    assert out["subject_range"] == [5, 11] and "mlp" in out["peaks"] and (tmp_path / "tr.png").exists()
    assert "last subject token" in out["_text"]
    assert out["effects"]["mlp"][0][:5] == [0.0] * 5


def test_eiffel_on_embedded_model(embedded):
    """The real fact: corrupting 'The Eiffel Tower' destroys ' Paris'; restoring a subject token's residual in
    early layers brings most of it back (on this model the 'iffel' token carries it), the last token's residual
    only in late layers (the final one exactly)."""
    text = "The Eiffel Tower is located in the city of"
    tr = causal_trace(embedded, text, "The Eiffel Tower", samples=3, kinds=("resid",), positions=["subject", "last"])
    assert tr.target == " Paris" and tr.subject_range == (1, 5)
    assert tr.corrupted_prob < 0.5 * tr.clean_prob
    grid = tr.restored["resid"]
    assert grid[:5, 1:5].max() > 0.6 * tr.clean_prob  # early layers, subject tokens
    assert grid[-1, -1] == pytest.approx(tr.clean_prob, abs=1e-5)  # the final state itself
    assert grid[0, -1] < 0.5 * tr.clean_prob  # the last token's early state holds nothing of the subject
    assert torch.isnan(grid[:, 5:-1]).all()  # not asked for


def test_result_protocol_and_keyword_only_out(tiny_llama, tmp_path):
    tr = causal_trace(tiny_llama, TEXT, SUBJECT, samples=2, kinds=("mlp",), positions=["last_subject"])
    doc = tr.to_json()
    assert json.loads(json.dumps(doc)) == doc and doc["target"] == tr.target and doc["noise_basis"]
    assert not hasattr(tr, "to_dict")  # the unreleased spelling is gone
    assert tr.plot("mlp", out=tmp_path / "a.png", value="effect") is not None and (tmp_path / "a.png").exists()
    with pytest.raises(TypeError):
        tr.plot("mlp", tmp_path / "b.png")  # out is keyword-only
    facts = trace_facts(tiny_llama, [{"prompt": "{} is in Paris", "subject": "The Eiffel Tower"}], samples=2,
                        progress=False)
    assert json.dumps(facts.to_json()) and facts.to_json()["peak_layers"]["mlp"] == facts.peak_layer("mlp")
    with pytest.raises(TypeError):
        facts.plot(tmp_path / "c.png")


def test_multi_token_target_is_scored_by_its_first_token_and_named(tiny_llama):
    # byte-level tiny tokenizer: " is" is three tokens; the policy scores " " and says so
    with pytest.warns(UserWarning, match="first token"):
        tr = causal_trace(tiny_llama, TEXT, SUBJECT, " is", samples=2, kinds=("mlp",), positions=["last"])
    assert tr.target_given == " is" and tr.target == " " and tr.target_id == tiny_llama.encode(" ", False)[0]
    from interp.cli.trace import text_report

    assert "(first token of ' is')" in text_report(tr)
    with pytest.raises(ValueError, match="token id 99999"):
        causal_trace(tiny_llama, TEXT, SUBJECT, 99999, samples=2)


def test_noise_scale_is_cached_per_model(tiny_llama):
    from interp.analyses.trace import embedding_std
    from interp.core.caches import model_cache

    sigma = embedding_std(tiny_llama)
    assert model_cache(tiny_llama, "trace.noise")["std"] == sigma and embedding_std(tiny_llama) == sigma
    tr = causal_trace(tiny_llama, TEXT, SUBJECT, samples=2, kinds=("mlp",), positions=["last"])
    assert tr.noise == pytest.approx(3 * sigma) and tr.meta["noise_basis"] != "given"
    assert causal_trace(tiny_llama, TEXT, SUBJECT, samples=2, kinds=("mlp",), positions=["last"],
                        noise=0.5).meta["noise_basis"] == "given"


@pytest.mark.parametrize("argv, word", [(["--samples", "0"], "--samples=0"), (["--window", "-1"], "--window=-1"),
                                        (["--kinds", "mlp,heads"], "heads"), (["--noise", "-2"], "noise=-2")])
def test_cli_rejects_bad_flags_before_loading_the_model(monkeypatch, capsys, argv, word):
    from interp import cli

    def no_load(args):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr("interp.cli.trace.load_model", no_load)
    assert cli.main(["trace", TEXT, "--subject", SUBJECT, *argv, "--json"]) == 2
    assert word in json.loads(capsys.readouterr().out)["error"]


# ============================================================================================== replacement (STR)
def manual_replaced_prob(model, text, subject, replacement, target_id, restore: dict[str, list[int]]):
    """Independent computation of one symmetric-token-replacement restoration: the replacement's rows of W_E
    written over ``hook_embed`` at the subject positions, clean states (from a separate clean model.cache)
    written back at the given positions; p(target) at the last position."""
    toks = model.to_tokens(text)
    s0, s1 = prompt_and_subject(model, text, subject)[1]
    ids = model.encode(text.replace(subject, replacement, 1), prepend_bos=True)[s0:s1]
    clean = model.cache(toks, list(restore)) if restore else {}

    def swap(t, hook):
        t = t.clone()
        t[0, s0:s1] = model.W_E[torch.tensor(ids)].to(t.dtype)
        return t

    def put(name, positions):
        def fn(t, hook):
            t = t.clone()
            t[0, positions] = clean[name][0, positions]
            return t
        return fn

    with model.hooks([("hook_embed", swap)] + [(n, put(n, p)) for n, p in restore.items()]):
        logits = model.run(toks)
    return float(logits[0, -1].softmax(-1)[target_id])


def test_replace_by_the_subject_itself_changes_nothing(sharp_gpt2, sharp_llama):
    for model in (sharp_gpt2, sharp_llama):
        tr = causal_trace(model, TEXT, SUBJECT, corruption="replace", replacement=SUBJECT, window=2)
        assert tr.corruption == "replace" and tr.replacement == SUBJECT and tr.samples == 1
        assert tr.corrupted_prob == pytest.approx(tr.clean_prob, abs=1e-6)
        for kind in tr.effects:
            assert tr.effects[kind].abs().max() < 1e-6


@pytest.mark.parametrize("fixture", ["sharp_llama", "sharp_gpt2"])
def test_replace_restoring_the_last_residual_gives_the_clean_prob(fixture, request):
    model = request.getfixturevalue(fixture)
    tr = causal_trace(model, TEXT, SUBJECT, corruption="replace", replacement="Berlin", kinds=("resid",))
    L, n = model.n_layers, len(tr.tokens)
    assert abs(tr.corrupted_prob - tr.clean_prob) > 1e-4  # the replacement does change the answer's probability
    assert float(tr.restored["resid"][L - 1, n - 1]) == pytest.approx(tr.clean_prob, abs=1e-6)
    # the clean probability itself, from an unhooked run
    assert tr.clean_prob == pytest.approx(float(model.run(TEXT)[0, -1].softmax(-1)[tr.target_id]), abs=1e-6)
    assert tr.corrupted_probs.shape == (1,) and tr.noise is None


@pytest.mark.parametrize("method", ["grow", "plain"])
@pytest.mark.parametrize("kind, layer, pos", [("resid", 0, 7), ("resid", 1, 10), ("mlp", 0, 10), ("attn", 1, 28)])
def test_replace_matches_hand_written_restoration(sharp_llama, method, kind, layer, pos):
    model = sharp_llama
    tr = causal_trace(model, TEXT, SUBJECT, corruption="replace", replacement="Berlin", window=1, kinds=(kind,),
                      method=method)
    hook = {"resid": "hook_resid_post", "mlp": "hook_mlp_out", "attn": "hook_attn_out"}[kind]
    expect = manual_replaced_prob(model, TEXT, SUBJECT, "Berlin", tr.target_id, {f"blocks.{layer}.{hook}": [pos]})
    assert float(tr.restored[kind][layer, pos]) == pytest.approx(expect, abs=2e-6)
    corrupted = manual_replaced_prob(model, TEXT, SUBJECT, "Berlin", tr.target_id, {})
    assert tr.corrupted_prob == pytest.approx(corrupted, abs=2e-6)
    assert float(model.run(TEXT.replace(SUBJECT, "Berlin"))[0, -1].softmax(-1)[tr.target_id]) == pytest.approx(
        corrupted, abs=2e-6)  # the same as simply running the replaced prompt


def test_replace_grow_engine_equals_plain_engine(sharp_gpt2):
    kw = {"corruption": "replace", "replacement": "Berlin", "window": 2}
    grow = causal_trace(sharp_gpt2, TEXT, SUBJECT, method="grow", chunk_tokens=100, **kw)  # several chunks
    plain = causal_trace(sharp_gpt2, TEXT, SUBJECT, method="plain", **kw)
    for kind in grow.effects:
        torch.testing.assert_close(grow.restored[kind], plain.restored[kind], rtol=0, atol=2e-6)
        assert grow.effects[kind].abs().max() > 1e-4


def test_replacement_is_picked_by_the_documented_rule(sharp_llama):
    import random

    from interp.analyses.trace import SUBJECTS

    model = sharp_llama
    tr = causal_trace(model, TEXT, SUBJECT, corruption="replace", kinds=("mlp",), positions=["last_subject"])
    again = causal_trace(model, TEXT, SUBJECT, corruption="replace", kinds=("mlp",), positions=["last_subject"])
    assert tr.replacement == again.replacement
    torch.testing.assert_close(tr.effects["mlp"], again.effects["mlp"], rtol=0, atol=0, equal_nan=True)
    # the rule written out: sorted candidates in a Random(seed) order; the first of the subject's token length
    # whose top-1 answer on the replaced prompt is not the clean answer
    order = sorted(set(SUBJECTS))
    random.Random(0).shuffle(order)
    n_subj = tr.subject_range[1] - tr.subject_range[0]
    fits = [c for c in order if len(model.encode(c, prepend_bos=False)) == n_subj]
    changed = [c for c in fits if int(model.run(TEXT.replace(SUBJECT, c))[0, -1].argmax()) != tr.target_id]
    assert changed and tr.replacement == changed[0]
    # another seed reorders the candidates; an explicit list restricts them
    picks = {causal_trace(model, TEXT, SUBJECT, corruption="replace", seed=s, kinds=("mlp",),
                          positions=["last"]).replacement for s in range(4)}
    assert len(picks) > 1 and picks <= set(changed)
    only = causal_trace(model, TEXT, SUBJECT, corruption="replace", candidates=["Rome", changed[-1]],
                        kinds=("mlp",), positions=["last"])
    assert only.replacement == changed[-1]
    doc = only.to_json()
    assert doc["corruption"] == "replace" and doc["replacement"] == changed[-1] and doc["noise"] is None
    assert repr(changed[-1]) in only.summary()


@pytest.mark.parametrize("kwargs, words", [
    ({"corruption": "blur"}, ["'blur'", "'noise'", "'replace'"]),
    ({"corruption": "replace", "replacement": "Rome"}, ["'Rome' is 4 tokens", "'Eiffel' is 6"]),
    ({"corruption": "replace", "candidates": ["Rome", "Oslo"]}, ["no replacement found", "6 tokens", "2 candidates"]),
    ({"corruption": "replace", "noise": 1.0}, ["noise=1.0", "corruption='noise'"]),
    ({"corruption": "replace", "samples": 3}, ["samples=3", "1 or None"]),
    ({"corruption": "replace", "replacement": ""}, ["replacement=''"]),
    ({"replacement": "Berlin"}, ["replacement='Berlin'", "corruption='replace'"]),
    ({"candidates": ["Berlin"]}, ["candidates=", "corruption='replace'"]),
])
def test_replace_bad_input(tiny_llama, kwargs, words):
    with pytest.raises(ValueError) as err:
        causal_trace(tiny_llama, TEXT, SUBJECT, **kwargs)
    for w in words:
        assert w in str(err.value)


def test_trace_facts_with_replacement(sharp_llama):
    model = sharp_llama
    records = [{"case_id": 1, "prompt": "The {} Tower is in", "subject": "Eiffel", "relation": "in"},
               {"case_id": 2, "prompt": "The {} is in", "subject": "Louvre", "relation": "in"},
               {"case_id": 3, "prompt": "{} plays for", "subject": "Messi", "relation": "plays"}]
    res = trace_facts(model, records, corruption="replace", kinds=("mlp",), progress=False)
    assert res.samples == 1 and res.meta["corruption"] == "replace" and res.to_json()["corruption"] == "replace"
    for i, rec in enumerate(res.records):
        assert rec["replacement"] and rec["replacement"] != rec["subject"]
        n = len(model.encode(rec["subject"], prepend_bos=False))
        assert len(model.encode(rec["replacement"], prepend_bos=False)) == n
        tr = causal_trace(model, rec["text"], rec["subject"], corruption="replace", replacement=rec["replacement"],
                          kinds=("mlp",), positions=["last_subject"])
        torch.testing.assert_close(res.effects["mlp"][i], tr.effects["mlp"][:, tr.last_subject])
    # same relation first: Eiffel and Louvre are both 6 bytes; Louvre is taken when it changes the answer
    top = int(model.run("The Eiffel Tower is in")[0, -1].argmax())
    if int(model.run("The Louvre Tower is in")[0, -1].argmax()) != top:
        assert res.records[0]["replacement"] == "Louvre"
    with pytest.raises(ValueError, match="noise=0.5"):
        trace_facts(model, records, corruption="replace", noise=0.5, progress=False)


def test_cli_replace(tiny_llama):
    import argparse

    from interp.cli import trace

    parser = argparse.ArgumentParser()
    trace.add_cli(parser.add_subparsers())
    args = parser.parse_args(["trace", TEXT, "--subject", SUBJECT, "--corruption", "replace", "--replacement",
                              "Berlin", "--kinds", "mlp", "--json"])
    out = args.func(args, model=tiny_llama)
    assert out["corruption"] == "replace" and out["replacement"] == "Berlin" and out["samples"] == 1
    assert "replaced by 'Berlin'" in out["_text"]


@pytest.mark.parametrize("argv, word", [
    (["--corruption", "blur"], "--corruption='blur'"),
    (["--corruption", "replace", "--noise", "1"], "noise=1.0"),
    (["--corruption", "replace", "--samples", "3"], "samples=3"),
    (["--replacement", "Berlin"], "corruption='replace'"),
])
def test_cli_rejects_bad_corruption_flags_before_loading_the_model(monkeypatch, capsys, argv, word):
    from interp import cli

    def no_load(args):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr("interp.cli.trace.load_model", no_load)
    assert cli.main(["trace", TEXT, "--subject", SUBJECT, *argv, "--json"]) == 2
    assert word in json.loads(capsys.readouterr().out)["error"]


def test_eiffel_replace_on_embedded_model(embedded):
    """Symmetric token replacement on the real fact. The default pick has the Eiffel Tower's 4 tokens and moves the
    answer away from ' Paris'. With 'The Colosseum' (-> ' Rome'): restoring the ' iffel' token's residual in
    early layers brings ' Paris' back (above its clean probability: the rest of the prompt now says Rome less),
    the last token's residual only in late layers (the final one exactly)."""
    text, subject = "The Eiffel Tower is located in the city of", "The Eiffel Tower"
    auto = causal_trace(embedded, text, subject, corruption="replace", kinds=("resid",), positions=["last"],
                        layers=[embedded.n_layers - 1])
    assert auto.target == " Paris" and len(embedded.encode(auto.replacement, prepend_bos=False)) == 4
    assert int(embedded.run(text.replace(subject, auto.replacement))[0, -1].argmax()) != auto.target_id
    assert auto.restored["resid"][-1, -1] == pytest.approx(auto.clean_prob, abs=1e-5)
    tr = causal_trace(embedded, text, subject, corruption="replace", replacement="The Colosseum", kinds=("resid",),
                      positions=["subject", "last"])
    assert tr.subject_range == (1, 5) and tr.corrupted_prob < 0.05 * tr.clean_prob
    grid = tr.restored["resid"]
    assert tr.corrupted_prob == pytest.approx(
        float(embedded.run(text.replace(subject, "The Colosseum"))[0, -1].softmax(-1)[tr.target_id]), abs=1e-5)
    assert grid[:8, 3].max() > tr.clean_prob  # ' iffel', early layers
    assert grid[:20, -1].max() < 0.1 * tr.clean_prob  # the last token's early states hold nothing of the subject
    assert grid[-1, -1] == pytest.approx(tr.clean_prob, abs=1e-5)


def test_plots_draw_under_a_figure_layout_engine(tmp_path):
    """The heatmap (with its colorbar) and the facts plot draw on a figure that already has a layout engine
    (constrained layout): no tight_layout() over it, which matplotlib refuses once a colorbar exists."""
    import interp

    model = interp.load_tiny("llama")
    tr = interp.causal_trace(model, "The Eiffel Tower is in", "The Eiffel", samples=2, kinds=("mlp",), window=1)
    fig = tr.plot("mlp", value="effect", out=tmp_path / "w1.png")
    assert fig is not None and (tmp_path / "w1.png").exists()
    facts = interp.trace_facts(model, [{"prompt": "{} is in", "subject": "The Eiffel"}], samples=2, window=1,
                               progress=False)
    assert facts.plot(out=tmp_path / "f.png") is not None and (tmp_path / "f.png").exists()
