"""The text of 03_ffn_neurons.ipynb. ``python notebooks/execute.py 03`` rebuilds the notebook from here and
executes it in place (it is committed with its outputs); running this file alone writes it without outputs."""

from pathlib import Path

import nbformat as nbf

cells = [
    ("md", """# 03 · FFN neurons in SmolLM2-135M

A neuron is one coordinate of the hidden vector that multiplies an MLP's down projection
(`blocks.{l}.mlp.hook_post` = `silu(gate) * up` in SmolLM2's gated MLP); neuron *n* of layer *l* adds
`activation × W_out[:, n]` to the residual stream. Layer 4 of 30 (1,536 neurons) is cheap to scan on a CPU
(the scan stops the forward pass right after the layer it reads), so we start there.

Questions: what do its most strongly firing neurons respond to, what do they write, and does the model need
them?"""),
    ("code", """import torch
import interp
from interp.core.corpus import wiki_documents

torch.set_num_threads(2)
model = interp.load()
L4 = interp.neurons(model, 4)
acts = L4.activations("The painting was made in the 18th century; the castle was built in 1066.")
for n in acts.top(5):
    a = acts.of(n)
    print(f"N{n}: peak {a.max():.2f} on {acts.str_tokens[int(a.argmax())]!r}")
acts.plot()"""),
    ("md", """The strongest neurons spike at single tokens: the ordinal "th" of "18th" and a digit of "1066". Is that a
habit? A streaming scan
over Wikipedia lead paragraphs keeps, for every neuron, its top-5 (document, token) contexts — only one batch of
this one layer's activations is ever held in memory. Position 0 (BOS, identical in every document) is left out."""),
    ("code", """docs = wiki_documents(96)
scan = L4.scan(docs, k=5, max_len=48, progress=False)  # progress=True (default) shows a tqdm bar
print(scan.summary())
scan.top_neurons(8)"""),
    ("code", """scan.plot(n=12)"""),
    ("code", """scan.show(n=4, vocab_k=5)  # interactive: each context coloured by activation, the vocabulary beside"""),
    ("code", """top = int(acts.top(1)[0])
scan.to_frame(top)[["activation", "title", "token", "context"]]"""),
    ("md", """The top contexts agree with the single sentence: this neuron fires on an ordinal suffix *right after
a century number* ("18th", "16th", "19th"). Several of its neighbours in the top list are digit neurons: they
fire on a particular digit of a year, because SmolLM2's tokenizer splits numbers into single digits, so a model
that wants to read years has to assemble them from parts.

## What does it write?
Project the neuron's output row through the final norm's scale and the unembedding: the tokens it promotes and
suppresses directly."""),
    ("code", """L4.vocab(top, k=8)"""),
    ("md", """Noise: a layer-4 neuron writes into a residual stream that 26 more layers will read, not into the
logits. The direct vocabulary projection is informative for late neurons. For contrast, a layer-8 neuron that
fires on the word *remained* — and whose output row points straight at *remained* / *maintained*:"""),
    ("code", """L8 = interp.neurons(model, 8)
sentence = L8.activations("The principles of its architecture have remained largely unchanged.")
print([(t, round(float(a), 2)) for t, a in zip(sentence.str_tokens, sentence.of(902))])
L8.vocab(902, k=8).plot()"""),
    ("md", """## Does the model need them?
Zero-ablate a neuron (through `model.ablate_neurons`, on `hook_post`) and watch the logit of the next token.
First the century neuron, then the five most active layer-4 neurons on the same text, one at a time and
together:"""),
    ("code", """text = "The painting was made in the 18th"
L4.ablate(text, " century", L4.activations(text).top(5), individually=True).to_frame().round(3)"""),
    ("md", """" century" stays near 88% whatever we remove: this early, one neuron's clean story does not make it
necessary — the prediction is carried redundantly. The layer-8 *remained* neuron matters more for what follows
it:"""),
    ("code", """abl = L8.ablate("The principles of its architecture have remained", " largely", [902])
abl.to_frame().round(3)"""),
    ("md", """The logit of " largely" barely moves (it even rises a little), yet its probability falls by about a
factor of three: the neuron's job is to hold competitors *down*. Logit differences and probabilities can tell
different stories; report both.

## Scans split across processes merge exactly
The scan's state is a few plain tensors ([neurons, k] values, document ids, positions, tokens). Two halves of a
corpus scanned separately (global document ids via `doc_offset`) and merged give exactly the scan of the whole
— ties included, broken by (activation desc, document, position)."""),
    ("code", """part = wiki_documents(16)
whole = L4.scan_state(part, k=5, max_len=48, progress=False)
a = L4.scan_state(part[:8], k=5, max_len=48, progress=False)
b = L4.scan_state(part[8:], k=5, max_len=48, doc_offset=8, progress=False)
print("merged == whole:", b.merge(a).equal(whole))"""),
]

nb = nbf.v4.new_notebook()
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in cells]
out = Path(__file__).with_name("03_ffn_neurons.ipynb")
nbf.write(nb, out)
print(f"wrote {out}")
