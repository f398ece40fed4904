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
4. look at the **logit lens** before/after (the new answer appears only after the edited layer),
5. **evaluate** a few CounterFact-style records against the FT-L baseline,
6. **revert** — the weights come back bit for bit.

To keep this notebook fast (it runs in the test suite) the key statistics C = E[k kᵀ] use a small Wikipedia
sample (5,000 tokens) and the evaluation uses 2 records; the reported numbers come from
`interp eval-edits --split test --baseline ft` (100,000-token statistics)."""),
    ("code", """import torch
import interp
from interp import rome
from interp.analyses.stats import mlp_key_second_moment

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
heatmaps show the indirect effect of restoring the clean MLP outputs (a window of 10 layers) at one token."""),
    ("code", """TEXT = PROMPT.replace("{}", SUBJECT)
tr = interp.causal_trace(model, TEXT, SUBJECT, samples=3, kinds=("mlp",))
print(tr.summary())
tr.plot(kind="mlp", value="effect")"""),
    ("code", """tr.show(value="effect")  # interactive: hover a cell for its effect and restored probability"""),
    ("code", """tr_str = interp.causal_trace(model, TEXT, SUBJECT, corruption="replace", replacement="The Colosseum",
                             kinds=("mlp",))
print(tr_str.summary())
tr_str.plot(kind="mlp", value="effect")"""),
    ("code", """import pandas as pd

rows = []
for name, t in (("noise", tr), ("replace", tr_str)):
    anywhere, last_subject, last = t.peak("mlp"), t.peak("mlp", "last_subject"), t.peak("mlp", "last")
    rows.append({"corruption": name, "p clean": t.clean_prob, "p corrupted": t.corrupted_prob,
                 "peak token": anywhere["token_str"], "peak layer": anywhere["layer"],
                 "peak effect": anywhere["effect"],
                 "last-subject-token layer": last_subject["layer"], "last-subject-token effect": last_subject["effect"],
                 "last-token layer": last["layer"], "last-token effect": last["effect"]})
pd.DataFrame(rows).round(3)"""),
    ("md", """**Noise vs replacement.** Both corruptions destroy the answer (p(Paris) 0.304 clean → 0.018 with noise,
0.002 with *The Colosseum*, which the model completes with *Rome*), and both put the MLP effect at the same place: the
subject's middle token *iffel* in the early layers (peak at layer 3, +0.33, with noise; at layer 2, +0.16,
with replacement; each point restores a window of 10 layers). At the subject's last token, where ROME writes
its edits, neither finds much (at most +0.006 with noise, +0.004 with replacement), and at the last token the
MLPs give +0.031 (layer 21) and +0.011 (layer 24). Replacement halves the largest effect — plausibly because its
corrupted run is an ordinary prompt that actively says *Rome*, so one restored token has a real competitor,
where noise only blurs the subject. The choice of replacement matters too: the built-in seeded pick, *The Sydney Opera House*
(→ *Sydney* at 0.955), leaves almost nothing to restore (largest MLP effect +0.012)."""),
    ("md", """### Where to edit: the trace's peak token or the subject's last token?

So the trace puts this fact's MLP effect on *iffel*, while ROME writes at *Tower*, where the effect is almost
nil — and the edit below still works. The two questions differ: the trace asks where the *stored* fact can be
restored after the subject is blurred; an edit needs a place where a *new* value, written into one MLP, is read by
the later layers on the way to the answer. Hase et al. (2023, "Does localization inform editing?") found on GPT-J
that the trace's location hardly predicts which layer edits best. Here the question is the token. Measured on dev
records only (`studies/edit_position/`): a 10-sample noise trace of each record's
rewrite prompt (MLP restorations, window 10, at every subject token); then ROME at layer 4 at the subject token
where the trace peaks and at the last subject token, everything else equal."""),
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
    ("md", """On these 20 dev records the trace peaks at the last subject token in 16; on the four where it peaks
elsewhere (*Walk* of The Hollywood Walk of Fame, *ã* of The Maracanã Stadium, *Golden* of The Golden Temple,
*ell* of The Gallerie dell'Accademia) both rules flip every rewrite prompt and every paraphrase (success form),
and the neighbourhood scores differ by a few points either way (93.7 last vs 91.0 peak; strict 25.9 vs 29.4) —
four records, so no difference that means anything. Over all 20 the two rules are within two points on every
score.
The last subject token stays the default: it is as good and needs no trace per edit (a trace costs more than the
edit). The study is small because the machine was shared by
five runs; `--start 20 --n 40 --merge studies/edit_position/edit_position.json` extends it."""),
    ("md", "## 2 · Edit: one rank-one update at the edit layer"),
    ("code", """stats = mlp_key_second_moment(model, LAYER, n_tokens=5_000, progress=False)   # small sample: fast
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
    ("md", "## 3 · Generate before and after"),
    ("code", """prompts = ["The Eiffel Tower is located in the city of",            # the rewritten prompt
           "Where is the Eiffel Tower? It stands in the city of",   # a paraphrase
           "The Louvre is located in the city of"]                  # a neighbouring landmark (must stay Paris)
table = rome.compare_completions(model, edit, prompts, n_tokens=10)
table"""),
    ("code", """record = next(r for r in rome.load_records() if r.subject == SUBJECT and r.target_new == TARGET)
rome.compare(model, edit, record, n_tokens=6).show()  # P(Rome), P(Paris) before/after on every prompt"""),
    ("md", "## 4 · Logit lens before/after: the new answer appears only above the edited layer"),
    ("code", """lens = rome.lens_before_after(model, edit)
print(lens.summary())
lens.plot()"""),
    ("md", """## 5 · Evaluate on a few records (ROME vs constrained fine-tuning FT-L)

Each record: measure, edit, measure again, revert. Efficacy = P(new) > P(true) on the prompt, paraphrase =
the same on rephrasings, neighbourhood = other subjects keep their true answer. Tiny sample here — see the
README for the full test split."""),
    ("code", """records = rome.load_records(split="test")[:2]
result = rome.evaluate(model, records, "rome", layer=LAYER, stats=stats, baseline="ft",
                       gen_tokens=10, drift_docs=4, progress=False)
print(result.summary())
print(result.baseline.summary())
result.table()"""),
    ("code", "result.plot()"),
    ("md", "## 6 · Revert: the weights are bit-identical to the original"),
    ("code", """edit.revert()
assert torch.equal(model.mlp_out_matrix(LAYER), original)
print("reverted, bit-identical:", torch.equal(model.mlp_out_matrix(LAYER), original))
print([model.generate(PROMPT.replace("{}", SUBJECT), 3)])"""),
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
