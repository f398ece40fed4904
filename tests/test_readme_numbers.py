"""Every result table in README.md is what a stored result says: each number is read from its study's JSON and
compared at the precision the README prints (half a unit of the last digit shown). So are the before/after tables
of ``studies/memit_shared/README.md``, and the dev-condition table of
``studies/features_sweep/README.md``."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
CELL = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)(?:\s*\[([-+]?\d+(?:\.\d+)?),\s*([-+]?\d+(?:\.\d+)?)\])?")

# README row (its first cell starts so) -> the stored result it quotes
GEMMA_ROWS = {
    "ROME, one at a time": "studies/memit_gemma/gemma_test_rome_ft.json",
    "MEMIT, all 100 at once": "studies/memit_gemma/gemma_test_memit100.json",
    "MEMIT, 10 batches of 10": "studies/memit_gemma/gemma_test_memit10x10.json",
    "FT-L, one at a time": "studies/ft_norm_gemma/gemma_test_ft.json",
}
COLUMNS = ["efficacy_score", "paraphrase_score", "neighborhood_score", "loss_drift"]


def _table(text: str, header: str) -> list[list[str]]:
    """The body rows (cells stripped) of the markdown table in ``text`` whose header row starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    out = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        out.append([c.strip() for c in ln.strip("|").split("|")])
    return out


def _rows(header: str) -> dict:
    """{first cell: [the other cells]} of the README table whose header row starts with ``header``."""
    return {cells[0]: cells[1:] for cells in _table(README, header)}


def _close(shown: str, value: float) -> bool:
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return abs(float(shown) - value) <= 0.5 * 10 ** -decimals + 1e-9


@pytest.mark.parametrize("label", list(GEMMA_ROWS))
def test_gemma_editing_table_is_its_stored_runs(label):
    rows = _rows("| Gemma 3 270M, 100 test records")
    cells = next(v for k, v in rows.items() if k.startswith(label))
    stored = json.loads((ROOT / GEMMA_ROWS[label]).read_text())
    assert stored["n_records"] == 100 and stored["n_failed"] == 0
    for col, cell in zip(COLUMNS, cells):
        m = CELL.match(cell)
        assert m, f"{label}: cannot read {cell!r}"
        assert _close(m.group(1), stored[col]), f"{label} {col}: README {m.group(1)}, stored {stored[col]}"
        if m.group(2) is not None:
            lo, hi = stored[col + "_ci"]
            assert _close(m.group(2), lo) and _close(m.group(3), hi), \
                f"{label} {col} CI: README [{m.group(2)}, {m.group(3)}], stored [{lo}, {hi}]"


def test_a_number_edited_by_hand_is_caught():
    assert _close("94.0", 94.00000000000001) and not _close("94.1", 94.00000000000001)
    assert _close("100", 99.6) and not _close("100", 99.4) and _close("0.39", 0.38646773864397643)
    assert not _close("0.38", 0.38646773864397643)


def test_transcoder_paragraph_is_the_stored_full_run():
    import statistics

    doc = json.loads((ROOT / "studies/features_full/quality.json").read_text())
    rows = doc["rows"]
    text = README[README.index("Transcoders for all 30 layers"):]
    text = text[:text.index("\n\n")]

    def shown(label):
        m = re.search(re.escape(label) + r"\s*([-+]?\d+(?:\.\d+)?)", text)
        assert m, f"README's transcoder paragraph has no number after {label!r}"
        return m.group(1)

    median = {k: statistics.median(r[k] for r in rows) for k in ("fvu", "fvu_neurons", "ce_score", "ce_score_neurons")}
    assert _close(shown("median FVU"), median["fvu"])
    assert _close(shown("k largest neurons:"), median["fvu_neurons"])
    assert _close(shown("median CE-loss score"), median["ce_score"])
    assert _close(shown("the neuron baseline"), median["ce_score_neurons"])
    assert _close(shown("at most"), 100 * max(r["dead_frac"] for r in rows))
    assert _close(shown("every layer replaced"), 100 * doc["stack"]["top1_agreement"])
    assert len(rows) == 30 and doc["settings"]["tokens"] >= 200_000
    meet = sum(r["fvu"] <= 0.5 * r["fvu_neurons"] for r in rows)
    assert f"{meet} of 30 layers" in " ".join(text.split())


# studies/memit_shared/README.md: its before/after tables (first cell's start) -> the eval-edits run each row quotes
MEMIT_SHARED = ROOT / "studies/memit_shared"
MEMIT_SHARED_ROWS = {
    ("| facts_shared test, 100 at once", "MEMIT, `bare_key_weight=0`"): "test_memit_b100_bare0.json",
    ("| facts_shared test, 100 at once", "MEMIT, the default now"): "test_memit_b100.json",
    ("| facts.jsonl test | ES", "100 at once, default before"): "own_test100_memit_b100.json",
    ("| facts.jsonl test | ES", "100 at once, default now"): "own_test100_memit_b100_bare4.json",
    ("| facts.jsonl test | ES", "464 at once, default before"): "own_test464_memit_b464.json",
    ("| facts.jsonl test | ES", "464 at once, default now"): "own_test464_memit_b464_bare4.json",
    **{("| own test, which facts get the row", f"{n} at once, {rule}"): f"own_test{n}_memit_b{n}{suffix}.json"
       for n in (100, 464) for rule, suffix in (("γ 0", ""), ("mismatch τ 0.5", "_bare4"), ("alone τ 0.4", "_alone"))},
    **{("| second set's test, which facts get the row", rule): f"test_memit_b100{suffix}.json"
       for rule, suffix in (("γ 0", "_bare0"), ("mismatch τ 0.5", ""), ("alone τ 0.4", "_alone"))},
}
SHARED_COLUMNS = ["efficacy_score", "paraphrase_score", "neighborhood_score", "neighborhood_unedited_score"]


@pytest.mark.parametrize("header,label", list(MEMIT_SHARED_ROWS))
def test_memit_shared_tables_are_their_stored_runs(header, label):
    table = _table((MEMIT_SHARED / "README.md").read_text().replace("**", ""), header)
    cells = next(row for row in table if row[0].startswith(label))[1:]
    stored = json.loads((MEMIT_SHARED / MEMIT_SHARED_ROWS[(header, label)]).read_text())
    for col, cell in zip(SHARED_COLUMNS, cells):
        m = CELL.match(cell)
        assert m and _close(m.group(1), stored[col]), f"{label} {col}: README {cell!r}, stored {stored[col]}"
        if m.group(2) is not None:
            lo, hi = stored[col + "_ci"]
            assert _close(m.group(2), lo) and _close(m.group(3), hi), f"{label} {col} CI: {cell!r}, [{lo}, {hi}]"
    strict = [s.strip() for s in cells[4].split("/")]
    for col, shown in zip(("efficacy_acc", "paraphrase_acc", "neighborhood_acc"), strict):
        assert _close(shown, stored[col]), f"{label} {col}: README {shown}, stored {stored[col]}"
    assert _close(cells[5].rstrip("%"), stored["loss_drift"]), f"{label} drift: {cells[5]!r}, {stored['loss_drift']}"
    shown_failed = int(cells[6].split(":")[0].split()[0])
    assert shown_failed == sum(stored["failure_counts"].values()), (label, cells[6], stored["failure_counts"])


def test_features_sweep_full_dev_table_is_its_stored_rows():
    """studies/features_sweep/README.md's table of the dev condition: each row is its line of full_dev.jsonl."""
    here = ROOT / "studies/features_sweep"
    stored = {}
    for ln in (here / "full_dev.jsonl").read_text().splitlines():
        r = json.loads(ln)
        stored[r["config"]] = r  # a later line for the same configuration (a rerun) is the one shown
    seen = set()
    for cells in _table((here / "README.md").read_text().replace("**", ""), "| configuration | steps | median dev FVU"):
        config = re.match(r"`([^`]+)`", cells[0]).group(1)
        r, layers = stored[config], stored[config]["layers"]
        seen.add(config)
        assert int(cells[1].replace(",", "")) == r["steps"], (config, cells[1])
        assert _close(cells[2], r["median_fvu"]), (config, cells[2], r["median_fvu"])
        meet = sum(v["fvu"] <= 0.5 * v["fvu_neurons"] for v in layers.values())
        assert cells[3] == f"{meet} of {len(layers)}", (config, cells[3], meet)
        worst = max(layers, key=lambda L: layers[L]["dead_frac"])
        m = re.match(r"([\d.]+)% \(layer (\d+)\)", cells[4])
        assert m and _close(m.group(1), 100 * r["max_dead_frac"]) and int(m.group(2)) == int(worst), (config, cells[4])
        over = sorted(int(L) for L, v in layers.items() if v["dead_frac"] > 0.05)
        assert int(cells[5].split()[0]) == len(over), (config, cells[5], over)
        if over:
            runs = re.findall(r"(\d+)(?:–(\d+))?", cells[5].split("(", 1)[1])
            assert sorted(x for a, b in runs for x in range(int(a), int(b or a) + 1)) == over, (config, cells[5])
    assert seen == set(stored), (seen, set(stored))


def test_gemma_dead_crowding_table_is_its_stored_rows():
    """studies/features_gemma_dead/README.md's crowding table: each row is its line of crowding.jsonl (medians are
    the quartiles' middle values)."""
    here = ROOT / "studies/features_gemma_dead"
    stored = {(r["config"], r["layer"]): r for r in map(json.loads, (here / "crowding.jsonl").read_text().splitlines())}
    text = (here / "README.md").read_text().replace("**", "").replace("−", "-")
    seen = set()
    for cells in _table(text, "| run, layer | dead | of those ever > 0"):
        m = re.match(r"`([^`]+)`, (\d+)", cells[0])
        key = (m.group(1), int(m.group(2)))
        r, seen = stored[key], seen | {key}
        assert [int(cells[1]), int(cells[2])] == [r["dead"], r["dead_ever_positive"]], (key, cells[1:3])
        assert _close(cells[3].rstrip("%"), 100 * r["tokens_with_k_not_filled"]), (key, cells[3])
        for cell, name in ((cells[4], "kth_pre_quartiles"), (cells[5], "dead_max_pre_quartiles"),
                           (cells[6], "dead_margin_to_kth_quartiles")):
            assert _close(cell, r[name][1]), (key, name, cell, r[name])
        for cell, dead, alive in ((cells[7], "b_enc_quartiles_dead", "b_enc_quartiles_alive"),
                                  (cells[8], "encoder_norm_quartiles_dead", "encoder_norm_quartiles_alive")):
            shown = [s.strip() for s in cell.split("/")]
            assert _close(shown[0], r[dead][1]) and _close(shown[1], r[alive][1]), (key, cell, r[dead], r[alive])
    assert seen == set(stored), (seen, set(stored))


def _gemma_dead_row(stored: list[dict], label: str) -> dict:
    """The results.jsonl row a table label names: its configuration in backticks (or ``today`` for a label that is
    only a machine), and, where the configuration ran more than once, the machine the label names."""
    m = re.match(r"`([^`]+)`", label)
    config = m.group(1) if m else "today"
    rows = [r for r in stored if r["config"] == config]
    if len(rows) > 1:
        cpu = "Xeon" if "Intel" in label else "EPYC"  # a label that names no machine means this one
        rows = [r for r in rows if cpu in r["provenance"]["machine"]["cpu"]]
    assert len(rows) == 1, (label, len(rows))
    return rows[0]


@pytest.mark.parametrize("header,n", [("| configuration | dev FVU L0 / L5 | L0 (active", 4),
                                      ("| `today`, same seed and settings", 2),
                                      ("| configuration (AMD EPYC, 2 threads)", 4),
                                      ("| run (AMD EPYC, 2 threads) | dev FVU", 4),
                                      ("| run (AMD EPYC; softplus at 1 thread)", 4)])
def test_gemma_dead_frozen_bias_table_is_its_stored_rows(header, n):
    """studies/features_gemma_dead/README.md's frozen-bias and machine tables: each row is its run's line of
    results.jsonl (FVU, L0, dead fraction and count, the median FVU over the two layers)."""
    here = ROOT / "studies/features_gemma_dead"
    stored = [json.loads(line) for line in (here / "results.jsonl").read_text().splitlines()]
    rows = 0
    for cells in _table((here / "README.md").read_text().replace("**", ""), header):
        layers = _gemma_dead_row(stored, cells[0])["layers"]
        for cell, name in ((cells[1], "fvu"), (cells[2], "l0")):
            shown = [s.strip() for s in cell.split("/")]
            assert all(_close(v, layers[L][name]) for v, L in zip(shown, ("0", "5"))), (cells[0], name, cell)
        for part, L in zip(cells[3].split("/"), ("0", "5")):
            m = re.match(r"\s*([\d.]+)% \((\d+)\)", part)
            assert _close(m.group(1), 100 * layers[L]["dead_frac"]), (cells[0], part)
            assert int(m.group(2)) == round(layers[L]["dead_frac"] * 2304), (cells[0], part)
        assert _close(cells[4], (layers["0"]["fvu"] + layers["5"]["fvu"]) / 2), (cells[0], cells[4])
        rows += 1
    assert rows == n


def test_graph_faithfulness_position_table_is_what_by_position_computes():
    """studies/graphs_faithfulness/README.md's table by layer band and position: each row is by_position.py's row of
    the stored results.json (count, sign agreement, its interval), and the rows cover every ablation."""
    import importlib.util

    here = ROOT / "studies/graphs_faithfulness"
    spec = importlib.util.spec_from_file_location("by_position", here / "by_position.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = json.loads((here / "results.json").read_text())
    computed = {(r["layers"].replace("layers ", "").replace("-", "–"), r["position"]): r for r in mod.table(doc)}
    shown = _table((here / "README.md").read_text(), "| layers | ablated feature's position")
    assert len(shown) == len(computed) and sum(int(c[2]) for c in shown) == 500
    for cells in shown:
        r = computed[(cells[0], cells[1])]
        m = re.match(r"([\d.]+) \(([\d.]+)–([\d.]+)\)", cells[3])
        assert int(cells[2]) == r["n"], cells
        assert _close(m.group(1), r["sign_agreement"]) and _close(m.group(2), r["ci_95"][0]) \
            and _close(m.group(3), r["ci_95"][1]), (cells, r)
