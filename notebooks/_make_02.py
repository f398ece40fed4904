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
to attend to?"""),
    ("code", """import torch, matplotlib.pyplot as plt
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
    ("md", """## Per-head statistics
Averaged over query positions 1..n-1 (position 0 can only see itself): entropy (nats), weight on the first
token, weight on the previous token, and the expected distance to the attended token."""),
    ("code", """stats = res.stats()
print("previous-token heads"); display(stats.sort_values("prev_token", ascending=False).head(4).round(3))
print("sink heads");           display(stats.sort_values("first_token", ascending=False).head(4).round(3))"""),
    ("code", """fig, axes = plt.subplots(1, 2, figsize=(9, 7))
for ax, col in zip(axes, ["first_token", "prev_token"]):
    im = ax.imshow(stats[col].unstack().values, aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax.set_title(col); ax.set_xlabel("head"); ax.set_ylabel("layer")
    fig.colorbar(im, ax=ax, fraction=0.05)
fig.tight_layout()"""),
    ("md", """Two regimes: in layers 0-2 and 10-11 heads spread their attention over the content, elsewhere about half of
the weight or more goes to the first token, most of all in the upper-middle layers — the sink that lets a head
"do nothing". A few heads stand out as previous-token heads (high `prev_token`, `mean_offset` near 1). The
sharpest is plotted below."""),
    ("code", """best = stats.prev_token.idxmax()
print("sharpest previous-token head:", best, stats.loc[best].round(3).to_dict())
res.plot(*best)"""),
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
plt.figure(figsize=(4, 3.4)); plt.imshow(sim, cmap="magma"); plt.colorbar()
plt.title("pattern similarity between heads (mean over layers)"); plt.xlabel("head"); plt.ylabel("head");"""),
    ("md", """On average only slightly (every head's pattern is dominated by the same sink column), but where a KV head
is specialised its whole group follows: in layer 18 the three heads of KV group 2 (heads 6-8) are almost pure
sinks."""),
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
    print(f"L{l}H{h} (KV group {res.kv_groups[h]}): induction {v:.2f}, first-token weight on natural text {stats.loc[(l, h), 'first_token']:.2f}")"""),
    ("code", """l, h = divmod(int(top.indices[0]), 9)
rep.plot(l, h)"""),
    ("code", """rep.show(layers=[l])  # interactive: click a head, hover a token of the second copy for its row"""),
    ("md", """The strongest induction heads are the very heads that looked like idle sinks on the natural sentence:
with no earlier copy of the current token to attend to, they park on the first token; as soon as a match
exists they jump to it. A head's statistics on one text describe its default, not its function — look at it
on the input that triggers it."""),
]

nb = nbf.v4.new_notebook()
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in cells]
out = Path(__file__).with_name("02_attention_patterns.ipynb")
nbf.write(nb, out)
print(f"wrote {out}")
