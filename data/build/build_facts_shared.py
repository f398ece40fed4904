"""Build ``interp/editing/records/facts_shared.jsonl``: the facts of ``rules_shared.py`` (relations the other
records never use, many subjects per object) that SmolLM2-135M-Instruct knows, by exactly the rule of
``build_facts.py``.

Run from the repository root::

    .venv/bin/python data/build/build_facts_shared.py  # -v lists the candidates the model does not know

The filter, target_new draws, neighbourhood prompts, paraphrases, seeds, checks and the second paraphrase set are
``build_facts.py``'s and ``build_paraphrases_other.py``'s own (imported, not copied); what differs is the candidates
(``rules_shared.RELATIONS``), the second set's templates (``rules_shared.OTHER_TEMPLATES``), no pinned seed record,
and the split: half dev, half test per relation (``DEV_FRACTION``), because MEMIT is to be tuned on ~100 dev facts
at once and reported on ~100 test facts, so both parts need well over 100 records.
"""
from __future__ import annotations

import os

import build_facts  # the rule itself (this script's folder is on sys.path: run as a script)
from rules import RECORDS
from rules_shared import OTHER_TEMPLATES, RELATIONS

OUT_PATH = os.path.join(RECORDS, "facts_shared.jsonl")
DEV_FRACTION = 1 / 2
MIN_PER_SPLIT = 120  # a 100-fact MEMIT batch from each split, with room to spare


def split_and_order(kept):
    """This file's split and order of the kept records (candidate order), as the build made them (no model)."""
    return build_facts.split_and_order(kept, RELATIONS, seed_record=None, dev_fraction=DEV_FRACTION)


def main():
    records, _ = build_facts.main(RELATIONS, OUT_PATH, seed_record=None, dev_fraction=DEV_FRACTION,
                                  other_templates=OTHER_TEMPLATES, min_records=2 * MIN_PER_SPLIT)
    for split in ("dev", "test"):
        n = sum(r["split"] == split for r in records)
        assert n >= MIN_PER_SPLIT, f"only {n} {split} records survived the filter; need {MIN_PER_SPLIT}"


if __name__ == "__main__":
    main()
