"""The text of 01_residual_stream_and_logit_lens.ipynb. ``python notebooks/execute.py 01`` rebuilds the notebook from here and
executes it in place (it is committed with its outputs); running this file alone writes it without outputs."""

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

model = interp.load()
prompt = "The Eiffel Tower is located in the city of"
print(model)
print(model.to_str_tokens(prompt))"""),
    ("md", """## 1. Reads and writes

How big is the stream at each depth, and how much does each block add? At the last token the residual's norm
grows by a factor of ~200 from the embedding to the final layer, and the last MLPs write the largest vectors."""),
    ("code", """stack = model.resid_stack(prompt)                      # [n_layers + 1, pos, d_model]
norms = stack[:, -1].norm(dim=-1)
print("residual norm at the last token, every 3 layers:", [round(float(v), 1) for v in norms[::3]])
dec = interp.decompose(model, prompt)                   # the final residual at the last token, split into parts
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
    ("code", """lens = interp.logit_lens(model, prompt, targets=[" Paris", " London", " Rome"])
lens.plot()"""),
    ("md", """Row 0 mostly predicts each input token *itself*: SmolLM2 ties its unembedding to its embedding
(`W_U = W_E^T`), so an embedding vector's best match in the unembedding is usually its own token (a few
tokens land instead on one odd token, " strugg"). Follow the last position up the stack:"""),
    ("code", """print("tied embeddings:", torch.equal(model.W_U.T, model.W_E))
for row in range(0, model.n_layers + 1, 2):
    print(f"after {row:2d} blocks:", [(t, round(p, 2)) for t, p in lens.top(row)[:3]])
first, stable = lens.first_top1(" Paris"), lens.first_top1(" Paris", stable=True)
print(f"' Paris' is first top-1 after {first} blocks and stays top-1 from {stable} on (of {model.n_layers})")
curve = lens.target_curve(" Paris")
print("rank of ' Paris' by depth:", curve["rank"].tolist())
print("final row == model output:",
      float((lens.target_logits[-1, -1, 0] - model.run(prompt)[0, -1, model.to_single_token(" Paris")]).abs()))
lens.plot_targets()"""),
    ("code", """lens.show()  # interactive: hover a cell for its top-5, click a position for its curves"""),
    ("md", """The answer is assembled late. Through most of the stack the lens's guess at " of" is a generic continuation
(a comma, a parenthesis, a full stop, a newline); place-like tokens (" T", " Saint", " central") surface only
after 28-29 blocks, and " Paris" climbs from rank thousands to a few hundred after ~24 blocks and reaches
top-1 only at the output. In this small model the logit lens is informative mostly about the last third of
the stack: earlier residuals are not yet in the unembedding's "language" (the tuned lens, section 5, addresses
that with a learned map per layer). DLA below is exact about what reaches the logits directly."""),
    ("md", """## 3. Direct logit attribution

Freeze the final RMSNorm's scale `s = rms(x_final)` at its actual value. Then
`logit(t) = sum_i (p_i * w) . W_U[:, t] / s` exactly, one term per part `p_i`. The terms add up to the
model's logit (up to float rounding):"""),
    ("code", """dla = interp.direct_logit_attribution(model, prompt, " Paris")
print(dla.summary())
print("model logit", round(dla.model_value, 4), " sum of parts", round(dla.total(), 4),
      " via heads", round(dla.total("head"), 4))
dla.plot()"""),
    ("code", """print("largest direct contributions:", [(c, round(v, 2)) for c, v in dla.top(8)])
heads = dla.head_matrix()
print(f"{int((heads > 0).sum())} heads push ' Paris' up (total {float(heads[heads > 0].sum()):+.2f}), "
      f"{int((heads < 0).sum())} push it down (total {float(heads[heads < 0].sum()):+.2f})")
print("heads summed per layer, layers 20-29:", [round(float(v), 2) for v in heads.sum(1)[20:]])
dla.plot_heads()"""),
    ("code", """dla.show()  # interactive: hover a head or a bar; the embedding's direct path is marked"""),
    ("md", """The last three MLPs carry most of the direct effect; among the heads, layer 23 stands out (L23H4 alone adds
about +1.6, a candidate "mover" of the answer into the last position), while L29H0 pushes against " Paris".
Heads up and heads down nearly cancel in total. A logit difference isolates what separates the answer from a
rival city:"""),
    ("code", """diff = interp.direct_logit_attribution(model, prompt, " Paris", baseline_token=" London")
print(diff.summary())
[(c, round(v, 2)) for c, v in diff.top(6)]"""),
    ("md", """## 4. The embedding's direct path

The token embedding is added at the bottom and never removed, so it reaches the unembedding directly, skipping
every block. How much of the answer travels that way?"""),
    ("code", """e = dla.embedding_share()
print(f"embedding -> logit(' Paris'): {e['contribution']:+.3f} "
      f"({e['fraction_of_value']:.1%} of the logit, {e['abs_share']:.1%} of all |direct attribution|, "
      f"rank {e['rank_by_abs']} of {e['n_components']} components)")
print(f"|embedding| = {float(dec.parts[0].norm()):.1f}, |final residual| = {float(dec.resid.norm()):.1f}, "
      f"frozen norm scale s = {dla.scale:.1f}")
own = interp.direct_logit_attribution(model, prompt, " of").embedding_share()  # the input token itself
print(f"embedding -> logit(' of') (the input token): {own['contribution']:+.3f}")
prompts = {"The Colosseum is located in the city of": " Rome",     # facts: the answer must be moved in
           "The capital of Japan is": " Tokyo",
           "I live in New": " York",                              # bigram-like: predictable from one token
           "Los": " Angeles"}
for p, t in prompts.items():
    r = interp.direct_logit_attribution(model, p, t)
    s = r.embedding_share()
    print(f"{p!r:42} {t!r:10} logit {r.model_value:5.1f}  embedding {s['contribution']:+.3f} "
          f"= {s['fraction_of_value']:+6.1%} of the logit, {s['abs_share']:5.1%} of |attribution|")"""),
    ("md", """The direct path is real but nearly silent in SmolLM2: around 1% of the logit or less, even for bigram-like
continuations (" New" -> " York", "Los" -> " Angeles") that the current token alone predicts. Two reasons show
in the numbers above. The embedding is a short vector (norm ~3) in a residual that ends ~200x longer, and the
final norm divides every part by the same frozen scale, so whatever the embedding says is drowned out by the
blocks' writes. And with tied embeddings the embedding's direct vote goes mostly to the input token itself
(its push on " of" is ~10x its push on " Paris"), which is rarely the right next token, so the blocks have
to write over it anyway. Even "which token usually follows this one" has to be written by the blocks; the raw
embedding's direct path barely carries it.

**Caveats.** DLA only measures the direct path: a head whose output is read by a later MLP gets credit only for
what it writes straight to the logits. Freezing the norm scale is exact for the actual input but not a
counterfactual: removing a part would change the scale too."""),
    ("md", """## 5. The tuned lens

The logit lens assumes every layer already writes in the unembedding's basis. The **tuned lens** (Belrose et al.
2023) drops that assumption: one affine translator per layer, `T_l(h) = h + A_l h + b_l`, put in front of the
final norm and trained so that the translated residual predicts what the *model* finally predicts (minimum
KL(final ‖ lens) on natural text). `A_l = 0, b_l = 0` is exactly the logit lens.

The reference implementation trains on tens of millions of tokens on a GPU. `interp.train_tuned_lens` trains on
this laptop CPU: one forward pass over held-in Wikipedia text, a closed-form least-squares start per layer, then
Adam steps on the KL itself; a bias-only translator `h + c_l` (the paper's baseline) is trained alongside. Its
default (16,384 positions, 16 KL steps) takes ~5 minutes on 2 cores (`interp train-lens`); this notebook trains a
smaller lens with the settings written in the cell (4,096 positions, 1,024 of them for 4 KL steps, ~1-2 minutes),
so that what it shows does not depend on which lens happens to be cached. A lens is saved under the model's
fingerprint and its settings, so the call loads it the second time; its settings are printed with it:"""),
    ("code", """tl = interp.train_tuned_lens(model, tokens=4096, kl_tokens=1024, steps=4, progress=False)
print({k: tl.meta["settings"][k] for k in ("tokens", "kl_tokens", "steps", "seed", "corpus")})
print(tl.summary())
tl.plot()                                # training KL: least-squares start, then the KL steps"""),
    ("md", """The same prompt through both lenses. `interp.tuned_lens` returns the logit lens's result type, marked
`tuned`, so everything above (`top`, `target_curve`, `plot`, `show`) works unchanged; the last row is the model's
output in both."""),
    ("code", """tuned = interp.tuned_lens(model, prompt, targets=[" Paris", " London", " Rome"], lens=tl)
tuned.plot()"""),
    ("code", """# drift: rtol=0.05 - the tuned lens is trained on the CPU: its ranks move by one or two between CPUs
for row in range(0, model.n_layers + 1, 3):
    # ties at the printed precision in name order, so that a last-bit swap between CPUs does not reorder them
    top3 = sorted(((t, round(p, 2)) for t, p in tuned.top(row)[:3]), key=lambda tp: (-tp[1], tp[0]))
    print(f"after {row:2d} blocks: logit {lens.top(row)[0][0]!r:10} tuned", top3)
print("rank of ' Paris', logit lens:", lens.target_curve(" Paris")["rank"].tolist())
print("rank of ' Paris', tuned lens:", tuned.target_curve(" Paris")["rank"].tolist())
print(f"' Paris' stays top-1 from row {lens.first_top1(' Paris', stable=True)} (logit) / "
      f"{tuned.first_top1(' Paris', stable=True)} (tuned) of {model.n_layers}")
print("first-row guesses at each position (tuned lens, after 0 blocks):",
      [(tuned.str_tokens[p], tuned.top(0, p)[0][0]) for p in tuned.positions[4:]])
tuned.plot_targets()"""),
    ("code", """tuned.show()  # the tuned lens, interactive (same view as the logit lens, titled "tuned lens")"""),
    ("md", """Through the tuned lens the picture changes where the logit lens was blind. After 0 blocks the tuned lens
already gives bigram-like continuations at the other positions (" located" → " in", " is" → " a", " in" →
" the", " city" → " of"): the early residual does encode a next-token guess, just not in the unembedding's
basis. At " of" itself the early rows guess " a" / " the" (and " Ash" after 3 blocks); in the middle of the stack
the tuned lens shows name fragments and capital initials (" Lag", " K", " S", " El", " N", " Z", " Al"), the
*kind* of answer forming. The rank of " Paris" does not fall steadily: 764 at the embedding, thousands in rows
2-4 and 10-13, 600-1,900 in rows 14-18, 200-600 in rows 19-21, then 69 and 39 in rows 22-23, and top-1 from 24
blocks on; the
logit lens only finds it in the final row (rank 710 at row 24, 3 at row 29). Late rows are more confident than
the model itself (p 0.79 after 24 blocks, 0.95 after 27, against 0.30 at the output): the last blocks spread
probability out again.

One prompt is an anecdote. On held-out documents (never trained on: one document in ten, by hash) the
comparison is per layer, in bits of KL to the model's final distribution and in perplexity on the actual next
token:"""),
    ("code", """ev = interp.evaluate_lens(model, tl, progress=False)    # 512 held-out positions; cached beside the lens
print(ev.summary())
ev.plot()"""),
    ("code", """ev.to_frame()[["kl_logit_bits", "kl_tuned_bits", "kl_bias_bits", "kl_ratio_tuned_logit",
               "ppl_logit", "ppl_tuned", "ppl_bias"]].iloc[::3].round(3)"""),
    ("md", """And on the fact prompts of `interp/editing/records/facts.jsonl` (test split): **prediction depth**, the
first row from which the model's final top-1 stays top-1."""),
    ("code", """records = interp.rome.load_records(split="test")[:100]
depth = interp.prediction_depth(model, records, tl, progress=False)
print(depth.summary())
depth.plot()"""),
    ("md", """What the difference says about the early layers. With the logit lens SmolLM2 looks as if it knew nothing
until the very end: 21-28 bits of KL in the rows shown from 3 to 21, perplexities from tens of millions to
billions. The tuned
lens brings the KL from 154 to 6 bits at the embedding (26x lower) and keeps it at most 0.31 of the logit lens's
at every row up to 24 (the worst is row 1; the rows shown from 3 to 27 are 4-9x lower), with a perplexity that
falls from ~1,200
at the embedding to the model's own 17.6. So the early and middle residuals carry a usable next-token
prediction that improves layer by layer; the logit lens hides it because SmolLM2's intermediate layers write in
a basis the tied unembedding does not read. The bias-only baseline recovers only part of it (it keeps about
40-60% of the logit lens's KL in the rows shown from 3 to 24): a shift is not enough, the basis has to rotate. For facts the picture is the
opposite: even through the tuned lens the final answer settles late (mean depth 26.4 of 30 against 29.4 for the
logit lens), so the fact itself is written by the last blocks, consistent with the direct logit attribution
above.

**Caveats.** This lens was fitted on 4,096 positions of encyclopedic text (BOS excluded), with a least-squares
start and 4 KL steps, where the paper uses ~65M tokens of SGD (the default, 16,384 positions and 16 steps, is
not what is shown here). It is a lens onto this model's residual stream on text like that, not a
causal claim: a translator can also read features a layer computes but never uses for the next token."""),
]

nb = nbf.v4.new_notebook()
nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in cells]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, Path(__file__).with_name("01_residual_stream_and_logit_lens.ipynb"))
