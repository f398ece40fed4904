"""FFN neurons: activations, the streaming top-k scan (exact merges, ties, padding), vocabulary projection, ablation,
bad input, memory. Every check compares against an independent computation."""

import argparse
import importlib
import json
import os
import random
import subprocess
import sys

import pytest
import torch

from interp.analyses.neurons import Neurons, TopK, neurons
from interp.core.corpus import Doc, token_batches

# the module itself, even if the package re-exports the function ``neurons`` under the same name
neurons_module = importlib.import_module("interp.analyses.neurons")
cli_neurons_module = importlib.import_module("interp.cli.neurons")

TEXTS = ["the cat sat on the mat", "a dog ran in the park!", "the cat sat on the mat", "zebras, zebras",
         "one two three four five six", "hello there general", "the the the", "x", "mat mat cat",
         "the cat sat on the mat", "quiet night", "on the mat sat the cat"]


def brute_topk(model, layer, docs, k, *, batch_size, max_len=128, skip_bos=True, doc_offset=0, only=None):
    """Reference: every (value, doc, pos) of every real token, sorted in Python by (-value, doc, pos)."""
    name = f"blocks.{layer}.mlp.hook_post"
    entries = {}  # neuron -> list of (value, doc, pos, token)
    for toks, mask, idx in token_batches(model, docs, max_len=max_len, batch_size=batch_size):
        acts = model.cache(toks, [name])[name]  # [b, pos, d_mlp], same padded batches as the scan
        for b, d in enumerate(idx):
            for p in range(toks.shape[1]):
                if not mask[b, p] or (skip_bos and p == 0):
                    continue
                for n in (range(acts.shape[-1]) if only is None else only):
                    entries.setdefault(n, []).append((float(acts[b, p, n]), d + doc_offset, p, int(toks[b, p])))
    return {n: sorted(e, key=lambda t: (-t[0], t[1], t[2]))[:k] for n, e in entries.items()}


def state_as_lists(state: TopK):
    out = {}
    for i, n in enumerate(state.neurons.tolist()):
        out[n] = [(float(state.values[i, r]), int(state.doc[i, r]), int(state.pos[i, r]), int(state.token[i, r]))
                  for r in range(state.k) if int(state.doc[i, r]) >= 0]
    return out


# ------------------------------------------------------------------------------------------------ activations
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_activations_are_the_hidden_vector_of_the_down_projection(arch, request):
    model = request.getfixturevalue(arch)
    layer = 1
    text = "the quick brown fox"
    acts = neurons(model, layer).activations(text).acts  # [pos, d_mlp]
    cache = model.cache(text, [f"blocks.{layer}.mlp.hook_in", f"blocks.{layer}.hook_mlp_out"])
    x = cache[f"blocks.{layer}.mlp.hook_in"][0]  # the MLP's (normalized) input
    w = {k: v.detach() for k, v in model.mlp_in_weights(layer).items()}
    if model.gated_mlp:  # act(gate) * up, nn.Linear weights [d_mlp, d_model]
        expect = torch.nn.functional.silu(x @ w["gate"].T) * (x @ w["in"].T)
    else:  # GPT-2 Conv1D c_fc [d_model, d_mlp] + bias, GELU (tanh approximation)
        fc = model.module.blocks[layer].mlp.__getattr__("in")
        bias = (getattr(fc, "original_component", None) or fc).bias.detach()
        expect = torch.nn.functional.gelu(x @ w["in"] + bias, approximate="tanh")
    assert torch.allclose(acts, expect, atol=1e-5)
    # and it is what multiplies the down projection: hidden @ M.T + bias == the MLP's output
    bias = model.mlp_out_module(layer).bias
    out = acts @ model.mlp_out_matrix(layer).T + (0 if bias is None else bias.detach())
    assert torch.allclose(out, cache[f"blocks.{layer}.hook_mlp_out"][0], atol=1e-5)


def test_activations_embedded_and_plot(embedded, tmp_path):
    view = neurons(embedded, 3)
    res = view.activations("The Eiffel Tower is in Paris")
    x = embedded.cache("The Eiffel Tower is in Paris", ["blocks.3.mlp.hook_in"])["blocks.3.mlp.hook_in"][0]
    w = embedded.mlp_in_weights(3)
    expect = torch.nn.functional.silu(x @ w["gate"].detach().T) * (x @ w["in"].detach().T)
    assert torch.allclose(res.acts, expect, atol=1e-4)
    top = res.top(3)
    peaks = res.acts.max(0).values
    assert [int(i) for i in peaks.argsort(descending=True)[:3]] == top
    fig = res.plot(out=tmp_path / "acts.png")
    assert (tmp_path / "acts.png").stat().st_size > 0
    assert fig.axes[0].get_xticklabels()[0].get_text() == "<|im_start|>"
    frame = res.to_frame([top[0], 7])
    assert len(frame) == 2 * len(res.str_tokens) and set(frame.neuron) == {top[0], 7}


# ------------------------------------------------------------------------------------------------ scan
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_scan_equals_brute_force_sort(arch, request):
    model = request.getfixturevalue(arch)
    docs = [Doc(f"t{i}", t) for i, t in enumerate(TEXTS)]
    state = neurons(model, 0).scan_state(docs, k=4, batch_size=5, progress=False)
    ref = brute_topk(model, 0, docs, 4, batch_size=5)
    got = state_as_lists(state)
    assert got == {n: [(v, d, p, t) for v, d, p, t in ref[n]] for n in ref}
    assert state.n_tokens == sum(len(t.encode()) for t in TEXTS)  # bytes = tokens; BOS left out
    # identical documents 0 and 2 (same batch) give exactly tied activations, so ties are exercised
    assert any(len({v for v, *_ in e}) < len(e) for e in ref.values())


def test_scan_split_and_merge_is_exact(tiny_llama, tmp_path):
    docs = [Doc(f"t{i}", t) for i, t in enumerate(TEXTS)]
    view = neurons(tiny_llama, 1)
    whole = view.scan_state(docs, k=3, batch_size=4, progress=False)
    a = view.scan_state(docs[:4], k=3, batch_size=4, progress=False)
    b = view.scan_state(docs[4:8], k=3, batch_size=4, doc_offset=4, progress=False)
    c = view.scan_state(docs[8:], k=3, batch_size=4, doc_offset=8, progress=False)
    assert a.merge(b).merge(c).equal(whole)
    assert c.merge(a).merge(b).equal(whole)  # order of merges does not matter
    # through safetensors, as separate processes would hand them over
    for i, part in enumerate((a, b, c)):
        part.save(tmp_path / f"part{i}.safetensors")
    parts = [TopK.load(tmp_path / f"part{i}.safetensors") for i in range(3)]
    assert parts[1].merge(parts[2]).merge(parts[0]).equal(whole)
    # the result rendered from the merged state equals the one-go scan's frame
    one = view.scan(docs, k=3, batch_size=4, progress=False).to_frame()
    merged = neurons_module.NeuronScan.from_state(tiny_llama, parts[0].merge(parts[1]).merge(parts[2]), docs)
    assert merged.to_frame().equals(one)


def test_merge_refuses_overlap_and_mismatch(tiny_llama):
    docs = [Doc(f"t{i}", t) for i, t in enumerate(TEXTS[:4])]
    view = neurons(tiny_llama, 0)
    a = view.scan_state(docs, k=3, batch_size=4, progress=False)
    with pytest.raises(ValueError, match="share documents"):
        a.merge(a)
    other_k = view.scan_state(docs, k=2, batch_size=4, doc_offset=10, progress=False)
    with pytest.raises(ValueError, match="different k"):
        a.merge(other_k)
    with pytest.raises(ValueError, match="different layer"):
        a.merge(neurons(tiny_llama, 1).scan_state(docs, k=3, doc_offset=10, progress=False))


def _random_batches(seed, n_docs, width, n_neurons):
    """Synthetic batches with many exact ties (small integers) and huge values at padded positions."""
    g = torch.Generator().manual_seed(seed)
    out, doc = [], 0
    while doc < n_docs:
        b = min(int(torch.randint(1, 5, (1,), generator=g)), n_docs - doc)
        acts = torch.randint(-3, 4, (b, width, n_neurons), generator=g).float()
        lengths = torch.randint(1, width + 1, (b,), generator=g)
        mask = torch.arange(width)[None] < lengths[:, None]
        acts[~mask] = 1e6  # padding must never enter the top-k
        toks = torch.randint(0, 50, (b, width), generator=g)
        out.append((acts, mask, torch.arange(doc, doc + b), toks))
        doc += b
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_topk_ties_and_padding_against_python_sort(seed):
    batches = _random_batches(seed, n_docs=23, width=7, n_neurons=5)
    k = 6
    ref = {n: [] for n in range(5)}
    for acts, mask, ids, toks in batches:
        for b in range(acts.shape[0]):
            for p in range(1, acts.shape[1]):  # BOS skipped
                if mask[b, p]:
                    for n in range(5):
                        ref[n].append((float(acts[b, p, n]), int(ids[b]), p, int(toks[b, p])))
    ref = {n: sorted(e, key=lambda t: (-t[0], t[1], t[2]))[:k] for n, e in ref.items()}
    whole = TopK.empty(0, k, range(5))
    for batch in batches:
        whole.update(*batch)
    assert state_as_lists(whole) == ref
    assert all(v < 1e6 for entries in ref.values() for v, *_ in entries)
    # any split into parts, merged in a random order, is identical (bit for bit, ties included)
    rng = random.Random(seed)
    cut = sorted(rng.sample(range(1, len(batches)), 2))
    parts = []
    for lo, hi in zip([0] + cut, cut + [len(batches)]):
        acc = TopK.empty(0, k, range(5))
        for batch in batches[lo:hi]:
            acc.update(*batch)
        parts.append(acc)
    rng.shuffle(parts)
    merged = parts[0].merge(parts[1]).merge(parts[2])
    assert merged.equal(whole)


def test_topk_fewer_real_tokens_than_k_leaves_empty_slots():
    acc = TopK.empty(0, 5, [0, 1])
    acts = torch.tensor([[[1.0, 2.0], [3.0, -1.0], [9.0, 9.0]]])  # position 2 is padding
    acc.update(acts, torch.tensor([[True, True, False]]), torch.tensor([0]), torch.tensor([[1, 2, 3]]))
    assert state_as_lists(acc) == {0: [(3.0, 0, 1, 2)], 1: [(-1.0, 0, 1, 2)]}  # BOS and padding left out


def test_scan_never_returns_padding_and_stops_after_its_layer(tiny_gpt2):
    docs = ["ab", "a much longer document than the first one", "cd"]
    fired = []
    later = f"blocks.{tiny_gpt2.n_layers - 1}.hook_resid_post"
    with tiny_gpt2.hooks([(later, lambda t, hook: fired.append(1))]):
        res = neurons(tiny_gpt2, 0).scan(docs, k=50, batch_size=3, progress=False)
    assert fired == []  # the forward pass was stopped at layer 0's MLP
    frame = res.to_frame()
    lengths = {i: len(d.encode()) + 1 for i, d in enumerate(docs)}
    assert (frame.pos < frame.doc.map(lengths)).all() and (frame.pos > 0).all()
    per_neuron = frame.groupby("neuron").size()
    assert (per_neuron == sum(lengths.values()) - len(docs)).all()  # every real token, nothing more


def test_scan_result_frame_and_contexts(tiny_llama, tmp_path):
    docs = [Doc(f"title {i}", t) for i, t in enumerate(TEXTS)]
    res = neurons(tiny_llama, 1).scan(docs, k=2, batch_size=4, progress=False)
    frame = res.to_frame()
    assert list(frame.columns) == ["neuron", "rank", "activation", "doc", "title", "pos", "token", "context"]
    for row in frame.head(20).itertuples():
        assert row.title == f"title {row.doc}"
        assert row.token == TEXTS[row.doc].encode()[row.pos - 1:row.pos].decode()
        assert f"[[{row.token}]]" in row.context
    top = res.top_neurons(4)
    peaks = frame[frame["rank"] == 0].sort_values(["activation", "neuron"], ascending=[False, True])
    assert top.neuron.tolist() == peaks.neuron.head(4).tolist()
    res.plot(n=4, out=tmp_path / "scan.png")
    assert (tmp_path / "scan.png").stat().st_size > 0
    assert "top-2 contexts" in res._repr_html_()


def test_scan_embedded_matches_brute_force(embedded):
    docs = [Doc("a", "Paris is the capital of France."), Doc("b", "The cat sat on the mat."),
            Doc("c", "Paris is the capital of France, and Rome of Italy.")]
    state = neurons(embedded, 2).scan_state(docs, k=3, neurons=[0, 5, 100, 1535], batch_size=2, progress=False)
    ref = brute_topk(embedded, 2, docs, 3, batch_size=2, only=(0, 5, 100, 1535))
    assert state_as_lists(state) == ref


# ------------------------------------------------------------------------------------------------ vocab
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2", "embedded"])
def test_vocab_projection_is_the_direct_effect_through_the_final_norm(arch, request):
    model = request.getfixturevalue(arch)
    layer, n = model.n_layers - 1, 3
    view = neurons(model, layer)
    effect = view.logit_effect(n)
    # independent: push the neuron's output row alone through the model's own final norm and unembedding
    w = model.mlp_out_matrix(layer)[:, n].detach().float() * 100.0
    via_model = model.unembed(model.final_norm(w)) - model.unembed(model.final_norm(torch.zeros_like(w)))
    alpha = float(via_model @ effect / (effect @ effect))
    assert alpha > 0  # the omitted 1/rms (1/std) factor is positive ...
    assert torch.allclose(via_model, alpha * effect, atol=1e-4 * float(via_model.abs().max()))  # ... and uniform
    v = view.vocab(n, k=5)
    assert [i for _, i, _ in v.promoted] == via_model.topk(5).indices.tolist()
    assert [i for _, i, _ in v.suppressed] == (-via_model).topk(5).indices.tolist()
    assert len(v.to_frame()) == 10


# ------------------------------------------------------------------------------------------------ ablation
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2", "embedded"])
def test_ablation_matches_residual_arithmetic(arch, request):
    model = request.getfixturevalue(arch)
    layer = model.n_layers - 1
    text = "the cat sat on the" if arch != "embedded" else "The capital of France is"
    target = " mat" if arch == "embedded" else 109  # byte 'm' on the tiny models
    chosen = [2, 7, 11]
    each = arch != "embedded"  # one forward per row: keep the embedded case short
    res = neurons(model, layer).ablate(text, target, chosen, individually=each)
    tid = res.target_id
    post, final = f"blocks.{layer}.mlp.hook_post", f"blocks.{layer}.hook_resid_post"
    logits, cache = model.cache(text, [post, final], logits=True)
    clean = float(logits[0, -1, tid])
    # independent: in the last layer a zero-ablated neuron only removes act * W_out[:, n] from the final residual
    acts, resid = cache[post][0, -1], cache[final][0, -1]
    W = model.mlp_out_matrix(layer).detach().float()
    for row in res.rows:
        changed = resid - W[:, row["neurons"]] @ acts[row["neurons"]]
        expect = model.unembed(model.final_norm(changed))[tid]
        assert row["ablated_logit"] == pytest.approx(float(expect), abs=1e-4)
        assert row["clean_logit"] == pytest.approx(clean, abs=1e-4)
    assert [r["neurons"] for r in res.rows] == ([[2], [7], [11]] if each else []) + [chosen]
    assert res.to_frame().delta.tolist() == pytest.approx([r["ablated_logit"] - r["clean_logit"] for r in res.rows])


# ------------------------------------------------------------------------------------------------ bad input
def test_bad_input_names_the_value_and_range(tiny_llama):
    m = tiny_llama
    with pytest.raises(ValueError, match=r"layer 7 .*0\.\.1"):
        neurons(m, 7)
    view = neurons(m, 1)
    with pytest.raises(ValueError, match=r"neuron 128 .*0\.\.127"):
        view.vocab(128)
    with pytest.raises(ValueError, match=r"neuron -1 .*0\.\.127"):
        view.activations("abc", neurons=[-1])
    with pytest.raises(ValueError, match=r"neuron 999"):
        view.ablate("abc", 97, [999])
    with pytest.raises(ValueError, match=r"neuron 500"):
        view.scan(["abc"], neurons=[500], progress=False)
    with pytest.raises(ValueError, match="empty text"):
        view.activations("")
    with pytest.raises(ValueError, match="empty text"):
        view.ablate("", 97, [1])
    with pytest.raises(ValueError, match="no documents"):
        view.scan([], progress=False)
    with pytest.raises(ValueError, match=r"n_docs=0"):
        view.scan(n_docs=0, progress=False)
    with pytest.raises(ValueError, match=r"k=0"):
        view.scan(["abc"], k=0, progress=False)
    with pytest.raises(ValueError, match=r"target 9999"):
        view.ablate("abc", 9999, [1])
    # a failure in the middle of a scan (a bad document in the second batch) leaves no hook attached
    with pytest.raises(ValueError, match="empty text"):
        view.scan(["abc", "def", ""], batch_size=2, progress=False)
    assert m.attached_hook_count() == 0


def test_package_exports_the_analyzer(tiny_llama):
    """``interp.neurons(model, layer)`` is the package-level entry point."""
    import interp

    view = interp.neurons(tiny_llama, -1)
    assert isinstance(view, Neurons) and view.layer == 1 and "128 neurons" in repr(view)


# ------------------------------------------------------------------------------------------------ CLI / demo
def test_cli_handler_json(tiny_gpt2):
    args = argparse.Namespace(layer=1, top=3, docs=6, k=2, neuron=None, json=True)
    out = cli_neurons_module.cli_neurons(args, model=tiny_gpt2)
    json.dumps(out)
    assert out["docs"] == 6 and len(out["neurons"]) == 3
    maxes = [n["max_activation"] for n in out["neurons"]]
    assert maxes == sorted(maxes, reverse=True)
    assert all(len(n["contexts"]) == 2 and len(n["promotes"]) == 5 for n in out["neurons"])
    one = cli_neurons_module.cli_neurons(argparse.Namespace(layer=1, top=3, docs=6, k=2, neuron=[5], json=True),
                                     model=tiny_gpt2)
    assert [n["neuron"] for n in one["neurons"]] == [5]
    with pytest.raises(ValueError, match=r"layer 9"):
        cli_neurons_module.cli_neurons(argparse.Namespace(layer=9, top=3, docs=6, k=2, neuron=None, json=True),
                                   model=tiny_gpt2)


def test_demo_runs(tiny_llama, capsys):
    cli_neurons_module.demo(tiny_llama)
    out = capsys.readouterr().out
    assert "FFN neurons" in out and out.count("L1N") == 5 and out.count("[[") == 15  # 5 neurons x 3 contexts


# ------------------------------------------------------------------------------------------------ memory
_MEM_CHILD = r"""
import json, sys, torch
torch.set_num_threads(1)
import interp
from interp.analyses.neurons import neurons
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
model = interp.load_tiny("llama", d_model=32, n_heads=2, d_mlp=int(sys.argv[1]), n_layers=1)
docs = [("doc %d " % i) * 6 for i in range(int(sys.argv[2]))]
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # peak := now; measure the scan only
before = status("VmRSS")
state = neurons(model, 0).scan_state(docs, k=4, batch_size=4, progress=False)
print(json.dumps({"grow": status("VmHWM") - before, "tokens": state.n_tokens}))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc peak-RSS reset")
def test_scan_memory_holds_one_batch_not_the_corpus():
    """A wide MLP (d_mlp 16384) over 500 documents: caching the layer's activations would take
    tokens * d_mlp * 4 bytes (~1.5 GB; a leaky variant that keeps each batch measured +1.9 GB); the scan holds one
    batch (~13 MB, plus the MLP's own intermediates of the same size) and its [d_mlp, k] state (measured +126 MB)."""
    d_mlp, n_docs = 16384, 500
    out = subprocess.run([sys.executable, "-c", _MEM_CHILD, str(d_mlp), str(n_docs)], capture_output=True,
                         text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    info = json.loads(out.stdout.strip().splitlines()[-1])
    whole_cache = info["tokens"] * d_mlp * 4
    assert whole_cache > 1e9  # the check is meaningful: keeping everything would blow the bound
    assert info["grow"] < 400 * 2 ** 20, f"scan grew RSS by {info['grow'] / 2 ** 20:.0f} MB"


def test_numpy_integers_from_frames_are_accepted(tiny_llama):
    import numpy as np

    view = neurons(tiny_llama, np.int64(1))
    n = np.int64(5)
    assert view.vocab(n, k=2).neuron == 5
    assert view.ablate("abc", np.int64(97), [n]).rows[0]["neurons"] == [5]
    assert view.activations("abc", neurons=np.array([1, 2])).neurons == [1, 2]


def test_cli_parser_accepts_the_issue_syntax():
    from interp import cli

    args = cli.build_parser().parse_args(["neurons", "--layer", "4", "--top", "7", "--docs", "50", "--json"])
    assert (args.layer, args.top, args.docs, args.json, args.func) == (4, 7, 50, True, cli_neurons_module.cli_neurons)


# ------------------------------------------------------------------------------------------------ target policy, JSON
def test_ablate_multi_token_target_scores_its_first_token_and_names_it(tiny_llama):
    first = tiny_llama.encode(" mat", prepend_bos=False)[0]  # bytes: " mat" is 4 tokens on the tiny model
    with pytest.warns(UserWarning, match="first token"):
        res = neurons(tiny_llama, 1).ablate("the cat sat on the", " mat", [2])
    assert res.target_id == first and res.target == tiny_llama.tokenizer.decode([first]) and res.label == " mat"
    doc = res.to_json()
    assert (doc["target"], doc["target_id"], doc["label"]) == (res.target, first, " mat")


def test_every_result_has_the_json_protocol(tiny_llama, tmp_path):
    view = neurons(tiny_llama, 1)
    results = [view.activations("the cat sat"), view.scan(TEXTS, k=2, batch_size=4, progress=False),
               view.vocab(3, k=3), view.ablate("the cat sat", 97, [1, 2])]
    for res in results:
        doc = res.to_json()
        json.dumps(doc)
        assert doc["result"] == type(res).__name__ and doc["summary"] == res.summary() and doc["rows"]
        fig = res.plot(out=tmp_path / f"{type(res).__name__}.png")
        assert fig is not None and (tmp_path / f"{type(res).__name__}.png").stat().st_size > 0
    scan_doc = results[1].to_json(neurons=[5])
    assert {r["neuron"] for r in scan_doc["rows"]} == {5} and scan_doc["docs"] == len(TEXTS)


def test_cli_flags_are_checked_before_the_model_loads(capsys, monkeypatch):
    from interp import cli

    def no_model(args):
        raise AssertionError("the model was loaded before the flags were checked")

    monkeypatch.setattr(cli_neurons_module, "load_model", no_model)
    for flag, value in (("--top", "-3"), ("--docs", "0"), ("--k", "0")):
        code = cli.main(["neurons", "--layer", "4", flag, value, "--json"])
        err = json.loads(capsys.readouterr().out)["error"]
        assert code == 2 and flag in err and value in err


def test_cli_json_is_the_result_protocol_plus_the_neuron_list(tiny_gpt2):
    out = cli_neurons_module.cli_neurons(argparse.Namespace(layer=1, top=2, docs=4, k=2, neuron=None, json=True),
                                         model=tiny_gpt2)
    assert out["result"] == "NeuronScan" and out["summary"] and out["_text"].startswith(out["summary"])
    assert {r["neuron"] for r in out["rows"]} == {n["neuron"] for n in out["neurons"]}


# ------------------------------------------------------------------------------------------------ corpus means
def test_scan_records_each_neurons_mean_over_non_bos_tokens(tiny_llama):
    layer, name = 1, "blocks.1.mlp.hook_post"
    scan = neurons(tiny_llama, layer).scan(TEXTS, k=3, batch_size=4, progress=False)
    total, count = 0, 0
    for text in TEXTS:  # one document at a time: no padding to leave out by hand
        acts = tiny_llama.cache(text, [name])[name][0, 1:].double()  # BOS left out
        total, count = total + acts.sum(0), count + acts.shape[0]
    assert scan.mean.shape == (tiny_llama.d_mlp,)
    assert torch.allclose(scan.mean.double(), total / count, atol=1e-5)
    assert torch.allclose(scan.mean_of([5, 2]), scan.mean[[5, 2]])
    sub = neurons(tiny_llama, layer).scan(TEXTS, k=3, neurons=[7, 3], batch_size=4, progress=False)
    assert torch.allclose(sub.mean_of([3, 7]), scan.mean[[3, 7]], atol=1e-6)
    with pytest.raises(ValueError, match="not scanned"):
        sub.mean_of([4])


def test_mean_ablation_from_a_scan_writes_the_corpus_means(tiny_llama):
    view = neurons(tiny_llama, 1)
    scan = view.scan(TEXTS, k=2, batch_size=4, progress=False)
    text, chosen = "the cat sat on the", [2, 9]
    res = view.ablate(text, 5, chosen, mode="mean", mean_over=scan, individually=True)
    assert res.mode == "mean" and [r["neurons"] for r in res.rows] == [[2], [9], [2, 9]]
    with tiny_llama.ablate_neurons(1, chosen, mode="mean", values=scan.mean[chosen]):
        post = tiny_llama.cache(text, ["blocks.1.mlp.hook_post"])["blocks.1.mlp.hook_post"][0]
        expect = tiny_llama.run(text)[0, -1, 5]
    assert torch.allclose(post[:, chosen], scan.mean[chosen].expand(post.shape[0], 2), atol=1e-6)
    assert res.rows[-1]["ablated_logit"] == pytest.approx(float(expect), abs=1e-5)
    zero = view.ablate(text, 5, chosen)  # a mean ablation is not a zero ablation on this model
    assert abs(zero.rows[-1]["ablated_logit"] - res.rows[-1]["ablated_logit"]) > 1e-4
    with pytest.raises(ValueError, match="mode='mean'"):
        view.ablate(text, 5, chosen, mode="zero", mean_over=scan)
    with pytest.raises(ValueError, match="layer"):
        neurons(tiny_llama, 0).ablate(text, 5, chosen, mode="mean", mean_over=scan)
