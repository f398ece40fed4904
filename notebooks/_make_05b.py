"""The text of 05b_editing_at_scale.ipynb. ``python notebooks/execute.py 05b`` rebuilds the notebook from here and
executes it in place (it is committed with its outputs); running this file alone writes it without outputs.

Sections 1-2 only read stored runs (``studies/editing_at_scale/*.json``, made by
``studies/editing_at_scale/editing_at_scale.py``; ``studies/test_split/``, ``studies/loss_rise/``,
``studies/sequential_fix/``): each took tens of CPU-minutes; the command that made it is stored beside its numbers.
Section 3 runs the public API live on a few dev records (under a minute each on two threads once the key
statistics are cached)."""

from pathlib import Path

import nbformat as nbf

INTRO = """# Editing at scale: many facts at once, one edit after another

Notebook 05 rewrote one fact. Here: what happens with many. Every number in sections 1–2 was measured on the
embedded SmolLM2-135M-Instruct with the test split of `interp/editing/records/facts.jsonl` and is read from a JSON
file under `studies/` (each stores the command that produced it; the runs take tens of CPU-minutes, so the notebook
does not repeat them). Section 3 runs the public API live on a few dev records: examples to copy.

Every score comes in two forms, side by side:
- **success** (the paper's): efficacy / paraphrase = share of prompts where P(new) > P(true); neighbourhood = share
  of other subjects' prompts where P(true) > P(new) still;
- **strict**: the wanted answer is the top-1 next token (new target for efficacy / paraphrase, true target for
  neighbourhood). Unedited, the strict neighbourhood score is already far below 100: the facts were kept when the
  true answer is in the top 10, not necessarily top-1.

The **second paraphrase set** (`paraphrase_other`: questions, longer contexts, other word orders) was written for
the test records only and never used for any choice.

**"Collapse" here is a threshold, not a broken model.** The printed summaries say "collapse at step N" when, after
step N, the mean token loss on 16 fixed Wikipedia summaries is more than 10% above the unedited model's (the *loss
drift*, a relative change of the loss; with the unedited loss of 3.055 nats a 10% drift is a perplexity ratio of
exp(0.3055) ≈ 1.36) or the n-gram entropy of 15 fixed generations has fallen by more than 10%. That is this
project's alarm. In Gupta et al. 2024 ("Model editing at scale leads to gradual and catastrophic forgetting")
collapse means that the edited model becomes unusable. Nothing of that kind was measured here: the generations'
n-gram entropy (ROME's fluency measure; the texts themselves were not stored) never falls by more than 2.3% in any
ROME run and 8.5% in any run, while the Wikipedia perplexity of the longest ROME run nearly doubles (section 2's
table prints both for every run). The prose therefore says "crosses the drift threshold" for what the summaries
call a collapse."""

cells = [
    ("md", INTRO),
    ("code", """import json
from pathlib import Path

import pandas as pd

from interp.rome import ScaleResult, mass_table, plot_mass

STUDIES = Path("../studies")
docs = {p.stem: json.loads(p.read_text()) for p in sorted((STUDIES / "editing_at_scale").glob("*.json"))}
runs = {name: ScaleResult.from_json(d) for name, d in docs.items() if "partial" not in d}  # finished runs only
for name, d in docs.items():
    print(f"{name}: {runs[name].summary()}" if name in runs else f"{name}: not finished ({d['partial']}), not shown")"""),
    ("md", """## 1 · Mass editing: MEMIT in one batch against ROME and FT-L applied one edit after another

The first test records (file order). MEMIT edits 1 or 100 of them in one batch (layers 0–4 and λ = 2500, the
defaults then, chosen on dev, without the bare-key row that is now the default: see the end of section 1b; the batch of 100 holds two facts about The Blue Mosque, whose shared key one solve cannot
give two values, so it is written as two MEMIT edits, the 99 distinct subjects and then the second Blue Mosque
fact) and 100 in ten batches of 10, each on top of the previous (its first step is 10 facts in one batch);
ROME (layer 4) and FT-L (layer 4, per-weight bound 1e-2) edit them one after another. Every fact edited so far is
scored with all edits applied. The unedited scores of these 100 facts are printed below the table."""),
    ("code", """# one run per editor and mode: the 464-edit runs go on from the shorter ones (same first records)
longer = {"rome_seq250": "rome_seq464", "ft_seq100": "ft_seq464"}
mass = [r for name, r in runs.items() if name not in ("rome_seq250_guard", "rome_seq464_fix")  # sections 2b, 2e
        and "shuffled" not in name and longer.get(name) not in runs]                         # section 2f
t = mass_table(mass)
t.loc[(t["editor"] == "memit") & (t["mode"] == "one by one"), "mode"] = "one batch"  # MEMIT's 1 fact: a batch of one
cols = ["editor", "mode", "n_edited"] + [f"{m}_{f}" for m in ("efficacy", "paraphrase", "neighborhood")
                                         for f in ("score", "acc")]
print("unedited, the first 100 test facts:", {k: round(v["mean"], 1) for k, v in runs["memit_b100"].before["scores"].items()
                                              if k.split("_")[0] in ("efficacy", "paraphrase", "neighborhood")
                                              and not k.startswith("paraphrase_other")})
t[cols].sort_values(["n_edited", "editor"]).round(1)"""),
    ("code", """plot_mass(mass)"""),
    ("md", """The figure draws the 95% intervals (success form) from 10 facts on: for one fact they span most of the
axis (one prompt: about 21–100) and say nothing. MEMIT's one-fact run is a batch of one, drawn with its batch of 100.

The issue's comparison at N = 1, 10, 100 and the whole test split (464, section 1b): MEMIT in one batch against
ROME and FT-L applied one after another, every fact edited so far scored with all edits applied (success form,
strict in brackets). "facts" is how many facts are scored: ROME refused some edits (the model already gave the
target, or its guard refused them, section 2), so its row at 100 edits scores 99 facts and its row at 464 edits
scores 449."""),
    ("code", """M = ("efficacy", "paraphrase", "neighborhood")

def row(editor, n_edits, scores, n_facts):
    return {"N (edits)": n_edits, "editor": editor, "facts": n_facts,
            **{m: f"{scores[m + '_score']:.1f} ({scores[m + '_acc']:.1f})" for m in M}}

def at_step(run, step):  # the checkpoint after `step` steps: {score: mean}, facts scored
    c = {c["step"]: c for c in run.checkpoints}[step]
    return {k: v["mean"] for k, v in c["scores"].items()}, c["n_edited"]

rows = [row("MEMIT, one batch", 1, *at_step(runs["memit_b1"], 1)),
        row("MEMIT, one batch", 10, *at_step(runs["memit_seq_b10"], 1)),  # the first batch of the 10-batch run
        row("MEMIT, one batch", 100, *at_step(runs["memit_b100"], 1))]
whole = json.loads((STUDIES / "test_split" / "memit.json").read_text())
rows.append(row("MEMIT, one batch", 464, whole, whole["n_records"]))
for editor, name in (("ROME, one by one", "rome_seq464"), ("FT-L, one by one", "ft_seq464")):
    rows += [row(editor, n, *at_step(runs[name], n)) for n in (1, 10, 100, 464)]
pd.DataFrame(rows).sort_values("N (edits)", kind="stable").reset_index(drop=True)"""),
    ("md", """At 100 facts MEMIT in one batch (ES 100.0, PS 94.7, NS 93.0) is at least as good as ROME one by one (99.0 /
93.3 / 86.4, on its 99 facts) on all three scores, and from 10 facts on it disturbs the neighbours less. The
strict form tells the same story at a lower level — paraphrases reach top-1 in 66.3% (MEMIT) and 61.3% (ROME) of
prompts, and the true answer of a neighbour stays top-1 in 41.1% and 33.6% of prompts, against 50.6% unedited.
Ten batches of 10 end close to one batch of 100 (99.0 / 94.3 / 92.1). ROME's and FT-L's points go on to 464
edits (ROME's last point scores its 449 facts). FT-L one by one is no competitor: after 100 edits 63.0% of its
facts still hold (strict 39.0%), after all 464 edits 50.0% (strict 11.6%) — later fine-tuning steps overwrite
earlier ones. All 464 test facts at once: section 1b."""),
    ("md", """## 1b · The whole test split: MEMIT with all 464 facts in one batch

All 464 test records in one MEMIT batch (layers 0–4, λ = 2500: the defaults then, chosen on dev; two rounds, since 17
subjects have two facts), scored with the whole batch applied — the issue's target is ES ≥ 90, PS ≥ 75, NS ≥ 70
in the success form. Beside it, ROME and FT-L one edit at a time (each edit scored alone, then reverted) on all
464 records: that evaluation ran in 16 shards of 29 records (`studies/test_split/test_split_eval.py`). 95% CIs:
Wilson's interval for efficacy (one prompt per record), the normal interval cut at [0, 100] for the per-record
shares. MEMIT's loss drift is one measurement of one batch, so it has no CI. (`interp eval-edits --split test
--editor memit --batch-size 464`; its time is printed below.)"""),
    ("code", """SPLIT = STUDIES / "test_split"
split = {e: json.loads((SPLIT / f"{e}.json").read_text()) for e in ("memit", "rome", "ft")
         if (SPLIT / f"{e}.json").exists()}
names = {"memit": "MEMIT (all at once)", "rome": "ROME (one at a time)", "ft": "FT-L (one at a time)"}
rows = {}
for e, d in split.items():
    for m in ("efficacy", "paraphrase", "paraphrase_other", "neighborhood"):
        for form, kind in (("success", "score"), ("strict", "acc")):
            k = f"{m}_{kind}"
            lo, hi = d[f"{k}_ci"]
            rows.setdefault((m, form), {"unedited": round(d[f"{k}_before"], 1)})
            rows[(m, form)][f"{names[e]}, {d['n_records']} facts"] = f"{d[k]:.1f} [{lo:.1f}, {hi:.1f}]"
pd.DataFrame(rows).T"""),
    ("code", """memit = split["memit"]
print(f"MEMIT layers {memit['layers']}, {memit['n_records']} facts, {memit['seconds'] / 3600:.1f} h on one thread")
print("loss drift %:", round(memit["loss_drift"], 3), " generation entropy drop %:",
      round(memit["generation_entropy_drop"], 2))
print("failed edits by diagnosed reason:", memit["failure_counts"])"""),
    ("code", """from interp.rome import load_records

prompt = {r.case_id: r.prompt for r in load_records(split="test")}
per_fact = pd.read_csv(SPLIT / "memit.csv", index_col="case_id")
per_fact["subject first"] = [prompt[c].startswith("{}") for c in per_fact.index]
per_fact["efficacy failed"] = per_fact["efficacy_score_post"] == 0
pd.crosstab(per_fact["subject first"], per_fact["efficacy failed"], margins=True)"""),
    ("md", """MEMIT with all 464 facts at once meets the three targets — ES 96.3, PS 90.2, NS 72.9, each with its whole CI
— and the price of mass editing shows in the strict form: the neighbours' true answer stays top-1 in 16.4% of
their prompts against 51.0% unedited (41.1% after 100 facts at once), and the Wikipedia loss rises by 2.4% (0.69%
at 100). ROME one fact at a time keeps efficacy near 100 and the neighbours near 95, but that is one edit in the
model at a time; section 2 shows ROME's edits piled up.

Part of that price is the measurement, not the editor: in a batch of 464, 56% of the neighbourhood prompts name a
subject the same batch edits, whose answer *should* change. Counting only the neighbours the batch does not edit
(`neighborhood_unedited`, now reported beside the old score), the same run keeps 89.3 [87.4, 91.2] (strict 38.4)
instead of 72.9 (16.4); at 100 facts, 96.1 instead of 93.0 (`studies/memit_shared/README.md`, where both runs are
re-measured and reproduce the stored figures exactly).

All 17 facts MEMIT fails have a rewrite prompt that starts with the subject (the crosstab: 17 of 258 such facts, none
of the 206 others). It looks like the BOS-adjacent key mismatch that made single ROME edits fail on facts the
project did not write, but on dev it mostly is not (`studies/memit_key_rule/`, its JSON
and README): at the earlier λ = 5000 the failed facts' bare prompts still got most of the update (median share
0.83 of the mean key's), and solving for every templated key (`key_spread_weight`) only made MEMIT worse. The
update was too weak: it moved the bare prompt's residual a median 30% of the way to its target for the failed
facts, 59% for the others. Halving λ (the Wikipedia prior pulls less) was chosen on 231 dev facts (failures 21 →
8); on these 464 test facts it cut the failures from 42 to 17 (ES 90.9 → 96.3, PS 84.0 → 90.2) for 3.9 points of
neighbourhood score (76.8 → 72.9) and twice the loss drift (1.3% → 2.4%). Section 1's MEMIT runs were made at
λ = 2500 too (first made at λ = 5000: 100 facts in one batch gave 96.0 / 88.3 / 94.3).

On a second fact set the key mismatch is real: one-token place names right after BOS ("Texas is located on the
continent of") got a median 0.35 of the update, and continent facts failed half the time. MEMIT's default on this
model now also asks each such fact's bare prompt key for its share (`bare_key_weight=4` on the facts whose bare
key would get less than half, chosen on that set's dev split: `studies/memit_shared/`). These stored runs were
made before that; `--hparam bare_key_weight=0` reproduces them. With the new default, re-measured without
generations or lens (`studies/memit_shared/README.md`): the first 100 test facts at once score 99.0 / 94.3 / 92.5
(one fact fewer than 100.0 / 94.7 / 93.0: a fact whose margin was 0.007), and all 464 at once 96.8 / 90.4 / 71.6 (was 96.3 / 90.2 / 72.9; over the unedited
neighbours 88.2, was 89.3): the key-mismatch failures are gone, and the neighbourhood pays 1.3 points."""),
    ("md", """## 2 · Sequential editing: retention, fluency and drift as edits pile up

After every step: retention (efficacy of every fact edited so far), the Wikipedia loss drift (16 summaries × 64
tokens, against the unedited model) and the generation entropy of 15 fixed prompts with fixed seeds. The drift
threshold (what the summaries call a collapse, see the top) is a drift above 10% or an entropy drop above 10%
after a step. In the run figures the x axis is logarithmic from the first fact, so the early steps stay visible;
a drift that grows linearly in the number of edits looks steeper there at the right."""),
    ("code", """runs["rome_seq250"].plot()"""),
    ("code", """runs["rome_seq250"].show()  # interactive: every step of the ROME run as a table"""),
    ("code", """runs["memit_seq_b10"].plot()"""),
    ("code", """runs["ft_seq464"].plot()"""),
    ("code", """import math

def largest_drop(r):
    return r.to_frame()["entropy_drop"].max()

pd.DataFrame.from_dict({name: {"facts edited": r.steps[-1]["n_edited"],
                     "threshold crossed at step": r.collapse["step"] if r.collapse else "never",
                     "retention": r.steps[-1]["retention"], "retention (strict)": r.steps[-1]["retention_acc"],
                     "loss drift %": r.steps[-1]["loss_drift"],
                     # loss drift is a relative change of the mean token loss: perplexity ratio = exp(loss change)
                     "perplexity ratio": math.exp(r.steps[-1]["loss"] - r.before["loss"]),
                     "largest entropy drop %": largest_drop(r)}
              for name, r in runs.items()}, orient="index").round(2)"""),
    ("md", """Perplexity ratio: the Wikipedia texts' perplexity at the end of the run over the unedited model's (the
drift threshold of 10% is a ratio of about 1.36). MEMIT's one-fact run shows how noisy the entropy measure of 15
generations is: a 5.47% drop after a single fact, against 0.24% after 100 facts.

Is ROME's drift more than the sum of its edits? Each of these 250 facts was also made alone, on the unedited
model, in the whole-test-split evaluation (section 1b; same hyperparameters, same 16 Wikipedia texts), which
measured its own loss drift. The sequential drift after N edits beside the sum of those N single-edit drifts:"""),
    ("code", """shard_rows = [row for p in sorted((SPLIT / "shards").glob("shard_*.json"))
              for row in json.loads(p.read_text())["rome"]["rows"]]
single = {row["case_id"]: row["loss_drift"] for row in shard_rows}
seq = runs["rome_seq250"].to_frame()
alone = [sum(single[c] for c in ids if c not in failed) for ids, failed in zip(seq["case_ids"], seq["failed"])]
seq["sum of single-edit drifts"] = pd.Series(alone, index=seq.index).cumsum()  # a refused edit adds nothing
seq["excess"] = seq["loss_drift"] - seq["sum of single-edit drifts"]
seq["drift increment"] = seq["loss_drift"].diff().fillna(seq["loss_drift"].iloc[0])
print("unedited Wikipedia loss:", round(runs["rome_seq250"].before["loss"], 3),
      "nats; a drift of 10% is a perplexity ratio of", round(math.exp(0.1 * runs["rome_seq250"].before["loss"]), 2))
print("correlation of a step's drift increment with that edit's drift alone:",
      round(seq["drift increment"].corr(pd.Series(alone, index=seq.index)), 2))
print("drift after steps 216 and 217:", seq.loc[[216, 217], "loss_drift"].round(2).tolist())
s = pd.DataFrame(shard_rows).set_index("case_id")[["loss_drift", "key_dot", "relative_update"]]
print("case 449 alone, against the median of the 464 single edits:\\n",
      pd.DataFrame({"case 449": s.loc[449], "median": s.median(), "rank (1 = largest)": s.rank(ascending=False).loc[449]}).round(3))
seq.loc[[1, 10, 50, 100, 150, 200, 250], ["n_edited", "loss_drift", "sum of single-edit drifts", "excess"]].round(2)"""),
    ("md", """ROME crosses the drift threshold at its 217th edit: one edit, case 449 (Wall Street → Florence), lifts the
drift from +8.53% to +14.08%. After 250 edits the drift is +15.41% (perplexity ratio 1.60), NS 68.1 (strict
13.3), retention 95.9%, and the entropy never falls more than 1.94%. Before that edit the drift is a little more
than the single-edit drifts added up (7.55 against 5.74 after 150), and a step's increment follows its edit's
own drift (correlation 0.7). Case 449 is an outlier of the 464 single edits — the largest drift alone (1.459%;
median 0.021%), the smallest C⁻¹k·k (key_dot, 40.7; median 3,517) and the largest relative update (0.888; median
0.077) — but `studies/editing_at_scale/README.md` shows that edits with the same statistics succeed on the
independently written facts, so no bound on them would single it out beforehand. Eight edits were refused
because the model already gave their target, most after an earlier edit with the same relation and target had
bled into them (six of the eight, `studies/editing_at_scale/README.md`). MEMIT in batches of 10 drifts +0.91% after 100 facts with retention 99.0%; FT-L: section 2c.
Every run's edits were reverted at the end and every written matrix compared bit for bit with its unedited
state."""),
    ("md", """## 2b · ROME's edit guard (chosen after seeing this test run)

`rome.edit(..., max_loss_rise=B)` tries the new matrix on 4 Wikipedia summaries that no evaluation reads (not the
16 drift texts) and refuses the edit — weights unchanged, a `ValueError` that names the rise — when their loss
would rise by more than B percent. It is measured on the model as it is, so in a sequential run it sees the edit on
top of all earlier ones; `sequential_edits` turns it on for ROME with the bound
`interp.editing.defaults.GUARD_BOUND` = 1.0%. A refused edit is skipped with its reason.

**The bound is not independent of this test run.** It was set on 100 dev edits in a row (`studies/loss_rise/`,
guard measuring only; the cell below prints its numbers), but by a rule amended after the test run above had
crossed the threshold at case 449: the rule set beforehand (twice the largest dev rise, rounded up to 0.5) gives
6.0%, which would not have refused case 449; the amended rule (twice the largest rise among dev edits whose v*
converged, rounded up) gives 1.0%, which does. So the guarded run below shows that the guard does what it was
tuned to do on the sequence that tuned it; it cannot validate the bound. The check on a sequence that no decision
saw is section 2f (with the smaller updates of section 2e).

The guarded run repeats the same 250 edits. An edit does not depend on the measurements and the guard only
measures (its trial write is undone bit for bit), so until the guard first refuses, the guarded run makes the
unguarded run's edits; it was measured from step 200 only (`--measure-from 200`), and its step 200 is compared
with the unguarded run's below."""),
    ("code", """import matplotlib.pyplot as plt

dev_rise = json.loads((STUDIES / "loss_rise" / "loss_rise_seq.json").read_text())["rows"]
top = sorted(dev_rise, key=lambda r: -r["loss_rise"])[:3]
print("dev run, largest guard rises (%) with v*'s final target probability:",
      [(round(r["loss_rise"], 2), round(r["p_final"], 2)) for r in top],
      "| largest of the edits whose v* converged (p_final >= 0.5):",
      round(max(r["loss_rise"] for r in dev_rise if r["p_final"] >= 0.5), 2))

before, after = runs["rome_seq250"], runs["rome_seq250_guard"]
b, a = before.to_frame(), after.to_frame()
print("step 200, unguarded vs guarded: drift", b.loc[200, "loss_drift"], a.loc[200, "loss_drift"],
      "| retention", b.loc[200, "retention"], a.loc[200, "retention"])
at200 = [{c["step"]: c for c in r.checkpoints}[200]["scores"] for r in (before, after)]
print("checkpoint 200, every score equal:", all(v["mean"] == at200[1][k]["mean"] for k, v in at200[0].items()))
refused = pd.DataFrame([{"step": r["step"], "case_id": c, "reason": why} for r in after.steps
                        for c, why in zip(r["failed"], r["failed_reasons"])])
rises = pd.DataFrame([{"step": r["step"], "loss_rise": e["loss_rise"]} for r in after.steps for e in r["edits"]])
print(f"guard rise of the {len(rises)} applied edits: median {rises['loss_rise'].median():+.3f}%, "
      f"max {rises['loss_rise'].max():+.3f}% (bound {after.hparams['max_loss_rise']}%)")
# case 449 was refused in two stored runs; each measured its rise on top of its own 216 earlier edits
for name in ("rome_seq250_guard", "rome_seq464"):
    r217 = docs[name]["steps"][216]
    print(f"{name}: drift after 216 edits {docs[name]['steps'][215]['loss_drift']:.2f}%; step 217, case "
          f"{r217['failed'][0]}: {r217['failed_reasons'][0][:72]}")
refused"""),
    ("code", """fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
for frame, label in ((b, "no guard"), (a, "guard (measured from step 200)")):
    axes[0].plot(frame["n_edited"], frame["loss_drift"], label=label)
    probed = frame.dropna(subset=["retention"])
    axes[1].plot(probed["n_edited"], probed["retention"], label=label)
axes[0].axhline(before.settings["max_drift"], color="r", lw=0.8, ls=":")
axes[0].set(xlabel="facts edited", ylabel="Wikipedia loss drift (%)", title="loss drift")
axes[1].set(xlabel="facts edited", ylabel="% of facts so far (axis from 90)", ylim=(90, 100.5),
            title="retention (P(new) > P(true)), y from 90%")
axes[2].plot(rises["step"], rises["loss_rise"], ".", ms=3)
axes[2].axhline(after.hparams["max_loss_rise"], color="r", lw=0.8, ls=":")
for step in refused["step"]:
    axes[2].axvline(step, color="k", lw=0.6, ls="--")
axes[2].set(xlabel="step", ylabel="guard texts' loss rise (%)", title="each edit's rise on top of the others")
for ax in axes[:2]:
    ax.set_xlim(150, 250)
    ax.legend(fontsize=7)
fig.tight_layout()"""),
    ("code", """keys = ["efficacy_score", "efficacy_acc", "paraphrase_score", "paraphrase_acc", "paraphrase_other_score",
        "neighborhood_score", "neighborhood_acc"]
rows = {}
for name, r in (("no guard", before), ("guard", after)):
    for c in r.checkpoints:
        if c["step"] in (200, 250):
            last = r.steps[c["step"] - 1]
            rows[(name, c["step"])] = {"facts": c["n_edited"], **{k: c["scores"][k]["mean"] for k in keys},
                                       "loss drift %": last["loss_drift"], "entropy drop %": last["entropy_drop"]}
pd.DataFrame(rows).T.round(2)"""),
    ("md", """The guard refuses one edit of the 250: case 449 at step 217. Its rise was 3.84% in this run and 3.23% in
section 2d's run, both against the bound of 1.0% (both read from the stored runs above). The two differ because
each was measured on top of that run's own 216 earlier edits, and those differ: this run was made on another
machine, whose float rounding differs in the last digits; carried through 216 edits, that left the drift at
8.37% instead of 8.53%
(section 2d's run repeats the unguarded run to the last digit). Every other applied edit rose at most 0.78%.
Without case 449 the drift keeps growing gradually, to +9.76% after 250 edits instead of +15.41%; retention is
97.1% (strict 90.5%) instead of 95.9% (79.3%), NS 71.7 instead of 68.1. The guard removes the jump, not the
accumulation: section 2d's longer run crosses 10% at step 262. Because of the machine difference the two runs
are already apart at step 200 (drift 7.41% against 7.61%, efficacy 98.97 against 98.45); both end with 242
facts edited."""),
    ("md", """## 2c · 464 edits in a row: FT-L

FT-L (layer 4, per-weight bound 1e-2) edits all 464 test facts one after another
(`studies/editing_at_scale/ft_seq464.json`; retention and entropy every 10 steps, the drift after every step;
88 min on one thread). Its drift does not grow steadily: single edits move it by several points, up or down."""),
    ("code", """ft = runs["ft_seq464"]
print(ft.summary())
print("collapse:", ft.collapse)
f = ft.to_frame()
f["drift change"] = f["loss_drift"].diff()
print("steps that moved the drift by more than 2 points:", int((f["drift change"].abs() > 2).sum()), "of", len(f))
print("drift after 101 edits:", round(f.loc[101, "loss_drift"], 2), "| largest entropy drop:",
      round(f["entropy_drop"].max(), 2), "% at step", f["entropy_drop"].idxmax())
# the same first 100 edits, made by the same code on the machine of an earlier session (ft_seq100.json)
other = runs["ft_seq100"].to_frame()
at = [1, 10, 25, 49, 50, 51, 100]
pd.DataFrame({"drift, this run": f.loc[at, "loss_drift"], "drift, earlier machine": other.loc[at, "loss_drift"],
              "edit's relative update, this run": [r["edits"][0]["relative_update"] for r in ft.steps if r["step"] in at],
              "earlier machine": [r["edits"][0]["relative_update"] for r in runs["ft_seq100"].steps if r["step"] in at]
              }).round(4)"""),
    ("md", """FT-L's run crosses the drift threshold at its 50th edit (case 282): that step alone adds 8.76 points (7.49% →
16.25%), and the next ones take most of it back (13.00% after 51, 1.8% after 101); after 464 edits the drift is
+11.86% and the largest entropy drop 8.49% (step 380). Efficacy over all 464 facts is 50.0 (strict 11.6),
paraphrase 18.9 (strict 4.5), neighbourhood 57.2 (strict 11.4): FT-L's updates of one matrix overwrite each
other, and each moves the model's loss by up to ±8 points.

The path is not reproducible across machines. The same code made the same first 100 edits in an earlier session on
another machine (`ft_seq100.json`): after 1 and after 10 edits the drifts agree to about 1e-4, after 25 they
differ by 0.14 points, and at step 50 the earlier machine measured 1.92% against 16.25% here. Each FT-L edit is
Adam on a per-weight box: sign-like steps, a clamp and a loss stop, so a rounding difference changes which weights
saturate and when an edit stops, and the next edit starts from other weights. ROME's path also depends on the
machine, but mildly (section 2b: 7.41% against 7.61% after 200 edits), and on a machine that rounds alike it
repeats to the last digit (section 2d). A single FT-L curve is one draw; what holds on both machines is the
level: after 100 edits efficacy 54.0 (earlier machine) and 63.0 (here), drift +4.19% and +3.08%."""),
    ("md", """## 2d · 464 edits in a row: ROME with its guard

ROME (layer 4, the guard on at 1.0%) edits all 464 test facts one after another
(`studies/editing_at_scale/rome_seq464.json`; retention and entropy every 10 steps, the drift after every
step). The run is longer than a session, so it saves its matrices and steps after every step (`--state`) and
continues from there. Until the guard first refuses an edit, it makes the same edits as the unguarded 250-edit
run of section 2. "excess" is the sequential drift minus the sum of the same edits' drifts each made alone."""),
    ("code", """doc = docs["rome_seq464"]
rome_run = ScaleResult.from_json(doc)  # a run not finished yet is its steps so far (it continues from its --state)
if "partial" in doc:
    print(f"NOT FINISHED: {doc['partial']}; below are its steps so far")
print(rome_run.summary())
print("collapse:", rome_run.collapse)
print("continued from a save at step:", rome_run.settings.get("resumed_at"))
r = rome_run.to_frame()
n = min(216, len(r))  # the guard first refuses at step 217 of the unguarded run's edits
print(f"same drift as the unguarded run, steps 1-{n}:",
      r.loc[1:n, "loss_drift"].tolist() == runs["rome_seq250"].to_frame().loc[1:n, "loss_drift"].tolist())
refused = [(row["step"], c, why[:80]) for row in rome_run.steps for c, why in zip(row["failed"], row["failed_reasons"])]
print(len(refused), "edits refused:", refused)
alone = [sum(single[c] for c in ids if c not in failed) for ids, failed in zip(r["case_ids"], r["failed"])]
r["sum of single-edit drifts"] = pd.Series(alone, index=r.index).cumsum()
r["excess"] = r["loss_drift"] - r["sum of single-edit drifts"]
at = [s for s in (1, 10, 50, 100, 200, 250, 300, 400, 464) if s in r.index]
display(r.loc[at, ["n_edited", "loss_drift", "sum of single-edit drifts", "excess", "retention",
                   "entropy_drop"]].round(2))
rome_run.plot()"""),
    ("md", """ROME's 464 edits in a row (449 facts; 15 refused: 10 whose target the model already gave, 5 by the guard)
end at ES 94.0, PS 86.7, NS 60.1 (strict 73.7 / 45.2 / 7.2) with the Wikipedia loss up 21.27% (perplexity ratio
1.92) and the entropy unchanged (largest drop 2.27%). The drift crosses 10% at step 262 by accumulation (that step
added 0.08 points). The single-edit drifts added up explain less of it as the edits pile up: the excess of the
sequential drift over their sum is 0.52 points after 200 edits, 5.54 after 400 and 5.65 after 464 (21.27 against
15.62). About three quarters of the final drift is the edits' own drifts, and a growing rest comes from their
interaction. The guard does not address either.

AlphaEdit (Fang et al. 2025) projects each update onto the (approximate) null space of the preserved keys, the
eigenvectors of their second moment C whose eigenvalues fall below a small threshold. ROME's C⁻¹k direction
already adds the least second moment on Wikipedia keys that a rank-one edit of one key can, and the layer-4 C has
no exact null space. But its eigenvalues run from 0.863 down to 0.0031, half of them below 0.0114 (section 3
prints them from the cached statistics), so a threshold near 0.01 would already count about half the directions
as null; whether a projection onto them leaves these edits their effect and stops their drift is untested. That
AlphaEdit would not help here is a conjecture; AlphaEdit was not run. Spreading edits over layers is the other route:
MEMIT in batches of 10 drifted +0.91% after 100 facts, ROME +3.98%. The run was stopped once and continued from
its save at step 309."""),
    ("md", """## 2e · Smaller ROME updates in a sequential run (chosen after seeing this test run)

About three quarters of ROME's drift after 464 edits is the single edits' drifts added up, so making each edit
drift less is the direct lever. A dev study (`studies/sequential_fix/`; 40 dev records, one edit each, measured
alone) tried stopping v*'s optimisation earlier (`v_loss_stop`: mean target NLL, default 0.05) and a tighter norm
clamp (`clamp_norm_factor`: |delta| ≤ factor × |M k*|, default 4). Its table, read from its JSON:"""),
    ("code", """dev_fix = json.loads((STUDIES / "sequential_fix" / "sequential_fix_dev.json").read_text())["settings"]
fix_rows = {}
for name, s in dev_fix.items():
    rec = s["rows"]
    fix_rows[name] = {"v_loss_stop": s["hparams"]["v_loss_stop"], "clamp_norm_factor": s["hparams"]["clamp_norm_factor"],
                      "mean single-edit drift %": s["mean_loss_drift"],
                      **{m: 100 * sum(x[f"{m}_score_post"] for x in rec) / len(rec) for m in M}, "records": len(rec)}
fix_table = pd.DataFrame.from_dict(fix_rows, orient="index").sort_values("mean single-edit drift %", ascending=False)
need = rome_run.steps[-1]["loss_drift"] / rome_run.settings["max_drift"]
cut = dev_fix["default"]["mean_loss_drift"] / dev_fix["stop05c15"]["mean_loss_drift"]
print(f"cut needed to end 464 edits under 10%: {need:.2f}x; stop 0.5 + clamp 1.5 cuts the dev drift {cut:.2f}x")
fix_table.round(3)"""),
    ("md", """Staying under the 10% threshold after 464 edits needs the drift per edit cut by about 2.13×; `v_loss_stop`
0.5 with `clamp_norm_factor` 1.5 cuts it 2.38× on dev and keeps ES at 97.5, so `sequential_edits` gives ROME these
values with the guard (the `sequential` entry of `interp.editing.defaults`; a single `rome.edit` keeps the paper's
values, since the smaller update costs paraphrase). The run below repeats section 2d's 464 test edits with them
(`studies/editing_at_scale/rome_seq464_fix.json`).

**What this run can and cannot show.** The study used dev records only, but it was run because this test sequence
crossed the threshold, and what counted as enough (the 2.13× cut) was read off this sequence; the guard's bound
was set by a rule amended after seeing it (section 2b). The run below is the same 464 test edits in the same
order, so it shows that the fixes do what they were designed to do on the sequence they were designed against —
it cannot validate them. The validation, on the same facts in an order no decision saw, is section 2f. (The
100 independently written facts, `interp/editing/records/facts_independent.jsonl`, are too few for it: after 100
edits the unfixed run's drift was 3.98%, far from the threshold.)"""),
    ("code", """fix_doc = docs["rome_seq464_fix"]
fixed = ScaleResult.from_json(fix_doc)
if "partial" in fix_doc:
    print(f"NOT FINISHED: {fix_doc['partial']}; below are its steps so far")
print("hparams:", {k: fixed.hparams[k] for k in ("v_loss_stop", "clamp_norm_factor", "max_loss_rise")})
print(fixed.summary())
print("collapse before:", rome_run.collapse)
print("collapse after: ", fixed.collapse)
print("wall time, before / after:", *(f"{docs[n]['seconds'] / 60:.0f} min" for n in ("rome_seq464", "rome_seq464_fix")))
fx = fixed.to_frame()
fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
for frame, label in ((r, "before: paper's values + guard"), (fx, "after: stop 0.5, clamp 1.5 + guard")):
    axes[0].plot(frame["n_edited"], frame["loss_drift"], label=label)
    probed = frame.dropna(subset=["retention"])
    axes[1].plot(probed["n_edited"], probed["retention"], label=label)
    axes[2].plot(probed["n_edited"], probed["entropy_drop"], label=label)
axes[0].axhline(fixed.settings["max_drift"], color="r", lw=0.8, ls=":")
axes[2].axhline(fixed.settings["max_entropy_drop"], color="r", lw=0.8, ls=":")
axes[0].set(xlabel="facts edited", ylabel="Wikipedia loss drift (%)", title="loss drift")
axes[1].set(xlabel="facts edited", ylabel="% of facts so far (axis from 85)", ylim=(85, 100.5),
            title="retention (P(new) > P(true)), y from 85%")
axes[2].set(xlabel="facts edited", ylabel="entropy drop (%)", title="generation entropy drop")
for ax in axes:
    ax.legend(fontsize=7)
fig.tight_layout()"""),
    ("code", """rows = {}
for name, run in (("before", rome_run), ("after", fixed)):
    for c in run.checkpoints:
        if c["step"] in (100, 200, 300, 464):
            last = run.steps[c["step"] - 1]
            rows[(name, c["step"])] = {"facts": c["n_edited"], **{k: c["scores"][k]["mean"] for k in keys},
                                       "loss drift %": last["loss_drift"], "entropy drop %": last["entropy_drop"]}
refused_fix = [(row["step"], c, why[:60]) for row in fixed.steps for c, why in zip(row["failed"], row["failed_reasons"])]
print(len(refused_fix), "edits refused:", refused_fix)
for name, run in (("before", rome_run), ("after", fixed)):
    e = run.checkpoints[-1]["scores"]["efficacy_score"]
    frame = run.to_frame()
    print(f"{name}: ES {e['mean']:.1f} [{e['ci_low']:.1f}, {e['ci_high']:.1f}], drift per edited fact "
          f"{frame['loss_drift'].iloc[-1] / frame['n_edited'].iloc[-1]:.4f}, largest one-step rise "
          f"{frame['loss_drift'].diff().max():.2f}, largest entropy drop {frame['entropy_drop'].max():.2f}%, "
          f"perplexity ratio {math.exp(frame['loss'].iloc[-1] - run.before['loss']):.2f}")
pd.DataFrame(rows).T.round(2)"""),
    ("code", """import numpy as np

late = fx.loc[200:]
slope = np.polyfit(late["n_edited"], late["loss_drift"], 1)[0]
last = fx.iloc[-1]
bound = fixed.settings["max_drift"]
print(f"after: drift {last['loss_drift']:.2f}% after {last['n_edited']} facts; the 10% bound at about "
      f"{bound / (last['loss_drift'] / last['n_edited']):.0f} facts at the mean rate per fact, "
      f"{last['n_edited'] + (bound - last['loss_drift']) / slope:.0f} at the late rate ({slope:.4f} points per fact, "
      "least squares over steps 200-464)")
print(f"strict neighbourhood after 464 edits: {fixed.final_scores()['neighborhood_acc']:.1f} "
      f"(unedited {fixed.before['scores']['neighborhood_acc']['mean']:.1f})")"""),
    ("md", """**Under the threshold after 464 edits, not clear of it.** The drift after 464 edits is +8.67% instead of
+21.27% (perplexity ratio 1.30 instead of 1.92), but it still grows linearly: 0.0190 points per edited fact
(0.0225 over steps 200–464) instead of 0.0474, so it would reach the 10% bound near 515–526 facts edited (late
rate, mean rate) — 60 to 70 facts after the run ends. Per edited fact that is a 2.5× cut, about the 2.38× the dev study's
single edits showed. The jumps shrink too: the largest single-step rise is 0.72 points (before 2.68), the largest
entropy drop 1.39% (before 2.27%); the guard refused 3 edits (before 5). The neighbours gain in the success form
(NS 64.0 against 60.1), but in the strict form only 10.2% of the neighbours' prompts keep their true answer on
top, against 51.0% unedited. **The price is retention**: ES 89.9 [86.8, 92.4] against 94.0 [91.4, 95.8], PS 82.3
against 86.7 (strict 70.2 / 34.6 against 73.7 / 45.2). Part of it is the dev study's single-edit cost (ES 97.5,
PS 81.7 there), part is that a smaller update is easier for later edits to overwrite: efficacy falls from 97.0
after 100 edits to 89.9 after 464 (before: 99.0 to 94.0). Which of the lost facts never flipped and which were
forgotten later this run cannot say: it predates the check of each edit right after its step, which runs make now
(`ScaleResult.failures()`, section 3). As section 2e says, this is the sequence the fixes were chosen on, and on
an order no decision saw (section 2f) this price does not show."""),
    ("md", """## 2f · The fixes on an order no decision saw

The same 464 test facts in the order `random.Random(1).shuffle` gives; the seed was written into this notebook
before any run, and so were the two runs: the sequential defaults (the fix) and the paper's values with no guard
(the control). The pass criteria were committed before either run's scores were read
(`studies/editing_at_scale/README.md`, last section): (1) the control crosses the 10% drift threshold within the
464 edits, or the order does not test the fix; (2) the fixed run stays under it at every step; (3) the drift per
edited fact after 464 edits is cut at least 2.13×, what section 2e says 464 edits need; (4) the scores are
reported as they come. Through the public API the runs are:

```python
records = interp.rome.load_records(split="test")
random.Random(1).shuffle(records)                      # an order no decision saw
fixed = interp.rome.sequential_edits(model, records, "rome", probe_every=10,
                                     checkpoints=(1, 10, 50, 100, 200, 300, 400, 464), state_dir="shuffled.state")
control = interp.rome.sequential_edits(model, records, "rome", probe_every=10,   # the paper's values, no guard
                                       hparams={"v_loss_stop": 0.05, "clamp_norm_factor": 4.0, "max_loss_rise": 0},
                                       checkpoints=(1, 10, 50, 100, 200, 300, 400, 464), state_dir="control.state")
```

(`studies/editing_at_scale/editing_at_scale.py --shuffle-seed 1` is the same, with the JSON written at every
checkpoint.)"""),
    ("code", """shuffled = {"control": "rome_seq464_shuffled", "fixed": "rome_seq464_fix_shuffled"}
for label, name in shuffled.items():
    if "partial" in docs[name]:
        print(f"{label} NOT FINISHED: {docs[name]['partial']}; below are its steps so far")
val = {label: ScaleResult.from_json(docs[name]) for label, name in shuffled.items()}
vf = {label: run.to_frame() for label, run in val.items()}
threshold = val["fixed"].settings["max_drift"]
for label, run in val.items():
    print(f"{label}: {run.summary()}")
    print(f"   hparams {({k: run.hparams[k] for k in ('v_loss_stop', 'clamp_norm_factor', 'max_loss_rise')})}, "
          f"wall {docs[shuffled[label]]['seconds'] / 60:.0f} min")
over = {label: f.loc[f["loss_drift"] > threshold, "n_edited"] for label, f in vf.items()}
per_fact = {label: f["loss_drift"].iloc[-1] / f["n_edited"].iloc[-1] for label, f in vf.items()}
cut = per_fact["control"] / per_fact["fixed"]
print(f"(1) the control crosses {threshold:.0f}%: {not over['control'].empty}"
      + (f" (first at {over['control'].iloc[0]} facts edited)" if not over["control"].empty else ""))
print(f"(2) the fixed run stays under {threshold:.0f}% at every step: {over['fixed'].empty} "
      f"(largest drift {vf['fixed']['loss_drift'].max():.2f}%)")
print(f"(3) drift per edited fact {per_fact['control']:.4f} (control) / {per_fact['fixed']:.4f} (fixed) = {cut:.2f}x "
      f"(needed 2.13x): {cut >= 2.13}")"""),
    ("code", """pairs = {("file order", "paper's values + guard"): rome_run, ("file order", "fix"): fixed,
         ("shuffled", "paper's values, no guard"): val["control"], ("shuffled", "fix"): val["fixed"]}
rows = {}
for (order, label), run in pairs.items():
    drift = run.to_frame()["loss_drift"]
    for c in run.checkpoints:
        if c["step"] in (100, 200, 300, 464):
            rows[(order, label, c["step"])] = {"facts": c["n_edited"], "drift %": drift[c["step"]],
                                                **{f"{m} ({f})": c["scores"][f"{m}_{f}"]["mean"]
                                                   for m in M for f in ("score", "acc")}}
for label, run in val.items():
    why = run.failures()["why"].value_counts().to_dict()
    refused = [(row["step"], why_[:40]) for row in run.steps for why_ in row["failed_reasons"]]
    print(f"{label}: failing after 464 edits {why}; refused {len(refused)}: {refused}")
fig, ax = plt.subplots(figsize=(7, 3.6))
for (order, label), run in pairs.items():
    f = run.to_frame()
    ax.plot(f["n_edited"], f["loss_drift"], ls="-" if order == "shuffled" else ":", label=f"{order}: {label}")
ax.axhline(threshold, color="r", lw=0.8, ls="--")
ax.set(xlabel="facts edited", ylabel="Wikipedia loss drift (%)", title="ROME, 464 test edits in a row, two orders")
ax.legend(fontsize=7)
fig.tight_layout()
pd.DataFrame(rows).T.round(1)"""),
    ("md", """**The fixes pass on an order no decision saw.** All three criteria written before the runs were read hold:
the control crosses the 10% threshold at 220 facts and ends at +30.6%; the fixed run peaks at 7.80% and ends at
+7.48%; the drift per edited fact is cut 4.08× (0.0677 against 0.0166 points), above the 2.13× that 464 edits need.
The cut is larger than section 2e's 2.5× because this control has no guard: its drift jumps 7.54 points at one
step (case 590, which the fix's guard refused) and 5.87 at another (case 449).

Three things do not go as section 2e told them:

- **The guard's bound does not bound the drift.** Case 449, which the guard refused in file order, passes it
  under the fix: its clamped, smaller update rises 0.90% on the guard's texts (under the 1.0% bound), then adds
  2.08 points of Wikipedia drift in one step, and the fact does not flip. The guard and the drift measure
  different texts, and for this edit they disagree.
- **"The price is retention" does not replicate.** On this order efficacy and paraphrase are the same with and
  without the fix (ES 89.1 [85.9, 91.7] against 89.4 [86.2, 91.9]; PS 82.3 against 81.9); section 2e's 4-point loss
  was against a guarded control in file order. The neighbours gain here as there (NS 67.2 against 58.4, strict
  12.6 against 7.1). Almost every lost fact was forgotten later, not left unflipped (47 of 49 with the fix, all
  48 without).
- The fixed run's drift still grows, and faster late than early (0.0271 points per fact over steps 200–464), so
  it would reach 10% near 544 facts: the fix moves the threshold past 464 edits, it does not remove it."""),
    ("md", """## 3 · Worked examples, run live: MEMIT on five facts, ROME on ten in a row

Everything above was read from stored runs. The cells below run the public API on the embedded model, on dev
records (nothing here touches the test split); copy them. Both editors solve with the key statistics C = E[k kᵀ]
over 100,000 Wikipedia tokens per edited layer. They are computed on first use and cached on disk
(`~/.cache/interp/stats/`), so on a machine without that cache the first MEMIT call first scans Wikipedia for
layers 0–4 — a one-off that costs several minutes on a CPU (the second cell prints how long the cached ones took
when they were computed here: 112 s for the one scan of layers 0–3, 585 s for layer 4). The two editing cells
print their wall time: here, with the statistics cached, 173 s for MEMIT's five facts (their v* optimisations
dominate) and 40 s for ROME's ten edits, on two threads of a machine shared with other jobs (the provenance cell
names it) — the MEMIT example is slower than a minute."""),
    ("code", """# drift: rtol=0.05 - MEMIT's v* optimisation rounds differently on another CPU, and so do the probabilities
import time

import torch

import interp

torch.set_num_threads(2)
model = interp.load(device="cpu")
dev = interp.rome.load_records(split="dev")
five = dev[:5]

def p_target(fact, target):  # P(target | rewrite prompt), every token of the target
    ids, tt = model.encode(fact.text), model.target_tokens(target)
    with torch.no_grad():
        logp = model.forward(torch.tensor([ids + tt]))[0, len(ids) - 1:-1].float().log_softmax(-1)
    return float(logp[torch.arange(len(tt)), torch.tensor(tt)].sum().exp())

layers = interp.memit.default_layers(model)
original = {l: model.mlp_out_matrix(l).detach().clone() for l in layers}
before = [(p_target(f, f.target_new), p_target(f, f.target_true)) for f in five]
t0 = time.perf_counter()
batch = interp.memit.edit(model, five)                     # one MEMIT batch over layers 0-4
after = [(p_target(f, f.target_new), p_target(f, f.target_true)) for f in five]
batch.revert()
print(f"MEMIT, {len(five)} facts over layers {layers}: {time.perf_counter() - t0:.0f} s")
print("reverted, every written matrix bit-identical:",
      all(torch.equal(model.mlp_out_matrix(l), original[l]) for l in layers))
pd.DataFrame([{"prompt": f.text, "true -> new": f"{f.target_true!r} -> {f.target_new!r}",
               **{k: f"{v:.3g}" for k, v in (("P(new) before", b[0]), ("P(new) after", a[0]),
                                             ("P(true) before", b[1]), ("P(true) after", a[1]))}}
              for f, b, a in zip(five, before, after)])"""),
    ("code", """C = interp.rome.key_stats(model, 4).mom2                  # layer 4, the cached statistics ROME uses
eig = torch.linalg.eigvalsh(C)
print(f"layer-4 C = E[k kᵀ] ({C.shape[0]} x {C.shape[1]}): eigenvalues {eig.max():.3g} (largest) ... "
      f"{eig.median():.3g} (median) ... {eig.min():.2g} (smallest)")
print("time to compute each layer's statistics, when they were computed (cached since):",
      {l: f"{interp.rome.key_stats(model, l).meta.get('seconds', float('nan')):.0f} s" for l in layers})"""),
    ("code", """# drift: rtol=0.05 - ROME's v* optimisation rounds differently on another CPU
settings = interp.rome.ScaleSettings(generation=False, checkpoints=(10,), probe_every=5, score_before=False,
                                     progress=False)                # cheap: no generations, one full scoring
t0 = time.perf_counter()
run = interp.rome.sequential_edits(model, dev[:10], "rome", settings)  # the sequential defaults: guard, smaller updates
print(f"{time.perf_counter() - t0:.0f} s")
print(run.summary())
print("used:", {k: run.hparams[k] for k in ("v_loss_stop", "clamp_norm_factor", "max_loss_rise")})
run.failures()  # facts failing efficacy at the end: never flipped, or forgotten later"""),
]

nb = nbf.v4.new_notebook()
nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in cells]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
out = Path(__file__).parent / "05b_editing_at_scale.ipynb"
nbf.write(nb, out)
print(f"wrote {out}")
