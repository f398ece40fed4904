"""Interactive views without a browser: escaping, 8-bit data, self-containment, size limits, the numbers each view
embeds (against the analyses), the Result protocol (show / save_html / _repr_html_) and the CLI's --html.
tests/test_views_browser.py opens the same pages in Chromium."""

import json
import re
from dataclasses import replace

import numpy as np
import pytest
import torch

import interp
from interp.core.results import Result
from interp.core.views import View, ViewTooLarge, rounded, script_json, u8
from interp.core.views.page import ASSET_DIR
from interp.core.views.table import SCRIPT as TABLE_SCRIPT

PKG = ASSET_DIR.parent.parent  # interp/
SCRIPTS = sorted(PKG.rglob("*.js"))  # common.js and every view's script, wherever it sits

EVIL = "</script><script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\"><!--"


def page_data(view: View) -> dict:
    """The JSON a page embeds, read back the way the browser reads it (the text of its data block)."""
    m = re.search(r'<script type="application/json" id="interp-data">(.*?)</script>', view.page(), re.DOTALL)
    return json.loads(m.group(1))


def decode_u8(a: dict) -> np.ndarray:
    import base64

    codes = np.frombuffer(base64.b64decode(a["b64"]), dtype=np.uint8)
    return a["lo"] + codes * (a["hi"] - a["lo"]) / 255


# ------------------------------------------------------------------------------------------------ data and pages
def test_script_json_cannot_end_its_block_and_round_trips():
    data = {"t": [EVIL, "a & b", "x\u2028y\u2029z", "<!-- -->", "\U0001F600"], "n": [1.5, float("nan"), None]}
    text = script_json(data)
    assert not re.search(r"[<>&\u2028\u2029]", text)
    back = json.loads(text)
    assert back["t"] == data["t"] and back["n"] == [1.5, None, None]
    assert json.loads(script_json({"s": "a\ud800b"}))["s"] == "a\ud800b"  # a lone surrogate survives as an escape


def test_u8_codes_are_within_half_a_step():
    x = torch.rand(1000, dtype=torch.float64) * 4 - 1
    a = u8(x, -1.0, 3.0)
    assert a["n"] == 1000 and len(a["b64"]) <= 4 * 1000 // 3 + 4
    assert np.abs(decode_u8(a) - x.numpy()).max() <= 4 / 510 + 1e-12
    with pytest.raises(ValueError, match="empty"):
        u8(x, 1.0, 1.0)
    assert rounded(torch.tensor([[1.234567, float("nan")]]), 3) == [[1.23, None]]


def test_every_script_is_our_own_and_fetches_nothing():
    """Plain JavaScript written here: no network API, no dynamic code, no markup from data."""
    assert len(SCRIPTS) >= 8
    for path in SCRIPTS:
        # the SVG namespace is a name, not an address: nothing is requested from it
        js = path.read_text(encoding="utf-8").replace('"http://www.w3.org/2000/svg"', "SVG")
        for banned in ("fetch(", "XMLHttpRequest", "WebSocket", "EventSource", "sendBeacon", "import(", "eval(",
                       "new Function", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "http:",
                       "https:", "</script"):
            assert banned not in js, f"{path.relative_to(PKG)} uses {banned}"
    css = (ASSET_DIR / "views.css").read_text(encoding="utf-8")
    assert "url(" not in css and "@import" not in css and "@font-face" not in css


def test_each_view_script_sits_beside_its_module_and_the_page_builder_names_none():
    """A view kind's script is a ``<module>.js`` beside the ``<module>.py`` that builds the view with it
    (``SCRIPT = Path(__file__).with_name(...)``); core/views/page.py knows no kind and no script by name."""
    kinds = {}
    for js in SCRIPTS:
        if js == ASSET_DIR / "common.js":
            continue
        builder = js.with_suffix(".py")
        assert builder.is_file(), f"{js.relative_to(PKG)} has no module of the same name beside it"
        src = builder.read_text(encoding="utf-8")
        assert f'SCRIPT = Path(__file__).with_name("{js.name}")' in src, builder.relative_to(PKG)
        registered = re.findall(r"\bV\.renderers\.(\w+)\s*=", js.read_text(encoding="utf-8"))
        assert registered, f"{js.relative_to(PKG)} registers no renderer"
        for kind in registered:
            assert kind not in kinds, f"view kind {kind!r} is registered twice"
            built = re.search(rf'View\("{kind}", .*?script=SCRIPT\)', src, re.DOTALL)
            assert built, f"{builder.relative_to(PKG)} builds no {kind!r} view with its SCRIPT"
            kinds[kind] = js
    assert {"attention", "lens", "dla", "neurons", "activations", "grid", "table", "edit"} <= set(kinds)
    page = (ASSET_DIR / "page.py").read_text(encoding="utf-8")
    for kind, js in kinds.items():
        assert not re.search(rf"\b{kind}\b", page) and js.name not in page, f"page.py names {kind!r}"
    shared = {p.name for p in ASSET_DIR.iterdir() if p.suffix in (".js", ".css")}
    assert shared == {"common.js", "views.css", "grid.js", "table.js"}  # a new analysis adds nothing to core


def test_a_view_checks_its_script(tmp_path):
    data = {"title": "t", "summary": "", "columns": [], "rows": [], "n_rows": 0}
    assert "renderers.table" in View("table", "t", data, script=TABLE_SCRIPT).page()
    with pytest.raises(FileNotFoundError, match="no_such.js"):
        View("table", "t", data, script=tmp_path / "no_such.js")
    with pytest.raises(ValueError, match="registers no renderer for view kind 'lens'"):
        View("lens", "t", data, script=TABLE_SCRIPT)
    with pytest.raises(ValueError, match="lower-case"):
        View("Table<x>", "t", data, script=TABLE_SCRIPT)
    mine = tmp_path / "mine_view.js"  # a view of one's own, outside the package, needs only its script
    mine.write_text('(function () { window.InterpViews.renderers.mine = function (root, d) {}; })();\n')
    assert "renderers.mine" in View("mine", "t", {"title": "t"}, script=mine).page()


def test_a_page_is_self_contained(tiny_llama):
    page = interp.attention(tiny_llama, "The cat sat on the mat").view().page().replace("http://www.w3.org/2000/svg", "")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"""\b(src|href)\s*=\s*["'](?!data:)""", page)  # only the data: favicon links anything
    assert "http://" not in page and "https://" not in page


def test_save_html_errors_name_the_folder(tiny_llama, tmp_path):
    res = interp.attention(tiny_llama, "The cat")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        res.save_html(tmp_path / "nowhere" / "a.html")
    with pytest.raises(IsADirectoryError):
        res.save_html(tmp_path)
    path = res.save_html(tmp_path / "a.html")
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_a_2000_token_attention_view_is_refused_with_the_narrowing_options():
    from interp.analyses.attention import AttentionResult

    n = 2000  # a stride-0 tensor: 30 x 9 x 2000 x 2000 "patterns" that take no memory
    res = AttentionResult(patterns=torch.full((1, 1, 1, 1), 1.0 / n).expand(30, 9, n, n), str_tokens=["a"] * n,
                          layers=list(range(30)), kv_groups=[h // 3 for h in range(9)], n_kv_heads=3)
    with pytest.raises(ViewTooLarge, match=r"layers=.*heads=.*positions=") as err:
        res.view()
    assert "MB" in str(err.value)
    small = res.view(layers=[3], heads=[0, 1], positions=range(100, 160))
    assert small.nbytes < 100_000
    n = 1200  # as a notebook cell's value: the table, and the reason there is no view
    res = replace(res, patterns=torch.full((1, 1, 1, 1), 1.0 / n).expand(3, 9, n, n), str_tokens=["a"] * n,
                  layers=[0, 1, 2])
    html = res._repr_html_()
    assert "<iframe" not in html and "limit of a view" in html and "positions=" in html


# ------------------------------------------------------------------------------------------------ the numbers
def test_attention_view_holds_the_patterns_within_the_quantisation_step(tiny_llama):
    res = interp.attention(tiny_llama, "The cat sat on the mat. The cat")
    d = page_data(res.view())
    L, H, n = res.patterns.shape[:3]
    assert d["layers"] == res.layers and d["heads"] == list(range(H)) and d["kv_groups"] == res.kv_groups
    vals = decode_u8(d["patterns"]).reshape(L, H, n * (n + 1) // 2)
    iq, ik = np.tril_indices(n)
    assert np.abs(vals - res.patterns.numpy()[:, :, iq, ik]).max() <= 0.5 / 255 + 1e-9
    # narrowed: positions 3..9 of layer 1, heads 2-3 only
    d = page_data(res.view(layers=1, heads=[2, 3], positions=range(3, 10)))
    sub = res.patterns[1, 2:4][:, 3:10, 3:10].numpy()
    iq, ik = np.tril_indices(7)
    assert np.abs(decode_u8(d["patterns"]).reshape(2, -1) - sub[:, iq, ik]).max() <= 0.5 / 255 + 1e-9
    assert d["positions"] == list(range(3, 10)) and d["tokens"] == res.str_tokens[3:10]
    with pytest.raises(ValueError, match="heads"):
        res.view(heads=[9])


def test_lens_view_holds_the_table_and_the_curves(tiny_llama):
    res = interp.logit_lens(tiny_llama, "The cat sat on", targets=["a", "e"], k=3)
    d = page_data(res.view())
    k = res.top_ids.shape[2]
    assert d["top_ids"] == res.top_ids.reshape(-1).tolist() and d["k"] == k
    np.testing.assert_allclose(d["top_probs"], res.top_probs.reshape(-1).numpy(), rtol=5e-4)
    assert all(d["vocab"][str(i)] == res.token(i) for i in d["top_ids"])
    for j, t in enumerate(d["targets"]):
        np.testing.assert_allclose(t["prob"], res.target_probs[:, :, j].reshape(-1).numpy(), rtol=5e-4)
        assert t["rank"] == res.target_ranks[:, :, j].reshape(-1).tolist()
    assert d["tuned"] is False and d["title"].startswith("logit lens")
    tuned = replace(res)
    tuned.tuned = True  # the tuned lens's results carry this flag; the same view titles itself so
    assert page_data(tuned.view())["title"].startswith("tuned lens")


def test_dla_view_holds_the_head_matrix_and_the_layer_parts(tiny_llama):
    res = interp.direct_logit_attribution(tiny_llama, "The cat sat on the", "m")
    d = page_data(res.view())
    np.testing.assert_allclose(d["heads"], res.head_matrix().numpy(), rtol=1e-5, atol=1e-9)
    f = res.to_frame("layer")
    assert [p["label"] for p in d["parts"]] == list(f.index) and d["parts"][0]["kind"] == "embed"
    np.testing.assert_allclose([p["value"] for p in d["parts"]], f["contribution"], rtol=1e-5, atol=1e-9)
    assert d["embedding"]["contribution"] == pytest.approx(res.embedding_share()["contribution"])


def test_trace_and_patching_views_hold_their_grids(tiny_llama):
    from interp.analyses.patching import logit_diff

    tr = interp.causal_trace(tiny_llama, "The Tower is in Rome", "Tower", samples=2, window=2)
    d = page_data(tr.view())
    assert [p["id"] for p in d["panels"]] == ["trace-resid", "trace-mlp", "trace-attn"]
    for p, kind in zip(d["panels"], ("resid", "mlp", "attn")):
        want = tr.restored[kind].T.numpy()
        got = np.array([[np.nan if v is None else v for v in row] for row in p["values"]])
        np.testing.assert_allclose(got, want, rtol=1e-4, equal_nan=True)
        assert p["vmin"] == pytest.approx(tr.corrupted_prob)  # the static plot's colour floor
    assert d["panels"][0]["rows"][tr.subject_range[0]].endswith("*")
    pr = interp.activation_patching(tiny_llama, "Mary and John went", "Mary and Kate went", logit_diff(" ", "a"))
    p = page_data(pr.view())["panels"][0]
    np.testing.assert_allclose(np.array(p["values"], dtype=float), pr.values.numpy(), rtol=1e-4, atol=1e-7)
    lim = float(np.nanmax(np.abs(pr.values.numpy())))
    assert (p["vmin"], p["vmax"], p["cmap"]) == (pytest.approx(-lim), pytest.approx(lim), "RdBu_r")


def test_neuron_view_holds_activations_in_context(tiny_llama):
    nv = interp.neurons(tiny_llama, 1)
    docs = ["The cat sat on the mat.", "Paris is the capital of France.", "Numbers 1 2 3 4 5"]
    scan = nv.scan(docs, k=2, progress=False)
    d = page_data(scan.view(n=3))
    assert len(d["neurons"]) == 3 and d["neurons"][0]["promoted"]
    for item in d["neurons"]:
        for c in item["contexts"]:
            acts = nv.activations(torch.tensor([scan._ids(c["doc"])]), [item["neuron"]]).of(item["neuron"])
            np.testing.assert_allclose(c["acts"], acts[c["positions"]].numpy(), rtol=2e-3, atol=1e-6)
            assert c["acts"][c["positions"].index(c["pos"])] == pytest.approx(c["value"], rel=2e-3, abs=1e-6)


def test_edit_comparison_measures_before_and_after(tiny_llama):
    from interp.editing.eval.measure import fact_probs
    from interp.editing.ft import ft_edit

    e = ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, steps=2, lr=5e-2, norm_constraint=5e-2)
    cmp = interp.rome.compare(tiny_llama, e, paraphrases=["The Tower is in"], neighbours=["Bridge is in"],
                              target_true=" Paris", n_tokens=2)
    assert e.applied  # left as it was
    fact = type("F", (), {"text": "Tower is in", "paraphrase_prompts": ["The Tower is in"],
                          "neighborhood_prompts": ["Bridge is in"], "target_new": " Rome", "target_true": " Paris"})
    after = fact_probs(tiny_llama, fact)
    e.revert()
    before = fact_probs(tiny_llama, fact)
    for g in ("rewrite", "paraphrase", "neighborhood"):
        np.testing.assert_allclose(cmp.probs["after"][g], after[g].numpy(), rtol=1e-6)
        np.testing.assert_allclose(cmp.probs["before"][g], before[g].numpy(), rtol=1e-6)
    d = page_data(cmp.view())
    assert d["groups"]["paraphrase"][0]["after"] == pytest.approx(cmp.probs["after"]["paraphrase"][0], rel=1e-4)
    assert len(cmp.to_frame()) == 3 and "rewrite" in cmp.summary()


# ------------------------------------------------------------------------------------------------ the protocol
def test_every_result_has_a_view_show_and_save_html():
    import importlib
    import pkgutil

    for m in pkgutil.walk_packages(interp.__path__, "interp."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)

    def subclasses(c):
        for s in c.__subclasses__():
            yield s
            yield from subclasses(s)

    own = {c.__name__ for c in subclasses(Result) if "view" in vars(c)}
    assert {"AttentionResult", "LogitLensResult", "DLAResult", "NeuronScan", "NeuronActivations", "TraceResult",
            "PatchingResult", "InductionScan", "EditComparison"} <= own
    for c in subclasses(Result):
        assert callable(c.show) and callable(c.save_html) and callable(c.view)


def test_repr_html_is_the_view_or_the_table(tiny_llama):
    res = interp.attention(tiny_llama, "The cat")
    html = res._repr_html_()
    assert html.startswith("<iframe") and "srcdoc=" in html and "<script" not in html  # all of it escaped
    vp = interp.neurons(tiny_llama, 0).vocab(3, k=4)  # no view of its own: summary and table
    assert vp._repr_html_().startswith("<p><b>")
    table = page_data(vp.view())
    assert table["n_rows"] == 8 and table["columns"][:3] == ["direction", "rank", "token"]


def test_show_outside_a_notebook_writes_a_file(tiny_llama, capsys):
    path = interp.attention(tiny_llama, "The cat").show(layers=[0])
    assert path.is_file() and "view written to" in capsys.readouterr().out
    path.unlink()


# ------------------------------------------------------------------------------------------------ command line
def test_every_analysis_command_takes_html():
    from interp import cli

    for name, sub in cli.commands():
        if name in ("info", "run", "stats", "train-lens"):  # facts, or a cache being built: no result to view
            continue
        assert any("--html" in a.option_strings for a in sub._actions), name


def test_attention_html_without_layer_writes_the_whole_model(tiny_llama, tmp_path):
    from interp import cli
    from interp.cli.attention import cli_attention

    args = cli.build_parser().parse_args(["attention", "The cat sat", "--html", str(tmp_path / "a.html")])
    out = cli_attention(args, model=tiny_llama)
    d = _read(tmp_path / "a.html").data
    assert out["html"] == str(tmp_path / "a.html") and d["layers"] == list(range(tiny_llama.n_layers))
    assert len(d["heads"]) == tiny_llama.n_heads and "saved to" in out["_text"]
    args = cli.build_parser().parse_args(["attention", "The cat sat", "--layer", "1", "--head", "0", "--html",
                                          str(tmp_path / "b.html")])
    out = cli_attention(args, model=tiny_llama)
    assert out["layer"] == 1 and _read(tmp_path / "b.html").data["layers"] == [1]


def _read(path) -> View:
    m = re.search(r'<script type="application/json" id="interp-data">(.*?)</script>',
                  path.read_text(encoding="utf-8"), re.DOTALL)
    return View("table", "", json.loads(m.group(1)), script=TABLE_SCRIPT)


def test_html_flag_errors_come_before_the_model_loads(capsys, monkeypatch, tmp_path):
    from interp import cli
    from interp.core import loading

    monkeypatch.setattr(loading, "load", lambda *a, **k: pytest.fail("the model was loaded before the flag check"))
    missing = str(tmp_path / "no_such_folder" / "v.html")
    for argv in (["lens", "hello"], ["dla", "hello", "--token", " x"], ["attention", "hello"],
                 ["trace", "hello", "--subject", "hello"], ["neurons", "--layer", "0"]):
        assert cli.main([*argv, "--html", missing, "--json"]) == 2
        doc = json.loads(capsys.readouterr().out)
        assert "no_such_folder" in doc["error"], argv
    assert cli.main(["attention", "hello", "--json"]) == 2
    assert "--html" in json.loads(capsys.readouterr().out)["error"]


@pytest.mark.parametrize("argv", [["lens", "The cat sat", "--target", "a"], ["dla", "The cat sat", "--token", "a"],
                                  ["patch", "--clean", "Mary and John", "--corrupted", "Mary and Kate",
                                   "--answer", "a", "--wrong", "e", "--over", "resid_pre"],
                                  ["neurons", "--layer", "1", "--docs", "3", "--k", "2", "--top", "2"]])
def test_analysis_commands_write_their_view(argv, tiny_llama, tmp_path):
    from interp import cli

    path = tmp_path / "view.html"
    args = cli.build_parser().parse_args([*argv, "--html", str(path)])
    out = args.func(args, model=tiny_llama)
    assert out["html"] == str(path) and "interactive view saved to" in out["_text"]
    kind = re.search(r'data-kind="(\w+)"', path.read_text(encoding="utf-8")).group(1)
    assert kind == {"lens": "lens", "dla": "dla", "patch": "grid", "neurons": "neurons"}[argv[0]]
