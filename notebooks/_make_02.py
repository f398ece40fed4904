"""The text of 02_attention_patterns.ipynb. ``python notebooks/execute.py 02`` rebuilds the notebook from here and
executes it in place (it is committed with its outputs); running this file alone writes it without outputs."""

from pathlib import Path

import nbformat as nbf

cells = [
    ("md", """# 02 · Attention patterns in SmolLM2-135M

Every head of every layer, read from `blocks.{l}.attn.hook_pattern` in one forward pass. SmolLM2 has 30 layers of
9 query heads that share 3 key/value heads (grouped-query attention): query heads 0-2 read KV head 0, 3-5 read
KV head 1, 6-8 read KV head 2.

Questions: which heads look at the previous token, which park their attention on the first token (the
"attention sink"), do heads that share keys behave alike, and what do sink heads do when there *is* something
to attend to? One sentence illustrates; the claims about heads rest on averages over 300 Wikipedia paragraphs."""),
    ("code", """import numpy as np, torch, matplotlib.pyplot as plt
import interp

torch.set_num_threads(2)
model = interp.load()
text = "The quick brown fox jumps over the lazy dog. Alice gave Bob the book because Bob asked for it."
res = interp.attention(model, text)
res  # the interactive view: every head (layer x head); click one, hover a token for its weights"""),
    ("md", """## Trust, then look
The captured pattern must be exactly the softmax of the rotated queries against the rotated keys (each query
head using its group's key) with a causal mask. Recompute one layer independently from `hook_rot_q` /
`hook_rot_k` of the same forward pass:"""),
    ("code", """import math
layer, store = 16, {}
def keep(name):
    def fn(t, hook): store[name] = t[0].detach().float()
    return fn
names = [f"blocks.{layer}.attn.hook_rot_q", f"blocks.{layer}.attn.hook_rot_k"]
with model.hooks([(n, keep(n)) for n in names]):
    check = interp.attention(model, text, layers=[layer])
q, k = store[names[0]], store[names[1]][:, res.kv_groups]          # [pos, head, d_head]
scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
n = scores.shape[-1]
mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
print("max |captured - recomputed| =", float((scores.masked_fill(mask, -torch.inf).softmax(-1) - check.patterns[0]).abs().max()))"""),
    ("md", """## Per-head statistics: one sentence, then a corpus
Averaged over query positions 1..n-1 (position 0 can only see itself): entropy (nats), weight on the first
token, weight on the previous token, and the expected distance to the attended token. On the sentence above
(22 tokens):"""),
    ("code", """stats = res.stats()
print("previous-token heads"); display(stats.sort_values("prev_token", ascending=False).head(4).round(3))
print("sink heads");           display(stats.sort_values("first_token", ascending=False).head(4).round(3))"""),
    ("md", """One sentence is one draw. `interp.head_scan` sums the same four statistics at every query after BOS of a
corpus, batch by batch: 300 Wikipedia lead paragraphs (a seeded shuffle), each cut to 64 tokens."""),
    ("code", """import time
t0 = time.perf_counter()
corpus = interp.head_scan(model, interp.wiki_documents(300, seed=0), max_len=64)
print(corpus.summary(), f"in {time.perf_counter() - t0:.0f} s")
cs = corpus.to_frame()
print("previous-token heads"); display(cs.sort_values("prev_token", ascending=False).head(4).round(3))
print("sink heads");           display(cs.sort_values("first_token", ascending=False).head(4).round(3))
by_layer = cs.first_token.groupby("layer")
print("first-token weight per layer, mean (min-max over its 9 heads):")
print("  ".join(f"L{l} {m:.2f} ({lo:.2f}-{hi:.2f})" for l, m, lo, hi in
                zip(by_layer.mean().index, by_layer.mean(), by_layer.min(), by_layer.max())))
r = torch.corrcoef(torch.tensor(np.stack([stats.first_token.values, cs.first_token.values])))[0, 1]
print(f"sentence vs corpus, first_token over the 270 heads: Pearson r = {r:.2f}")"""),
    ("code", """fig, axes = plt.subplots(1, 2, figsize=(9, 7))
for ax, col in zip(axes, ["first_token", "prev_token"]):
    im = ax.imshow(cs[col].unstack().values, aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax.set_title(f"{col} (corpus mean)"); ax.set_xlabel("head"); ax.set_ylabel("layer")
    fig.colorbar(im, ax=ax, fraction=0.05)
fig.tight_layout()"""),
    ("md", """Over the corpus the layers fall into three groups by how much attention goes to the first token (layer
means): in layers 0-2 and 10-11 heads spread their attention over the content (0.01-0.11; no head above 0.19);
in layers 3-9 about a third goes to the first token (0.31-0.36); from layer 12 up about half or more (0.45-0.83,
highest in layers 20, 23 and 24) — the sink that lets a head "do nothing" — with layer 16 the exception (0.35).
Heads within a layer differ widely there (layer 18: 0.30 to 1.00). The one sentence gives the same picture
(r = 0.96 between its per-head first-token weights and the corpus's), so it serves as the illustration."""),
    ("code", """best = tuple(int(x) for x in cs.prev_token.idxmax())
print("strongest previous-token head over the corpus:", best, cs.loc[best].round(3).to_dict())
print("the same head on the sentence:", stats.loc[best].round(3).to_dict())
res.plot(*best)"""),
    ("md", """L16H0 is the strongest previous-token head both over the corpus (0.759 of its weight on the previous token)
and on the sentence (0.813); the next ones over the corpus are L11H1 (0.610), L1H2 (0.602) and L2H1 (0.565).
`prev_token` is what identifies them, not `mean_offset`: L16H0 also puts 0.143 of its weight on the first token,
which sits as far back as the query is long, so its expected distance is 5.22 over 64-token paragraphs (2.50 on
the 22-token sentence), far from 1. The pattern above shows both parts: the diagonal just below the main one and
a faint first column.

That this head matters, and how, is the subject of notebook 06 (section 2): L16H0 is the sender in
K-composition there — noising it only through the keys of the three top induction heads costs about as much of the
induction behaviour as noising it everywhere, and almost nothing goes through their queries or values."""),
    ("md", """## Heads that share keys
In grouped-query attention the heads of one group see the same keys; only their queries differ. Are their
patterns more alike than those of heads in different groups? Mean cosine similarity of the flattened patterns,
over all layers:"""),
    ("code", """P = res.patterns.flatten(2)                          # [layer, head, q*k]
P = P / P.norm(dim=-1, keepdim=True)
sim = torch.einsum("lhx,lgx->lhg", P, P).mean(0)      # [head, head]
same = torch.tensor([[a != b and res.kv_groups[a] == res.kv_groups[b] for b in range(9)] for a in range(9)])
diff = torch.tensor([[res.kv_groups[a] != res.kv_groups[b] for b in range(9)] for a in range(9)])
print(f"same KV group: {sim[same].mean():.3f}   different KV groups: {sim[diff].mean():.3f}")
off = sim.masked_fill(torch.eye(9, dtype=torch.bool), float("nan"))  # the diagonal is 1 by construction
fig, ax = plt.subplots(figsize=(4.6, 3.8), layout="constrained")
im = ax.imshow(off, cmap="magma", vmin=float(off.nan_to_num(1.0).min()), vmax=float(off.nan_to_num(0.0).max()))
fig.colorbar(im, ax=ax, label="mean cosine (diagonal masked)")
ax.set_title("pattern similarity between heads\\n(sentence, mean over layers)", fontsize=10)
ax.set_xlabel("head"); ax.set_ylabel("head");"""),
    ("md", """On this sentence, only slightly (0.844 against 0.809: every head's pattern is dominated by the same sink
column), but where a KV head is specialised its whole group follows: in layer 18 the three heads of KV group 2
(heads 6-8) are almost pure sinks, on the sentence and over the corpus (0.94, 0.992 and 0.995 of their weight on
the first token; 0.30-0.76 for the other six heads of the layer)."""),
    ("code", """res.plot_layer(18)"""),
    ("md", """## What a sink head does when it has something to do
A sequence of 20 random tokens, repeated. On the second copy an *induction head* attends to the token right
after the previous occurrence of the current token (offset 19). Score every head by that weight:"""),
    ("code", """g = torch.Generator().manual_seed(0)
period = 20
rand = torch.randint(1000, 10000, (period,), generator=g)
toks = torch.cat([torch.tensor([model.bos_token_id]), rand, rand])
rep = interp.attention(model, toks)
q = torch.arange(1 + period, toks.shape[0])
induction = rep.patterns[:, :, q, q - period + 1].mean(-1)         # [layer, head]
top = induction.flatten().topk(5)
for v, i in zip(top.values, top.indices):
    l, h = divmod(int(i), 9)
    print(f"L{l}H{h} (KV group {res.kv_groups[h]}): induction {v:.2f}, first-token weight on Wikipedia {cs.loc[(l, h), 'first_token']:.2f}")"""),
    ("code", """l, h = divmod(int(top.indices[0]), 9)
rep.plot(l, h)"""),
    ("code", """rep.show(layers=[l])  # interactive: click a head, hover a token of the second copy for its row"""),
    ("md", """The strongest induction heads are heads that look like idle sinks on ordinary text: over the 300 Wikipedia
paragraphs they put 0.79-0.99 of their attention on the first token. With no earlier copy of the current token
to attend to, they park there; as soon as a match exists they jump to it. A head's average statistics, even
over a corpus, describe its default, not its function — look at it on the input that triggers it."""),
]

nb = nbf.v4.new_notebook()
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in cells]
out = Path(__file__).with_name("02_attention_patterns.ipynb")
nbf.write(nb, out)
print(f"wrote {out}")
