"""CounterFact-style fact records for ROME: loading and validation.

A record (one JSON object per line of ``interp/editing/records/facts.jsonl``; data/README.md is its card)::

    {"case_id": 0, "relation": "located_in_city", "split": "dev",
     "prompt": "{} is located in the city of", "subject": "The Eiffel Tower",
     "target_true": " Paris", "target_new": " Rome",
     "paraphrase_prompts": [...>= 2 full texts...], "neighborhood_prompts": [...>= 5 full texts...],
     "generation_prompts": [...>= 2 full texts...]}

``prompt`` is a template with one ``{}`` where the subject goes; the targets start with a space (they are
continuations). Paraphrases mention the subject; neighbourhood prompts are about other subjects whose true
answer is ``target_true``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

SPLITS = ("dev", "test")
_LIST_MINIMA = {"paraphrase_prompts": 2, "neighborhood_prompts": 5, "generation_prompts": 2}


@dataclass(frozen=True)
class Fact:
    case_id: int | str
    relation: str
    split: str
    prompt: str
    subject: str
    target_true: str
    target_new: str
    paraphrase_prompts: tuple[str, ...]
    neighborhood_prompts: tuple[str, ...]
    generation_prompts: tuple[str, ...]
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def text(self) -> str:
        """The rewrite prompt with the subject filled in."""
        return self.prompt.replace("{}", self.subject)

    def to_dict(self) -> dict:
        d = asdict(self)
        extra = d.pop("extra")
        return {**d, **{k: list(v) for k, v in d.items() if isinstance(v, tuple)}, **extra}


@dataclass(frozen=True)
class Request:
    """One fact to write, without the prompts that score it: what an editor needs (a :class:`Fact` has it too)."""
    prompt: str
    subject: str
    target_new: str
    target_true: str | None = None
    case_id: int | str | None = None

    def __post_init__(self):
        check_prompt(self.prompt, self.subject)
        check_target(self.target_new, "target_new")

    @property
    def text(self) -> str:
        return self.prompt.replace("{}", self.subject)


# Each packaged model has its own records: the candidates filtered by what that model knows (data/README.md).
MODEL_FACTS = {"gemma3-270m": "facts_gemma.jsonl"}


def default_path(name: str = "facts.jsonl") -> Path:
    """A records file shipped with the package (package data, in a checkout and in an installed package alike):
    ``interp/editing/records/NAME``, e.g. ``facts.jsonl``, ``facts_gemma.jsonl``, ``facts_independent.jsonl``."""
    folder = Path(__file__).resolve().parent / "records"
    path = folder / name
    if path.is_file():
        return path
    shipped = sorted(p.name for p in folder.glob("*.jsonl"))
    raise FileNotFoundError(f"no records file {name!r} in {folder} (shipped: {', '.join(shipped) or 'none'}); "
                            f"pass path= to a JSON-lines file of records")


def records_file(model=None) -> str:
    """The records file name for ``model`` (a Model, a short name such as ``"gemma3-270m"``, or None)."""
    name = model if isinstance(model, str) or model is None else getattr(model, "source", "")
    return MODEL_FACTS.get((name or "").removeprefix("packaged:"), "facts.jsonl")


def load_records(path: str | Path | None = None, split: str | None = None, *, model=None) -> list[Fact]:
    """Read and validate fact records; ``split`` = "dev" | "test" | None (all). Without ``path``, the records of
    ``model`` (a Model or a short name; Gemma 3 270M has its own, :data:`MODEL_FACTS`), else ``records/facts.jsonl``."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split {split!r} not known; allowed: 'dev', 'test' or None (all records)")
    path = default_path(records_file(model)) if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"records file {str(path)!r} does not exist")
    records, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            fact = as_fact(raw, where=f"{path}:{lineno}")
            if fact.case_id in seen:
                raise ValueError(f"{path}:{lineno}: case_id {fact.case_id!r} appears twice")
            seen.add(fact.case_id)
            records.append(fact)
    if not records:
        raise ValueError(f"records file {str(path)!r} holds no records")
    if split is not None:
        records = [r for r in records if r.split == split]
        if not records:
            raise ValueError(f"records file {str(path)!r} has no {split!r} records")
    return records


def as_fact(raw, where: str = "record") -> Fact:
    """A :class:`Fact` from a dict (validated) or a Fact (returned as is)."""
    if isinstance(raw, Fact):
        return raw
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: a record must be a JSON object, got {type(raw).__name__}")
    missing = [k for k in ("case_id", "prompt", "subject", "target_true", "target_new", *_LIST_MINIMA)
               if k not in raw]
    if missing:
        raise ValueError(f"{where}: missing keys {missing}; a record needs case_id, relation, split, prompt, "
                         f"subject, target_true, target_new, paraphrase_prompts, neighborhood_prompts, "
                         f"generation_prompts")
    split = raw.get("split", "test")
    if split not in SPLITS:
        raise ValueError(f"{where}: split {split!r} not known; allowed: 'dev', 'test'")
    prompt, subject = raw["prompt"], raw["subject"]
    check_prompt(prompt, subject, where)
    for key in ("target_true", "target_new"):
        check_target(raw[key], f"{where}: {key}")
    if raw["target_true"] == raw["target_new"]:
        raise ValueError(f"{where}: target_new {raw['target_new']!r} equals target_true")
    lists = {}
    for key, minimum in _LIST_MINIMA.items():
        items = raw[key]
        if not isinstance(items, list) or len(items) < minimum or \
                not all(isinstance(s, str) and s.strip() for s in items):
            raise ValueError(f"{where}: {key} must be a list of >= {minimum} non-empty strings, got {items!r:.120}")
        lists[key] = tuple(items)
    known = {"case_id", "relation", "split", "prompt", "subject", "target_true", "target_new", *_LIST_MINIMA}
    return Fact(case_id=raw["case_id"], relation=str(raw.get("relation", "")), split=split, prompt=prompt,
                subject=subject, target_true=raw["target_true"], target_new=raw["target_new"], **lists,
                extra={k: v for k, v in raw.items() if k not in known})


def check_prompt(prompt, subject, where: str = "request") -> None:
    """A prompt template has exactly one ``{}`` (where the subject goes); the subject is non-empty text."""
    if not isinstance(subject, str) or not subject.strip():
        raise ValueError(f"{where}: subject {subject!r} is empty; give the entity to edit, e.g. 'The Eiffel Tower'")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"{where}: prompt {prompt!r} is empty; give a template like '{{}} is located in'")
    n = prompt.count("{}")
    if n == 0:
        hint = (f"; did you mean {prompt.replace(subject, '{}', 1)!r}?" if subject in prompt else
                f"; the subject {subject!r} is not found in the prompt either")
        raise ValueError(f"{where}: prompt {prompt!r} has no '{{}}' marking where the subject goes{hint}")
    if n > 1:
        raise ValueError(f"{where}: prompt {prompt!r} has {n} '{{}}'; allowed: exactly one (the subject)")
    if prompt.replace("{}", "").strip() == "":
        raise ValueError(f"{where}: prompt {prompt!r} is only the subject; add the relation, e.g. '{{}} is in'")


def check_target(target, where: str = "target") -> None:
    if not isinstance(target, str) or not target.strip():
        raise ValueError(f"{where} {target!r} is empty; give the new continuation with its leading space, "
                         "e.g. ' Rome'")
