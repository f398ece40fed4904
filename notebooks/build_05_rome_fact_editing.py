"""The text of 05_rome_fact_editing.ipynb. ``python notebooks/execute.py 05`` rebuilds the notebook from here and
executes it in place (it is committed with its outputs); running this file alone writes it without outputs."""

from pathlib import Path

import nbformat as nbf

CELLS = [
    ("md", """# 05 · ROME: locate a fact, rewrite it, check it, take it back

The embedded SmolLM2-135M says *"The Eiffel Tower is located in the city of"* → **Paris**. We

1. **trace** where the fact lives (causal tracing: corrupt the subject — with Gaussian noise, and by swapping
   it for another landmark of the same token length — then restore one MLP state at a time),
2. **edit** it with one rank-one update of one MLP down projection (ROME) so the answer becomes **Rome**,
3. **generate** before/after for the prompt, a paraphrase and a neighbouring landmark (which must stay in Paris),
4. look at the **logit lens** before/after (the edit changes nothing below its layer; *Rome* rises late),
5. **revert** — the weights come back bit for bit,
6. **evaluate** a few CounterFact-style records against the FT-L baseline.

To keep this notebook fast (it runs in the test suite) the key statistics C = E[k kᵀ] use a small Wikipedia
sample (5,000 tokens) and the evaluation runs on 2 records, shown record by record; the reported numbers are the
whole test split's (`studies/test_split/rome.json`, 464 records, 100,000-token statistics), read from the file in
section 5."""),
    ("code", """import torch
import interp
from interp import rome

torch.manual_seed(0)
model = interp.load(device="cpu")
PROMPT, SUBJECT, TARGET = "{} is located in the city of", "The Eiffel Tower", " Rome"
LAYER = rome.default_layer(model)   # chosen on the dev split of interp/editing/records/facts.jsonl
print(model, "\\nedit layer:", LAYER)"""),
    ("md", """## 1 · Trace: where does the model recall the city?

Causal tracing needs a corrupted run in which the model no longer knows the answer. Two ways to get one:
**Gaussian noise** on the subject's token embeddings (Meng et al. 2022; 3 samples here), and **symmetric token
replacement** (Zhang & Nanda 2023): the subject swapped for another subject of the same token length, so the
corrupted prompt is still an ordinary sentence — here *The Colosseum* (4 tokens, like *The Eiffel Tower*). Both
heatmaps show the indirect effect of restoring the clean MLP outputs at one token, as in the paper over a
**window of 10 layers**: the point at layer *l* restores the MLPs of layers *l*−5 … *l*+4 (cut at 0 and 29)
together, so every point from layer 0 to layer 5 includes MLP 0, and none after it does."""),
    ("code", """TEXT = PROMPT.replace("{}", SUBJECT)
tr = interp.causal_trace(model, TEXT, SUBJECT, samples=3, kinds=("mlp",))
print(tr.summary())
tr.plot(kind="mlp", value="effect")"""),
    ("code", """tr.show(value="effect")  # interactive: hover a cell for its effect and restored probability"""),
    ("md", """### Window 10 against window 1: most of the early effect is MLP 0

The same noise trace with `window=1` restores one MLP at a time. Beside it, the effect per layer at the subject's
tokens under both windows."""),
    ("code", """tr1 = interp.causal_trace(model, TEXT, SUBJECT, samples=3, kinds=("mlp",), window=1)
print(tr1.summary())
tr1.plot(kind="mlp", value="effect")"""),
    ("code", """import matplotlib.pyplot as plt
import pandas as pd

s0, s1 = tr.subject_range
peak_tok = s0 + int(tr.effects["mlp"][:, s0:s1].amax(0).argmax())   # the subject token where window 10 peaks
cols = {}
for w, t in ((10, tr), (1, tr1)):
    for j, name in ((peak_tok, tr.tokens[peak_tok].strip()), (s1 - 1, tr.tokens[s1 - 1].strip())):
        cols[f"{name!r}, window {w}"] = t.effects["mlp"][:, j].numpy()
frame = pd.DataFrame(cols).rename_axis("layer")
for w, t in ((10, tr), (1, tr1)):
    p = t.peak("mlp")
    print(f"window {w}: MLP peak {p['effect']:+.3f} at {p['token_str']!r}, layer {p['layer']}")
print(f"window 10 at {tr.tokens[peak_tok]!r}: layers 0-5 average {frame.iloc[:6, 0].mean():+.3f}, "
      f"layers 6-11 average {frame.iloc[6:12, 0].mean():+.3f}")
fig, ax = plt.subplots(figsize=(7.5, 3.2), layout="constrained")
for (name, col), style in zip(frame.items(), ("-", "-", "--", "--")):
    ax.plot(frame.index, col, style, marker=".", label=name)
ax.axvline(5.5, color="gray", lw=0.8)
ax.text(5.6, ax.get_ylim()[1] * 0.9, "MLP 0 leaves the window", fontsize=8, color="gray")
ax.set(xlabel="layer", ylabel="MLP indirect effect"); ax.legend(fontsize=8); plt.show()
frame.iloc[:12].round(3)"""),
    ("md", """Restoring MLP 0 alone at *iffel* brings back +0.344, as much as the window-10 plateau of layers 0–5 (+0.303 on
average), and no other single MLP on the subject does much: the window-10 effect falls from 0.310 to 0.077 exactly
between layers 5 and 6, where MLP 0 leaves the window. MLP 0 at a word's middle token is where the model
assembles the word from its pieces (*E* + *iffel*; "detokenisation"), so restoring it undoes the noise on the word
itself. That is evidence that the clean word is needed, not that a fact is stored there: on the subject's tokens
this prompt's window-1 trace finds no mid-layer MLP that carries the fact. The smaller window-10 effect that remains
at *iffel* after layer 5 (+0.067 on average over layers 6–11) is in no single MLP (window 1 gives at most +0.019
there, at layer 9): it appears only when several MLPs are restored together.

Is the Eiffel prompt typical? The dev trace that chose ROME's layer (`studies/rome_layer/rome_layer.json`, stored:
noise, window 10, at the last subject token, averaged over dev records) against this prompt's curve at the same
token:"""),
    ("code", """import json
import random
from pathlib import Path

dev = json.loads(Path("../studies/rome_layer/rome_layer.json").read_text())["trace"]
mean, ci = torch.tensor(dev["mlp_indirect_effect_by_layer"]), torch.tensor(dev["ci95"])
print(f"stored dev average, n = {dev['n_records']} dev records ({dev['samples']} noise samples, window 10): "
      f"peak at layer {int(mean.argmax())} ({float(mean.max()):+.3f}); layers 4, 5, 6: "
      + ", ".join(f"{float(mean[l]):+.3f}" for l in (4, 5, 6)))
print(f"the Eiffel prompt at its last subject token {tr.tokens[s1 - 1]!r}: at most "
      f"{float(tr.effects['mlp'][:, s1 - 1].max()):+.3f} (window 10), "
      f"{float(tr1.effects['mlp'][:, s1 - 1].max()):+.3f} (window 1)")

# window 1 on the first 20 of the same dev records (the stored study's order: random.Random(0) over the dev split)
dev_records = rome.load_records(split="dev")
random.Random(0).shuffle(dev_records)
avg1 = interp.trace_facts(model, dev_records[:20], samples=5, window=1, kinds=("mlp",), progress=False)
m1, ci1 = avg1.mean("mlp"), avg1.ci95("mlp")
print(f"window 1, n = {len(avg1.records)} dev records (5 noise samples): MLP 0 {float(m1[0]):+.3f} "
      f"[{float(m1[0] - ci1[0]):+.3f}, {float(m1[0] + ci1[0]):+.3f}]; the largest of layers 1-29 "
      f"{float(m1[1:].max()):+.3f} (layer {1 + int(m1[1:].argmax())})")

fig, ax = plt.subplots(figsize=(7.5, 3.4), layout="constrained")
x = torch.arange(len(mean))
ax.plot(x, mean, marker=".", color="tab:green", label=f"dev average, window 10, n = {dev['n_records']} (95% CI)")
ax.fill_between(x, mean - ci, mean + ci, color="tab:green", alpha=0.2)
ax.plot(x, m1, marker=".", color="tab:purple", label=f"dev average, window 1, n = {len(avg1.records)} (95% CI)")
ax.fill_between(x, m1 - ci1, m1 + ci1, color="tab:purple", alpha=0.2)
ax.plot(x, tr.effects["mlp"][:, s1 - 1], marker=".", color="tab:gray", label="Eiffel prompt, window 10")
ax.axvline(5.5, color="gray", lw=0.8)
ax.set(xlabel="layer", ylabel="MLP indirect effect, last subject token"); ax.legend(fontsize=8)
plt.show()"""),
    ("md", """On average the dev facts show a large effect at the last subject token with window 10 (+0.204 at layers 4 and
5, the peak that set ROME's edit layer 4); the Eiffel prompt shows almost none there (at most +0.006), so it is an
atypical example for the trace. The average carries the same window caveat: it drops from 0.204 to 0.131 between
layers 5 and 6, where MLP 0 leaves the window, and with window 1 (20 of the same dev records) MLP 0 alone gives
+0.185 [+0.055, +0.315], no single MLP of layers 1–29 more than +0.010. So the dev trace, too, mostly measures
MLP 0 at the subject's last token; its plateau over layers 0–5 does not show that a mid-layer MLP holds the fact. Layer 4 does not rest on the trace alone: the same study
swept the edit itself over layers 2–6 on dev records and found layers 2–5 equally good (`studies/rome_layer/`)."""),
    ("code", """tr_str = interp.causal_trace(model, TEXT, SUBJECT, corruption="replace", replacement="The Colosseum",
                             kinds=("mlp",))
print(tr_str.summary())
tr_str.plot(kind="mlp", value="effect")"""),
    ("code", """rows = []
for name, t in (("noise", tr), ("replace", tr_str)):
    anywhere, last_subject, last = t.peak("mlp"), t.peak("mlp", "last_subject"), t.peak("mlp", "last")
    rows.append({"corruption": name, "p clean": t.clean_prob, "p corrupted": t.corrupted_prob,
                 "peak token": anywhere["token_str"], "peak layer": anywhere["layer"],
                 "peak effect": anywhere["effect"],
                 "last-subject-token layer": last_subject["layer"], "last-subject-token effect": last_subject["effect"],
                 "last-token layer": last["layer"], "last-token effect": last["effect"]})
pd.DataFrame(rows).round(3)"""),
    ("code", """# the built-in seeded pick of a replacement (no replacement= given)
tr_auto = interp.causal_trace(model, TEXT, SUBJECT, corruption="replace", kinds=("mlp",))
probs = torch.softmax(model.run(PROMPT.replace("{}", tr_auto.replacement))[0, -1].float(), -1)
top = int(probs.argmax())
print(f"replacement {tr_auto.replacement!r}: the corrupted prompt's top answer {model.tokenizer.decode([top])!r} "
      f"at {float(probs[top]):.3f}; p(' Paris') corrupted {tr_auto.corrupted_prob:.1e}; "
      f"largest MLP effect {tr_auto.peak('mlp')['effect']:+.3f}")"""),
    ("md", """**Noise vs replacement.** Both corruptions destroy the answer (p(Paris) 0.304 clean → 0.018 with noise,
0.002 with *The Colosseum*, which the model completes with *Rome*), and both put the MLP effect at the same place: the
subject's middle token *iffel* in the early layers (peak at layer 3, +0.33, with noise; at layer 2, +0.16,
with replacement; each point a window of 10 layers, so both peaks include MLP 0, which with noise is most of it,
as above). At the subject's last token, where ROME writes its edits, neither finds much (at most +0.006 with
noise, +0.004 with replacement), and at the last token the MLPs give +0.031 (layer 21) and +0.011 (layer 24).
Replacement halves the largest effect — plausibly because its corrupted run is an ordinary prompt that actively
says *Rome*, so one restored token has a real competitor, where noise only blurs the subject. The choice of
replacement matters too: the built-in seeded pick, *The Sydney Opera House* (→ *Sydney* at 0.955), leaves almost
nothing to restore (largest MLP effect +0.012)."""),
    ("md", """### Where to edit: the trace's peak token or the subject's last token?

So the trace puts this prompt's MLP effect on *iffel* — mostly MLP 0 rebuilding the word — while ROME writes at
*Tower*, where the effect is almost nil, and the edit below still works. The two questions differ: the trace asks
where the *stored* fact can be
restored after the subject is blurred; an edit needs a place where a *new* value, written into one MLP, is read by
the later layers on the way to the answer. Hase et al. (2023, "Does localization inform editing?") found on GPT-J
that the trace's location hardly predicts which layer edits best. Here the question is the token. Measured on dev
records only (`studies/edit_position/`): a 10-sample noise trace of each record's
rewrite prompt (MLP restorations, window 10, at every subject token); then ROME at layer 4 at the subject token
where the trace peaks and at the last subject token, everything else equal. The study was made before ROME's
`key_rule="auto"` became the default (under ROME's original rule, "mean"; `studies/key_rule/`), so its edit scores
are those of the earlier default; the traces do not depend on it."""),
    ("code", """import json
from pathlib import Path

pos = json.loads(Path("../studies/edit_position/edit_position.json").read_text())
agg = pos["aggregates"]
keys = ["efficacy_score", "paraphrase_score", "neighborhood_score", "efficacy_acc", "paraphrase_acc",
        "neighborhood_acc"]
print(f"{pos['n_records']} dev records; the trace peaks at another subject token than the last in "
      f"{pos['n_peak_not_last']} of them")
pd.DataFrame({f"{rule} ({subset})": {k: f"{agg[f'{rule}_{subset}'][k]['mean']:.1f}" for k in keys}
              for subset in ("all", "differ") for rule in ("last", "peak")})"""),
    ("code", """pd.DataFrame([{"subject": r["subject"], "peak token": r["tokens"][r["peak_token"]], "peak layer": r["peak_layer"],
               "peak effect": round(r["peak_effect"], 3), "best effect at the last token":
               round(r["last_token_best_effect"], 3), "PS last": round(r["last"]["paraphrase_score"], 1),
               "PS peak": round(r["peak"]["paraphrase_score"], 1), "NS last": round(r["last"]["neighborhood_score"], 1),
               "NS peak": round(r["peak"]["neighborhood_score"], 1)}
              for r in pos["records"] if r["peak_token"] != len(r["tokens"]) - 1])"""),
    ("code", """elsewhere = [r for r in pos["records"] if r["peak_token"] != len(r["tokens"]) - 1]
print(f"{sum(r['peak_layer'] == 0 for r in elsewhere)} of the {len(elsewhere)} records that peak elsewhere "
      f"peak at layer 0 (a window of 10 there restores MLPs 0-4)")"""),
    ("md", """On these 20 dev records the trace peaks at the last subject token in 16; on the four where it peaks
elsewhere (*Hollywood* of The Hollywood Walk of Fame at layer 0, *ã* of The Maracanã Stadium at layer 12,
*Golden* of The Golden Temple at layer 0, *ell* of The Gallerie dell'Accademia at layer 3) both rules flip every
rewrite prompt and every paraphrase (success form),
and the neighbourhood scores differ by a few points either way (93.7 last vs 91.0 peak; strict 25.9 vs 29.4) —
four records, so no difference that means anything. Over all 20 the two rules are within two points on every
score. Two of the four peak at layer 0, where the window of 10 covers MLPs 0–4 and, as on the Eiffel prompt,
MLP 0's rebuilding of the word may be most of what the trace sees; so "the trace's peak token" is itself partly a
detokenisation signal.
The last subject token stays the default: it is as good and needs no trace per edit (a trace costs more than the
edit). The study is small because the machine was shared by
five runs; `--start 20 --n 40 --merge studies/edit_position/edit_position.json` extends it."""),
    ("md", "## 2 · Edit: one rank-one update at the edit layer"),
    ("code", """stats = rome.key_stats(model, LAYER, n_tokens=5_000, progress=False)   # small sample: fast
print(stats.summary())
original = model.mlp_out_matrix(LAYER).detach().clone()
edit = rome.edit(model, PROMPT, SUBJECT, TARGET, LAYER, stats=stats, seed=0)
print(edit.summary())
print("context templates:", edit.templates)
delta = model.mlp_out_matrix(LAYER).double() - original.double()
print("rank of the update:", int(torch.linalg.matrix_rank(delta, rtol=1e-5)),
      "| relative error of M' k* vs v*:",
      edit.value_error(model))
edit.plot()"""),
    ("md", """## 3 · Generate before and after

Greedy, 10 tokens. The embedded model is an instruction-tuned chat model: after a short answer it often ends the
turn (`<|im_end|>`) and starts the next one's template (`<|im_start|>assistant`); the table cuts each
continuation at `<|im_end|>`, so a shorter one is a turn that ended there."""),
    ("code", """prompts = ["The Eiffel Tower is located in the city of",            # the rewritten prompt
           "Where is the Eiffel Tower? It stands in the city of",   # a paraphrase
           "The Louvre is located in the city of"]                  # a neighbouring landmark (must stay Paris)
table = rome.compare_completions(model, edit, prompts, n_tokens=10)
for col in ("before", "after"):   # shown up to the chat model's end-of-turn token: what follows it is template
    table[col] = table[col].str.split("<|im_end|>").str[0]
table"""),
    ("code", """record = next(r for r in rome.load_records() if r.subject == SUBJECT and r.target_new == TARGET)
rome.compare(model, edit, record, n_tokens=6).show()  # P(Rome), P(Paris) before/after on every prompt"""),
    ("md", """## 4 · Logit lens before/after: the edit changes nothing below its layer and raises *Rome* above it

The lens reads the residual entering each layer (row *r* = entering layer *r*; the last row is the output). The
edit writes at layer 4's MLP, whose output enters row 5: rows 0–4 are the same before and after by construction.
Probabilities on a log scale (on a linear one, everything below the last rows looks like 0)."""),
    ("code", """lens = rome.lens_before_after(model, edit)
rows_top1 = {when: ("never" if r is None else f"row {r}") for when, r in lens.rows.items()}
print(f"' Rome' top-1 (and staying top-1) from: before the edit {rows_top1['before']}, after {rows_top1['after']} "
      f"(the edit's output enters row {LAYER + 1})")
f = lens.to_frame()
ratio = f["p_new_after"] / f["p_new_before"]
print(f"first row where P(Rome) after / before differs from 1 by over 1%: {int((abs(ratio - 1) > 0.01).idxmax())}")
fig, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
for when, style in (("before", "--"), ("after", "-")):
    ax.plot(f.index, f[f"p_new_{when}"], style, color="tab:red", label=f"P(Rome) {when}")
    ax.plot(f.index, f[f"p_true_{when}"], style, color="tab:blue", label=f"P(Paris) {when}")
ax.axvline(LAYER + 1, color="gray", lw=0.8)
ax.set_yscale("log")
ax.set(xlabel="lens row (residual entering the layer; last = output)", ylabel="probability (log scale)",
       title=f"logit lens before/after (edit at layer {LAYER})")
ax.legend(fontsize=8); plt.show()
f.iloc[[0, LAYER, LAYER + 1, LAYER + 2, 10, 20, 25, 28, 29, len(f) - 1]].map(lambda v: f"{v:.2e}")"""),
    ("md", """Rows 0–4 are identical; from row 5 P(Rome) moves (by over 1%), but at the rows shown from 5 to 20 both answers
stay below 1e-13 before and after alike — the lens reads almost nothing there. The difference shows only in the last rows:
at row 28 P(Rome) is 2.01e-02 after against 6.06e-05 before, at row 29 0.251 against 5.83e-04, and at the output
0.957 against 8.24e-03, while P(Paris) falls from 0.304 to 3.31e-05. *Rome* is top-1 (and stays so) from row 29
after the edit, never before: the edit's write at layer 4 becomes readable as *Rome* only in the last layers."""),
    ("md", "## 5 · Revert: the weights are bit-identical to the original"),
    ("code", """edit.revert()
assert torch.equal(model.mlp_out_matrix(LAYER), original)
print("reverted, bit-identical:", torch.equal(model.mlp_out_matrix(LAYER), original))
print([model.generate(PROMPT.replace("{}", SUBJECT), 3)])"""),
    ("md", """## 6 · Evaluate on a few records (ROME vs constrained fine-tuning FT-L)

On the unedited model (the Eiffel edit is reverted above), each record: measure, edit, measure again, revert. Efficacy = P(new) > P(true) on the prompt, paraphrase =
the same on rephrasings, neighbourhood = other subjects keep their true answer. Two records only (so no
intervals: shown record by record); the whole test split's numbers follow, read from their stored file."""),
    ("code", """records = rome.load_records(split="test")[:2]
result = rome.evaluate(model, records, "rome", layer=LAYER, stats=stats, baseline="ft",
                       gen_tokens=10, drift_docs=4, progress=False)
cols = ["efficacy_score", "paraphrase_score", "paraphrase_other_score", "neighborhood_score"]
per_record = []
for name, res, when in (("unedited", result, "pre"), ("ROME", result, "post"), ("FT-L", result.baseline, "post")):
    for cid, row in res.to_frame().iterrows():
        per_record.append({"editor": name, "subject": row["subject"], "new": row["target_new"],
                           **{c.replace("_score", ""): round(100 * row[f"{c}_{when}"], 1) for c in cols}})
pd.DataFrame(per_record).set_index(["editor", "subject"])"""),
    ("md", """Both editors flip both rewrite prompts. ROME carries the Eiffel edit to every paraphrase of the first set
and the Paraguay edit to 2 of 3 (66.7), and keeps the neighbours (100.0 and 80.0); FT-L carries neither edit to the
second paraphrase set and, for Paraguay, to no paraphrase, and its Paraguay neighbours all lose their answer (0.0).
Two records show what is measured, not how the editors compare; the whole split below does."""),
    ("md", """The whole test split (464 records, one edit at a time, 100,000-token key statistics, the current defaults;
`studies/test_split/`), with 95% CIs as stored:"""),
    ("code", """split = {name: json.loads(Path(f"../studies/test_split/{f}.json").read_text()) for name, f in
         (("ROME", "rome"), ("FT-L", "ft"))}
print(f"ROME: {split['ROME']['n_records']} records, layer {split['ROME']['layer']}, key_rule "
      f"{split['ROME']['hparams']['key_rule']!r}, {split['ROME']['hparams']['mom2_n_tokens']:,} tokens of statistics")
pd.DataFrame({name: {k: f"{d[k]:.1f} [{d[k + '_ci'][0]:.1f}, {d[k + '_ci'][1]:.1f}]" for k in
                     ("efficacy_score", "paraphrase_score", "paraphrase_other_score", "neighborhood_score")}
              | {"harmonic_mean": f"{d['harmonic_mean']:.1f}", "records": d["n_records"]}
              for name, d in split.items()})"""),
]


def build() -> nbf.NotebookNode:
    nb = nbf.v4.new_notebook()
    nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


if __name__ == "__main__":
    out = Path(__file__).with_name("05_rome_fact_editing.ipynb")
    nbf.write(build(), out)
    print(f"wrote {out}")
