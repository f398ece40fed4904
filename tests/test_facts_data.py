"""The second paraphrase set of the fact files (``paraphrase_prompts_other``, built by
data/build/build_paraphrases_other.py).

Fast, no model: reads the shipped files (interp/editing/records/) and the builder's templates."""

import json
import sys
from pathlib import Path

import pytest

from interp.editing.facts import default_path

DATA = default_path("facts.jsonl").parent  # the records shipped with the package
BUILD = Path(__file__).resolve().parents[1] / "data" / "build"
sys.path.insert(0, str(BUILD))  # the builders import their siblings by name, as when run as scripts

import build_paraphrases_other as bpo  # noqa: E402
from rules import RELATIONS, mid  # noqa: E402

FILES = ["facts.jsonl", "facts_gemma.jsonl"]


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
        old |= {t.replace("{S}", "{}") for t in RELATIONS[r["relation"]]["paraphrases"]}
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
    assert bpo.dumps(bpo.add_field(recs)) == text
    # from the records without the field, the builder gives the same file back: the field is all it adds
    stripped = [{k: v for k, v in r.items() if k != bpo.FIELD} for r in recs]
    assert bpo.dumps(bpo.add_field(stripped)) == text
    assert all(list(r)[-1] == bpo.FIELD for r in recs if r["split"] == "test")


def test_same_fact_gets_the_same_prompts_in_both_files():
    a = {(r["relation"], r["subject"]): r.get(bpo.FIELD) for r in records("facts.jsonl") if r["split"] == "test"}
    b = {(r["relation"], r["subject"]): r.get(bpo.FIELD) for r in records("facts_gemma.jsonl")
         if r["split"] == "test"}
    shared = set(a) & set(b)
    assert shared and all(a[k] == b[k] for k in shared)


def test_templates_are_checked():
    bpo.check_templates()  # the shipped lists pass
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
