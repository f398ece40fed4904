"""The second paraphrase set of the fact files (``paraphrase_prompts_other``, built by
data/build/build_paraphrases_other.py), and the second set of facts (``facts_shared.jsonl``, built by
data/build/build_facts_shared.py from data/build/rules_shared.py).

Fast, no model: reads the shipped files (interp/editing/records/) and the builders' templates and candidates."""

import collections
import json
import re
import sys
from pathlib import Path

import pytest

from interp.editing.facts import default_path

DATA = default_path("facts.jsonl").parent  # the records shipped with the package
BUILD = Path(__file__).resolve().parents[1] / "data" / "build"
sys.path.insert(0, str(BUILD))  # the builders import their siblings by name, as when run as scripts

import build_facts  # noqa: E402
import build_facts_shared  # noqa: E402
import build_paraphrases_other as bpo  # noqa: E402
import rules_shared  # noqa: E402
from rules import RELATIONS, mid  # noqa: E402

FILES = ["facts.jsonl", "facts_gemma.jsonl", "facts_shared.jsonl"]
SHARED = "facts_shared.jsonl"
ALL_RELATIONS = {**RELATIONS, **rules_shared.RELATIONS}  # disjoint: checked below


def records(name):
    return bpo.read(str(DATA / name))


@pytest.mark.parametrize("name", FILES)
def test_every_test_record_has_3_to_5_other_paraphrases_naming_the_subject(name):
    for r in records(name):
        if r["split"] != "test":
            continue
        other = r.get(bpo.FIELD)
        assert isinstance(other, list) and 3 <= len(other) <= 5, (r["case_id"], other)
        assert len(set(other)) == len(other), (r["case_id"], other)
        for p in other:
            assert isinstance(p, str) and p == p.rstrip() and "{" not in p and "}" not in p, (r["case_id"], p)
            # the full subject, as written or with a leading "The" lowercased mid-sentence
            assert r["subject"] in p or mid(r["subject"]) in p, (r["case_id"], p)


@pytest.mark.parametrize("name", FILES)
def test_other_paraphrases_share_no_template_with_the_rewrite_or_existing_paraphrases(name):
    for r in records(name):
        if r["split"] != "test":
            continue
        s = r["subject"]
        old = {r["prompt"]} | {bpo.template_key(p, s) for p in r["paraphrase_prompts"]}
        # also every paraphrase template of the relation, not only the ones this record drew
        old |= {t.replace("{S}", "{}") for t in ALL_RELATIONS[r["relation"]]["paraphrases"]}
        for p in r[bpo.FIELD]:
            key = bpo.template_key(p, s)
            assert p != r["prompt"].format(s) and p not in r["paraphrase_prompts"], (r["case_id"], p)
            clash = [o for o in old if bpo.shares_template(key, o)]
            assert not clash, (r["case_id"], key, clash)


@pytest.mark.parametrize("name", FILES)
def test_dev_records_have_no_other_paraphrases(name):
    dev = [r for r in records(name) if r["split"] == "dev"]
    assert dev and not [r["case_id"] for r in dev if bpo.FIELD in r]


@pytest.mark.parametrize("name", FILES)
def test_rebuilding_is_idempotent_and_changes_nothing_else(name):
    text = (DATA / name).read_text(encoding="utf-8")
    recs = [json.loads(line) for line in text.splitlines()]
    templates = bpo.templates_for(name)[0]
    assert bpo.dumps(bpo.add_field(recs, templates)) == text
    # from the records without the field, the builder gives the same file back: the field is all it adds
    stripped = [{k: v for k, v in r.items() if k != bpo.FIELD} for r in recs]
    assert bpo.dumps(bpo.add_field(stripped, templates)) == text
    assert all(list(r)[-1] == bpo.FIELD for r in recs if r["split"] == "test")


def test_same_fact_gets_the_same_prompts_in_both_files():
    a = {(r["relation"], r["subject"]): r.get(bpo.FIELD) for r in records("facts.jsonl") if r["split"] == "test"}
    b = {(r["relation"], r["subject"]): r.get(bpo.FIELD) for r in records("facts_gemma.jsonl")
         if r["split"] == "test"}
    shared = set(a) & set(b)
    assert shared and all(a[k] == b[k] for k in shared)


def test_templates_are_checked():
    bpo.check_templates()  # the shipped lists pass
    bpo.check_templates(rules_shared.OTHER_TEMPLATES, rules_shared.RELATIONS)
    with pytest.raises(ValueError, match="differ"):  # one set's templates with the other set's relations
        bpo.check_templates(rules_shared.OTHER_TEMPLATES, RELATIONS)
    rel = "located_in_city"
    saved = bpo.OTHER_TEMPLATES[rel]
    try:
        for bad in ("The weather was fine. " + RELATIONS[rel]["prompt"],   # an existing template with a lead-in
                    RELATIONS[rel]["paraphrases"][0],                       # an existing template as is
                    "Where is {}? It is in {}",                             # two subject slots
                    "Which city is home to {}? The answer is "):            # trailing space
            bpo.OTHER_TEMPLATES[rel] = [bad, *saved]
            with pytest.raises(ValueError, match=rel):
                bpo.check_templates()
    finally:
        bpo.OTHER_TEMPLATES[rel] = saved


def test_unknown_relation_and_split_are_refused():
    with pytest.raises(ValueError, match="no_such_relation"):
        bpo.other_paraphrases("no_such_relation", "X")
    with pytest.raises(ValueError, match="'train'"):
        bpo.add_field([{"case_id": 0, "split": "train", "relation": "located_in_city", "subject": "X"}])


def test_the_loader_keeps_the_field():
    from interp.editing.facts import load_records

    r = next(f for f in load_records(DATA / "facts.jsonl", split="test"))
    assert 3 <= len(r.extra[bpo.FIELD]) <= 5


def test_the_independent_facts_load_and_follow_the_record_format():
    """facts_independent.jsonl (written without looking at facts.jsonl, never used for a choice): every record
    valid for the loader, 100 of them, many relations, neighbours that are other subjects."""
    from interp.editing.facts import load_records

    records = load_records(DATA / "facts_independent.jsonl")
    assert [r.case_id for r in records] == list(range(100))
    assert len({r.relation for r in records}) >= 12 and {r.split for r in records} == {"test"}
    for r in records:
        assert len(r.paraphrase_prompts) == 3 and 5 <= len(r.neighborhood_prompts) <= 8
        assert r.text not in r.neighborhood_prompts and all(g.startswith(r.subject) for g in r.generation_prompts)


# ------------------------------------------------------------------------------------- facts_shared.jsonl
KEYS = ["case_id", "relation", "split", "prompt", "subject", "target_true", "target_new", "paraphrase_prompts",
        "neighborhood_prompts", "generation_prompts"]


def candidate_order(records, relations):
    """The records in the order the builder meets the candidates: relation, object, subject as in the pools."""
    pos = {(rel, s): (i, j, k) for i, (rel, spec) in enumerate(relations.items())
           for j, subjects in enumerate(spec["pools"].values()) for k, s in enumerate(subjects)}
    return sorted(records, key=lambda r: pos[r["relation"], r["subject"]])


def test_shared_records_load_and_have_the_format():
    from interp.editing.facts import load_records

    recs = records(SHARED)
    assert [r["case_id"] for r in recs] == list(range(len(recs)))
    for r in recs:
        assert list(r) == KEYS + ([bpo.FIELD] if r["split"] == "test" else []), r["case_id"]
    dev, test = load_records(DATA / SHARED, split="dev"), load_records(DATA / SHARED, split="test")
    assert len(dev) + len(test) == len(recs)
    # MEMIT is tuned on ~100 dev facts at once and reported on ~100 test facts
    assert len(dev) >= build_facts_shared.MIN_PER_SPLIT and len(test) >= build_facts_shared.MIN_PER_SPLIT
    per_rel = collections.Counter((r["relation"], r["split"]) for r in recs)
    for rel in {r["relation"] for r in recs}:  # about half of each relation in dev
        n = per_rel[rel, "dev"] + per_rel[rel, "test"]
        assert per_rel[rel, "dev"] == round(n * build_facts_shared.DEV_FRACTION), rel


def test_shared_records_are_the_candidates_of_rules_shared():
    relations = rules_shared.RELATIONS
    for r in records(SHARED):
        spec = relations[r["relation"]]
        pools = spec["pools"]
        s, true, new = r["subject"], r["target_true"], r["target_new"]
        assert r["prompt"] == spec["prompt"] and s in pools[true], r["case_id"]
        assert new in pools and new != true and new not in spec.get("also_true", {}).get(s, []), r["case_id"]
        start = r["prompt"].index("{}")
        assert start == 0 or r["prompt"][start - 1] == " ", r["case_id"]
        assert s in r["prompt"].format(s)
        # neighbours: the rewrite prompt on other subjects with the same true object
        assert 5 <= len(r["neighborhood_prompts"]) <= 10
        others = {r["prompt"].format(n) for n in pools[true] if n != s}
        assert set(r["neighborhood_prompts"]) <= others, r["case_id"]
        assert len(r["paraphrase_prompts"]) == 3 and len(r["generation_prompts"]) == 3
        assert all(g.startswith(s) for g in r["generation_prompts"])


def test_shared_facts_are_new_and_share_objects():
    assert not set(rules_shared.RELATIONS) & set(RELATIONS)
    recs = records(SHARED)
    rels = {r["relation"] for r in recs}
    assert len(rels) >= 6 and not rels & {r["relation"] for r in records("facts.jsonl")}
    # not a fact of the other files: no (subject, relation) in common, not even with the independent facts,
    # which share some relation ids (continent, currency, ...) and are scored only
    keys = {(r["relation"], r["subject"]) for r in recs}
    for name in ("facts.jsonl", "facts_independent.jsonl"):
        assert not keys & {(r["relation"], r["subject"]) for r in records(name)}, name
    # and no (subject, object) pair of rules.py's candidates
    old = {(s, o) for spec in RELATIONS.values() for o, subjects in spec["pools"].items() for s in subjects}
    assert not {(r["subject"], r["target_true"]) for r in recs} & old
    # the point of the set: few objects, many subjects each
    per_object = collections.Counter((r["relation"], r["target_true"]) for r in recs)
    crowded = {rel for (rel, _), n in per_object.items() if n >= 10}
    assert len(crowded) >= 5, per_object


@pytest.mark.parametrize("name, relations, seed_record, fraction", [
    ("facts.jsonl", RELATIONS, build_facts.SEED_RECORD, build_facts.DEV_FRACTION),
    ("facts_gemma.jsonl", RELATIONS, build_facts.SEED_RECORD, build_facts.DEV_FRACTION),
    (SHARED, rules_shared.RELATIONS, None, build_facts_shared.DEV_FRACTION),
])
def test_the_seeded_split_and_order_come_back_from_the_builder(name, relations, seed_record, fraction):
    """The builders' split (seeded, stratified by relation) and file order, re-derived without the model from the
    kept records: the files are exactly what split_and_order gives."""
    text = (DATA / name).read_text(encoding="utf-8")
    recs = [json.loads(line) for line in text.splitlines()]
    kept = [{k: v for k, v in r.items() if k not in ("case_id", "split", bpo.FIELD)}
            for r in candidate_order(recs, relations)]
    if name == SHARED:
        out = build_facts_shared.split_and_order(kept)
    else:
        out = build_facts.split_and_order(kept, relations, seed_record, fraction)
    assert bpo.dumps(bpo.add_field(out, bpo.templates_for(name)[0])) == text


# data/README.md's data card: every count it prints is the shipped file's (records per relation and split, the
# totals) or the builder's (candidates per relation). The pre-edit paraphrase accuracies need the model and are
# not read here.
CARD = (Path(__file__).resolve().parents[1] / "data" / "README.md").read_text()


def _card_table(heading):
    """[{column: cell}] of the first table after the line that starts with ``heading``."""
    lines = CARD.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.startswith(heading))
    i = next(n for n in range(i, len(lines)) if lines[n].startswith("|"))
    head = [c.strip() for c in lines[i].strip("|").split("|")]
    rows = []
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        cells = (re.sub(r"(?<=\d),(?=\d{3})", "", c.strip().replace("**", "")) for c in ln.strip("|").split("|"))
        rows.append(dict(zip(head, cells)))
    return rows


def _count(cell):
    return 0 if cell in ("—", "-") else int(cell)


@pytest.mark.parametrize("name", FILES)
def test_the_data_card_counts_are_the_files(name):
    recs = records(name)
    relations = rules_shared.RELATIONS if name == SHARED else RELATIONS
    per = collections.Counter((r["relation"], r["split"]) for r in recs)
    rows = _card_table(f"### `{name}`")
    seen = set()
    for row in rows:
        rel = row["relation"].split()[0]
        if rel == "total":
            assert _count(row["dev"]) == sum(r["split"] == "dev" for r in recs), (name, row)
            assert _count(row["test"]) == sum(r["split"] == "test" for r in recs), (name, row)
            assert _count(row["total"]) == len(recs), (name, row)
            assert _count(row["candidates"]) == sum(len(s) for spec in relations.values()
                                                    for s in spec["pools"].values()), (name, row)
            continue
        seen.add(rel)
        for split in ("dev", "test"):
            assert _count(row[split]) == per[rel, split], f"{name} {rel} {split}: card {row[split]}"
        assert _count(row["total"]) == per[rel, "dev"] + per[rel, "test"], (name, rel)
        assert _count(row["candidates"]) == sum(len(s) for s in relations[rel]["pools"].values()), (name, rel)
    assert seen == set(relations), f"{name}: the card's relations {sorted(seen)} are not the builder's"
    # the summary table at the top: "N (dev / test)" and the number of relations kept
    summary = next(r for r in _card_table("| file |") if r["file"] == f"`{name}`")
    n_dev, n_test = (sum(r["split"] == s for r in recs) for s in ("dev", "test"))
    assert summary["records (dev / test)"] == f"{len(recs)} ({n_dev} / {n_test})", (name, summary)
    assert int(summary["relations"].split()[0]) == len({r["relation"] for r in recs}), (name, summary)


def test_the_data_card_lists_the_shared_objects_it_kept():
    """facts_shared's "objects (kept records)" column: each "name count" pair is that object's records."""
    recs = records(SHARED)
    for row in _card_table(f"### `{SHARED}`"):
        rel = row["relation"].split()[0]
        cell = row.get("objects (kept records)", "")
        if rel == "total" or cell in ("", "—"):
            continue
        have = collections.Counter(r["target_true"].strip() for r in recs if r["relation"] == rel)
        if (m := re.fullmatch(r"(\d+) languages, (\d+)–(\d+) each", cell)):
            assert (len(have), min(have.values()), max(have.values())) == tuple(map(int, m.groups())), (rel, have)
            continue
        pairs = re.findall(r"([A-Za-z][A-Za-z /]*?) (\d+)(?:,|$)", cell)
        assert pairs, (rel, cell)
        for names, n in pairs:
            for obj in names.split(" / "):
                assert have[obj] == int(n), f"{rel}: card says {obj} {n}, the file has {have[obj]}"


# What the builders measured with the model (pre-edit paraphrase accuracy, why candidates were dropped) is stored
# by them in data/build/stats/ (``build_facts.summarize``); the data card's numbers are read from there.
STATS = BUILD / "stats"
PARA_COLUMN = {"facts.jsonl": "paraphrase pre-edit acc.*", SHARED: "para.*"}


def _stats(name):
    return json.loads((STATS / name.replace(".jsonl", ".json")).read_text())


def _prose(pattern):
    m = re.search(pattern, " ".join(CARD.split()))
    assert m, f"data/README.md no longer says {pattern!r}"
    return [int(g) for g in m.groups()]


@pytest.mark.parametrize("name", FILES)
def test_the_build_stats_are_of_the_shipped_file(name):
    st, recs = _stats(name), records(name)
    assert st["file"] == name and st["records"] == len(recs)
    per = collections.Counter((r["relation"], r["split"]) for r in recs)
    for rel, row in st["per_relation"].items():
        assert (row["dev"], row["test"]) == (per[rel, "dev"], per[rel, "test"]), (name, rel)
    assert st["candidates"] == len(recs) + sum(st["drops"].values())
    kept_subjects = {(r["relation"], r["subject"]) for r in recs}
    assert not kept_subjects & {(d["relation"], d["subject"]) for d in st["dropped"]}
    assert collections.Counter(d["reason"] for d in st["dropped"]) == collections.Counter(st["drops"])


@pytest.mark.parametrize("name", list(PARA_COLUMN))
def test_the_data_card_paraphrase_accuracy_is_the_build_stats(name):
    per = _stats(name)["per_relation"]
    for row in _card_table(f"### `{name}`"):
        rel = row["relation"].split()[0]
        if rel == "total" or row[PARA_COLUMN[name]] in ("—", ""):
            continue
        p = per[rel]
        shown = int(row[PARA_COLUMN[name]].rstrip("%"))
        assert shown == round(100 * p["paraphrase_pre_edit_correct"] / p["paraphrase_pre_edit_prompts"]), (name, rel)


def test_the_data_card_drop_counts_are_the_build_stats():
    gemma = _stats("facts_gemma.jsonl")
    top10, fewer, word, nll, multi = _prose(
        r"(\d+) candidates were dropped for the top-10 rule, (\d+) for fewer than 5 neighbours, (\d+) for a target "
        r"word in the subject, (\d+) for preferring target_new; (\d+) records have a multi-token target")
    assert (top10, fewer, word, nll) == (gemma["drops"].get("target_true not in top-10", 0),
                                         gemma["drops"].get("fewer than 5 valid neighborhood prompts", 0),
                                         gemma["drops"].get("subject contains a target word", 0),
                                         gemma["drops"].get("target_new has lower NLL than target_true", 0))
    assert multi == gemma["multi_token_records"]
    missed, of = _prose(r"so (\d+) of (\d+) true countries miss the top-10")
    assert missed == gemma["drops_by_relation"]["citizenship"]["target_true not in top-10"]
    assert of == gemma["per_relation"]["citizenship"]["candidates"]

    shared = _stats(SHARED)
    cont = [d for d in shared["dropped"] if d["relation"] == "continent"]
    prefer = [d for d in cont if d["reason"] == "target_new has lower NLL than target_true"]
    n, europe, two, asia, asia_of = _prose(r"Continents: (\d+) places were dropped for preferring target_new \((\d+) "
                                           r"of them preferring Europe, (\d+) with a two-token true continent\), "
                                           r"(\d+) of the (\d+) in Asia")
    assert n == len(prefer) and europe == sum(d["target_new"] == " Europe" for d in prefer)
    assert two == sum(d["true_tokens"] > 1 for d in prefer)
    assert asia == sum(d["target_true"] == " Asia" for d in cont)
    assert asia_of == len(rules_shared.RELATIONS["continent"]["pools"][" Asia"])
    genre = [d for d in shared["dropped"] if d["relation"] == "genre"]
    (n_genre,) = _prose(r"The genre prompt continues with \" a\" for all (\d+) candidates")
    assert n_genre == len(genre) == shared["per_relation"]["genre"]["candidates"]
    assert {d["top1"] for d in genre} == {" a"}


def test_the_data_card_pre_edit_shares_are_stored_runs():
    """The second paraphrase set's pre-edit agreement (build_paraphrases_other.py --score, stored in
    data/build/stats/) and the independent facts' unedited preference (their stored ROME run)."""
    smol, gemma = (_stats(f"{n}_paraphrases.jsonl")["relations"]["overall"]
                   for n in ("facts", "facts_gemma"))
    m = re.search(r"\((\d+\.\d)% / (\d+\.\d)% pre-edit agreement with the existing paraphrases on SmolLM2, "
                  r"(\d+\.\d)% / (\d+\.\d)% on Gemma\)", " ".join(CARD.split()))
    assert m, "data/README.md no longer quotes the pre-edit agreement"
    stored = [smol["paraphrase_prompts"]["prompt_share"], smol["paraphrase_prompts_other"]["prompt_share"],
              gemma["paraphrase_prompts"]["prompt_share"], gemma["paraphrase_prompts_other"]["prompt_share"]]
    for shown, value in zip(m.groups(), stored):
        assert abs(float(shown) - 100 * value) <= 0.05 + 1e-9, (shown, value)

    run = json.loads((BUILD.parents[1] / "studies/rome_eval_test/rome_eval_independent.json").read_text())
    rewrite, neighbour = _prose(r"P\(true\) > P\(new\) on only (\d+)% of the rewrite prompts and (\d+)% of the "
                                r"neighbour prompts of the 96 records")
    assert run["n_records"] - run["n_failed"] == 96  # the 4 refused: target_new already the answer
    assert rewrite == round(100 - run["efficacy_score_before"]) and neighbour == round(run["neighborhood_score_before"])
