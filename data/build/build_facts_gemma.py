"""Build ``interp/editing/records/facts_gemma.jsonl``: the fact records Gemma 3 270M knows, by exactly the
rule of ``build_facts.py``.

Run from the repository root::

    .venv/bin/python data/build/build_facts_gemma.py  # -v lists the candidates the model does not know

The candidates, target_new draws, neighbourhood filter, paraphrases, seeds and the stratified dev/test split are
``build_facts.py``'s own (imported, not copied); only the model differs: Gemma 3 270M from its chunk packages,
read through ``interp.load``'s cache (the raw transformers model, no bridge), with Gemma's BOS (``<bos>``, id 2)
prepended as the toolkit's BOS policy does. Gemma's tokenizer would add ``<bos>`` itself, so texts are encoded
without special tokens and the BOS is prepended once, by the scorer. The split is Gemma's own: the same seeded
rule applied to the records Gemma keeps.
"""

from __future__ import annotations

import os

import build_facts  # the rule itself (this script's folder is on sys.path: run as a script)

_LOADED: list = []


def load_model():
    if not _LOADED:
        from interp.core import loading

        tok = loading.load("gemma3-270m", device="cpu").tokenizer
        _LOADED.append((tok, loading.embedded_transformers("gemma3-270m")))
    return _LOADED[0]


def _ids(self, text):
    return self.tok(text, add_special_tokens=False).input_ids


def main():
    tok, _ = load_model()
    build_facts.BOS_ID = tok.bos_token_id  # 2: <bos>
    build_facts.OUT_PATH = os.path.join(build_facts.RECORDS, "facts_gemma.jsonl")
    build_facts.load_model = load_model
    build_facts.Scorer.ids = _ids
    original = build_facts.summarize

    def summarize(records, stats, tok):
        # build_facts measures targets with tok(t).input_ids; Gemma's tokenizer adds <bos> there
        class NoSpecials:
            def __call__(self, text):
                return tok(text, add_special_tokens=False)

        return original(records, stats, NoSpecials())

    build_facts.summarize = summarize
    build_facts.main()


if __name__ == "__main__":
    main()
