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
    ("code", """import time
import torch
import interp

torch.set_num_threads(2)
model = interp.load()
L4 = interp.neurons(model, 4)
acts = L4.activations("The painting was made in the 18th century; the castle was built in 1066.")
for n in acts.top(5):
    a = acts.of(n)
    print(f"N{n}: peak {a.max():.2f} on {acts.str_tokens[int(a.argmax())]!r}")
acts.plot()"""),
    ("md", """The strongest neurons spike at single tokens: the ordinal "th" of "18th" and a digit of "1066". Is that a
habit? A streaming scan over the first 2,000 Wikipedia lead paragraphs (each cut to 48 tokens) keeps, for every
neuron, its top-5 (document, token) contexts — only one batch of this one layer's activations is ever held in
memory — and each neuron's mean activation over all scanned tokens (used for mean-ablation below). Position 0
(BOS, identical in every document) is left out."""),
    ("code", """docs = interp.wiki_documents(2000)
t0 = time.perf_counter()
scan = L4.scan(docs, k=5, max_len=48, progress=False)  # progress=True (default) shows a tqdm bar
print(scan.summary(), f"in {time.perf_counter() - t0:.0f} s")
scan.top_neurons(8)"""),
    ("code", """scan.plot(n=12)"""),
    ("code", """scan.show(n=4, vocab_k=5)  # interactive: each context coloured by activation, the vocabulary beside"""),
    ("code", """top = int(acts.top(1)[0])
scan.to_frame(top)[["activation", "title", "token", "context"]]"""),
    ("md", """All five top contexts of N1202 over the 2,000 documents are the same token in the same frame: the "th" of
"18th", each time followed by " century" (8.73, 8.71, 7.94, 7.84, 7.75; in the scan figure its top five sit in a
narrow band). The neuron fires on "th" before " century" arrives (attention is causal), so what it can respond
to is "18" + "th". That is the claim the scan supports: its strongest responses in this corpus are "18th".
Whether it responds to other centuries' ordinals ("16th", "19th") more weakly, a top-5 cannot say. Its
neighbours at the top of the corpus list peak on unrelated tokens (" contract", "ching", " currents", " tails",
a digit "5", a comma, "ovsky"); each needs its own reading of its contexts (the view above shows four).

## What does it write?
Project the neuron's output row through the final norm's scale and the unembedding: the tokens it promotes and
suppresses directly."""),
    ("code", """L4.vocab(top, k=8)"""),
    ("md", """No visible relation to centuries or ordinals: the promoted tokens are fragments (' setattr', 'airobi',
'agland', "|')"), the most suppressed ones suffixes ('ed', 'wise'). A layer-4 neuron writes into a residual
stream that 26 more layers will read, not into the logits, so its direct projection need not mean anything; it
is more informative for later neurons. How we pick one: the layer-8 neuron that fires most strongly on the word
*remained* in one sentence."""),
    ("code", """L8 = interp.neurons(model, 8)
sentence = L8.activations("The principles of its architecture have remained largely unchanged.")
at = sentence.str_tokens.index(" remained")
row = sentence.acts[at]                                  # every layer-8 neuron at " remained"
best = int(row.argmax())
second = float(row.topk(2).values[1])
print(f"largest layer-8 activation at ' remained': N{best} ({row[best]:.2f}; next-largest neuron {second:.2f}, "
      f"median over the layer {row.median():.2f})")
print([(t, round(float(a), 2)) for t, a in zip(sentence.str_tokens, sentence.of(best))])"""),
    ("code", """proj = L8.vocab(best, k=8)
effect = L8.logit_effect(best)
rank = {w: int((effect > effect[model.to_single_token(w)]).sum()) + 1 for w in (" remained", " maintained")}
print(f"rank in the projection, of {effect.numel():,} tokens: {rank}")
proj.plot()"""),
    ("md", """N902 stands out at " remained" in this sentence (9.66 against 1.65 for the next neuron) and is near zero on
the other tokens except " unchanged" (2.84). That is one sentence: whether it fires on "remained" across a corpus
would need a layer-8 scan, not run here. Its vocabulary projection partly points at related words: " maintained"
and " remained" rank 2 and 3 of 49,152 tokens, " until" and " remains" 7 and 8 — but the first, fourth and fifth
are unrelated fragments ('onging', 'ih', '"]:'). A direction that leans towards *remain* / *maintain*, not one
that points only at them.

## Does the model need them?
Ablate a neuron (through `model.ablate_neurons`, on `hook_post`) and watch the next token's logit and
probability. Two ablations: *zero* (activation set to 0) and *mean* (set to its mean over the 2,000-document
scan's tokens, `mode="mean", mean_over=scan`). First the century neuron, then the five most active layer-4
neurons on this text, one at a time and together:"""),
    ("code", """text = "The painting was made in the 18th"
five = L4.activations(text).top(5)
zero = L4.ablate(text, " century", five, individually=True).to_frame()
mean = L4.ablate(text, " century", five, mode="mean", mean_over=scan, individually=True).to_frame()
print(f"clean: logit {zero.clean_logit[0]:.3f}, probability {zero.clean_prob[0]:.3f}")
print("corpus means of these neurons:", [round(float(v), 4) for v in scan.mean_of(five)])
table = zero[["ablated"]].assign(zero_dlogit=zero.delta, zero_prob=zero.ablated_prob,
                                 mean_dlogit=mean.delta, mean_prob=mean.ablated_prob)
table.round(3)"""),
    ("md", """Baseline: the same ablations of random layer-4 neurons (20 seeded draws of one neuron, 20 of five)."""),
    ("code", """n_neurons = len(acts.neurons)                            # 1,536 in every layer
g = torch.Generator().manual_seed(0)
draws = {1: [[int(i)] for i in torch.randint(n_neurons, (20,), generator=g)],
         5: [torch.randperm(n_neurons, generator=g)[:5].tolist() for _ in range(20)]}
for size, sets in draws.items():
    for mode in ("zero", "mean"):
        kw = {"mode": "mean", "mean_over": scan} if mode == "mean" else {}
        rows = [L4.ablate(text, " century", s, **kw).rows[0] for s in sets]
        d = torch.tensor([r["delta"] for r in rows])
        pr = torch.tensor([r["ablated_prob"] for r in rows])
        print(f"{size} random neuron{'s' if size > 1 else ''}, {mode}: delta logit median {d.median():+.3f}, "
              f"range {d.min():+.3f}..{d.max():+.3f}; probability range {pr.min():.3f}..{pr.max():.3f}")"""),
    ("md", """The century neuron is *not* needed for " century" here. Removing it raises the logit of " century" by
0.73 whether zeroed or set to its corpus mean (0.0065, so the two ablations are nearly the same), more than any of
20 random single neurons (zero: −0.19..+0.03; mean: −0.17..+0.03), yet the probability barely moves (0.876 → 0.880): the other logits rise
by almost as much. So the neuron that fires on "18th" does not push " century" up at this position — its removal
slightly helps it — and what it does for later layers this notebook does not establish. Of the five, only N1267
(the other "th" neuron) lowers the logit (−0.73 zero, −0.72 mean; probability 0.849, below every random single
neuron's 0.873 or more). All five together: +0.43 (zero) / +0.46 (mean), probability 0.867, inside the range of
20 random five-neuron sets (zero: −0.15..+0.62, probability 0.858..0.881; mean: −0.15..+0.57, 0.870..0.881).
The prediction does not depend on these neurons."""),
    ("code", """prompt = "The principles of its architecture have remained"
abl = L8.ablate(prompt, " largely", [best]).to_frame()
print(abl.round(3).to_string())
rows = [L8.ablate(prompt, " largely", [int(i)]).rows[0]
        for i in torch.randint(n_neurons, (20,), generator=torch.Generator().manual_seed(1))]
d = torch.tensor([r["delta"] for r in rows]); pr = torch.tensor([r["ablated_prob"] for r in rows])
print(f"20 random layer-8 neurons, zero: delta logit {d.min():+.3f}..{d.max():+.3f}, "
      f"probability {pr.min():.3f}..{pr.max():.3f}")"""),
    ("md", """For the layer-8 *remained* neuron and the next token " largely": zero-ablating it *raises* the logit of
" largely" by 0.26, yet its probability falls from 0.103 to 0.033, while 20 random layer-8 neurons move the logit
by −0.02..+0.01 and leave the probability at 0.102..0.104. Removing N902 raises competing tokens' logits by more
than that of " largely": on this prompt the neuron holds competitors down more than it pushes " largely" up.
Logit differences and probabilities can tell different stories; report both.

## Scans split across processes merge exactly
The scan's state is a few plain tensors ([neurons, k] values, document ids, positions, tokens). Two halves of a
corpus scanned separately (global document ids via `doc_offset`) and merged give exactly the scan of the whole
— ties included, broken by (activation desc, document, position)."""),
    ("code", """part = interp.wiki_documents(16)
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
