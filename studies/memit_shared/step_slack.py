"""How much of its v* step a fact needs (issue 37, dev; README.md, "Neighbour rows in v*"): for each fact of the
mixed dev batch and each stored set of targets, the bare rewrite prompt with ``s · δ`` added at the subject's last
token of the residual after the range's last layer (where v* put it), for s in SHARES; a fact succeeds at s when the
new object's mean token NLL is below the true one's (the success form of efficacy). The spread delivers a median
0.7 of δ to the bare prompt (``bare_reach`` in the compare runs' rows), so what matters is how many facts still
succeed at that share.

    OMP_NUM_THREADS=1 .venv/bin/python studies/memit_shared/step_slack.py     # -> step_slack_dev.json
    .venv/bin/python studies/memit_shared/step_slack.py --tables   # the README's per-relation and per-pair tables
"""

import collections
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "memit_key_rule"))

from memit_key_rule import dev_facts  # noqa: E402

import interp  # noqa: E402
from interp.core.provenance import provenance  # noqa: E402
from interp.editing.eval.measure import target_nll  # noqa: E402
from interp.editing.memit_solve import as_requests  # noqa: E402
from interp.editing.vstar import fill_subject, subject_token_index  # noqa: E402

HERE = Path(__file__).parent
WORK = Path.home() / ".cache" / "interp" / "memit_key_rule"
SHARES = (0.5, 0.6, 0.7, 0.8, 1.0)
SETS = {"today": "", **{f"w {w}": f"vstar_vstar_neighbours=4,vstar_neighbour_share=1,vstar_neighbour_weight={w}/"
                        for w in (1, 4)}}
LAYER = 4


def deltas(folder: str) -> torch.Tensor:
    """[464, d_model] δ = z - h of the own dev set then the second set, as the mixed batch orders them."""
    out = []
    for sub in ("", "facts_shared/"):
        t = load_file(str(WORK / sub / folder / "targets_0of1.safetensors"))
        out.append(t["z"] - t["init"])
    return torch.cat(out).float()


def margins(model, requests, delta: torch.Tensor, share: float) -> torch.Tensor:
    """[n] mean token NLL of the true object minus the new one's (the evaluation's :func:`target_nll`), bare
    prompt, ``share · δ`` at the subject."""
    out = []
    for r, d in zip(requests, delta):
        text, end = fill_subject(r["prompt"], r["subject"])
        pos = subject_token_index(model, text, end, len(r["subject"]))

        def add(x, hook, d=d, pos=pos):
            x = x.clone()
            x[:, pos] += (share * d).to(x.dtype)   # rows are right-padded: the subject sits at pos in both
            return x
        with model.hooks([(f"blocks.{LAYER}.hook_resid_post", add)]):
            true, new = target_nll(model, [text, text], [r["target_true"], r["target_new"]])
        out.append(float(true - new))
    return torch.tensor(out)


RUNS = {"today": "null_space_dev_a.json", "w 1": "vstar_neighbours_dev_w1.json", "w 4": "vstar_neighbours_dev_w4.json"}


def tables(requests) -> None:
    """ES / PS / NS unedited (success form, %) of the three γ 4, q 0 runs, per relation and per number of other
    facts of the batch that share the fact's (true → new) pair."""
    rows = {}
    for name, file in RUNS.items():
        doc = json.loads((HERE / file).read_text())
        rows[name] = next(r for r in doc["runs"] if r.get("null_space_mass", 0) == 0 and r["bare_key_weight"] == 4)["rows"]
        assert [r["case_id"] for r in rows[name]] == [r["case_id"] for r in requests]
    pair = collections.Counter((r["target_true"], r["target_new"]) for r in requests)
    by = {"relation": lambda i: rows["today"][i]["relation"],
          "others sharing the pair": lambda i: min(pair[(requests[i]["target_true"], requests[i]["target_new"])] - 1, 3)}
    for title, group in by.items():
        parts = collections.defaultdict(list)
        for i in range(len(requests)):
            parts[group(i)].append(i)
        print(f"by {title} (3: three or more)" if title != "relation" else "by relation")
        for g, idx in sorted(parts.items()):
            cell = lambda key: " → ".join(f"{100 * sum(rows[n][i][key] for i in idx) / len(idx):.1f}" for n in RUNS)
            print(f"  {g} ({len(idx)}): ES {cell('efficacy_score')} | PS {cell('paraphrase_score')} | "
                  f"NS unedited {cell('neighborhood_unedited_score')}")


def mixed_requests() -> list:
    """The mixed dev batch's requests: the own dev set, then the second set's."""
    return as_requests(dev_facts()) + as_requests(dev_facts(records_path="interp/editing/records/facts_shared.jsonl"))


def main():
    if sys.argv[1:] == ["--tables"]:
        return tables(mixed_requests())
    torch.set_num_threads(1)
    model = interp.load(device="cpu")
    requests = mixed_requests()
    table = {}
    for name, folder in SETS.items():
        d = deltas(folder)
        table[name] = {str(s): float((margins(model, requests, d, s) > 0).float().mean() * 100) for s in SHARES}
        print(name, table[name])
    out = {"doc": __doc__.split("\n\n")[0].replace("\n", " "), "facts": len(requests), "layer": LAYER,
           "success_pct_by_share": table, "provenance": provenance()}
    (HERE / "step_slack_dev.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
