"""The interactive views in a real browser (headless Chromium from Debian, driven by Playwright): each page makes no
request but for its own file, logs no console error, a hover or click shows the analysis's numbers, and a
screenshot is not blank; a prompt made of markup runs nothing in any view; and a view renders inside a notebook
executed by nbclient and exported to HTML by nbconvert.

Without Chromium (``apt-get install -y chromium``) or Playwright's Python package (the ``dev`` extra) these tests
skip and say which is missing; ``make test`` installs Chromium when it runs as root."""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import interp

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# The flags that keep Chromium from reaching out on its own (updates, sync, field trials) on a closed network.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
EVIL = "</script><script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"
STEP = 0.5 / 255  # half a step of the 8-bit attention codes


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser tests need Playwright's Python package: pip install playwright (in the dev extra)")
    if CHROMIUM is None:
        pytest.skip("browser tests need Chromium: apt-get install -y chromium (make test does this as root)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


class Opened:
    """A page with every request and console error it produced."""

    def __init__(self, browser, path: Path):
        self.url = path.resolve().as_uri()
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.set_default_timeout(5_000)  # a missing element fails fast
        self.requests, self.errors = [], []
        self.context.on("request", lambda r: self.requests.append(r.url))
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(self.url)
        self.page.wait_for_selector("#interp-root[data-ready]", timeout=10_000)

    def check(self, shot: Path | None = None):
        """Drawn, quiet and self-contained; a screenshot (if asked) with some picture in it."""
        assert self.page.get_attribute("#interp-root", "data-ready") == "1", self.page.inner_text("body")[:500]
        assert self.requests == [self.url], f"requests besides the file itself: {self.requests}"
        assert not self.errors, self.errors
        if shot is not None:
            from PIL import Image

            self.page.screenshot(path=str(shot), full_page=True)
            colors = Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 16)
            assert colors is None or len(colors) > 20, f"{shot} looks blank ({len(colors)} colours)"

    def values(self, selector: str) -> list[float]:
        return [float("nan") if v == "nan" else float(v)
                for v in self.page.eval_on_selector_all(selector, "els => els.map(e => e.getAttribute('data-value'))")]

    def close(self):
        self.context.close()


@pytest.fixture
def opened(browser):
    pages = []

    def open_(path):
        pages.append(Opened(browser, path))
        return pages[-1]

    yield open_
    for p in pages:
        p.close()


def number_after(label: str, text: str) -> float:
    m = re.search(re.escape(label) + r"\s*([-+]?[0-9.]+(?:e[-+]?\d+)?)", text)
    assert m, f"no number after {label!r} in {text!r}"
    return float(m.group(1))


# ------------------------------------------------------------------------------------------------ each view
def test_attention_view_hover_shows_the_head_row_and_column(tiny_llama, opened, tmp_path):
    res = interp.attention(tiny_llama, "The cat sat on the mat. The cat")
    v = opened(res.save_html(tmp_path / "attention.html"))
    L, H, n = res.patterns.shape[:3]
    assert v.page.locator("#attn-heads canvas.thumb").count() == L * H
    assert v.page.locator("#attn-heads .group").count() == tiny_llama.n_kv_heads  # GQA groups marked
    v.page.click('#attn-heads canvas[data-layer="1"][data-head="2"]')
    assert (v.page.get_attribute("#attn-title", "data-layer"), v.page.get_attribute("#attn-title", "data-head")) \
        == ("1", "2")
    p = res.pattern(1, 2).numpy()
    for i in (0, 7, n - 1):
        v.page.hover(f'#attn-tokens .tok[data-index="{i}"]')
        row, col = np.array(v.values("#attn-to .tok")), np.array(v.values("#attn-from .tok"))
        assert np.abs(row[: i + 1] - p[i, : i + 1]).max() <= STEP + 1e-9 and np.isnan(row[i + 1:]).all()
        assert np.abs(col[i:] - p[i:, i]).max() <= STEP + 1e-9 and np.isnan(col[:i]).all()
    v.check(tmp_path / "attention.png")


def test_lens_view_hover_shows_top_k_and_click_the_target_curve(tiny_llama, opened, tmp_path):
    res = interp.logit_lens(tiny_llama, "The cat sat on", targets=["a", "e"], k=4)
    v = opened(res.save_html(tmp_path / "lens.html"))
    for r, c in ((0, 0), (1, 3), (2, 4)):
        v.page.hover(f'#lens-table td.c[data-row="{r}"][data-col="{c}"]')
        ids = v.page.eval_on_selector_all("#lens-topk tr[data-rank]", "els => els.map(e => +e.dataset.tokenId)")
        assert ids == res.top_ids[r, c].tolist()
        np.testing.assert_allclose(v.values("#lens-topk td.prob"), res.top_probs[r, c].numpy(), rtol=5e-4)
        np.testing.assert_allclose(v.values("#lens-targets td.prob"), res.target_probs[r, c].numpy(), rtol=5e-4)
        assert v.values("#lens-targets td.rank") == res.target_ranks[r, c].tolist()
    v.page.click('#lens-table th.pos[data-col="2"]')
    assert v.page.get_attribute("#lens-curve-title", "data-col") == "2"
    np.testing.assert_allclose(v.values('#lens-prob-chart circle[data-series="1"]'),
                               res.target_probs[:, 2, 1].numpy(), rtol=5e-4)
    v.check(tmp_path / "lens.png")


def test_dla_view_hover_shows_head_and_layer_contributions(tiny_llama, opened, tmp_path):
    res = interp.direct_logit_attribution(tiny_llama, "The cat sat on the", "m")
    v = opened(res.save_html(tmp_path / "dla.html"))
    m = res.head_matrix()
    for layer, head in ((0, 0), (1, 3)):
        v.page.hover(f'#dla-heads .cell[data-row="{layer}"][data-col="{head}"]')
        text = v.page.inner_text("#dla-readout")
        assert f"L{layer}H{head}" in text
        assert number_after("direct contribution", text) == pytest.approx(float(m[layer, head]), rel=1e-3, abs=1e-6)
    f = res.to_frame("layer")
    v.page.hover('#dla-bars rect[data-index="0"]')
    text = v.page.inner_text("#dla-bar-readout")
    assert "embed" in text and number_after("direct contribution", text) == pytest.approx(
        float(f["contribution"].iloc[0]), rel=1e-3, abs=1e-6)
    assert "embedding direct path" in v.page.text_content("#dla-bars")  # the mark over the embed bar
    v.check(tmp_path / "dla.png")


def test_neuron_view_hover_shows_the_activation(tiny_llama, opened, tmp_path):
    docs = ["The cat sat on the mat.", "Paris is the capital of France.", "Numbers 1 2 3 4 5"]
    nv = interp.neurons(tiny_llama, 1)
    scan = nv.scan(docs, k=2, progress=False)
    v = opened(scan.save_html(tmp_path / "neurons.html", n=3))
    top = scan.top_neurons(3)
    assert v.page.locator(".card").count() == 3
    st = scan.state
    for n in top["neuron"].tolist()[:2]:
        i = st.neurons.tolist().index(n)
        doc, pos = int(st.doc[i, 0]), int(st.pos[i, 0])
        v.page.hover(f'#neuron-{n} .ctx .tok[data-pos="{pos}"] >> nth=0')
        text = v.page.inner_text(f"#neuron-{n}-readout")
        assert f"doc {doc} token {pos}" in text
        assert number_after("activation", text) == pytest.approx(float(st.values[i, 0]), rel=2e-3, abs=1e-5)
        # a neighbouring token's value is the model's activation there, not the scan's
        ids = scan._ids(doc)
        acts = nv.activations(torch.tensor([ids]), [n]).of(n)
        other = pos - 1 if pos > 1 else pos + 1  # contexts leave BOS out
        v.page.hover(f'#neuron-{n} .ctx .tok[data-pos="{other}"] >> nth=0')
        assert number_after("activation", v.page.inner_text(f"#neuron-{n}-readout")) == pytest.approx(
            float(acts[other]), rel=2e-3, abs=1e-5)
    v.check(tmp_path / "neurons.png")


def test_feature_views_hover_and_click_show_the_numbers(tiny_llama, opened, tmp_path):
    from dataclasses import replace

    from interp.analyses.features import Dictionary, Site
    from interp.analyses.features.dictionary import model_info

    m = tiny_llama
    d = Dictionary(64, 64, 96, k=6, skip=True, site=Site.transcoder(m, 0), model=model_info(m))
    d.init_(3, 1.5, 0.7)
    docs = ["The cat sat on the mat.", "Paris is the capital of France.", "Numbers 1 2 3 4 5"]
    st = interp.features.scan(m, d, 0, docs=docs, n_tokens=10_000, k=3)
    f = int(st.fires.argmax())
    card = interp.features.card(m, d, 0, f, docs=docs, scan_state=st)
    v = opened(card.save_html(tmp_path / "card.html"))
    top = card.strips[0]
    v.page.hover(f'#feature-card .ctx .tok[data-pos="{top["pos"]}"] >> nth=0')
    text = v.page.inner_text("#feature-readout")
    assert f"doc {top['doc']} token {top['pos']}" in text
    # the value under the scan's top token is the scan's own number, computed again from a fresh forward
    assert number_after("activation", text) == pytest.approx(float(st.topk.values[f, 0]), rel=2e-3, abs=1e-5)
    v.page.hover('#feature-hist rect[data-index="0"]')
    assert "tokens" in v.page.inner_text("#hist-readout")
    v.check(tmp_path / "card.png")

    text = f"The Tower {EVIL}"
    fa = interp.features.encode(m, d, text, top=3)
    v = opened(fa.save_html(tmp_path / "tokens.html"))
    v.page.click('#feature-tokens .tok[data-index="2"]')
    row = v.page.inner_text('#feature-list tr[data-dictionary="L0"]')
    best = fa.active(0, 2)[0]
    assert f"{best[0]} (" in row
    v.page.hover('#feature-tokens .tok[data-index="2"]')
    assert number_after("activation", v.page.inner_text("#feature-tokens-readout")) == pytest.approx(best[1], rel=2e-3)
    v.check(tmp_path / "tokens.png")
    evil = opened(replace(fa, tokens=[EVIL] * len(fa.tokens)).save_html(tmp_path / "evil_tokens.html"))
    evil.check()
    assert evil.page.evaluate("window.__pwned") is None and evil.page.locator("img").count() == 0



def test_graph_view_hover_an_edge_and_click_a_feature_for_its_card(tiny_llama, opened, tmp_path):
    from interp.analyses.features import Dictionary, DictionarySet, Site
    from interp.analyses.features.dictionary import model_info

    m = tiny_llama
    tc = {}
    for L in range(m.n_layers):
        d = Dictionary(64, 64, 48, k=4, skip=True, site=Site.transcoder(m, L), model=model_info(m))
        d.init_(L, 1.5, 0.7)
        tc[L] = d
    tc = DictionarySet(tc)
    g = interp.attribution_graph(m, tc, f"The Tower {EVIL}", max_logits=2, node_threshold=0.6)
    kept = [int(i) for i in g.nodes.index[g.nodes["kept"]]]
    edges = g.edges()
    e = edges.iloc[int(edges["weight"].abs().argmax())]
    feat = g.nodes.loc[int(e["target"])] if g.nodes.loc[int(e["target"]), "kind"] == "feature" else \
        g.nodes.loc[[i for i in kept if g.nodes.loc[i, "kind"] == "feature"][0]]
    card = interp.features.card(m, tc, int(feat["layer"]), int(feat["feature"]),
                                docs=["The cat sat on the mat.", "Paris is the capital of France."], n_tokens=200, k=3)
    v = opened(g.view(cards={(int(feat["layer"]), int(feat["feature"])): card}).save(tmp_path / "graph.html"))
    assert v.page.locator("#graph-svg [data-node]").count() == len(kept)
    k = next(i for i, (t, s, w) in enumerate(edges.itertuples(index=False))
             if t == e["target"] and s == e["source"])
    v.page.hover(f'#graph-svg line[data-edge="{k}"]', force=True)
    assert number_after("weight", v.page.inner_text("#graph-readout")) == pytest.approx(float(e["weight"]), rel=2e-3)
    node = kept.index(int(feat.name))
    v.page.click(f'#graph-svg [data-node="{node}"]', force=True)
    assert f"feature {int(feat['feature'])} at layer {int(feat['layer'])}" in v.page.inner_text("#graph-panel")
    assert v.page.locator("#graph-card .ctx").count() >= 1
    v.check(tmp_path / "graph.png")
    assert v.page.evaluate("window.__pwned") is None and v.page.locator("img").count() == 0

def test_trace_and_patching_views_hover_values(tiny_llama, opened, tmp_path):
    from interp.analyses.patching import logit_diff

    tr = interp.causal_trace(tiny_llama, "The Tower is in Rome", "Tower", samples=2, window=2)
    v = opened(tr.save_html(tmp_path / "trace.html"))
    for layer, tok in ((0, 5), (1, 6)):
        v.page.hover(f'#trace-mlp .cell[data-row="{tok}"][data-col="{layer}"]')
        text = v.page.inner_text("#trace-mlp-readout")
        assert number_after("indirect effect", text) == pytest.approx(float(tr.effects["mlp"][layer, tok]),
                                                                      rel=1e-3, abs=1e-7)
    v.check(tmp_path / "trace.png")
    pr = interp.activation_patching(tiny_llama, "Mary and John went", "Mary and Kate went", logit_diff(" ", "a"))
    v = opened(pr.save_html(tmp_path / "patching.html"))
    v.page.hover('#patching .cell[data-row="1"][data-col="10"]')
    text = v.page.inner_text("#patching-readout")
    assert number_after("clean)", text) == pytest.approx(float(pr.values[1, 10]), rel=1e-3, abs=1e-6)
    v.check(tmp_path / "patching.png")


def test_edit_view_shows_before_and_after(tiny_llama, opened, tmp_path):
    from interp.editing.ft import ft_edit

    e = ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, steps=2, lr=5e-2, norm_constraint=5e-2)
    try:
        cmp = interp.rome.compare(tiny_llama, e, paraphrases=["The Tower is in"], neighbours=["Bridge is in"],
                                  target_true=" Paris", n_tokens=3)
    finally:
        e.revert()
    v = opened(cmp.save_html(tmp_path / "edit.html"))
    for g in ("rewrite", "paraphrase", "neighborhood"):
        for cls, when, j in (("p-new-before", "before", 0), ("p-new-after", "after", 0),
                             ("p-true-before", "before", 1), ("p-true-after", "after", 1)):
            np.testing.assert_allclose(v.values(f"#edit-{g} td.{cls}"), [p[j] for p in cmp.probs[when][g]],
                                       rtol=1e-4)
    assert v.page.eval_on_selector_all("#edit-completions td.after", "els => els.map(e => e.textContent)") \
        == [c["after"] for c in cmp.completions]
    v.check(tmp_path / "edit.png")


def test_fallback_table_and_grid_views(tiny_llama, opened, tmp_path):
    vp = interp.neurons(tiny_llama, 0).vocab(3, k=4)
    v = opened(vp.save_html(tmp_path / "table.html"))
    assert v.page.locator("#table tbody tr").count() == 8
    v.page.click("#table th >> nth=4")  # sort by the value column
    vals = v.values("#table tbody td:nth-child(5)")
    assert vals == sorted(vals)
    v.check(tmp_path / "table.png")
    scan = interp.induction_heads(tiny_llama, seq_len=10, batch=2)
    v = opened(scan.save_html(tmp_path / "induction.html"))
    v.page.hover('#induction-induction_score .cell[data-row="1"][data-col="2"]')
    text = v.page.inner_text("#induction-induction_score-readout")
    assert number_after("induction_score", text) == pytest.approx(float(scan.scores["induction_score"][1, 2]),
                                                                  rel=1e-3, abs=1e-6)
    v.check(tmp_path / "induction.png")


# ------------------------------------------------------------------------------------------------ markup as data
def test_a_prompt_of_markup_runs_nothing_in_any_view(tiny_llama, opened, tmp_path):
    """The prompt goes through every view (token by token, and whole: in summaries, titles, targets, labels);
    it must show as text, run no script and send no request."""
    from dataclasses import replace

    from interp.analyses.patching import logit_diff
    from interp.core.corpus import Doc
    from interp.editing.compare import EditComparison

    text = f"The Tower {EVIL}"
    att = interp.attention(tiny_llama, text)
    acts = interp.neurons(tiny_llama, 0).activations(text, [0, 1])
    views = {
        "attention": replace(att, str_tokens=[EVIL] * len(att.str_tokens), source=EVIL),
        "lens": interp.logit_lens(tiny_llama, text, targets=[EVIL], k=2),
        "dla": interp.direct_logit_attribution(tiny_llama, text, EVIL),
        "trace": interp.causal_trace(tiny_llama, text, "Tower", samples=1, window=1, kinds=("mlp",)),
        "patching": interp.activation_patching(tiny_llama, text, "The Bower " + EVIL, logit_diff(" ", "a"),
                                               over="resid_pre", layers=[0]),
        "neurons": interp.neurons(tiny_llama, 0).scan([Doc(EVIL, text), Doc(EVIL, EVIL)], k=1, neurons=[0, 1],
                                                      progress=False),
        "activations": replace(acts, str_tokens=[EVIL] * len(acts.str_tokens)),
        "edit": EditComparison(editor="ROME", subject=EVIL, target_new=EVIL, target_true=" x", layer=0,
                               completions=[{"prompt": EVIL, "before": EVIL, "after": EVIL}],
                               prompts={"rewrite": [EVIL], "paraphrase": [], "neighborhood": [EVIL]},
                               probs={"before": {"rewrite": [[0.1, 0.2]], "neighborhood": [[0.3, 0.1]]},
                                      "after": {"rewrite": [[0.5, 0.2]], "neighborhood": [[0.2, 0.1]]}}),
    }
    views["trace"].subject = EVIL
    views["patching"].col_labels = [EVIL] * len(views["patching"].col_labels)
    views["table"] = interp.neurons(tiny_llama, 0).vocab(0, k=2)
    views["table"].promoted[0] = (EVIL, 0, 1.0)
    for name, res in views.items():
        v = opened(res.save_html(tmp_path / f"evil_{name}.html"))
        v.check()
        assert v.page.evaluate("window.__pwned") is None, name
        assert v.page.locator("img").count() == 0 and v.page.locator("script").count() == 2, name
        assert EVIL in v.page.inner_text("body") or EVIL in v.page.eval_on_selector_all(
            "[title]", "els => els.map(e => e.title).join(' ')"), name


# ------------------------------------------------------------------------------------------------ in a notebook
def test_a_view_renders_inside_an_exported_notebook(browser, tmp_path):
    """A notebook whose cell value is a result, executed by nbclient and exported by nbconvert, shows the view
    (an iframe of the same self-contained page) when the HTML file is opened."""
    import importlib.util

    import nbformat
    from nbconvert import HTMLExporter

    # the notebooks' own runner (notebooks/execute.py): the same kernel settings as the committed notebooks
    spec = importlib.util.spec_from_file_location("notebooks_execute",
                                                  Path(__file__).parent.parent / "notebooks" / "execute.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import interp\nmodel = interp.load_tiny('llama', seed=0)\n"
                                          "res = interp.attention(model, 'The cat sat on the mat')\nres")]
    runner.execute(nb, tmp_path, timeout=300)
    out = nb.cells[0].outputs[0]["data"]
    assert out["text/html"].startswith("<iframe")
    body, _ = HTMLExporter().from_notebook_node(nb)
    path = tmp_path / "notebook.html"
    path.write_text(body, encoding="utf-8")
    context = browser.new_context()
    requests = []
    context.on("request", lambda r: requests.append((r.frame.url if r.frame else "", r.url)))
    page = context.new_page()
    try:
        page.goto(path.as_uri(), wait_until="load")
        frame = next(f for f in page.frames if f.url == "about:srcdoc")
        frame.wait_for_selector("#interp-root[data-ready]", timeout=10_000)
        assert frame.get_attribute("#interp-root", "data-ready") == "1"
        assert frame.locator("canvas.thumb").count() == 2 * 4  # the tiny model: 2 layers x 4 heads
        assert not [u for f, u in requests if f == "about:srcdoc"], "the view made requests"
        page.screenshot(path=str(tmp_path / "notebook.png"), full_page=True)
    finally:
        context.close()
