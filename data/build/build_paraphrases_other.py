"""Add a second, independently written paraphrase set to the TEST records of the fact files.

Run from the repository root::

    .venv/bin/python data/build/build_paraphrases_other.py          # rewrites the files of FILES in place
    .venv/bin/python data/build/build_paraphrases_other.py --score  # + pre-edit check on the unedited models

The files are the package's records, ``interp/editing/records/``.

Why: the records' ``paraphrase_prompts`` come from 5 templates per relation, the same templates the dev split was
scored on when the edit layer was chosen, so a high paraphrase score may only mean the edit carries over to those
templates. ``paraphrase_prompts_other`` asks the same fact in forms that share no template with them or with the
rewrite prompt: questions, structured "Key: value" lines, first-person and dialogue forms, a sentence or two of
neutral lead-in, the subject late in the sentence, other names for the relation. Nothing is ever chosen with this
set, so dev records never get it.

Each test record gets 3-5 of its relation's templates (count and choice seeded by relation and subject, so the same
fact gets the same prompts in both files). The file is rewritten with the field appended as the record's last key;
every other key, its order and the JSON formatting are left as they are. Rerunning gives the same file byte for
byte. ``build_facts.py`` (and so ``build_facts_gemma.py``) calls :func:`add_to_file` after writing its file, so
rebuilding the records does not drop the field.

``--score`` loads each file's model (``interp.load()``; ``interp.load("gemma3-270m")`` for ``facts_gemma.jsonl``) and
prints, per relation and overall, how often the unedited model prefers target_true over target_new (mean per-token
NLL, :func:`interp.editing.eval.measure.target_nll`, the rule of the paraphrase score) on the existing paraphrases and
on this set, plus the rate of every template.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import time

import rules_shared  # facts_shared.jsonl: its own relations and second-set templates
from rules import PREFIXES, RECORDS, RELATIONS, SEED, fill, mid  # the records' own templates and rules

FIELD = "paraphrase_prompts_other"
N_MIN, N_MAX = 3, 5
# file -> model name for interp.load (None: default)
FILES = {"facts.jsonl": None, "facts_gemma.jsonl": "gemma3-270m", "facts_shared.jsonl": None}

# '{}' = the subject in mid-sentence form ("the Eiffel Tower"), '{S}' = as written in the record (sentence start);
# rules.fill does the substitution. A template ends where the target (with its leading space) continues.
OTHER_TEMPLATES: dict[str, list[str]] = {
    "located_in_city": [
        "Which city is home to {}? The answer is",
        "Q: Which city is {} in? A: It is in",
        "Landmark: {S}. City:",
        "Last summer my sister sent me a postcard of {} from",
        "{S} can be found in the city of",
        ("Our guide had planned the trip carefully. On the third day we finally stood in front of {}, in the "
         "heart of"),
        "Of all the famous sights in the world, my favourite is {}. To see it, I would fly to",
    ],
    "located_in_country": [
        "In which country is {}? The answer is",
        "Q: Which country would you visit to see {}? A:",
        "Landmark: {S}. Country:",
        "My grandparents always dreamed of seeing {} with their own eyes, so last year they flew to",
        "{S} can be found in the country of",
        ("The travel book has a chapter on every region. The next stop on the tour is {}, a highlight of any "
         "trip to"),
        "Few places are as well known as {}, which lies in",
    ],
    "city_in_country": [
        "Q: In which country is the city of {}? A:",
        "City: {S}. Country:",
        "I grew up in {}, so my home country is",
        "After a long train journey we reached {}. We were now in",
        "Which country is the city of {} part of? The answer is",
        "The conference was held in a large hotel. This year the organisers chose {}, a city in",
        "{S} belongs to the country of",
    ],
    "official_language": [
        "What language is spoken in {}? The answer is",
        "Q: Which language do people use in {}? A:",
        "Place: {S}. Official language:",
        "I am moving to {} next year, so I have started learning",
        "The government of {} publishes its laws in",
        "The letter arrived after many weeks. It came from {}, so of course it was written in",
        "A child born in {} grows up speaking",
    ],
    "citizenship": [
        "Q: What is the home country of {}? A:",
        "Name: {S}. Country:",
        "I read a biography of {}, a famous figure from",
        "The homeland of {} is",
        "Which country is {} from? The answer is",
        "The museum opened a new exhibition last week. It is about the life of {}, who was from",
        "{S} is a national hero in",
    ],
    "field_of_work": [
        "Q: Which subject did {} work on? A:",
        "Name: {S}. Field:",
        "In my history of science class, we learned that {} was an expert in",
        "{S} is best known as a pioneer of",
        "Which discipline is {} famous for? The answer is",
        "The library has a whole shelf of old books. Most of them were written by {}, and they are about",
        "Few people shaped their discipline as much as {}, a giant of",
    ],
    "company_country": [
        "Q: Which country is the company {} from? A: It is from",
        "Company: {S}. Country:",
        "I work at the head office of {}, which is in",
        "Q: In which country was {} founded? A:",
        "In which country does {} have its main office? The answer is",
        "The business pages ran a long story this morning. It was about {}, the well-known company from",
    ],
    "product_manufacturer": [
        "Q: Which company makes {}? A:",
        "Product: {S}. Manufacturer:",
        "I have been using {} for years; it comes from",
        "{S} is a brand owned by",
        "Which company created {}? The answer is",
        "The shop was almost empty that afternoon. On the shelf I saw {}, one of the best-known products of",
        "Everyone knows {}, a product of the company",
    ],
    "plays_sport": [
        "Q: Which sport does {} play? A:",
        "Athlete: {S}. Sport:",
        "My brother has a poster of {} on his wall because he loves",
        "{S} is a star of",
        "Which sport made {} famous? The answer is",
        "The television showed an old match last night. It featured {}, the great player of",
        "On the sports channel, the commentators talked about {} and the latest news from the world of",
    ],
}


def template_key(text: str, subject: str) -> str:
    """A prompt's template: the subject (as written, or in mid-sentence form) replaced by ``{}``, a leading
    unrelated prefix sentence (rules.PREFIXES) removed."""
    for p in PREFIXES:
        if text.startswith(p + " "):
            text = text[len(p) + 1:]
            break
    return text.replace(subject, "{}").replace(mid(subject), "{}")


def _norm(template: str) -> str:
    return template.replace("{S}", "{}")


def shares_template(a: str, b: str) -> bool:
    """True if two templates (``{}`` = subject) are equal or one contains the other (e.g. a lead-in sentence put
    in front of an existing template)."""
    return a == b or a in b or b in a


def check_templates(other_templates=None, relations=None) -> None:
    """Every relation has templates; none equals or contains (or is contained in) the rewrite prompt or one of the
    relation's paraphrase templates; each has one subject slot and ends where the target continues. Defaults:
    this module's OTHER_TEMPLATES and rules.RELATIONS (a second record set passes its own, e.g. rules_shared's)."""
    other_templates = OTHER_TEMPLATES if other_templates is None else other_templates
    relations = RELATIONS if relations is None else relations
    if set(other_templates) != set(relations):
        raise ValueError(f"OTHER_TEMPLATES relations {sorted(other_templates)} differ from the records' relations "
                         f"{sorted(relations)}")
    for rel, templates in other_templates.items():
        if len(templates) < N_MAX or len(set(templates)) != len(templates):
            raise ValueError(f"{rel}: needs >= {N_MAX} distinct templates, got {templates}")
        old = [_norm(t) for t in [relations[rel]["prompt"], *relations[rel]["paraphrases"]]]
        for t in templates:
            n = t.count("{}") + t.count("{S}")
            if n != 1:
                raise ValueError(f"{rel}: template {t!r} has {n} subject slots; allowed: exactly one")
            if t != t.rstrip() or t.endswith(" "):
                raise ValueError(f"{rel}: template {t!r} ends with whitespace; the target brings its own space")
            clash = [o for o in old if shares_template(_norm(t), o)]
            if clash:
                raise ValueError(f"{rel}: template {t!r} shares a template with the existing {clash}")


def other_paraphrases(relation: str, subject: str, other_templates=None) -> list[str]:
    """The 3-5 prompts of one fact: count and templates drawn with a generator seeded by (relation, subject)."""
    other_templates = OTHER_TEMPLATES if other_templates is None else other_templates
    if relation not in other_templates:
        raise ValueError(f"relation {relation!r} has no other-paraphrase templates; allowed: "
                         f"{sorted(other_templates)}")
    rng = random.Random(f"{SEED}|para_other|{relation}|{subject}")
    k = rng.randint(N_MIN, N_MAX)
    return [fill(t, subject) for t in rng.sample(other_templates[relation], k)]


def add_field(records: list[dict], other_templates=None) -> list[dict]:
    """Copies of ``records`` where every test record has the field (appended last, or replaced in place) and dev
    records have none."""
    out = []
    for r in records:
        r = dict(r)
        if r.get("split") not in ("dev", "test"):
            raise ValueError(f"record {r.get('case_id')!r}: split {r.get('split')!r} not known; allowed: dev, test")
        if r["split"] == "dev":
            r.pop(FIELD, None)
        else:
            r[FIELD] = other_paraphrases(r["relation"], r["subject"], other_templates)
        out.append(r)
    return out


def read(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def dumps(records: list[dict]) -> str:
    """The fact files' own format (build_facts.main): one ``json.dumps(ensure_ascii=False)`` object per line."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def add_to_file(path: str, other_templates=None, relations=None) -> int:
    """Rewrite ``path`` with the field on its test records; returns how many records got it."""
    check_templates(other_templates, relations)
    records = add_field(read(path), other_templates)
    with open(path, "w", encoding="utf-8") as f:
        f.write(dumps(records))
    return sum(FIELD in r for r in records)


def templates_for(name: str) -> tuple[dict, dict]:
    """(second-set templates, relations) of a records file: facts_shared.jsonl has rules_shared's, the rest rules'."""
    if name == "facts_shared.jsonl":
        return rules_shared.OTHER_TEMPLATES, rules_shared.RELATIONS
    return OTHER_TEMPLATES, RELATIONS


# ---------------------------------------------------------------------------------------------- pre-edit check
def score(path: str, model_name: str | None, batch_size: int = 64) -> dict:
    """Pre-edit preference for target_true over target_new on the test split: per relation, on the existing
    paraphrases and on this set (prompt-level share, and the per-record share averaged over records), and per
    template of this set."""
    import torch

    import interp
    from interp.editing.eval.measure import target_nll

    torch.set_num_threads(1)
    model = interp.load() if model_name is None else interp.load(model_name)
    recs = [r for r in read(path) if r["split"] == "test"]
    rows = []  # (record index, which set, template key)
    prompts, targets = [], []
    for i, r in enumerate(recs):
        for which in ("paraphrase_prompts", FIELD):
            for p in r[which]:
                for t in (r["target_true"], r["target_new"]):
                    prompts.append(p)
                    targets.append(t)
                rows.append((i, which, template_key(p, r["subject"])))
    t0 = time.time()
    nll = target_nll(model, prompts, targets, batch_size=batch_size).reshape(-1, 2)
    ok = (nll[:, 0] < nll[:, 1]).tolist()
    per_rec = collections.defaultdict(list)
    per_tpl = collections.defaultdict(list)
    for (i, which, key), good in zip(rows, ok):
        per_rec[i, which].append(good)
        if which == FIELD:
            per_tpl[recs[i]["relation"], key].append(good)
    table = {}
    for rel in [*templates_for(os.path.basename(path))[0], "overall"]:
        idx = [i for i, r in enumerate(recs) if rel in ("overall", r["relation"])]
        if not idx:
            continue
        row = {"n_records": len(idx)}
        for which in ("paraphrase_prompts", FIELD):
            flat = [g for i in idx for g in per_rec[i, which]]
            row[which] = {"prompt_share": sum(flat) / len(flat), "n_prompts": len(flat),
                          "record_mean": sum(sum(per_rec[i, which]) / len(per_rec[i, which]) for i in idx) / len(idx)}
        table[rel] = row
    templates = {f"{rel} | {key}": {"share": sum(v) / len(v), "n": len(v)} for (rel, key), v in sorted(per_tpl.items())}
    return {"file": os.path.basename(path), "model": model_name or "default (SmolLM2-135M)", "relations": table,
            "templates": templates, "seconds": round(time.time() - t0, 1), "prompts": len(rows)}


def print_score(res: dict) -> None:
    print(f"\n=== {res['file']} test split, model {res['model']}: {res['prompts']} prompts, {res['seconds']} s ===")
    print(f"{'relation':<22}{'n':>5}  {'existing: prompts / record-mean':>32}  {'other: prompts / record-mean':>30}")
    for rel, row in res["relations"].items():
        a, b = row["paraphrase_prompts"], row[FIELD]
        print(f"{rel:<22}{row['n_records']:>5}  {a['prompt_share']:>20.1%} / {a['record_mean']:>6.1%}"
              f"  {b['prompt_share']:>19.1%} / {b['record_mean']:>6.1%}")
    print("\nper template of the other set (share where target_true is preferred, n prompts):")
    for key, v in res["templates"].items():
        print(f"  {v['share']:>6.1%} {v['n']:>4}  {key}")


def write_stats(filename: str, doc: dict) -> None:
    """Store a build's summary as ``data/build/stats/<filename>`` (what tests/test_facts_data.py reads)."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stats")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, filename), "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", default=list(FILES),
                    help=f"files in interp/editing/records/ (default: {' '.join(FILES)})")
    ap.add_argument("--score", action="store_true", help="also run the pre-edit check on each file's model")
    args = ap.parse_args(argv)
    for name in args.files:
        if name not in FILES:
            raise SystemExit(f"file {name!r} not known; allowed: {', '.join(FILES)}")
        path = os.path.join(RECORDS, name)
        n = add_to_file(path, *templates_for(name))
        print(f"{name}: {FIELD} on {n} test records")
        if args.score:
            res = score(path, FILES[name])
            print_score(res)
            # beside the build's own stats: data/README.md quotes the overall shares, a test reads them there
            write_stats(name.replace(".jsonl", "_paraphrases.json"),
                        {**res, "command": f".venv/bin/python data/build/build_paraphrases_other.py {name} --score"})


if __name__ == "__main__":
    main()
