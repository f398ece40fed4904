"""Offline prompt-pair datasets for patching experiments, built from the model's tokenizer, seeded.

Every pair is (clean, corrupted) of EQUAL token length, with an ``answer`` (what the clean prompt should be
continued with) and a ``wrong`` token (what the corruption points to), both single tokens, so ``logit_diff``
applies directly.

- :func:`ioi` — indirect-object identification: "When Mary and John went to the store, John gave a drink to" ->
  " Mary" (wrong: " John"); corrupted by replacing the second mention of the subject with a third name ("..., Kate
  gave a drink to"), so nothing in the prompt says who the indirect object is. Names, places and objects are
  checked to be single tokens (with their leading space) on this tokenizer.
- :func:`fact_pairs` — factual recall from CounterFact-style records (``interp.rome.load_records``): the
  subject swapped for another record's subject of the same relation and the same token length; answer = the
  clean subject's true target, wrong = the swapped subject's.
- :func:`induction_pairs` — [BOS] R R[:-1] -> R[-1] (a repeated random sequence) against [BOS] R' R[:-1] (the
  first half replaced by other random tokens, so nothing can be copied); token tensors.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from ...core.inputs import check_int, decode
from ..induction.heads import ordinary_token_ids

NAMES = ["Mary", "John", "Alice", "Bob", "Tom", "James", "Sarah", "Anna", "Paul", "Mark", "Lisa", "David", "Emma", "Jack", "Kate", "Peter", "Laura", "Mike", "Susan", "Daniel", "Michael", "Robert", "William", "Richard", "Thomas", "Charles", "Jennifer", "Linda", "Elizabeth", "Barbara", "Jessica", "Karen", "Nancy", "Helen", "Sandra", "Carol", "Ruth", "George", "Edward", "Brian", "Kevin", "Jason", "Ryan", "Gary", "Eric", "Steven", "Andrew", "Frank", "Scott", "Ben", "Sam", "Max", "Luke", "Adam", "Chris", "Dan", "Rose", "Grace", "Amy", "Jane", "Lucy", "Claire", "Emily", "Sophie"]
PLACES = ["store", "park", "school", "garden", "house", "office", "beach", "station", "market", "church", "library", "hospital", "restaurant"]
OBJECTS = ["drink", "book", "ring", "bag", "kiss", "gift", "letter", "pen", "ball", "cake", "flower", "key", "box", "hat"]
IOI_TEMPLATES = (
    "When {A} and {B} went to the {place}, {B} gave a {obj} to",
    "When {A} and {B} got a {obj} at the {place}, {B} decided to give it to",
    "Then, {A} and {B} were working at the {place}. {B} decided to give a {obj} to",
    "After {A} and {B} went to the {place}, {B} gave a {obj} to",
    "While {A} and {B} were at the {place}, {B} handed a {obj} to",
)


@dataclass
class PromptPairs:
    """Clean/corrupted prompts (strings, or token tensors [n, pos]) with single-token answers and wrongs."""

    name: str
    clean: list | torch.Tensor
    corrupted: list | torch.Tensor
    answers: list[str]
    wrongs: list[str]
    answer_ids: list[int]
    wrong_ids: list[int]
    meta: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.answers)

    def __getitem__(self, idx) -> PromptPairs:
        sel = list(range(len(self)))[idx] if isinstance(idx, slice) else list(idx)
        pick = (lambda xs: xs[sel]) if isinstance(self.clean, torch.Tensor) else (lambda xs: [xs[i] for i in sel])
        return PromptPairs(self.name, pick(self.clean), pick(self.corrupted), [self.answers[i] for i in sel],
                           [self.wrongs[i] for i in sel], [self.answer_ids[i] for i in sel],
                           [self.wrong_ids[i] for i in sel], [self.meta[i] for i in sel] if self.meta else [])

    def to_frame(self):
        import pandas as pd

        def show(x):
            return x if isinstance(x, str) else " ".join(map(str, x.tolist()))
        return pd.DataFrame({"clean": [show(c) for c in self.clean], "corrupted": [show(c) for c in self.corrupted],
                             "answer": self.answers, "wrong": self.wrongs})


def _ids(model, words: list[str]) -> list[int]:
    return [model.encode(w, prepend_bos=False)[0] for w in words]


def single_token_words(model, words) -> list[str]:
    """The words that are one token with a leading space on this model's tokenizer."""
    return [w for w in words if len(model.encode(" " + w, prepend_bos=False)) == 1]


def ioi(model, n: int = 32, *, seed: int = 0, templates=IOI_TEMPLATES) -> PromptPairs:
    """``n`` IOI prompt pairs (see the module docstring); the same seed gives the same pairs."""
    n = check_int("n", n, 1)
    names, places, objects = (single_token_words(model, ws) for ws in (NAMES, PLACES, OBJECTS))
    if len(names) < 3 or not places or not objects:
        raise ValueError(f"this tokenizer has too few single-token names/places/objects ({len(names)}, "
                         f"{len(places)}, {len(objects)}) for IOI prompts")
    rng = random.Random(seed)
    clean, corrupted, answers, wrongs, meta = [], [], [], [], []
    while len(clean) < n:
        template = rng.choice(templates)
        a, b, c = rng.sample(names, 3)
        fill = {"place": rng.choice(places), "obj": rng.choice(objects)}
        x = template.format(A=a, B=b, **fill)
        # The second {B} of the template becomes C. Edited in the template, not the text: a name can be part of
        # another ("Dan" in "Daniel"), so searching the text could replace the wrong mention.
        second = template.index("{B}", template.index("{B}") + 3)
        y = (template[:second] + "{C}" + template[second + 3:]).format(A=a, B=b, C=c, **fill)
        if len(model.encode(x)) != len(model.encode(y)):
            continue  # a name that merges with its neighbour; draw again
        clean.append(x)
        corrupted.append(y)
        answers.append(" " + a)
        wrongs.append(" " + b)
        meta.append({"template": templates.index(template), "IO": a, "S": b, "C": c})
    return PromptPairs("ioi", clean, corrupted, answers, wrongs, _ids(model, answers), _ids(model, wrongs), meta)


def fact_pairs(model, records, n: int | None = None, *, seed: int = 0) -> PromptPairs:
    """Factual-recall pairs from records with ``subject``, ``prompt`` ("{}" marks the subject), ``target_true``
    and ``relation_id`` (interp.rome.load_records gives them): each subject swapped for another subject of the
    same relation with the same token length and a different single-token answer."""
    n = check_int("n", n, 1, allow_none=True)
    # Copies: the caller's records are not modified. ``relation`` (interp/editing/records/facts.jsonl) or ``relation_id``
    # (CounterFact); ``target_true`` a string or CounterFact's {"str": ...}.
    recs = [dict(r) if isinstance(r, dict) else r.to_dict() for r in records]
    for r in recs:
        true = r.get("target_true")
        r["true"] = true.get("str") if isinstance(true, dict) else true
        r["relation_id"] = r.get("relation_id", r.get("relation"))
    rng = random.Random(seed)
    order = list(range(len(recs)))
    rng.shuffle(order)
    clean, corrupted, answers, wrongs, meta = [], [], [], [], []
    for i in order:
        r = recs[i]
        ans = model.encode(r["true"], prepend_bos=False) if r.get("true") else []
        if len(ans) != 1:
            continue
        size = len(model.encode(r["subject"], prepend_bos=False))
        others = [o for o in recs if o is not r and o.get("relation_id") == r.get("relation_id")
                  and o.get("true") and o["true"] != r["true"]
                  and len(model.encode(o["true"], prepend_bos=False)) == 1
                  and len(model.encode(o["subject"], prepend_bos=False)) == size]
        if not others:
            continue
        o = rng.choice(others)
        x, y = r["prompt"].format(r["subject"]), r["prompt"].format(o["subject"])
        if len(model.encode(x)) != len(model.encode(y)):
            continue
        clean.append(x)
        corrupted.append(y)
        answers.append(r["true"])
        wrongs.append(o["true"])
        meta.append({"subject": r["subject"], "swapped": o["subject"], "relation": r.get("relation_id"),
                     "case_id": r.get("case_id")})
        if n is not None and len(clean) == n:
            break
    if not clean:
        raise ValueError("no record has a same-relation partner with a subject of equal token length and "
                         "single-token answers; pass more records")
    return PromptPairs("facts", clean, corrupted, answers, wrongs, _ids(model, answers), _ids(model, wrongs),
                       meta)


def induction_pairs(model, n: int = 16, *, seq_len: int = 20, seed: int = 0) -> PromptPairs:
    """Token pairs [BOS] R R[:-1] (answer R[-1]) vs [BOS] R' R[:-1] (wrong: R'[-1]), R and R' random ordinary
    tokens of length ``seq_len`` differing everywhere."""
    n, seq_len = check_int("n", n, 1), check_int("seq_len", seq_len, 2)
    pool = ordinary_token_ids(model)
    g = torch.Generator().manual_seed(seed)
    first = pool[torch.randint(len(pool), (n, seq_len), generator=g)]
    other = pool[torch.randint(len(pool), (n, seq_len), generator=g)]
    same = other == first
    while bool(same.any()):  # R' must differ from R at every position
        other[same] = pool[torch.randint(len(pool), (int(same.sum()),), generator=g)]
        same = other == first
    bos = torch.full((n, 1), model.bos_token_id, dtype=torch.long)
    clean = torch.cat([bos, first, first[:, :-1]], 1)
    corrupted = torch.cat([bos, other, first[:, :-1]], 1)
    answers = [decode(model, t) for t in first[:, -1]]
    wrongs = [decode(model, t) for t in other[:, -1]]
    return PromptPairs("induction", clean, corrupted, answers, wrongs, first[:, -1].tolist(),
                       other[:, -1].tolist())
