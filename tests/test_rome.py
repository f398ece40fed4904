"""ROME edits: the rank-one update, k* -> v*, exact revert / save / load / apply, interruption safety, bad input.

Most mechanics run on the tiny models (both MLP orientations: Llama Linear, GPT-2 Conv1D); the embedded model is
edited once (Eiffel Tower -> Rome) with a small covariance sample."""

import json
import types

import pytest
import torch

import interp
from interp import rome
from interp.cli.edit import cli_edit
from interp.core import caches
from interp.editing import base as editing_base
from interp.editing import defaults as editing_defaults
from interp.editing import drift as editing_drift
from interp.editing import rome as editing_rome
from interp.editing import vstar
from interp.editing.drift import drift_texts, text_nll
from interp.analyses.stats import mlp_key_second_moment

LAYER = 4  # a layer of the embedded model (the default edit layer is checked separately)
TINY = dict(prompt="{} is in the city of", subject="Tower", target=" Rome", layer=0, v_steps=4)


def digest(model) -> str:
    return model.weights_digest()


def matrix(model, layer) -> torch.Tensor:
    return model.mlp_out_matrix(layer).detach().cpu().clone()


@pytest.fixture(scope="module")
def tiny_stats(tiny_llama, tiny_gpt2):
    return {id(m): mlp_key_second_moment(m, 0, n_tokens=3000, cache=False, progress=False)
            for m in (tiny_llama, tiny_gpt2)}


@pytest.fixture(scope="module")
def embedded_stats(embedded):
    # a small sample (the real edits use 100,000 tokens); a ridge keeps the solve well posed
    return mlp_key_second_moment(embedded, LAYER, n_tokens=4000, cache=False, progress=False)


@pytest.fixture(scope="module")
def eiffel(embedded, embedded_stats):
    """One real edit of the embedded model, reverted at the end of the module."""
    before = matrix(embedded, LAYER)
    e = rome.edit(embedded, layer=LAYER, stats=embedded_stats, mom2_ridge=1e-3)
    yield e, before
    if e.applied:
        e.revert()
    assert torch.equal(matrix(embedded, LAYER), before)


def greedy(model, text, n=3) -> str:
    """Independent greedy decoding with full logits from model.run."""
    toks = model.to_tokens(text)
    for _ in range(n):
        toks = torch.cat([toks, model.run(toks)[:, -1].argmax(-1, keepdim=True)], 1)
    return model.tokenizer.decode(toks[0, -n:].tolist())


# ----------------------------------------------------------------------------------------------- the embedded edit
def test_eiffel_edit_changes_the_fact_and_generalizes(embedded, eiffel):
    e, _ = eiffel
    assert e.applied and e.layer == LAYER
    assert greedy(embedded, "The Eiffel Tower is located in the city of", 1) == " Rome"
    assert greedy(embedded, "Where is the Eiffel Tower? It stands in the city of", 1) == " Rome"
    assert greedy(embedded, "The Louvre is located in the city of", 1) == " Paris"  # neighbour kept
    assert e.request["target_true"] == " Paris"
    assert len(e.templates) == 1 + sum(c for _, c in e.hparams["templates"]) and e.templates[0] == "{}"
    assert e.losses[-1] < e.losses[0]


def test_update_is_rank_one_and_maps_key_to_value(embedded, eiffel):
    e, before = eiffel
    delta = matrix(embedded, LAYER).double() - before.double()
    s = torch.linalg.svdvals(delta)
    assert s[1] <= 1e-5 * s[0]
    assert torch.allclose(delta, torch.outer(e.u, e.v), atol=1e-6 * float(delta.abs().max()) + 1e-9)
    out = editing_base.mlp_out_apply(embedded, LAYER, e.key)  # float64, edited weights
    assert float((out - e.value).norm() / e.value.norm()) <= 1e-4
    # and the unedited matrix did not already do so
    assert float((e.key @ before.double().T - e.value).norm() / e.value.norm()) > 1e-2


def test_the_v_star_steps_run_each_head_once_and_make_the_whole_rows_edit(embedded, embedded_stats, monkeypatch):
    """The tokens before each row's subject position do not depend on delta: they run once (interp.editing.prefix)
    and every step runs the tails. The edit equals the one optimised on the whole rows, up to float rounding."""
    from interp.editing import prefix
    from interp.editing import vstar

    assert prefix.usable(embedded)
    kw = dict(prompt="{} is located in the city of", subject="The Louvre", target=" Berlin", layer=LAYER,
              stats=embedded_stats, mom2_ridge=1e-3, v_steps=6)
    d0, widths = digest(embedded), []
    real = prefix.tail_logits

    def counted(model, split, *a, **k):
        widths.append(split.tokens.shape[1])
        return real(model, split, *a, **k)

    monkeypatch.setattr(vstar, "tail_logits", counted)
    fast = rome.edit(embedded, **kw)
    fast.revert()
    monkeypatch.setattr(prefix, "usable", lambda model: False)
    whole = rome.edit(embedded, **kw)
    whole.revert()
    assert digest(embedded) == d0
    assert len(widths) == len(fast.losses) + len(whole.losses) and widths[0] < widths[-1] / 2
    assert fast.losses == pytest.approx(whole.losses, rel=1e-4)
    for name in ("u", "v", "key", "value"):
        a, b = getattr(fast, name), getattr(whole, name)
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-6 * float(b.abs().max())), (name, float((a - b).abs().max()))


def test_rome_edits_made_together_are_each_edit_made_alone(embedded, embedded_stats):
    """Independent ROME edits whose v* optimisations share forwards (each its own delta, Adam, clamp and stop)
    against rome.edit one at a time: the same steps, losses, keys and update up to float rounding; nothing is
    written. (A row seeing another edit's delta, or a stop shared by all, moves the losses far more.)"""
    reqs = [("{} is located in the city of", "The Louvre", " Berlin"), ("{} plays the", "Michael Jordan", " guitar"),
            ("The mother tongue of {} is", "Danielle Darrieux", " English")]
    kw = dict(layer=LAYER, stats=embedded_stats, mom2_ridge=1e-3, v_steps=8, v_loss_stop=0.5)
    d0 = digest(embedded)
    together = rome.edits_together(embedded, reqs, **kw)
    assert digest(embedded) == d0 and not any(e.applied for e in together)
    steps = []
    for req, e in zip(reqs, together):
        alone = rome.edit(embedded, *req, **kw)
        alone.revert()
        steps.append(len(alone.losses))
        assert len(e.losses) == len(alone.losses), req
        assert e.losses == pytest.approx(alone.losses, rel=1e-3, abs=1e-4), req
        assert torch.allclose(e.key, alone.key, rtol=1e-4, atol=1e-5)
        for name in ("u", "v"):
            a, b = getattr(e, name), getattr(alone, name)
            assert float((a - b).norm() / b.norm()) < 2e-3, (req, name)
        assert e.timings["batch_share_s"] > 0 and e.request == alone.request and e.norms["key_rule"]
    assert len(set(steps)) > 1, steps  # the stops differed, so each edit stopped on its own loss
    e = together[1].apply(embedded)
    assert torch.equal(matrix(embedded, LAYER), e._edited)
    e.revert()
    assert digest(embedded) == d0
    with pytest.raises(ValueError, match="no ROME requests"):
        rome.edits_together(embedded, [], **kw)
    with pytest.raises(ValueError, match="target"):
        rome.edits_together(embedded, [reqs[0], ("{} is in", "Tower", "")], **kw)


def test_key_is_the_template_average_from_an_independent_forward(embedded, eiffel):
    e, _ = eiffel
    keys = []
    name = f"blocks.{LAYER}.mlp.hook_post"  # the input of the edited matrix: the edit does not change it
    for tpl in e.templates:
        text = tpl.replace("{}", e.request["prompt"]).replace("{}", e.request["subject"])
        prefix = text[: text.index(e.request["subject"]) + len(e.request["subject"])]
        pos = embedded.to_tokens(prefix).shape[1] - 1  # subject's last token
        keys.append(embedded.cache(text, [name])[name][0, pos].double())
    k = torch.stack(keys).mean(0)
    assert torch.allclose(k, e.key, rtol=1e-4, atol=1e-5)


def test_edit_changes_the_real_forward_by_the_rank_one_term(embedded, eiffel):
    """The MLP output inside a real forward moves by u * (v . k) at the subject's last token."""
    e, _ = eiffel
    text = "The Eiffel Tower is located in the city of"
    pos = embedded.to_tokens("The Eiffel Tower").shape[1] - 1
    names = [f"blocks.{LAYER}.mlp.hook_post", f"blocks.{LAYER}.hook_mlp_out"]
    after = embedded.cache(text, names)
    e.revert()
    try:
        before = embedded.cache(text, names)
    finally:
        e.apply(embedded)
    k = before[names[0]][0, pos].double()
    assert torch.equal(k, after[names[0]][0, pos].double())  # the key is upstream of the edit
    moved = (after[names[1]][0, pos] - before[names[1]][0, pos]).double()
    expected = e.u * float(e.v @ k)
    assert torch.allclose(moved, expected, rtol=1e-3, atol=1e-3 * float(expected.norm()))


def test_save_load_apply_is_bit_exact_and_altered_file_refused(embedded, eiffel, tmp_path):
    e, before = eiffel
    edited = matrix(embedded, LAYER)
    path = e.save(tmp_path / "eiffel.safetensors")
    meta = json.loads((tmp_path / "eiffel.json").read_text())
    assert meta["layer"] == LAYER and meta["fingerprint"] == embedded.fingerprint and len(meta["sha256"]) == 64
    e.revert()
    assert torch.equal(matrix(embedded, LAYER), before)
    loaded = rome.load_edit(path)
    assert loaded.templates == e.templates and loaded.request == e.request
    with rome.model_edited(embedded, loaded):
        assert torch.equal(matrix(embedded, LAYER), edited)
    assert torch.equal(matrix(embedded, LAYER), before)
    e.apply(embedded)  # back to the module's state
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="altered"):
        rome.load_edit(path)


def test_target_that_is_already_the_answer_is_refused(embedded, eiffel, embedded_stats):
    e, _ = eiffel
    e.revert()
    try:
        d = digest(embedded)
        with pytest.raises(ValueError, match="already the model's answer"):
            rome.edit(embedded, target=" Paris", layer=LAYER, stats=embedded_stats, mom2_ridge=1e-3)
        assert digest(embedded) == d
    finally:
        e.apply(embedded)


def test_default_layer_of_the_embedded_model_is_in_range(embedded):
    layer = rome.default_layer(embedded)
    assert 0 <= layer < embedded.n_layers
    assert layer == editing_defaults.DEFAULTS[embedded.fingerprint].layer


# ----------------------------------------------------------------------------------------------- tiny models
@pytest.fixture(params=["tiny_llama", "tiny_gpt2"])
def tiny(request, tiny_stats):
    model = request.getfixturevalue(request.param)
    return model, tiny_stats[id(model)]


def test_tiny_edit_rank_one_key_value_and_revert(tiny):
    model, stats = tiny
    d0, before = digest(model), matrix(model, 0)
    e = rome.edit(model, **TINY, stats=stats)
    try:
        delta = matrix(model, 0).double() - before.double()
        s = torch.linalg.svdvals(delta)
        assert s[1] <= 1e-5 * s[0] and s[0] > 0
        out = editing_base.mlp_out_apply(model, 0, e.key)
        assert float((out - e.value).norm() / e.value.norm()) <= 1e-4
        # the bias (GPT-2) is part of v*: v* - M k* - b is exactly the optimized delta u
        m64 = before.double()
        assert torch.allclose(e.value - e.key @ m64.T - editing_base.mlp_out_bias(model, 0), e.u, atol=1e-5)
    finally:
        e.revert()
    assert digest(model) == d0
    with pytest.raises(ValueError, match="not applied"):
        e.revert()


def _template_keys(model, e, layer=0):
    """The subject-last-token key of every templated prompt, from a forward of its own."""
    name, out = f"blocks.{layer}.mlp.hook_post", []
    for tpl in e.templates:
        text = tpl.replace("{}", e.request["prompt"]).replace("{}", e.request["subject"])
        end = text.index(e.request["subject"]) + len(e.request["subject"])
        pos = vstar.subject_last_index(model, text, end)
        out.append(model.cache(text, [name])[name][0, pos].double())
    return torch.stack(out)


@pytest.mark.parametrize("rule", ["mean", "each"])
def test_key_rule_sets_which_keys_get_the_whole_update(tiny, rule):
    """mean: v . k* = 1 and key_match is v . k of the bare prompt; each: v . k = 1 for every templated key, and v
    is the smallest such direction in the C metric (any other solution adds a C-orthogonal part)."""
    model, stats = tiny
    d0 = digest(model)
    e = rome.edit(model, **TINY, stats=stats, key_rule=rule)
    assert e.norms["key_rule"] == rule and e.hparams["key_rule"] == rule
    try:
        keys = _template_keys(model, e)  # the edited matrix is the MLP's output: its input keys do not change
        dots = keys @ e.v
        assert abs(float(keys.mean(0) @ e.v) - 1) < 1e-6
        assert abs(float(dots[0]) - e.norms["key_match"]) < 1e-4
        c = stats.mom2
        assert abs(1 / float(e.v @ c @ e.v) - e.norms["key_dot"]) < 1e-6 * e.norms["key_dot"]
        if rule == "each":
            assert torch.allclose(dots, torch.ones_like(dots), atol=1e-4)
            # a different solution of the same constraints is larger in the C metric
            basis = torch.linalg.svd(keys)[2][len(keys):]       # directions orthogonal to every key
            other = e.v + 0.1 * basis[0] * e.v.norm()
            assert torch.allclose(keys @ other, dots, atol=1e-6) and float(other @ c @ other) > float(e.v @ c @ e.v)
        else:
            assert float((dots - 1).abs().max()) > 1e-3  # the templated keys differ: only their mean gets u in full
    finally:
        e.revert()
    assert digest(model) == d0


def test_auto_key_rule_is_mean_unless_the_bare_prompt_key_mismatches(tiny, monkeypatch):
    model, stats = tiny
    made = {}
    for rule in ("mean", "each"):
        e = rome.edit(model, **TINY, stats=stats, key_rule=rule)
        e.revert()
        made[rule] = e
    match = made["mean"].norms["key_match"]
    for bound, want in ((match - 0.01, "mean"), (match + 0.01, "each")):  # the same edit on both sides of the bound
        monkeypatch.setattr(editing_rome, "KEY_MATCH", bound)
        e = rome.edit(model, **TINY, stats=stats)  # the default rule
        e.revert()
        assert e.hparams["key_rule"] == "auto" and e.norms["key_rule"] == want
        assert torch.equal(e.v, made[want].v) and torch.equal(e.u, made[want].u)


def test_save_then_apply_on_a_fresh_load_is_bit_identical(tmp_path, tiny):
    model, stats = tiny
    arch = "llama" if "llama" in model.source else "gpt2"
    e = rome.edit(model, **TINY, stats=stats)
    edited = digest(model)
    path = e.save(tmp_path / "e")
    e.revert()
    fresh = interp.load_tiny(arch, seed=0)
    rome.load_edit(tmp_path / "e.json").apply(fresh)
    assert digest(fresh) == edited
    other = interp.load_tiny(arch, seed=0)
    rome.load_edit(path).apply(other)
    assert digest(other) == digest(fresh)
    stranger = interp.load_tiny(arch, seed=1)
    d = digest(stranger)
    with pytest.raises(ValueError, match="fingerprint"):
        rome.load_edit(path).apply(stranger)
    assert digest(stranger) == d


@pytest.mark.parametrize("stage, exc", [("optimize", KeyboardInterrupt), ("update", KeyboardInterrupt),
                                        ("update", RuntimeError)])
def test_interrupt_mid_edit_leaves_weights_bit_identical(tiny, stage, exc):
    model, stats = tiny
    d0 = digest(model)
    flags = [p.requires_grad for p in model.named_params().values()]
    seen = []

    def progress(event):
        seen.append(event["stage"])
        if event["stage"] == stage and (stage != "optimize" or event["step"] == 2):
            raise exc("stop")

    with pytest.raises(exc):
        rome.edit(model, **TINY, stats=stats, progress=progress)
    assert stage in seen
    assert digest(model) == d0
    assert [p.requires_grad for p in model.named_params().values()] == flags
    assert model.attached_hook_count() == 0


def test_failure_inside_the_weight_write_restores(tiny, monkeypatch):
    model, stats = tiny
    d0 = digest(model)
    real_copy = torch.Tensor.copy_
    calls = []

    def half_copy(self, src, *a, **k):
        # the first copy into the weight writes it, then fails, as if interrupted right after the write
        out = real_copy(self, src, *a, **k)
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(torch.Tensor, "copy_", half_copy)
    with pytest.raises(KeyboardInterrupt):
        editing_base.write_matrix(types.SimpleNamespace(), model, 0, matrix(model, 0) + 1.0)
    monkeypatch.undo()
    assert len(calls) == 2  # written once, restored once
    assert digest(model) == d0


def test_stacked_edits_revert_in_reverse_order_only(tiny):
    model, stats = tiny
    d0 = digest(model)
    a = rome.edit(model, **TINY, stats=stats)
    b = rome.edit(model, **{**TINY, "target": " Oslo"}, stats=stats)
    with pytest.raises(ValueError, match="revert the later edit first"):
        a.revert()
    b.revert()
    a.revert()
    assert digest(model) == d0


def test_model_edited_reverts_after_an_exception(tiny, tmp_path):
    model, stats = tiny
    d0 = digest(model)
    e = rome.edit(model, **TINY, stats=stats)
    e.revert()
    with pytest.raises(RuntimeError):
        with rome.model_edited(model, e):
            assert digest(model) != d0
            raise RuntimeError("boom")
    assert digest(model) == d0 and not e.applied
    with model.edited(e):
        with pytest.raises(ValueError, match="already applied"):
            e.apply(model)
    assert digest(model) == d0


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompt="Tower is in the city of"), "has no '{}'"),
    (dict(prompt="It is in the city of"), "not found in the prompt"),
    (dict(prompt="{} and {} are in"), "exactly one"),
    (dict(subject=""), "subject"),
    (dict(target=""), "empty"),
    (dict(layer=2), "out of range"),
    (dict(layer=-3), "out of range"),
    (dict(v_lr=0), "v_lr"),
    (dict(v_lr=float("inf")), r"v_lr=inf; allowed: a finite number > 0"),
    (dict(not_a_param=1), "unknown ROME hyperparameter"),
    (dict(key_rule="all"), "key_rule"),
    (dict(max_loss_rise=-1), r"max_loss_rise=-1; allowed: a finite number >= 0"),
])
def test_bad_input_is_refused_and_changes_nothing(tiny, kwargs, match):
    model, stats = tiny
    d0 = digest(model)
    with pytest.raises(ValueError, match=match):
        rome.edit(model, **{**TINY, **kwargs}, stats=stats)
    assert digest(model) == d0


def test_a_diverging_v_star_is_refused_and_changes_nothing(tiny):
    """A learning rate that overflows the delta's norm: the clamp would zero the delta (and the edit then blame a
    zero gradient); it is named as divergence instead."""
    model, stats = tiny
    d0 = digest(model)
    with pytest.raises(FloatingPointError, match=r"diverged \(the delta's norm overflowed\); lower v_lr"):
        rome.edit(model, **TINY, stats=stats, v_lr=1e30)
    assert digest(model) == d0


def test_missing_edit_files_and_wrong_stats(tmp_path, tiny):
    model, _ = tiny
    with pytest.raises(FileNotFoundError):
        rome.load_edit(tmp_path / "nothing.safetensors")
    with pytest.raises(ValueError, match="second-moment matrix"):
        rome.edit(model, **TINY, stats=torch.eye(3))


def test_context_templates_are_seeded_and_stored(tiny_llama):
    a = vstar.context_templates(tiny_llama, seed=3, spec=((4, 2), (6, 1)))
    caches.clear(tiny_llama, "rome.templates")
    b = vstar.context_templates(tiny_llama, seed=3, spec=((4, 2), (6, 1)))
    c = vstar.context_templates(tiny_llama, seed=4, spec=((4, 2), (6, 1)))
    assert a == b and a != c and len(a) == 4 and a[0] == "{}"
    assert all(t.endswith(". {}") and t.count("{}") == 1 for t in a[1:])


def test_subject_last_index_matches_prefix_tokenization(embedded):
    text = "Therefore, we went. The Eiffel Tower is located in"
    end = text.index("Tower") + len("Tower")
    assert vstar.subject_last_index(embedded, text, end) == embedded.to_tokens(text[:end]).shape[1] - 1
    assert embedded.to_str_tokens(text)[vstar.subject_last_index(embedded, text, end)] == " Tower"


def test_subject_token_picks_the_edited_subject_token(embedded):
    """``subject_token`` counts in the subject's own tokens ("The", " E", "iffel", " Tower"), in every context
    template and in the KL prompt alike; out of range it is refused with the subject's token count."""
    from interp.editing.vstar import edit_batch

    ids = embedded.target_tokens(" Rome")
    want = {-1: " Tower", 0: "The", 2: "iffel", -2: "iffel"}
    for which, tok in want.items():
        b = edit_batch(embedded, "{} is located in the city of", "The Eiffel Tower", ids,
                       ["{}", "Then we left. {}"], "{} is a", which)
        got = [embedded.tokenizer.decode([int(b.tokens[r, int(p)])]).strip() for r, p in enumerate(b.subject_pos)]
        assert got == [tok.strip()] * 3, (which, got)
    with pytest.raises(ValueError, match=r"subject_token=4; allowed: -4\.\.3 \('The Eiffel Tower' is 4 token"):
        edit_batch(embedded, "{} is located in the city of", "The Eiffel Tower", ids, ["{}"], "{} is a", 4)
    with pytest.raises(ValueError, match="subject_token=1.5; allowed: an integer"):
        rome.RomeHparams.make(subject_token=1.5)


# ----------------------------------------------------------------------------------------------- records
def _record(**over):
    rec = dict(case_id=1, relation="r", split="dev", prompt="{} is in", subject="X", target_true=" A",
               target_new=" B", paraphrase_prompts=["X is at", "X lies in"],
               neighborhood_prompts=[f"Y{i} is in" for i in range(5)], generation_prompts=["X is", "X was"])
    rec.update(over)
    return rec


@pytest.mark.parametrize("over, match", [
    (dict(prompt="X is in"), "has no"), (dict(split="train"), "split"), (dict(target_new=""), "empty"),
    (dict(target_new=" A"), "equals target_true"), (dict(paraphrase_prompts=["one"]), "paraphrase_prompts"),
    (dict(neighborhood_prompts="Y is in"), "neighborhood_prompts"),
])
def test_load_records_validates(tmp_path, over, match):
    path = tmp_path / "f.jsonl"
    path.write_text(json.dumps(_record()) + "\n" + json.dumps(_record(case_id=2, **over)) + "\n")
    with pytest.raises(ValueError, match=match):
        rome.load_records(path)


def test_load_records_splits_and_errors(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_text("\n".join(json.dumps(_record(case_id=i, split=s)) for i, s in enumerate(["dev", "test", "dev"])))
    assert [r.case_id for r in rome.load_records(path, split="dev")] == [0, 2]
    assert len(rome.load_records(path)) == 3
    with pytest.raises(ValueError, match="split"):
        rome.load_records(path, split="train")
    with pytest.raises(FileNotFoundError):
        rome.load_records(tmp_path / "absent.jsonl")
    path.write_text(json.dumps(_record()) + "\n" + json.dumps(_record()) + "\n")
    with pytest.raises(ValueError, match="twice"):
        rome.load_records(path)


def test_the_shipped_records_load():
    recs = rome.load_records()
    assert {r.split for r in recs} == {"dev", "test"}
    assert all(r.target_new.startswith(" ") and r.target_true.startswith(" ") for r in recs)


# ----------------------------------------------------------------------------------------------- CLI
def test_cli_edit_handler(tiny_llama, tmp_path):
    args = types.SimpleNamespace(prompt=TINY["prompt"], subject=TINY["subject"], target=TINY["target"], layer=0,
                                 seed=0, also=["Tower is"], tokens=3, save=str(tmp_path / "cli"),
                                 mom2_tokens=3000, json=True)
    d0 = digest(tiny_llama)
    out = cli_edit(args, model=tiny_llama)
    assert digest(tiny_llama) == d0
    assert [c["prompt"] for c in out["completions"]] == ["Tower is in the city of", "Tower is"]
    assert out["completions"][0]["before"] == greedy(tiny_llama, "Tower is in the city of", 3)
    assert out["saved"] and rome.load_edit(out["saved"]).layer == 0
    json.dumps({k: v for k, v in out.items() if k != "_text"})


def test_loss_guard_measures_the_edit_on_its_own_texts(tiny):
    """loss_rise is the guard texts' loss with the edit applied against without it (computed here through the
    edit's own apply / revert), and the guard texts are not the evaluation's drift texts."""
    model, stats = tiny
    d0 = digest(model)
    e = rome.edit(model, **TINY, stats=stats, max_loss_rise=1e9)  # measure, never refuse
    texts = editing_drift.guard_texts(model)
    with_edit = text_nll(model, texts)
    e.revert()
    assert digest(model) == d0
    without = text_nll(model, texts)
    assert e.norms["loss_rise"] == pytest.approx(100 * (with_edit - without) / without, rel=1e-9, abs=1e-12)
    assert not set(texts.texts) & set(drift_texts())
    off = rome.edit(model, **TINY, stats=stats)  # the default for a model without a chosen bound: off
    off.revert()
    assert "loss_rise" not in off.norms and off.hparams["max_loss_rise"] == 0


def test_loss_guard_refuses_an_edit_and_leaves_the_weights(tiny, monkeypatch):
    model, stats = tiny
    d0 = digest(model)
    monkeypatch.setattr(editing_rome, "loss_rise", lambda m, layer, new: 3.25)
    with pytest.raises(ValueError, match=r"raise the loss on reference text by 3\.25% \(max_loss_rise=2\.0%\): "
                                         r"refused, weights unchanged"):
        rome.edit(model, **TINY, stats=stats, max_loss_rise=2.0)
    assert digest(model) == d0
    e = rome.edit(model, **TINY, stats=stats, max_loss_rise=4.0)  # under the bound: written
    assert e.applied and e.norms["loss_rise"] == 3.25
    e.revert()
    assert digest(model) == d0


