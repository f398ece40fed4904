"""Where do the graph's predicted ablations and the real model part? (issue 34; a reading: it chooses nothing.)

    .venv/bin/python studies/graphs_faithfulness/freeze_parts.py --model gemma3-270m --threads 1

`run.py` compares each top-10 feature's predicted ablation (linear, in the local replacement model: attention
patterns and norm scales frozen, MLPs replaced by transcoders with their errors held, features passing changes at
slope 1) with the real model, where nothing is frozen. Between the two lie three differences. This script measures
the same ablations of the same 50 prompts under conditions that add them back one at a time:

* ``replacement_exact``: the local replacement model run forward, attention and norms frozen, each MLP write
  ``transcoder(x) + error`` with the error held at its clean value and the transcoder's TopK recomputed from the
  live input (the graph's linearisation of the features removed, nothing else);
* ``replacement_live``: the same MLP writes, nothing frozen (``replacement_norms`` / ``replacement_attention``:
  only the norms' scales or only the attention patterns frozen; asked for with ``--conditions``);
* ``frozen_both``: the real MLPs, attention patterns and norm scales frozen at their clean values;
* ``frozen_norms`` / ``frozen_attention``: only one of the two frozen;
* ``real``: nothing frozen (`run.py`'s measurement; checked here against its stored values).

With the real MLPs, an MLP's post-norm (Gemma's ``post_feedforward_layernorm``, ``ln2_post``) stays live: the
transcoder stands in for the MLP *and* that norm (it predicts ``hook_mlp_out``), so the graph never freezes its
scale. Frozen with a real MLP, it divides any change of the MLP's output by the clean run's rms, which on Gemma is
as small as 1e-3 at some positions: 355 of the 500 ablations then overflowed to NaN (the first version of this
script). A Llama MLP (SmolLM2) has no post-norm to keep live, and there some real-MLP ablations with frozen norm scales
overflow (a gated MLP behind a frozen pre-norm growing a change layer after layer is the reading; not traced). A non-finite change is stored as null
and counted per condition (``non_finite``); the figures are over the ablations every condition measured finitely
(``n_scored``).

Each condition's clean forward (no ablation) must give the real model's logits (checked: the conditions only freeze
what the clean run already computed). The figures are `run.py`'s: sign agreement with the prediction, pooled
Spearman, over the same ablations. Writes ``freeze_parts_NAME.json`` beside this file.
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

import interp
from interp.analyses.graphs.replacement import LocalReplacement
from interp.analyses.patching.activation import spearman
from interp.cli.features import add_dictionary_options, dictionaries_for
from interp.core.provenance import provenance
from interp.analyses.features.use import feature_hooks

from run import known_facts

HERE = Path(__file__).parent
CONDITIONS = ("replacement_exact", "replacement_live", "frozen_both", "frozen_norms", "frozen_attention", "real")
MORE = ("replacement_norms", "replacement_attention")
REPLACEMENT_FROZEN = {"replacement_exact": "both", "replacement_norms": "norms", "replacement_attention": "attention"}
MLP_POST_NORM = ".ln2_post.hook_scale"


def frozen_hooks(lrm: LocalReplacement, which: str, *, mlp_post_norms: bool = True) -> list:
    """Hooks holding the norm scales ('norms'), the attention patterns ('attention') or both at the clean run's;
    without ``mlp_post_norms``, the MLPs' post-norms stay live (the module docstring says why)."""
    def hold(v):
        return lambda t, hook: v.to(t.dtype).expand(t.shape[0], *v.shape[1:])
    keep = {"norms": (".hook_scale",), "attention": ("attn.hook_pattern",),
            "both": (".hook_scale", "attn.hook_pattern")}[which]
    return [(n, hold(v)) for n, v in lrm.frozen.items() if n.endswith(keep)
            and (mlp_post_norms or not n.endswith(MLP_POST_NORM))]


def replacement_hooks(lrm: LocalReplacement, ablate: tuple | None) -> list:
    """Each MLP write as its transcoder of the live input plus the held error; ``ablate`` = (layer, pos, feature)
    set to 0 after the TopK. The BOS position's features are zeroed as the graph folds them into its error."""
    model, hooks, seen = lrm.model, [], {}
    bos = int(lrm.tokens[0, 0]) == model.bos_token_id
    for i in range(model.n_layers):
        d = lrm.dicts.get(i)

        def read(t, hook, i=i):
            seen[i] = t

        def write(t, hook, i=i, d=d):
            if d is None:
                return lrm.error[i].to(t.dtype).expand_as(t)
            x = seen.pop(i).float()
            a = d.encode(x)                                              # [1, pos, width]
            if bos:
                a[:, 0] = 0
            if ablate is not None and ablate[0] == i:
                a[:, ablate[1], ablate[2]] = 0
            return (d.decode(a, x).float() + lrm.error[i]).to(t.dtype)
        hooks += [(lrm.read[i], read), (lrm.write[i], write)]
    return hooks


def logit_value(model, toks, tid, hooks) -> float:
    with torch.no_grad(), model.hooks(hooks, description="freeze_parts"):
        lg = model.forward(toks)[0, -1].float()
    return float(lg[tid] - lg.mean())


def condition_hooks(lrm, c: str, feat: tuple | None, edit: list) -> list:
    """The hooks measuring condition ``c``; ``feat`` = (layer, pos, feature) ablated (None: the clean run)."""
    if c.startswith("replacement"):
        fr = frozen_hooks(lrm, REPLACEMENT_FROZEN[c]) if c in REPLACEMENT_FROZEN else []
        return fr + replacement_hooks(lrm, feat)
    fr = [] if c == "real" else frozen_hooks(lrm, c.split("_")[1], mlp_post_norms=False)
    return fr + (edit if feat is not None else [])


def measure(model, tc, lrm, toks, tid, feat, bases: dict) -> dict:
    """{condition: logit change} for ablating ``feat`` = (layer, pos, feature) under each condition of ``bases``
    (each condition's clean logit)."""
    layer, pos, f = feat
    edit = feature_hooks(model, tc, [(layer, f, "ablate", 0.0, [pos])])
    out = {}
    for c, base in bases.items():
        v = logit_value(model, toks, tid, condition_hooks(lrm, c, feat, edit)) - base
        out[c] = v if math.isfinite(v) else None                 # an overflow: kept as such, counted, not scored
    return out


def figures(pred, meas) -> dict:
    return {"sign_agreement": sum((a > 0) == (b > 0) for a, b in zip(pred, meas)) / len(pred),
            "spearman": spearman(pred, meas)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--conditions", default=",".join(CONDITIONS),
                    help=f"comma-separated, of {', '.join(CONDITIONS + MORE)} (another set needs --out)")
    ap.add_argument("--out", default=None, help="where to write (default: freeze_parts[_MODEL].json here)")
    ap.add_argument("--check-only", action="store_true",
                    help="only each condition's clean run against the real logits, per condition (writes nothing)")
    add_dictionary_options(ap)
    args = ap.parse_args()
    conditions = tuple(args.conditions.split(","))
    if set(conditions) - set(CONDITIONS + MORE):
        raise SystemExit(f"--conditions {args.conditions}; allowed: {', '.join(CONDITIONS + MORE)}")
    if conditions != CONDITIONS and not args.out and not args.check_only:
        raise SystemExit("--conditions other than the default set need --out FILE")
    torch.set_num_threads(args.threads)
    prov = provenance(" ".join(["python studies/graphs_faithfulness/freeze_parts.py", *sys.argv[1:]]))
    model = interp.load(args.model)
    tc = dictionaries_for(args, model)
    stored = json.loads((HERE / ("results.json" if args.model is None else f"results_{args.model}.json")).read_text())
    stored = {p["prompt"]: p for p in stored["prompts"]}
    t0 = time.time()
    pairs = interp.patching.fact_pairs(model, known_facts(model, "test"), n=args.n, seed=args.seed)
    prompts, worst_stored, by_condition = [], 0.0, {}
    for k, (prompt, answer) in enumerate(zip(pairs.clean, pairs.answers)):
        lrm = LocalReplacement(model, tc, prompt)
        toks, tid = lrm.tokens, model.to_single_token(answer)
        real = logit_value(model, toks, tid, [])
        # each condition's clean run, computed once per prompt; freezing what it computed changes nothing
        bases = {c: logit_value(model, toks, tid, condition_hooks(lrm, c, None, [])) for c in conditions}
        for c, b in bases.items():
            by_condition[c] = max(by_condition.get(c, 0.0), abs(b - real))
        if args.check_only:
            continue
        feats = interp.attribution_graph(model, tc, prompt, targets=[answer]).predicted_ablation().head(args.top)
        rows = []
        for _, r in feats.iterrows():
            m = measure(model, tc, lrm, toks, tid, (int(r["layer"]), int(r["pos"]), int(r["feature"])), bases)
            rows.append({"layer": int(r["layer"]), "pos": int(r["pos"]), "feature": int(r["feature"]),
                         "predicted": float(r["predicted"]), **m})
        s = stored.get(prompt)
        if s is not None and "real" in conditions:
            worst_stored = max(worst_stored, max(abs(a - r["real"]) if r["real"] is not None else math.inf
                                                 for a, r in zip(s["measured"], rows)))
        prompts.append({"prompt": prompt, "target": answer, "n_tokens": int(toks.shape[1]), "rows": rows})
        print(f"{k + 1}/{len(pairs.clean)} {prompt!r} ({time.time() - t0:.0f} s)", flush=True)
    worst_clean = max(by_condition.values())
    # the figures are over the ablations every condition measured finitely, so that the conditions compare
    every = [r for p in prompts for r in p["rows"] if all(r[c] is not None for c in conditions)]
    non_finite = {c: sum(r[c] is None for p in prompts for r in p["rows"]) for c in conditions}
    pred = [r["predicted"] for r in every]
    if args.check_only:
        for c, v in by_condition.items():
            print(f"{c}: clean run vs real, worst {v:.2e} over {len(pairs.clean)} prompts")
        return
    table = {c: figures(pred, [r[c] for r in every]) for c in conditions}

    def pair(a, b):
        return figures([r[a] for r in every], [r[b] for r in every])
    for a, b in (("frozen_both", "real"), ("replacement_exact", "replacement_live"),
                 ("replacement_exact", "frozen_both")):
        if a in conditions and b in conditions:
            table[f"{b}_vs_{a}"] = pair(a, b)
    doc = {"figures": table, "n_scored": len(every), "non_finite": non_finite, "check_clean_max_abs": worst_clean,
           "check_real_vs_stored_max_abs": worst_stored if "real" in conditions else None,
           "n_prompts": len(prompts), "top": args.top, "prompts": prompts, "model": model.source,
           "dictionaries": tc.settings, "commit": prov["commit"], "command": prov["command"], "provenance": prov,
           "threads": args.threads, "seconds": round(time.time() - t0)}
    name = "freeze_parts" if args.model is None else f"freeze_parts_{args.model}"
    Path(args.out or HERE / f"{name}.json").write_text(json.dumps(doc, indent=1))
    for c, v in table.items():
        print(f"{c}: sign agreement {v['sign_agreement']:.3f}, Spearman {v['spearman']:.3f}")
    print(f"scored {len(every)} ablations; non-finite per condition {non_finite}")
    print(f"checks: clean conditions vs real {worst_clean:.2e}; real vs stored {worst_stored:.2e}")


if __name__ == "__main__":
    main()
