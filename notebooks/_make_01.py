"""Writes 01_residual_stream_and_logit_lens.ipynb (run: python notebooks/_make_01.py). The tests execute it."""

from pathlib import Path

import nbformat as nbf

cells = [
    ("md", """# The residual stream, the logit lens and direct logit attribution

A decoder-only transformer keeps one vector per token, the **residual stream**. The embedding writes it first;
then every block *reads* it (through a norm) and *writes* back by **adding** its output. Nothing is ever
overwritten, so the final residual is literally a sum of parts:

    x_final = embed + sum_l (attn_l + mlp_l),        attn_l = sum_h head_{l,h}

Two tools follow from that picture. The **logit lens** decodes the partial sums as if they were final.
**Direct logit attribution** (DLA) decodes the parts: with the final norm's scale frozen at its actual value the
path from residual to logits is linear, so each part gets an exact share of the logit.

Everything runs on the embedded SmolLM2-135M-Instruct (30 layers, 9 heads, d_model 576), offline."""),
    ("code", """import torch
import interp
from interp.lens import logit_lens
from interp.attribution import decompose, direct_logit_attribution

model = interp.load()
prompt = "The Eiffel Tower is located in the city of"
print(model)
print(model.to_str_tokens(prompt))"""),
    ("md", """## 1. Reads and writes

How big is the stream at each depth, and how much does each block add? Residual norms at the last token grow
steadily; the writes of the last MLPs are among the largest."""),
    ("code", """stack = model.resid_stack(prompt)                      # [n_layers + 1, pos, d_model]
norms = stack[:, -1].norm(dim=-1)
print("residual norm at the last token, every 3 layers:", [round(float(v), 1) for v in norms[::3]])
dec = decompose(model, prompt)                          # the final residual at the last token, split into parts
print(dec.summary())
print("max |sum of parts - final residual| =", float((dec.total("layer") - dec.resid).abs().max()))
dec.plot()"""),
    ("md", """`share_of_final` is each part's projection on the final residual, `<p, x> / |x|^2`; the shares sum to 1.
Reading the table top-down shows who built the direction the model ends up in:"""),
    ("code", """frame = dec.to_frame("layer")
print("shares sum to", round(float(frame.share_of_final.sum()), 4))
frame.sort_values("share_of_final", key=abs, ascending=False).head(8)"""),
    ("md", """## 2. The logit lens

Push every partial residual through the model's own final RMSNorm and unembedding. Rows are "after i blocks"
(row 0 = the embedding alone, the last row = the model's output). Each cell shows the top-1 next-token guess."""),
    ("code", """lens = logit_lens(model, prompt, targets=[" Paris", " London", " Rome"])
lens.plot()"""),
    ("md", """Row 0 predicts each input token *itself*: SmolLM2 ties its unembedding to its embedding, so an embedding
vector's best match in the unembedding is (nearly always) its own token. Follow " Paris" at the last position:"""),
    ("code", """first, stable = lens.first_top1(" Paris"), lens.first_top1(" Paris", stable=True)
print(f"' Paris' is first top-1 after {first} blocks and stays top-1 from {stable} on (of {model.n_layers})")
curve = lens.target_curve(" Paris")
print("rank of ' Paris' by depth:", curve["rank"].tolist())
print("final row == model output:",
      float((lens.target_logits[-1, -1, 0] - model.run(prompt)[0, -1, model.to_single_token(" Paris")]).abs()))
lens.plot_targets()"""),
    ("md", """The answer is assembled late: " Paris" climbs from rank thousands to the top only in the last few
blocks. Earlier layers hold the *topic* (the top-1 guesses drift towards place-like words) before the exact
city is read out. The lens reads a residual that later blocks were never trained to see as final, so its
middle rows are a hint, not a measurement; DLA below is exact about what reaches the logits directly."""),
    ("md", """## 3. Direct logit attribution

Freeze the final RMSNorm's scale `s = rms(x_final)` at its actual value. Then
`logit(t) = sum_i (p_i * w) . W_U[:, t] / s` exactly, one term per part `p_i`. The terms add up to the
model's logit (up to float rounding):"""),
    ("code", """dla = direct_logit_attribution(model, prompt, " Paris")
print(dla.summary())
print("model logit", round(dla.model_value, 4), " sum of parts", round(dla.total(), 4),
      " via heads", round(dla.total("head"), 4))
dla.plot()"""),
    ("code", """print("largest direct contributions:", [(c, round(v, 2)) for c, v in dla.top(8)])
dla.plot_heads()"""),
    ("md", """A few late MLPs and heads carry most of the direct effect; many middle-layer heads push slightly
*against* " Paris". A logit difference isolates what separates the answer from a rival city:"""),
    ("code", """diff = direct_logit_attribution(model, prompt, " Paris", baseline_token=" London")
print(diff.summary())
[(c, round(v, 2)) for c, v in diff.top(6)]"""),
    ("md", """## 4. The embedding's direct path

The token embedding is added at the bottom and never removed, so it reaches the unembedding directly, skipping
every block. How much of the answer travels that way?"""),
    ("code", """e = dla.embedding_share()
print(f"embedding -> logit(' Paris'): {e['contribution']:+.3f} "
      f"({e['fraction_of_value']:.1%} of the logit, {e['abs_share']:.1%} of all |direct attribution|, "
      f"rank {e['rank_by_abs']} of {e['n_components']} components)")
prompts = {"The Eiffel Tower is located in the city of": " Paris",
           "The Colosseum is located in the city of": " Rome",
           "The capital of Japan is": " Tokyo",
           "Water is made of hydrogen and": " oxygen"}
for p, t in prompts.items():
    s = direct_logit_attribution(model, p, t).embedding_share()
    print(f"{p!r:48} {t!r:10} embedding share {s['abs_share']:6.1%}  fraction of logit {s['fraction_of_value']:+6.1%}")"""),
    ("md", """For factual recall the direct path of the *last token's* embedding is a small share: the answer is not a
property of the word " of" or " is", so it has to be moved in by attention and built by the MLPs. The direct
path is where bigram-like statistics live (with tied embeddings, a token's own direction); it matters more
for continuations predictable from the current token alone.

**Caveats.** DLA only measures the direct path: a head whose output is read by a later MLP gets credit only for
what it writes straight to the logits. Freezing the norm scale is exact for the actual input but not a
counterfactual: removing a part would change the scale too."""),
]

nb = nbf.v4.new_notebook()
nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in cells]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, Path(__file__).with_name("01_residual_stream_and_logit_lens.ipynb"))
