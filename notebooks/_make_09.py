"""The text of 09_circuit_tracing.ipynb. ``python notebooks/execute.py 09`` rebuilds the notebook from here and
executes it in place (it is committed with its outputs); running this file alone writes it without outputs."""

from pathlib import Path

import nbformat as nbf

cells = [
    ("md", """# 09 · Circuit tracing: attribution graphs, checked against the real model

An **attribution graph** (Ameisen et al. 2025, "Circuit Tracing") answers "which features, through which paths,
produced this token". Every MLP is replaced by its transcoder plus an **error** term (what the transcoder misses,
held constant), and every attention pattern and norm scale is frozen at its value on the prompt. What is left is
linear, so every edge is an exact direct effect: a feature's activation times the gradient of its target through
the frozen model. The graph's nodes are the active features (layer, position, feature), one error node per (layer,
position), the token embeddings and the top logits; pruning keeps the nodes and edges that carry most of the
influence on the logits.

Because the frozen model reproduces the real logits exactly (the tests check it to 1e-4, every row's edges against
its target's value, and every edge against the explicit Jacobian on a small model), a graph is exact *about the
frozen model*. Whether it is right *about the real model*, where attention and the features' TopK selections respond
to an ablation, is a separate question, and this notebook asks it each time a graph makes a claim.

Two sets of numbers appear, kept apart:

* **live**: transcoders at all 30 layers trained in this notebook on 40,000 tokens (a few minutes on 2 cores), so that
  every cell reruns on a laptop and in the tests — far weaker than the full ones, so graphs carry more error;
* **stored**: studies run with the full transcoders (2,000,000 tokens, notebook 08), each JSON file with the
  commit, command and machine that made it: the faithfulness study over 50 test-split facts
  (`studies/graphs_faithfulness/`), the same rules on this notebook's prompts (`studies/graphs_stories/`), and the
  swap over many fact pairs (`studies/graphs_swap/`)."""),
    ("code", """import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch

import interp

torch.set_num_threads(2)
model = interp.load()
tc = interp.train_transcoders(model, tokens=40_000, progress=False)      # every layer; cached after the first run
print(f"{len(tc)} transcoders, width {tc[0].width}, k {tc[0].k}, trained on {tc.settings['tokens']:,} tokens")"""),
    ("code", """# drift: rtol=0.05 - trained on the CPU: float reductions differ in the last bits between CPUs
q = interp.features.evaluate(model, tc, tokens=4_000, ce_tokens=256, progress=False)
ft = q.to_frame()
print(f"held out, median over layers: FVU {ft['fvu'].median():.3f} (neurons at the same L0 "
      f"{ft['fvu_neurons'].median():.3f}), CE-loss score {ft['ce_score'].median():.3f} (neurons "
      f"{ft['ce_score_neurons'].median():.3f})")"""),
    ("code", """# drift: rtol=0.4 - with all 30 layers replaced the argmax is fragile: same seed, Intel Xeon printed 34 of 506, AMD EPYC 25
s = q.stack
print(f"top-1 agreement with every layer replaced: {s['top1_agreed']} of {s['positions']} positions, "
      f"{s['top1_agreement']:.3f} (95% interval {s['top1_ci'][0]:.3f} to {s['top1_ci'][1]:.3f})")"""),
    ("md", """These live transcoders are much weaker than the stored ones (median FVU 0.269, CE-loss score 0.882 against the
neurons' 0.450, top-1 agreement 0.468 at 2M tokens): more of each MLP's write is left to the error nodes, which is
what the replacement and completeness scores below measure. At 40,000 tokens they are no better than the neuron
baseline: their median FVU is above the k largest neurons' (0.681 against 0.627) and their CE-loss score about
level with it (0.442 against 0.434, over 506 predicted tokens). The graphs below are built on dictionaries this
weak; the faithfulness figures quoted from the studies use the 2M-token ones.

The top-1 figure is the least stable number here. With every MLP replaced the stack's next token is fragile, and
the last bits of training, which differ between CPUs, move it: from the same seed, an Intel Xeon printed 34 of 506
and an AMD EPYC 25 of 506, about what two independent samples of 506 positions would differ by. Read it as "a few
percent", not to three decimals; the per-layer medians above agree between the two machines to the third."""),
    ("md", """## 1 · The Eiffel Tower

`attribution_graph(model, tc, text, targets=[" Paris"])`: one logit node, the answer's (logit minus the mean
logit). Every active feature gets a row (the exact graph; `max_feature_nodes=` computes only the most influential
ones for long prompts)."""),
    ("code", """# drift: rtol=0.05 - features of the transcoders trained above
PROMPT = "The Eiffel Tower is located in the city of"
g = interp.attribution_graph(model, tc, PROMPT, targets=[" Paris"])
print(g.summary())
print({k: round(v, 3) for k, v in g.scores.items()})"""),
    ("code", """g.plot()"""),
    ("md", """Where the influence sits, by token and kind of node (the share of all influence on the logit; a node's
influence sums over every path from it to the logit):"""),
    ("code", """# drift: rtol=0.05 - features of the transcoders trained above
n = g.nodes
by_pos = n[n["kind"] != "logit"].pivot_table(index=["pos", "token"], columns="kind", values="influence",
                                              aggfunc="sum", fill_value=0.0)
(by_pos / n["influence"][n["kind"] != "logit"].sum()).round(3)"""),
    ("md", """The ten features of largest influence, with the graph's prediction of what ablating each alone does to the
answer's logit (`predicted`: its total effect through every path of the frozen model), and the same ablation run on
the **real** model (`interp.features.intervene`: the feature set to 0 at its position, the transcoder's error kept,
attention and every later feature free to respond):"""),
    ("code", """# drift: rtol=0.05 - features of the transcoders trained above
toks = model.to_tokens(PROMPT)
paris = model.to_single_token(" Paris")


def centred(logits, token):            # a logit node's value: the logit minus the mean logit
    return float(logits[token] - logits.mean())


base = float(n.loc[n["kind"] == "logit", "activation"].iloc[0])     # the graph's logit node: the real model's value
top = g.predicted_ablation().head(10)
measured = []
for r in top.itertuples():
    with torch.no_grad(), interp.features.intervene(model, tc, [(int(r.layer), int(r.feature), "ablate", 0.0,
                                                                  [int(r.pos)])]):
        measured.append(centred(model.forward(toks)[0, -1].float(), paris) - base)
top = top.assign(measured=measured)
agree = int(((top["predicted"] > 0) == (top["measured"] > 0)).sum())
print(f"sign agreement {agree}/10; Spearman (Pearson on ranks) {top['predicted'].rank().corr(top['measured'].rank()):.2f}")
top[["layer", "pos", "token", "feature", "activation", "influence", "predicted", "measured"]].round(3)"""),
    ("md", """On this prompt, with the live transcoders, the graph is a poor guide to single ablations: the
measured sign matches in 5 of 10, the ranks correlate at 0.32, and the predicted effects are several times the
measured ones (−7.9 predicted against −0.9 measured for the first feature). All ten are layer-0 features, eight of
them at the last token. A layer-0 feature's prediction sums its paths through every later feature, each taken as
linear with its TopK selection frozen, while in the real model later selections and attention respond. That is one
likely reason; it is not tested here."""),
    ("md", """### Over 50 facts, with the full transcoders (stored)

`studies/graphs_faithfulness/run.py` does the same for 50 test-split facts the model gets right: each fact's top-10
features by influence, ablated one at a time in the real model (500 ablations), and, layer by layer, the graph's
influence against exhaustive activation patching of each MLP's output (the subject swapped for another of the same
relation, all positions). The intervals resample prompts, not ablations, since one prompt's ablations are not
independent."""),
    ("code", """doc = json.loads(Path("../studies/graphs_faithfulness/results.json").read_text())
print(f"`{doc['command']}` at commit {doc['commit'][:10]}, {doc['seconds'] / 60:.0f} min, "
      f"{doc['machine']['threads']} threads; dictionaries {doc['dictionaries']['tokens']:,} tokens")
ci = doc["intervals_95"]
pd.DataFrame([
    ("sign agreement (top-10 ablations)", "≥ 0.80", doc["sign_agreement"], ci["sign_agreement"]),
    ("Spearman, predicted vs measured", "≥ 0.60", doc["spearman_feature_effects"], ci["spearman_feature_effects"]),
    ("Spearman per prompt, median", "", doc["median_spearman_per_prompt"], None),
    ("Spearman over layers, features vs MLP patching", "≥ 0.70", doc["spearman_layers"], None),
    ("the same, error nodes included", "", doc["spearman_layers_with_errors"], None),
], columns=["figure", "target", "value", "95% interval over prompts"]).round(3)"""),
    ("code", """fig, ax = plt.subplots(figsize=(8, 3.2))
layers = range(len(doc["patching_layer_effect"]))
ax.plot(layers, doc["patching_layer_effect"], "o-", label="MLP activation patching (logit diff, all positions)")
ax2 = ax.twinx()
ax2.plot(layers, doc["graph_layer_influence"], "s-", color="C1", label="graph: features' influence")
ax2.plot(layers, doc["graph_layer_influence_with_errors"], "^-", color="C2", label="graph: features + errors")
ax.set_xlabel("layer")
ax.set_ylabel("patching effect")
ax2.set_ylabel("influence (mean over facts)")
fig.legend(loc="upper center", fontsize=7, ncol=3)
fig.tight_layout(rect=(0, 0, 1, 0.9))"""),
    ("md", """With the full transcoders the graphs are right about the real model more often than not, but below
the issue's targets: the predicted single ablation has the measured sign in 76.2% of 500 ablations (95% interval
over prompts 72.0–80.0%; target 80%) and ranks the measured effects at Spearman 0.54 (0.45–0.63; target 0.60;
median per prompt 0.61). Layer by layer the graph's influence and MLP patching agree at 0.44 (target 0.70), and the
disagreement has a shape. Both put layer 0 first by far (patching 1.01, the graph 0.148): the MLP that rebuilds the
subject's word from its pieces (notebook 05). After it, patching falls steadily through layers 1–9 (0.20 to 0.07)
and has late bumps at layers 23 and 29, while the graph spreads its influence thinly over every layer (0.01–0.04),
with small bumps at 22 and 29. Counting the error nodes changes no layer's rank enough to move the correlation
(0.442 both ways). Part of the gap is that the two measure different things: patching asks what carries the
*difference* between two subjects; influence counts everything that reaches the logit on one prompt, the template
included. The next cell separates that part."""),
    ("md", """### Layer by layer, asked as patching asks it (stored)

`studies/graphs_faithfulness/layers_contrast.py` asks the graph patching's question. Each fact's graph carries
both answers as logit nodes. Every feature's total contribution to logit(answer) − logit(other answer) in the local
replacement model is then summed by layer. That contribution is `g.contributions(0, against=1)`, and it includes
the paths through later features.

Three sums were written down before any run:
* signed;
* absolute;
* signed with the error nodes.

40 dev pairs chose one. The 50 test pairs of the table above (the same pairs, the same patching) are scored on all
three."""),
    ("code", """lc = {s: json.loads(Path(f"../studies/graphs_faithfulness/layers_contrast_{s}.json").read_text())
      for s in ("dev", "test")}
t = lc["test"]
print(f"`{t['command']}` at commit {t['commit'][:10]}, {t['seconds'] / 60:.0f} min; dev chose: {lc['dev']['chosen']}")
rho = pd.DataFrame({f"{s} ({lc[s]['n_pairs']} pairs)": lc[s]["spearman_layers"] for s in lc}).round(3)
rho.loc["influence on the answer alone (run.py)"] = [float("nan"), doc["spearman_layers"]]
rho.astype(float).round(3)"""),
    ("code", """fig, ax = plt.subplots(figsize=(8, 3.2))
ax.plot(layers, t["patching_layer_effect"], "o-", label="MLP activation patching (logit diff, all positions)")
ax2 = ax.twinx()
ax2.plot(layers, t["graph_layers"]["signed"], "s-", color="C1", label="graph: features' contribution to the difference")
ax2.axhline(0, color="0.8", lw=0.8)
ax.set_xlabel("layer")
ax.set_ylabel("patching effect")
ax2.set_ylabel("contribution (mean over facts)")
fig.legend(loc="upper center", fontsize=7, ncol=2)
fig.tight_layout(rect=(0, 0, 1, 0.9))"""),
    ("md", """Asked about the difference, the graph agrees with patching much better: Spearman 0.665 over layers on
the 50 test facts with the sum dev chose (signed; 0.681 on dev), against 0.442 for influence on the answer alone.
That is still short of the 0.70 target: asking the same question closes most of the gap, not all of it.

What is left has a place. The graph gives layers 28 and 29 large **negative** contributions (−0.94, −1.32): their
features push the other answer up. Patching gives those layers about nothing (−0.01) and a positive 0.15. Layers
0–8 and 23 are high in both, but patching puts layer 0 far above the rest (1.01, against 0.20 or less), and the
graph does not (0.56, below layers 4, 6, 7 and 23). Counting the error nodes lowers the agreement (0.616). Their largest change is at
layer 11 (+1.11), the layer whose transcoder is worst in notebook 08; this study does not say at which
positions."""),
    ("md", """### The graph beside patching on this prompt (notebook 05's question)

Notebook 05 traced this prompt by corrupting the subject: most of the early effect was MLP 0 rebuilding the word
at *iffel*, little sat at the last subject token, and late MLPs at the last token (layers 21 and 24) carried the
rest. The same question here with exhaustive MLP patching (*The Colosseum* → *The Eiffel Tower*, each (layer,
position) restored alone, metric logit(Paris) − logit(Rome)) beside the graph's influence of each (layer, position),
features and error together:"""),
    ("code", """# drift: rtol=0.05 - features of the transcoders trained above
CORRUPT = "The Colosseum is located in the city of"
metric = interp.patching.logit_diff([" Paris"], [" Rome"])
patch = interp.activation_patching(model, PROMPT, CORRUPT, metric, over="mlp_out", positions="each")
grid = torch.zeros_like(patch.values)
inner = n[n["kind"].isin(["feature", "error"])]
for (layer, pos), v in inner.groupby(["layer", "pos"])["influence"].sum().items():
    grid[int(layer), int(pos)] = v
cells = pd.DataFrame({"patching": patch.values.flatten(), "graph": grid.flatten()})
print(f"Spearman over the {len(cells)} (layer, position) cells: "
      f"{cells['patching'].rank().corr(cells['graph'].rank()):.2f}")
tokens = model.to_str_tokens(toks[0])
for name, v in (("patching", patch.values), ("graph", grid)):
    flat = v.flatten().topk(5).indices
    print(f"{name:9} top 5: " + ", ".join(f"L{int(i) // v.shape[1]} {tokens[int(i) % v.shape[1]]!r}" for i in flat))"""),
    ("md", """On this prompt they do not agree at all (Spearman −0.03 over the 330 cells). Patching's five largest
cells are all MLPs at *iffel* (layers 0, 6, 3, 1 and 5): the subject's word, which is what the swap changes.
The graph's five largest are layer-0 cells at the template's tokens (*of*, *the*, *city*, *The*, *in*): they
feed the logit on this prompt whatever the subject is, so patching cannot see them, while the graph counts them.
The graph says where the logit's value comes from and patching where the fact's difference comes from; with these
live transcoders the graph's answer is also dominated by layer-0 features, as the tables above show."""),
    ("md", """## 2 · A two-step fact

*"The Eiffel Tower is in a country whose official language is"* → *French*: the answer needs an intermediate the
prompt never names (France). If the graph shows the model passing through it, some influential feature should
carry France. The rule, fixed before looking: among the 20 features of largest influence, those whose decoder
promotes *France*, *French* or *Paris* among its 10 most promoted tokens (its direct path through the unembedding
only)."""),
    ("code", """# drift: rtol=0.05 - features of the transcoders trained above
TWO_STEP = "The Eiffel Tower is in a country whose official language is"
g2 = interp.attribution_graph(model, tc, TWO_STEP, targets=[" French"])
print(g2.summary())
hits = []
for r in g2.predicted_ablation().head(20).itertuples():
    promoted = [t for t, _ in interp.features.promoted_tokens(model, tc[int(r.layer)], int(r.feature))["promoted"]]
    found = [t for t in promoted if t.strip() in ("France", "French", "Paris")]
    hits.append((int(r.layer), int(r.pos), r.token, int(r.feature), round(float(r.influence), 4), found,
                 promoted[:5]))
pd.DataFrame(hits, columns=["layer", "pos", "token", "feature", "influence", "France-like", "promoted (top 5)"])"""),
    ("md", """No feature passes the rule. 18 of the 20 most influential features are at layer 0 (12 of those at
the last token) and their decoders promote word fragments; none promotes France, French or Paris. With these live
transcoders the graph does not show the intermediate step. That is a null result about these dictionaries, not
evidence that the model skips France. Section 5 runs the same rule with the full transcoders."""),
    ("md", """## 3 · Indirect-object identification

*"When Mary and John went to the store, John gave a drink to"* → *Mary*. Notebook 06 found this behaviour in
attention heads (L23H3 alone restores 0.69 of the clean–corrupted gap; L20H0, L19H2, L29H1 and L17H4 follow). A
graph freezes every attention pattern: heads are not nodes, and *why* a head attends to Mary (its query and key)
is outside the graph. What the graph can show is which positions' features reach the answer through the frozen
heads' value paths. Logit nodes: Mary and John."""),
    ("code", """# drift: rtol=0.05 - features of the transcoders trained above
IOI = "When Mary and John went to the store, John gave a drink to"
g3 = interp.attribution_graph(model, tc, IOI, targets=[" Mary", " John"])
print(g3.summary())
n3 = g3.nodes
inner3 = n3[n3["kind"].isin(["feature", "error", "embedding"])]
share = inner3.groupby(["pos", "token"])["influence"].sum() / inner3["influence"].sum()
share.round(3).to_frame("share of influence").T"""),
    ("code", """# drift: rtol=0.05 - features of the transcoders trained above
ioi_top = g3.predicted_ablation().head(8)
ioi_top[["layer", "pos", "token", "feature", "activation", "influence", "predicted"]].round(3)"""),
    ("md", """The last token (*to*) carries 0.34 of the influence. Among the names, *Mary* (the indirect object)
carries 0.086, and each *John* carries 0.032–0.033; the comma (0.096) and *the* (0.073) carry as much as Mary. The
most influential features are again layer-0 features at the last token, with predicted effects on logit(Mary) of
both signs. Set beside notebook 06: the heads patching found (L23H3 and the others) are frozen inside the graph's
edges. The influence at Mary's position is where a head's value path from the indirect object would start, but the
graph cannot say which head carries it, or why the head attends there. The graph neither confirms nor contradicts
notebook 06's heads; with these transcoders it does not single out the indirect object either."""),
    ("md", """## 4 · Swapping Paris for Rome

The paper's "swap Texas for California" experiment, on a fact this model knows: in the Eiffel prompt, turn **off**
the `k` features of largest influence on *Paris*, and turn **on** the `k` features of largest influence on *Rome*
in the graph of *"The Colosseum is located in the city of"* — each clamped, at the same position (both subjects
are four tokens), to its activation there. Then read the real model's next token. `k` = 10 was fixed beforehand
(the faithfulness study's top-10); 5 and 20 are shown beside it. The control: `k` active Colosseum features drawn at
random (10 seeded draws) in place of the graph's top `k`."""),
    ("code", """# drift: rtol=0.05 - features of the transcoders trained above
gc = interp.attribution_graph(model, tc, CORRUPT, targets=[" Rome"])
rome = model.to_single_token(" Rome")
eiffel_top = g.predicted_ablation()
colosseum = gc.predicted_ablation()


def next_tokens(edits):
    with torch.no_grad(), interp.features.intervene(model, tc, edits):
        p = model.forward(toks)[0, -1].float().softmax(-1)
    v, i = p.topk(3)
    return p[paris].item(), p[rome].item(), [(model.to_str_tokens(torch.tensor([int(j)]))[0], round(float(x), 3))
                                             for x, j in zip(v, i)]


def swap(off, on):
    return ([(int(r.layer), int(r.feature), "ablate", 0.0, [int(r.pos)]) for r in off.itertuples()] +
            [(int(r.layer), int(r.feature), "clamp", float(r.activation), [int(r.pos)]) for r in on.itertuples()])


rows = [("none", *next_tokens([]))]
for k in (5, 10, 20):
    rows.append((f"k={k}: Paris's top k off", *next_tokens(swap(eiffel_top.head(k), colosseum.head(0)))))
    rows.append((f"k={k}: off, and Rome's top k on", *next_tokens(swap(eiffel_top.head(k), colosseum.head(k)))))
# chosen after the rule above failed (so an exploration, not a test): by signed prediction, the features whose
# ablation the graph says lowers the answer most
for_paris = eiffel_top.sort_values("predicted").head(10)
for_rome = colosseum.sort_values("predicted").head(10)
rows.append(("signed, k=10: off, and on (chosen after)", *next_tokens(swap(for_paris, for_rome))))
pd.DataFrame(rows, columns=["intervention", "p(Paris)", "p(Rome)", "top 3"]).round(4)"""),
    ("code", """# drift: rtol=0.05 - features of the transcoders trained above
gen = torch.Generator().manual_seed(0)
k = 10
wins = []
for _ in range(10):
    pick = torch.randperm(len(colosseum), generator=gen)[:k].tolist()
    p_paris, p_rome, _ = next_tokens(swap(eiffel_top.head(k), colosseum.iloc[pick]))
    wins.append(p_rome > p_paris)
print(f"random Colosseum features in place of the graph's top {k}: Rome above Paris in {sum(wins)} of 10 draws")"""),
    ("md", """The swap fails with these transcoders. Turning off the 5 features of largest influence on *Paris*
**raises** p(Paris) from 0.304 to 0.664: influence is unsigned, and the predicted column above shows that several
of the most influential features push *against* the answer. With k = 10 (the rule fixed beforehand), p(Paris) falls
to 0.219 and p(Rome) is 0.006, below its 0.008 with no intervention; k = 20 does no better. The rule chosen after
seeing this (signed: the ten features each graph says support its answer most) gives p(Paris) 0.225 and p(Rome)
0.009. Random Colosseum features never put Rome above Paris either (0 of 10 draws), so no rule had a baseline to
beat. The paper's experiment needs features that carry the fact (its Texas and California); these live,
layer-0-dominated dictionaries do not provide them. Section 5 runs it with the full transcoders."""),
    ("md", """## 5 · The same rules with the full transcoders (stored)

Sections 1, 2 and 4 end on results about the live dictionaries. `studies/graphs_stories/run.py` applies the same
rules, unchanged, to the full transcoders (2,000,000 tokens), which cannot be trained inside the tests. The script
was committed before those dictionaries were trained, and on the live ones it prints this notebook's numbers
(`studies/graphs_stories/README.md`)."""),
    ("code", """st = json.loads(Path("../studies/graphs_stories/results.json").read_text())
print(f"`{st['command']}` at commit {st['commit'][:10]}, {st['seconds'] / 60:.1f} min, "
      f"{st['machine']['threads']} threads; dictionaries {st['dictionaries']['tokens']:,} tokens")
e = st["eiffel"]
print("Eiffel:", e["summary"])
print(f"top-10 ablations in the real model: sign agreement {e['sign_agreement']}/10, Spearman {e['spearman']:.2f}")
print(f"(layer, position) cells against MLP patching: Spearman {e['spearman_cells']:.2f} over {e['cells']} cells")
print("  patching top 5:", ", ".join(e["patching_top5"]))
print("  graph top 5:   ", ", ".join(e["graph_top5"]))
pd.DataFrame(e["top10"]).astype({"layer": int, "feature": int}).assign(predicted=e["predicted"],
                                                                      measured=e["measured"]).round(3)"""),
    ("code", """ts = st["two_step"]
print("two-step:", ts["summary"])
print(f"{ts['passing']} of the 20 most influential features promote France, French or Paris")
pd.DataFrame(ts["top20"]).assign(promoted=lambda f: f["promoted"].str[:5])[
    ["layer", "pos", "token", "feature", "influence", "predicted", "france_like", "promoted"]].round(3)"""),
    ("code", """io = st["ioi"]
print("IOI:", io["summary"])
pd.DataFrame(io["share_by_position"]).set_index(["pos", "token"])["share"].round(3).to_frame("share of influence").T"""),
    ("code", """sw = st["swap"]
print(f"random active Colosseum features in place of the top 10: Rome above Paris in "
      f"{sw['random_control_rome_wins_of_10']} of 10 draws")
pd.DataFrame(sw["rows"]).assign(top3=lambda f: [[(t, round(p, 3)) for t, p in r] for r in f["top3"]]).round(4)"""),
    ("md", """On the Eiffel prompt the full transcoders make the graph a much better guide to single ablations: 8 of 10
signs right and Spearman 0.81, against 5 of 10 and 0.32 with the live ones. Their ten most influential features
have moved from layer 0 to the last token's later layers (29, 24, 22, 20) plus four at layer 0. The other claims
do not change:

* **Graph against patching, cell by cell:** Spearman −0.02 over 330 cells (live −0.03). Patching still finds the
  fact's difference in the MLPs at *iffel*. The graph's largest cells are at the template's tokens, and one is at
  the BOS token's layer 11.
* **The two-step prompt:** again **0 of 20** features pass the France rule. The most influential ones sit at *is*
  in layers 21–29, and their decoders promote language words (*languages*, *English*, *language*, *dialects*): a
  "name a language here" signal, not France. The rule reads only the direct path through the unembedding, so this
  is no evidence either way about an intermediate carried in the residual stream. It is still a null result, now
  with the stored dictionaries too.
* **IOI:** *Mary* now carries 0.16 of the influence, more than either *John* (0.064, 0.062), and the last token
  carries 0.26. The graph points at the indirect object where the live dictionaries did not. It still cannot say
  which head carries it.
* **The swap fails again under this notebook's rules, and it is not the dictionaries' fault alone.** With the
  rule's k = 10, turning Paris's top features off and Rome's on **raises** p(Paris) from 0.304 to 0.581, and p(Rome)
  is 0.004. The signed variant chosen after does not put Rome above Paris either (0.229 / 0.010), nor do random
  features (0 of 10).

Influence is unsigned, and it is about one answer. So a rule that takes the top features by influence switches
off features that push against the answer as well as for it, and features that would say any city. A swap needs
the features that carry *which* city: those whose effect on logit(Paris) − logit(Rome) is largest. The last three
rows use that rule, **contrast**, which the next section chose on dev fact pairs: the 40 features each graph
predicts most raise its answer over the other, the Colosseum's clamped at twice their activation. Then p(Paris)
falls to 0.006 and p(Rome) rises to 0.054. Rome is above Paris, but not first: *S* leads with 0.105. Each half alone
leaves Paris above Rome."""),
    ("md", """### The swap over many fact pairs (stored)

One prompt cannot separate a rule from luck. `studies/graphs_swap/run.py` asks the swap of many pairs: a fact
prompt x with answer a, and a prompt y with the same template and length but another subject of the same relation,
whose answer b the model also gets right.

On x, the chosen features of x's graph are switched off and those of y's graph are clamped on. Success means b's
logit ends above a's.

The grid was fixed before any run: rule (contrast, or this notebook's influence rule) × k ∈ {5, 10, 20, 40} ×
clamp scale ∈ {1, 2}. It was run on 40 dev pairs, and the best was run once on 50 test pairs.

The control is matched random features: each chosen feature is replaced by another active feature at the same
layer and position, with the same count and scale."""),
    ("code", """sw_doc = {s: json.loads(Path(f"../studies/graphs_swap/results_{s}.json").read_text()) for s in ("dev", "test")}
print(f"dev chose: {sw_doc['dev']['chosen']}; test: `{sw_doc['test']['command']}` at commit "
      f"{sw_doc['test']['commit'][:10]}, {sw_doc['test']['seconds'] / 60:.0f} min")
rows = []
for split, d in sw_doc.items():
    t, n = d["table"], d["n_pairs"]
    settings = {k.split(" off")[0].split(" on")[0].split(" matched")[0] for k in t} - {"none"}
    for setting in sorted(settings, key=lambda x: (x.split()[0], int(x.split()[1][2:]), float(x.split()[2][6:]))):
        v = t[setting]
        rows.append((split, setting, f"{v['b_wins']}/{n}", [max(0.0, x) for x in v["b_wins_95"]], f"{v['b_top']}/{n}",
                     *(f"{t[f'{setting} {c}']['b_wins']}/{n}" for c in ("off only", "on only", "matched random"))))
cols = ["split", "rule", "b above a", "95% interval (%)", "b first", "off only", "on only", "matched random"]
pd.DataFrame(rows, columns=cols).set_index(["split", "rule"])"""),
    ("md", """The contrast rule swaps the answer in **48 of 50 test pairs** (95% interval 86.5–98.9%). Matched random
features at the same layers, positions, count and scale do so in 4 of 50. Dev, where the rule was chosen, gave 40
of 40.

Most of the effect comes from clamping the other subject's features on: that half alone gives 45 of 50. Switching
a's features off alone gives 11 of 50. This notebook's influence rule gives 2–11 of 40 on dev, against 0–4 for
its matched random features.

The swap removes a's lead more often than it installs b: b becomes the top token in 20 of 50 test pairs. The
probability freed from a often goes to a third token, as *S* on the Eiffel prompt above. Forty features clamped at
twice their value is a large intervention. The claim is that the graph's signed contrast points at the features
that carry which answer, far better than chance; it is not that a few features hold a fact."""),
    ("md", """## 6 · Gemma 3 270M, with its own full transcoders (stored)

Gemma's 18 transcoders were trained with SmolLM2's settings, nothing tuned for Gemma (width 2,304, k 16, 2M
tokens; `studies/features_full/README.md`). The same scripts then ran on Gemma's own fact records: exactness on
three prompts, the 50-fact faithfulness benchmark, the layer contrast, and the swap with the rule SmolLM2's dev
pairs chose. Nothing below was chosen on Gemma."""),
    ("code", """G = Path("../studies")
q = json.loads((G / "features_full/quality_gemma3-270m.json").read_text())
print(f"training: {q['train_seconds_this_call'] / 3600:.1f} h on {q['machine']['cores']} cores; {q['summary']}")
ex = json.loads((G / "graphs_exactness/results_gemma3-270m_rerun.json").read_text())
for r in ex["prompts"]:
    print(f"exactness {r['text']!r}: frozen vs real logits {r['frozen_vs_real_max_abs']:.1e}; "
          f"edges + constants {r['edges_plus_constants_over_bound']:.2f} of the bound, "
          f"{r['rows_outside_bound']} of {r['rows']} rows outside it")
runs = {"SmolLM2": ("results.json", "layers_contrast_test.json", "results_test.json"),
        "Gemma 3 270M": ("results_gemma3-270m.json", "layers_contrast_test_gemma3-270m.json",
                         "results_test_gemma3-270m.json")}
rows = []
for name, (faith, contrast, swap) in runs.items():
    f = json.loads((G / "graphs_faithfulness" / faith).read_text())
    c = json.loads((G / "graphs_faithfulness" / contrast).read_text())
    w = json.loads((G / "graphs_swap" / swap).read_text())
    t = w["table"]["contrast k=40 scale=2"]
    rows.append((name, f["sign_agreement"], [round(x, 3) for x in f["intervals_95"]["sign_agreement"]],
                 f["spearman_feature_effects"],
                 f["spearman_layers"], c["spearman_layers"]["signed"], f"{t['b_wins']}/{w['n_pairs']}",
                 f"{w['table']['contrast k=40 scale=2 matched random']['b_wins']}/{w['n_pairs']}",
                 f"{t['b_top']}/{w['n_pairs']}"))
pd.DataFrame(rows, columns=["model", "sign agreement", "95% interval", "Spearman, ablations", "layers: influence",
                            "layers: signed contrast", "swap: b above a", "matched random", "b first"]
             ).set_index("model").round(3)"""),
    ("md", """Gemma's graphs are exact about its frozen model on the three prompts, and its transcoders reconstruct
better than SmolLM2's, but the graphs agree less with the real model on every faithfulness figure: sign
agreement 0.684 against 0.762, Spearman 0.23 against 0.54, layers 0.16 against 0.44 (0.54 against 0.67 by the
signed contrast). One stored exactness run, the first (`results_gemma3-270m.json`), broke the bound on the Eiffel
prompt, and neither rerun reproduced it; the cause was not found (`studies/graphs_exactness/README.md`).

The swap transfers: SmolLM2's rule puts b above a in 48 of 50 Gemma test pairs, against 10 of 50 for matched random
features. But b becomes Gemma's top token in only 1 of 50 (SmolLM2: 20), so on Gemma the swap removes a's lead
and does not install b."""),
    ("md", """## What this notebook does not show

* The live graphs are built on transcoders trained on 40,000 tokens; their features are not the stored run's, and
  their larger error nodes carry more of each graph. The 50-fact figures above are the full transcoders'.
* A graph is exact about the frozen model only. Each claim above that is about the real model comes with the real
  model's answer beside it (ablations, patching, the swap), and where they disagree it says so.
* Heads are not graph nodes: the attention patterns are frozen, so a graph says nothing about why a head attends
  where it does (notebook 06's patching answers that).
* The interactive graph (`g.view()`, with feature cards) and the circuit-tracer export (`g.to_circuit_tracer()`)
  are left to the CLI (`interp graph TEXT --target " Paris" --html graph.html`): views need a live Jupyter front
  end and GitHub shows only their text."""),
]

nb = nbf.v4.new_notebook()
nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in cells]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
out = Path(__file__).parent / "09_circuit_tracing.ipynb"
nbf.write(nb, out)
print(f"wrote {out}")
