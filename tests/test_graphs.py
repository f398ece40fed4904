"""Attribution graphs: the local replacement model reproduces the real model; each feature's incoming edges plus its
constant terms are its pre-activation; every edge equals the frozen model's explicit Jacobian; influence and
pruning match their definitions — on tiny models."""

import warnings

import numpy as np
import pytest
import torch

from interp.analyses.features import Dictionary, DictionarySet, Site
from interp.analyses.features.dictionary import model_info
from interp.analyses.graphs import LocalReplacement, attribution_graph
from interp.analyses.graphs.prune import (graph_scores, influence, influence_through_rows, normalise, prune,
                                         threshold_value)

TEXT = "Paris is the capital of France"


def _transcoders(model, layers, width=48, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for L in layers:
        d = Dictionary(model.d_model, model.d_model, width, k=k, skip=True, site=Site.transcoder(model, L),
                       model=model_info(model))
        with torch.no_grad():
            for p in d.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)   # outputs of the MLP write's size: an error
            d.b_enc.fill_(0.5)          # that cancels a huge reconstruction would only measure float32 round-off
        out[L] = d.eval()
    return DictionarySet(out)


@pytest.fixture(scope="module")
def tiny_gemma3():
    import interp

    return interp.load_tiny("gemma3", seed=0, n_layers=3)


@pytest.mark.parametrize("which", ["tiny_llama", "tiny_gemma3"])
def test_frozen_replacement_reproduces_the_real_logits(which, request):
    m = request.getfixturevalue(which)
    for layers in (range(m.n_layers), [1]):                         # every MLP replaced, or one (the rest: errors)
        lrm = LocalReplacement(m, _transcoders(m, layers), TEXT)
        with torch.no_grad(), warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            real = m.forward(m.to_tokens(TEXT))[0].float()
            frozen, _ = lrm.run(3)
        for r in range(3):
            torch.testing.assert_close(frozen[r].float(), real, rtol=1e-4, atol=1e-4)
        # holding the norms' scales is the method, not news: TransformerLens's warning on each edit is not shown
        assert not [w for w in seen if "hook_scale" in str(w.message)]
    assert m.attached_hook_count() == 0
    scale = next(n for n in m.hook_names() if n.endswith(".hook_scale"))
    with torch.no_grad(), warnings.catch_warnings(record=True) as seen, m.hooks([(scale, lambda t, hook: t * 1.0)]):
        warnings.simplefilter("always")
        m.forward(m.to_tokens(TEXT))
    assert [w for w in seen if "hook_scale" in str(w.message)]    # the same edit outside the graph still warns


def _frozen_targets(lrm, targets, taps, *, zero_sources=False):
    """Each target's value in the frozen forward with ``taps`` added (``zero_sources``: every source at zero, which
    leaves the constant terms): a feature's pre-activation, or a logit minus the mean logit at the last position."""
    logits, reads = lrm.run(1, taps=taps, keep_reads=True, zero_sources=zero_sources)
    out = []
    for t in targets:
        if t[0] == "logit":
            last = logits[0, -1].float()
            out.append(last[t[1]] - last.mean())
        else:
            _, L, p, f = t
            d = lrm.dicts[L]
            out.append(d.pre(d.normalise(reads[L][0, p:p + 1].float()))[0, f])
    return torch.stack(out).float()


@pytest.mark.parametrize("which", ["tiny_llama", "tiny_gemma3"])
def test_edges_sum_to_each_pre_activation_and_equal_the_explicit_jacobian(which, request):
    """On Gemma 3 too: its post-norms put a frozen 1/rms after attention and after the MLP (a shorter prompt there,
    past the sliding window of 4: the explicit Jacobian costs a backward per target and grows with both)."""
    m = request.getfixturevalue(which)
    text = TEXT if which == "tiny_llama" else "Paris is big"
    tc = _transcoders(m, range(m.n_layers))
    g = attribution_graph(m, tc, text, max_logits=2, batch=5)
    lrm = LocalReplacement(m, tc, text)
    nodes = g.nodes
    kinds = nodes["kind"].to_numpy()
    feats = nodes[nodes["kind"] == "feature"]
    assert len(feats) == sum(int((lrm.acts[L] > 0).sum()) for L in lrm.acts)
    rows = [("feature", int(r.layer), int(r.pos), int(r.feature)) for r in feats.itertuples()]
    logit_ids = [int(x) for x in nodes[nodes["kind"] == "logit"]["feature"]]
    rows += [("logit", t) for t in logit_ids]
    row_index = list(feats.index) + list(nodes.index[kinds == "logit"])
    with torch.no_grad():
        value = _frozen_targets(lrm, rows, {})
        const = _frozen_targets(lrm, rows, {}, zero_sources=True)
    A = g.adjacency
    # (1) incoming edges + constant terms = the value (the frozen model is affine in its sources)
    total = A[row_index].sum(1) + const
    # float32: the terms reach ~10^3 (frozen 1/rms scales of a tiny random model) and cancel to ~1, so the sum is
    # held to 1e-4 of its value plus 1e-6 of the terms' absolute sum (their float32 round-off is ~1e-7 of it)
    scale = A[row_index].abs().sum(1) + const.abs()
    err = (total - value.float()).abs()
    assert (err <= 1e-4 * value.float().abs() + 1e-6 * scale).all(), float((err / scale).max())
    # an active feature's pre-activation is its activation
    acts = torch.tensor(feats["activation"].to_numpy(), dtype=torch.float32)
    torch.testing.assert_close(value[: len(feats)].float(), acts, rtol=1e-4, atol=1e-5)

    # (2) every edge = d target / d (multiplier of the source) at 1, by the explicit Jacobian of the frozen forward
    n_pos, d = lrm.n_pos, m.d_model
    src = [(i, r) for i, r in enumerate(nodes.itertuples()) if r.kind in ("feature", "error", "embedding")]

    def targets_of(mult):
        taps = {"embed": torch.zeros(1, n_pos, d)}
        taps.update({L: torch.zeros(1, n_pos, d) for L in range(m.n_layers)})
        for (i, r), c in zip(src, mult - 1):
            if r.kind == "embedding":
                taps["embed"] = taps["embed"] + _at(n_pos, r.pos, c * lrm.embed[r.pos])
            elif r.kind == "error":
                taps[r.layer] = taps[r.layer] + _at(n_pos, r.pos, c * lrm.error[r.layer][r.pos])
            else:
                dd = lrm.dicts[r.layer]
                vec = r.activation * dd.W_dec[int(r.feature)].float() * dd.out_scale.float()
                taps[r.layer] = taps[r.layer] + _at(n_pos, r.pos, c * vec)
        return _frozen_targets(lrm, rows, taps)

    J = torch.autograd.functional.jacobian(targets_of, torch.ones(len(src)))      # [targets, sources]
    cols = [i for i, _ in src]
    torch.testing.assert_close(A[row_index][:, cols], J, rtol=1e-5, atol=1e-5)
    assert m.attached_hook_count() == 0


def test_contributions_equal_removing_a_node_with_downstream_features_following(tiny_llama):
    """Independent of the graph's solve: remove one node's write from the frozen forward, then, layer by layer,
    let every active feature's activation follow its new pre-activation (the TopK choice frozen, as the local
    replacement model has it) and read logit 0 minus logit 1."""
    m = tiny_llama
    tc = _transcoders(m, range(m.n_layers))
    g = attribution_graph(m, tc, TEXT, max_logits=2)
    lrm = LocalReplacement(m, tc, TEXT)
    nodes = g.nodes
    logit_ids = [int(x) for x in nodes[nodes["kind"] == "logit"]["feature"]]
    feats = nodes[nodes["kind"] == "feature"]
    n_pos, d = lrm.n_pos, m.d_model
    by_layer = {L: [("feature", int(r.layer), int(r.pos), int(r.feature)) for r in feats.itertuples()
                    if r.layer == L] for L in range(m.n_layers)}

    def write(L, f, pos, a):
        dd = lrm.dicts[L]
        return _at(n_pos, pos, a * dd.W_dec[f].float() * dd.out_scale.float())

    def contrast_after_removing(r):
        taps = {"embed": torch.zeros(1, n_pos, d), **{L: torch.zeros(1, n_pos, d) for L in range(m.n_layers)}}
        if r.kind == "embedding":
            taps["embed"] = -_at(n_pos, int(r.pos), lrm.embed[int(r.pos)])
        elif r.kind == "error":
            taps[int(r.layer)] = -_at(n_pos, int(r.pos), lrm.error[int(r.layer)][int(r.pos)])
        removed = ("feature", int(r.layer), int(r.pos), int(r.feature)) if r.kind == "feature" else None
        for L in range(m.n_layers):
            rows = by_layer[L]
            if rows:
                delta = _frozen_targets(lrm, rows, taps) - _frozen_targets(lrm, rows, {})
                for (_, _, pos, f), dv in zip(rows, delta):
                    taps[L] = taps[L] + write(L, f, pos, float(dv))
            if removed is not None and removed[1] == L:
                a = float(r.activation)
                taps[L] = taps[L] + write(L, removed[3], removed[2], -a)
        v = _frozen_targets(lrm, [("logit", t) for t in logit_ids], taps)
        return float(v[0] - v[1])

    with torch.no_grad():
        base = _frozen_targets(lrm, [("logit", t) for t in logit_ids], {})
    base = float(base[0] - base[1])
    c = g.contributions(0, against=1)
    pred = g.predicted_ablation(0, against=1)
    gen = torch.Generator().manual_seed(0)
    picks = []
    for kind in ("feature", "error", "embedding"):
        idx = c.index[c["kind"] == kind]
        picks += [idx[int(i)] for i in torch.randperm(len(idx), generator=gen)[:3]]
    for i in picks:
        r = c.loc[i]
        with torch.no_grad():
            measured = contrast_after_removing(r) - base
        assert measured == pytest.approx(-float(r["contribution"]), rel=1e-3, abs=1e-4), (r["kind"], i)
        if r["kind"] == "feature":
            assert float(pred.loc[i, "predicted"]) == pytest.approx(-float(r["contribution"]), rel=1e-9, abs=1e-9)
    assert (c.loc[c["kind"] == "logit", "contribution"] == 0).all()
    assert m.attached_hook_count() == 0


def _at(n_pos, pos, vec):
    t = torch.zeros(1, n_pos, vec.shape[-1])
    t[0, pos] = vec
    return t


def test_logit_nodes_and_bad_input(tiny_llama):
    m = tiny_llama
    tc = _transcoders(m, [0, 1])
    g = attribution_graph(m, tc, TEXT, cumulative=0.5, max_logits=3)
    logits = g.nodes[g.nodes["kind"] == "logit"]
    probs = torch.softmax(m.forward(m.to_tokens(TEXT))[0, -1].detach().float(), -1)
    top = probs.sort(descending=True)
    n = int((top.values.cumsum(0) < 0.5).sum()) + 1
    assert logits["feature"].tolist() == top.indices[: min(n, 3)].tolist()
    assert 0 <= g.scores["replacement"] <= 1 and 0 <= g.scores["completeness"] <= 1
    # the BOS position's features are folded into its error nodes unless asked for; the sum is the same
    feats = g.nodes[g.nodes["kind"] == "feature"]
    assert (feats["pos"] > 0).all()
    with_bos = LocalReplacement(m, tc, TEXT, bos_features=True)
    assert (with_bos.acts[0][0] > 0).any()
    with torch.no_grad():
        torch.testing.assert_close(with_bos.run(1)[0], LocalReplacement(m, tc, TEXT).run(1)[0], rtol=1e-5, atol=1e-5)
    assert g.summary().startswith("attribution graph of")
    g.to_json()
    g.plot()
    with pytest.raises(ValueError, match="node_threshold=1.5"):
        attribution_graph(m, tc, TEXT, node_threshold=1.5)
    with pytest.raises(ValueError, match="target id"):
        attribution_graph(m, tc, TEXT, targets=[10 ** 9])
    sae = DictionarySet({"blocks.0.hook_resid_pre": _sae(m)})
    with pytest.raises(ValueError, match="transcoders"):
        LocalReplacement(m, sae, TEXT)


def _sae(m):
    return Dictionary(m.d_model, m.d_model, 32, k=4, site=Site.sae(m, "blocks.0.hook_resid_pre"),
                      model=model_info(m)).eval()


# ============================================================================================== influence, pruning
def _chain():
    """emb0 -> f0 -> f1 -> logit, emb1 -> f1, err -> logit, f2 (feeds nothing): kinds in the graph's order."""
    kinds = np.array(["feature", "feature", "feature", "error", "embedding", "embedding", "logit"])
    A = torch.zeros(7, 7)
    A[0, 4] = 2.0           # f0 <- emb0
    A[1, 0] = 1.0           # f1 <- f0
    A[1, 5] = -1.0          # f1 <- emb1
    A[2, 4] = 0.01          # f2 <- emb0
    A[6, 1] = 3.0           # logit <- f1
    A[6, 3] = 1.0           # logit <- err
    return A, kinds


def test_influence_is_the_sum_over_paths():
    A, kinds = _chain()
    An = normalise(A)
    w = torch.zeros(7)
    w[6] = 1.0
    explicit = w @ (torch.linalg.inv(torch.eye(7) - An) - torch.eye(7))   # every path, every length
    torch.testing.assert_close(influence(An, w), explicit)
    # by hand: logit's inputs are f1 (3/4) and err (1/4); f1's are f0 and emb1 (1/2 each); f0's is emb0
    inf = influence(An, w)
    assert inf[1] == pytest.approx(0.75) and inf[3] == pytest.approx(0.25) and inf[0] == pytest.approx(0.375)
    assert inf[4] == pytest.approx(0.375) and inf[5] == pytest.approx(0.375) and inf[2] == 0
    s = graph_scores(A, kinds, torch.tensor([1.0]))
    assert s["replacement"] == pytest.approx(0.75 / (0.75 + 0.25))
    # completeness: every node's non-error input share, weighted by influence + logit weight; only the logit
    # has error input (1/4)
    out = inf + w
    assert s["completeness"] == pytest.approx(float((out.sum() - 0.25 * out[6]) / out.sum()))
    # only some rows known (f1 and the logit): the influence of the graph whose other rows are zero
    part = An.clone()
    part[[0, 2]] = 0
    rows = torch.tensor([1, 6])
    torch.testing.assert_close(influence_through_rows(An[rows], rows, w[rows]), influence(part, w))
    known = influence_through_rows(An[rows], rows, w[rows])
    assert known[0] == pytest.approx(0.375) and known[5] == pytest.approx(0.375)    # through f1's row
    assert known[4] == 0                                     # emb0 feeds only f0 and f2, whose rows are not known
    cyc = torch.zeros(2, 2)
    cyc[0, 1] = cyc[1, 0] = 1.0
    with pytest.raises(ValueError, match="cycle"):
        influence(normalise(cyc), torch.tensor([1.0, 0.0]))


def test_predicted_ablation_follows_every_path_by_hand():
    import pandas as pd

    from interp.analyses.graphs import AttributionGraph

    A, kinds = _chain()
    acts = [2.0, 1.0, 0.01, 1.0, 1.0, 1.0, 3.0]          # f0 = 2 (from emb0), f1 = 1 (f0 + emb1... as given)
    nodes = pd.DataFrame({"kind": kinds, "layer": [0, 1, 1, 1, None, None, None], "pos": [0, 1, 1, 1, 0, 1, 1],
                          "feature": [0, 1, 2, None, None, None, 9], "token": ["a", "b", "b", "b", "a", "b", "x"],
                          "activation": acts, "influence": [0.375, 0.75, 0.0, 0.25, 0.375, 0.375, 0.0]})
    g = AttributionGraph(nodes, A, torch.tensor([1.0]), ["a", "b"], {})
    pred = g.predicted_ablation().set_index("feature")["predicted"]
    # f1 adds 3 to the logit (3 per unit, a = 1); f0 adds 1 to f1's pre-activation (1/2 per unit, a = 2), which
    # passes on at 3 per unit: ablating either removes 3; f2 feeds nothing
    assert pred[1] == pytest.approx(-3.0) and pred[0] == pytest.approx(-3.0) and pred[2] == 0
    assert list(g.predicted_ablation()["feature"])[:2] == [1, 0]                 # largest influence first
    with pytest.raises(ValueError, match="logit=1"):
        g.predicted_ablation(logit=1)


def test_predicted_ablation_against_another_logit_is_the_contrast_by_hand():
    import pandas as pd

    from interp.analyses.graphs import AttributionGraph

    # the chain with a second logit: f1 -> logit2 (2 per unit), f0 -> logit2 (-1 per unit, direct)
    A1, kinds1 = _chain()
    A = torch.zeros(8, 8)
    A[:7, :7] = A1
    A[7, 1] = 2.0
    A[7, 0] = -2.0          # f0 (a = 2) adds -2: -1 per unit
    kinds = np.array([*kinds1, "logit"])
    acts = [2.0, 1.0, 0.01, 1.0, 1.0, 1.0, 3.0, 0.0]
    nodes = pd.DataFrame({"kind": kinds, "layer": [0, 1, 1, 1, None, None, None, None],
                          "pos": [0, 1, 1, 1, 0, 1, 1, 1], "feature": [0, 1, 2, None, None, None, 9, 8],
                          "token": ["a", "b", "b", "b", "a", "b", "x", "y"], "activation": acts,
                          "influence": [0.375, 0.75, 0.0, 0.25, 0.375, 0.375, 0.0, 0.0]})
    g = AttributionGraph(nodes, A, torch.tensor([0.6, 0.4]), ["a", "b"], {})
    on = {k: g.predicted_ablation(k).set_index("feature")["predicted"] for k in (0, 1)}
    # logit 2 by hand: f1 removes 2; f0 removes its direct -2 and, through f1 (1/2 per unit, a = 2), 2: 0
    assert on[1][1] == pytest.approx(-2.0) and on[1][0] == pytest.approx(0.0) and on[1][2] == 0
    vs = g.predicted_ablation(0, against=1).set_index("feature")["predicted"]
    assert vs[1] == pytest.approx(-3.0 + 2.0) and vs[0] == pytest.approx(-3.0 - 0.0) and vs[2] == 0
    # supporting: the negative predictions only, most negative first (f2's 0 is not support)
    assert list(g.supporting(0, against=1)["feature"]) == [0, 1]
    assert list(g.supporting(0, against=1, k=1)["feature"]) == [0]
    assert list(g.supporting(1)["feature"]) == [1]
    with pytest.raises(ValueError, match="k=0"):
        g.supporting(0, k=0)
    for bad, match in (({"against": 0}, "against=0 is the logit itself"), ({"against": 2}, "against=2"),
                       ({"against": "1"}, "against='1'")):
        with pytest.raises(ValueError, match=match):
            g.predicted_ablation(0, **bad)


def test_pruning_keeps_the_influential_and_drops_the_dangling():
    A, kinds = _chain()
    node_mask, edge_mask, inf = prune(A, kinds, torch.tensor([1.0]), node_threshold=0.8, edge_threshold=0.98)
    assert not node_mask[2]                       # f2 feeds nothing: no influence
    assert node_mask[[4, 5, 6]].all()             # embeddings and logits always kept
    assert edge_mask[6, 1] and not edge_mask[2, 4]
    assert not (edge_mask & ~(node_mask[:, None] & node_mask[None, :])).any()
    assert threshold_value(torch.tensor([4.0, 3.0, 2.0, 1.0]), 0.7) == 3.0
    with pytest.raises(ValueError, match="edge_threshold=0"):
        prune(A, kinds, torch.tensor([1.0]), edge_threshold=0)


def test_circuit_tracer_export_names_every_kept_node_and_edge(tiny_llama):
    import json

    m = tiny_llama
    g = attribution_graph(m, _transcoders(m, range(m.n_layers)), TEXT, max_logits=2, node_threshold=0.5)
    doc = json.loads(json.dumps(g.to_circuit_tracer("t")))
    assert set(doc) == {"metadata", "qParams", "nodes", "links"}
    ids = [n["node_id"] for n in doc["nodes"]]
    assert len(ids) == len(set(ids))
    kinds = {n["feature_type"] for n in doc["nodes"]}
    assert {"embedding", "logit"} <= kinds
    assert sum(n["feature_type"] == "embedding" for n in doc["nodes"]) == len(g.tokens)
    assert sum(n["is_target_logit"] for n in doc["nodes"]) == 1
    known = set(ids)
    assert doc["links"] and all(x["source"] in known and x["target"] in known for x in doc["links"])
    assert len(doc["links"]) == int(g.edge_mask.sum())
    f = next(n for n in doc["nodes"] if n["feature_type"] == "cross layer transcoder")
    L, feat, pos = (int(v) for v in f["node_id"].split("_"))
    row = g.nodes[(g.nodes["kind"] == "feature") & (g.nodes["layer"] == L) & (g.nodes["feature"] == feat)
                  & (g.nodes["pos"] == pos)]
    assert len(row) == 1 and f["activation"] == pytest.approx(float(row["activation"].iloc[0]))
    assert doc["metadata"]["prompt_tokens"] == g.tokens


def test_graph_command_writes_json_view_and_circuit_tracer_file(embedded, tmp_path, capsys):
    import json

    from interp import cli

    m = embedded
    d = Dictionary(m.d_model, m.d_model, 64, k=4, skip=True, site=Site.transcoder(m, 3), model=model_info(m))
    d.init_(0, 1.0, 1.0)
    DictionarySet({3: d}).save(tmp_path / "tc")
    code = cli.main(["graph", "The Eiffel Tower is located in the city of", "--target", " Paris", "--dictionaries",
                     str(tmp_path / "tc"), "--html", str(tmp_path / "g.html"), "--circuit-tracer",
                     str(tmp_path / "ct.json"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    assert doc["meta"]["layers_with_transcoders"] == [3] and (tmp_path / "g.html").stat().st_size > 1000
    ct = json.loads((tmp_path / "ct.json").read_text())
    assert [n["clerp"] for n in ct["nodes"] if n["feature_type"] == "logit"][0].startswith('Output " Paris"')
    code = cli.main(["graph", "hello", "--dictionaries", str(tmp_path / "tc"), "--batch", "0", "--json"])
    assert code == 2 and "--batch" in json.loads(capsys.readouterr().out)["error"]
    # --against: both answers are logit nodes, and the listing is the graph's contrast, most negative first,
    # equal to the difference of the two logits' own predictions
    text = "The Eiffel Tower is located in the city of"
    code = cli.main(["graph", text, "--target", " Paris", "--against", " Rome", "--dictionaries",
                     str(tmp_path / "tc"), "--top", "5", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    g = attribution_graph(m, DictionarySet.load(tmp_path / "tc"), text, targets=[" Paris", " Rome"])
    own = [g.predicted_ablation(i).set_index(["layer", "pos", "feature"])["predicted"] for i in (0, 1)]
    got = [(r["layer"], r["pos"], r["feature"], r["predicted"]) for r in doc["contrast"]]
    assert len(got) == 5 and [x[3] for x in got] == sorted(x[3] for x in got) and all(x[3] < 0 for x in got)
    for L, p, f, v in got:
        assert v == pytest.approx(float(own[0][(L, p, f)] - own[1][(L, p, f)]), rel=1e-6, abs=1e-9)
    code = cli.main(["graph", text, "--against", " Rome", "--dictionaries", str(tmp_path / "tc"), "--json"])
    assert code == 2 and "exactly one --target" in json.loads(capsys.readouterr().out)["error"]
    code = cli.main(["graph", text, "--target", " Rome", "--against", " Rome", "--dictionaries", str(tmp_path / "tc"),
                     "--json"])
    assert code == 2 and "is the --target itself" in json.loads(capsys.readouterr().out)["error"]


def test_capped_rows_are_the_most_influential_and_equal_the_full_graph_rows_folded(tiny_llama):
    m = tiny_llama
    tc = _transcoders(m, range(m.n_layers))
    full = attribution_graph(m, tc, TEXT, max_logits=2, batch=8)
    capped = attribution_graph(m, tc, TEXT, max_logits=2, batch=8, max_feature_nodes=20)
    fn, cn = full.nodes, capped.nodes
    n_active = int((fn["kind"] == "feature").sum())
    assert full.meta["feature_rows"] == n_active == capped.meta["active_features"]
    assert capped.meta["feature_rows"] == 20 == int((cn["kind"] == "feature").sum())
    assert "20 with rows" in capped.summary()

    # every node of the capped graph, found in the full graph by its identity
    def key(r):
        return (r.kind, None if r.kind in ("embedding", "logit") else int(r.layer), int(r.pos),
                None if r.kind in ("error", "embedding") else int(r.feature))
    where = {key(r): i for i, r in enumerate(fn.itertuples())}
    to_full = [where[key(r)] for r in cn.itertuples()]
    error_of = {(int(r.layer), int(r.pos)): i for i, r in enumerate(cn.itertuples()) if r.kind == "error"}
    kept = set(to_full)
    # the expected capped rows, by hand: each full-graph source goes to its own node if kept, else to its error node
    for i, r in enumerate(cn.itertuples()):
        if r.kind not in ("feature", "logit"):
            assert not capped.adjacency[i].any()
            continue
        expect = torch.zeros(len(cn))
        for j, w in enumerate(full.adjacency[to_full[i]].tolist()):
            if j in kept:
                expect[to_full.index(j)] += w
            else:
                s_ = fn.iloc[j]
                assert s_["kind"] == "feature"
                expect[error_of[(int(s_["layer"]), int(s_["pos"]))]] += w
        torch.testing.assert_close(capped.adjacency[i], expect, rtol=1e-5, atol=1e-6)
    # the first batches: the features of largest influence through the logit rows alone
    logit = torch.tensor((fn["kind"] == "logit").to_numpy())
    feat = torch.tensor((fn["kind"] == "feature").to_numpy())
    only_logits = torch.zeros_like(full.adjacency)
    only_logits[logit] = full.adjacency[logit]
    w = torch.zeros(len(fn))
    w[logit] = full.logit_probs
    first = influence(normalise(only_logits), w)[feat].topk(20).indices
    assert set(first.tolist()) == {j for j in to_full if j < n_active}
    # an error node's activation: the norm of the error plus the folded features' writes
    lrm = LocalReplacement(m, tc, TEXT)
    L, p = 1, 3
    d = tc[L]
    a = lrm.acts[L][p].clone()
    for r in cn[(cn["kind"] == "feature") & (cn["layer"] == L) & (cn["pos"] == p)].itertuples():
        a[r.feature] = 0
    want = (lrm.error[L][p] + (a @ d.W_dec.detach().float()) * d.out_scale.detach().float()).norm()
    assert float(cn.loc[error_of[(L, p)], "activation"]) == pytest.approx(float(want), rel=1e-5)
    with pytest.raises(ValueError, match="max_feature_nodes"):
        attribution_graph(m, tc, TEXT, max_feature_nodes=0)
