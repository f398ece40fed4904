"""The text of 07_two_models.ipynb. ``python notebooks/execute.py 07`` rebuilds the notebook from here and executes
it in place (it is committed with its outputs); running this file alone writes it without outputs."""

from pathlib import Path

import nbformat as nbf

cells = [
    ("md", """# Two models, the same questions

SmolLM2-135M (Llama architecture) and Gemma 3 270M differ where naive analyses break: Gemma scales its embedding by
√d_model, its RMSNorms multiply by `1 + w`, every block normalises the attention and MLP outputs again before adding
them (post-norms), queries and keys are normalised, five of every six layers attend only to the last 512 tokens,
its MLP is GeGLU and its vocabulary has 262,144 tokens. interp states each difference once
(`interp/core/arch.py`); the analyses below are the same calls on both models.

1. where `" Paris"` surfaces in the residual stream (logit lens),
2. which heads are induction heads, and in which layers,
3. where facts are stored (causal tracing),
4. how well ROME rewrites the facts both models know."""),
    ("code", """import json
from pathlib import Path

import pandas as pd
import torch

import interp
import matplotlib.pyplot as plt

torch.set_num_threads(2)
models = {"SmolLM2-135M": interp.load(), "Gemma 3 270M": interp.load("gemma3-270m")}
pd.DataFrame({name: m.architecture() for name, m in models.items()})"""),
    ("md", """## 1. Where " Paris" surfaces

The logit lens reads the residual after every block through the model's own final norm and unembedding. Rows are
put on one axis as a fraction of depth (0 = the embedding, 1 = the final residual). In SmolLM2 " Paris" becomes
the top token only at the final residual; in Gemma it is top-1 from row 14 of 18 on, and the model is surer."""),
    ("code", """prompt = "The Eiffel Tower is located in the city of"
lenses = {name: interp.logit_lens(m, prompt, targets=[" Paris"], positions=[-1]) for name, m in models.items()}
fig = plt.figure(figsize=(8, 3.5), layout="constrained")
ax = fig.add_subplot(1, 1, 1)
rows = []
for name, lens in lenses.items():
    curve = lens.target_curve(" Paris")
    depth = torch.arange(lens.n_layers + 1) / lens.n_layers
    ax.plot(depth, (curve["rank"] + 1).numpy(), marker=".", label=name)
    first = lens.first_top1(" Paris", stable=True)
    rows.append({"model": name, "layers": lens.n_layers, "top-1 from row": first,
                 "fraction of depth": round(first / lens.n_layers, 2), "final p": float(curve["prob"][-1])})
ax.set_yscale("log"); ax.invert_yaxis(); ax.set_xlabel("fraction of depth"); ax.set_ylabel("rank + 1 of ' Paris'")
ax.legend(); plt.show()"""),
    ("code", """pd.DataFrame(rows).set_index("model")"""),
    ("md", """## 2. Induction heads

`[BOS] + R + R` with random ordinary tokens; the induction score is the attention from each token of the second copy
to the token after its first occurrence. Gemma's best induction head sits in layer 5, its first global-attention
layer; on these short sequences local and global layers see the same tokens."""),
    ("code", """scans = {name: interp.induction_heads(m, seq_len=20, batch=2, copying=False) for name, m in models.items()}
pd.concat({name: s.top(5)[["induction_score", "prefix_matching_score", "previous_token_score"]]
           for name, s in scans.items()}).round(3)"""),
    ("code", """from matplotlib.ticker import MaxNLocator

fig = plt.figure(figsize=(10, 3.2), layout="constrained")
for i, (name, s) in enumerate(scans.items()):
    ax = fig.add_subplot(1, 2, i + 1)
    im = ax.imshow(s.scores["induction_score"].numpy(), aspect="auto", origin="lower", vmin=0, vmax=1, cmap="Blues")
    ax.set_title(f"{name}: induction score", fontsize=10); ax.set_xlabel("head"); ax.set_ylabel("layer")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True)); ax.yaxis.set_major_locator(MaxNLocator(integer=True))
fig.colorbar(im, ax=fig.axes, fraction=0.03).set_label("induction score")
plt.show()"""),
    ("md", """## 3. Where facts are stored

Causal tracing on 30–40 dev facts of each model (stored with the layer choice in `studies/rome_layer/`): the
average indirect effect of restoring one MLP window at the last subject token, per layer (noise corruption, the
paper's window of 10 layers: the point at layer *l* restores MLPs *l*−5 … *l*+4 together). Both peak early, before
a third of the depth; Gemma's effect vanishes after layer 8 of 18.

**What the window hides.** Every point up to layer 5 includes MLP 0, none after it does. SmolLM2's curve drops by a
third exactly there (layer 5 → 6), and in notebook 05 a window-1 trace of SmolLM2 puts most of the effect in
MLP 0 alone, on the Eiffel prompt and on average over dev facts: MLP 0 rebuilding the subject's word from its tokens
(detokenisation), not a stored fact in a mid-layer MLP. Gemma's curve falls most between layers 8 and 9, where MLP 3
leaves the window; Gemma was not traced with window 1, so which of its MLPs carry its early plateau is not measured
here. Read both curves as "the early MLPs, together", not as the layer that stores facts."""),
    ("code", """def trace_curve(path):
    return json.loads(Path(path).read_text())["trace"]["mlp_indirect_effect_by_layer"]

fig = plt.figure(figsize=(8, 3.2), layout="constrained")
ax = fig.add_subplot(1, 1, 1)
for name, path in {"SmolLM2-135M": "../studies/rome_layer/rome_layer.json",
                   "Gemma 3 270M": "../studies/rome_layer/rome_layer_gemma.json"}.items():
    curve = torch.tensor(trace_curve(path))
    ax.plot(torch.arange(len(curve)) / len(curve), curve.numpy(), marker=".", label=name)
ax.set_xlabel("fraction of depth"); ax.set_ylabel("MLP indirect effect"); ax.legend(); plt.show()"""),
    ("md", """The seed fact, live: the subject replaced by another of the same token length ("The Colosseum", which
moves both models to " Rome"), then the clean residual after one block restored at one position: at the best
subject token (solid) and at the last token (dashed)."""),
    ("code", """traces = {name: interp.causal_trace(m, prompt, "The Eiffel Tower", corruption="replace",
                                   replacement="The Colosseum", kinds=("resid",), positions=["subject", "last"])
          for name, m in models.items()}
fig = plt.figure(figsize=(8, 3.2), layout="constrained")
ax = fig.add_subplot(1, 1, 1)
for (name, t), color in zip(traces.items(), ("C0", "C1")):
    depth = (torch.arange(t.n_layers) + 1) / t.n_layers
    grid = t.restored["resid"] / t.clean_prob
    s0, s1 = t.subject_range
    ax.plot(depth, grid[:, s0:s1].amax(1).numpy(), color=color, marker=".", label=f"{name}: best subject token")
    ax.plot(depth, grid[:, -1].numpy(), color=color, ls="--", label=f"{name}: last token")
ax.set_xlabel("fraction of depth (after block)"); ax.set_ylabel("restored p(' Paris') / clean")
ax.legend(fontsize=8); plt.show()"""),
    ("md", """In SmolLM2 one subject token (" iffel") carries the fact through most of the depth: restoring its residual
alone brings " Paris" back, even above its clean probability. In Gemma no single subject token does (restoring
one recovers at most ~20%): the fact needs the subject's tokens together. In both models the answer position holds
it only late (from about 70–80% of the depth on), after attention has moved it there."""),
    ("md", """## 4. ROME on facts both models know

Each model has its own records: the same candidates filtered by what that model knows
(`interp/editing/records/facts.jsonl`, `facts_gemma.jsonl`), split dev/test by the same rule. To compare the editors
and not the record sets, `studies/rome_eval_shared/rome_eval_shared.py` draws test facts that both models know (same
relation, subject, target_true and target_new, in the test split of both files, so neither model's dev split is
touched) and runs the same
`evaluate(model, records, "rome", generation=False, drift=False, lens=False)` on each, at each model's own edit
layer and hyperparameters (chosen on its own dev split; on Gemma a smaller clamp on `delta`, because its post-MLP
norm turns the write of neighbouring subjects too). The rewrite prompt, targets and both paraphrase sets are the
same for both models; the neighbourhood prompts are each model's own (the ones it was checked to know).
`paraphrase_other` is the second paraphrase set, in forms the layer choice never saw (`data/README.md`, the records'
card). The table is read from `studies/rome_eval_shared/rome_eval_shared.json` (success form, percent, 95% CIs as
stored: normal approximation, cut at 0 and 100); ROME is not run here. **Older defaults:** the study was made before
ROME's `key_rule="auto"` became the default (its hyperparameters have no `key_rule`: ROME's original "mean" rule;
`studies/key_rule/` found the two within a point or two on dev), and has not been rerun. "edits that errored": edits
that raised an error and were not scored (none); "efficacy_failures": edits that ran but did not flip the prompt."""),
    ("code", """shared = json.loads(Path("../studies/rome_eval_shared/rome_eval_shared.json").read_text())
metrics = ("efficacy_score", "paraphrase_score", "paraphrase_other_score", "neighborhood_score")

def cell(r, k):
    return f"{r[k]:.1f} [{max(0, r[k + '_ci'][0]):.1f}, {min(100, r[k + '_ci'][1]):.1f}]"

table = {}
for name, m in shared["models"].items():
    r = m["aggregates"]
    table[name] = {k: cell(r, k) for k in metrics if k in r}
    table[name].update(harmonic_mean=round(r["harmonic_mean"], 1), layer=r["layer"], records=r["n_records"],
                       **{"edits that errored": r["n_failed"]},
                       efficacy_failures=sum(r["failure_counts"].values()))
print(f"{shared['n_records']} of the {shared['n_shared_test_facts']} test facts both models know; "
      f"`{shared['command']}`")
pd.DataFrame(table)"""),
    ("md", """Per fact: on how many of the shared facts each model's score is higher (ties not counted)."""),
    ("code", """# one row per fact, the same facts in the same order for both models
rows = {name: pd.DataFrame(m["rows"]) for name, m in shared["models"].items()}
(smol_rows, gemma_rows) = rows.values()
pd.DataFrame({k: {"SmolLM2 higher": int((smol_rows[f"{k}_post"] > gemma_rows[f"{k}_post"]).sum()),
                  "Gemma higher": int((gemma_rows[f"{k}_post"] > smol_rows[f"{k}_post"]).sum())}
              for k in ("efficacy_score", "paraphrase_score", "paraphrase_other_score", "neighborhood_score")})"""),
    ("md", """On the same 30 facts both edits take (efficacy 96.7 for both; one edit each does not transfer). Gemma's edits
generalise less (paraphrases 85.6 vs 96.7, the second paraphrase set 81.6 vs 96.0) and are less specific
(neighbourhood 70.1 vs 92.5); per fact, SmolLM2 scores higher far more often than Gemma on the paraphrase sets and
the neighbourhood. That is 30 facts, and each model runs at its own layer and hyperparameters (Gemma with a smaller
clamp), so the difference belongs to model and settings together, not to the architecture alone. Nor do the 30
shared facts settle whether the record sets matter: Gemma's neighbourhood score is 70.1 [59.7, 80.4] on them but
84.9 [79.9, 90.0] on its own 100 test records below; the two intervals overlap, barely.
For reference, each model on its own test records, current defaults: SmolLM2 on its whole test split
(`studies/test_split/rome.json`), Gemma on 100 of its test records (`studies/memit_gemma/gemma_test_rome_ft.json`),
95% CIs as stored (efficacy: Wilson's interval, which is not zero-width at 100%)."""),
    ("code", """def facts(path):
    return {(json.loads(x)["relation"], json.loads(x)["subject"]) for x in Path(path).read_text().splitlines()}

both = facts("../interp/editing/records/facts.jsonl") & facts("../interp/editing/records/facts_gemma.jsonl")
print(f"{len(facts('../interp/editing/records/facts.jsonl'))} SmolLM2 facts, "
      f"{len(facts('../interp/editing/records/facts_gemma.jsonl'))} Gemma facts, {len(both)} known by both")
smol = json.loads(Path("../studies/test_split/rome.json").read_text())
gemma = json.loads(Path("../studies/memit_gemma/gemma_test_rome_ft.json").read_text())
own = {}
for name, r in {"SmolLM2-135M": smol, "Gemma 3 270M": gemma}.items():
    own[name] = {k: f"{r[k]:.1f} [{r[k + '_ci'][0]:.1f}, {r[k + '_ci'][1]:.1f}]"
                 for k in ("efficacy_score", "paraphrase_score", "paraphrase_other_score", "neighborhood_score")}
    own[name].update(records=int(r["n_records"]), layer=r["layer"], key_rule=r["hparams"]["key_rule"],
                     clamp_norm_factor=r["hparams"]["clamp_norm_factor"], harmonic_mean=round(r["harmonic_mean"], 1))
pd.DataFrame(own)"""),
]

nb = nbf.v4.new_notebook()
nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in cells]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
out = Path(__file__).parent / "07_two_models.ipynb"
nbf.write(nb, out)
print(f"wrote {out}")
