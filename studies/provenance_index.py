"""Build ``studies/provenance.json``: for every stored study result (``studies/**/*.json``) that does not record
the commit and command that made it, the best record there is, so every stored number can be traced to its code.

    .venv/bin/python studies/provenance_index.py            # rewrite the index (no model, seconds)

What an entry holds: ``commit`` and what it is — ``"ran_at"`` when a side file or README names the tree the run
used (e.g. ``*.meta.json``, ``*.meta.txt``), otherwise ``"committed_in"``: the commit that first added the file,
so the code that made it is that commit's or an older one (the runs of this project are committed with or right
after the code that made them); ``command``: the file's own, or the one its study's README gives (``source``
says where). Files made from now on carry their own: the CLI's ``--json`` has ``"provenance"``
(:mod:`interp.core.provenance`), the study scripts write ``commit`` and ``command``. ``tests/test_provenance.py``
fails on a stored result with neither its own record nor an entry here.
"""

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT / "studies"
INDEX = STUDIES / "provenance.json"

# Commands the files do not record, from their studies' READMEs (or side files), file -> (command, source)
EVAL = "OMP_NUM_THREADS={t} .venv/bin/interp eval-edits "
SHARED = "--records interp/editing/records/facts_shared.jsonl "
COMMANDS = {
    **{f"studies/ft_norm_gemma/dev_{v}.json": (
        "OMP_NUM_THREADS=1 .venv/bin/python -m interp.cli eval-edits --model gemma3-270m --split dev --sample 30 "
        f"--sample-seed 0 --editor ft --baseline none --hparam norm_constraint={v} --no-generation --no-lens --json",
        "studies/ft_norm_gemma/run.sh") for v in ("1e-2", "1e-3", "2e-3", "2e-4", "5e-3", "5e-4")},
    "studies/memit_shared/dev_memit_b100.json": (
        EVAL.format(t=2) + SHARED + "--split dev --n 100 --editor memit --batch-size 100 --baseline none "
        "--no-generation --json --csv studies/memit_shared/dev_memit_b100.csv", "studies/memit_shared/README.md"),
    "studies/memit_shared/own_test100_memit_b100.json": (
        EVAL.format(t=2) + "--split test --n 100 --editor memit --batch-size 100 --baseline none --no-generation "
        "--json --csv studies/memit_shared/own_test100_memit_b100.csv", "studies/memit_shared/README.md"),
    "studies/memit_shared/own_test464_memit_b464.json": (
        EVAL.format(t=2) + "--split test --editor memit --batch-size 464 --baseline none --no-generation --json "
        "--csv studies/memit_shared/own_test464_memit_b464.csv", "studies/memit_shared/README.md"),
    "studies/memit_shared/own_test100_memit_b100_bare4.json": (
        EVAL.format(t=1) + "--split test --n 100 --editor memit --batch-size 100 --baseline none --no-generation "
        "--json --csv studies/memit_shared/own_test100_memit_b100_bare4.csv", "studies/memit_shared/README.md"),
    "studies/memit_shared/own_test464_memit_b464_bare4.json": (
        EVAL.format(t=1) + "--split test --editor memit --batch-size 464 --baseline none --no-generation --json "
        "--csv studies/memit_shared/own_test464_memit_b464_bare4.csv", "studies/memit_shared/README.md"),
    "studies/memit_shared/test_memit_b100.json": (
        EVAL.format(t=1) + SHARED + "--split test --n 100 --editor memit --batch-size 100 --baseline none "
        "--no-generation --json --csv studies/memit_shared/test_memit_b100.csv", "studies/memit_shared/README.md"),
    "studies/memit_shared/test_memit_b100_bare0.json": (
        EVAL.format(t=1) + SHARED + "--split test --n 100 --editor memit --batch-size 100 --baseline none "
        "--no-generation --hparam bare_key_weight=0 --json --csv studies/memit_shared/test_memit_b100_bare0.csv",
        "studies/memit_shared/README.md"),
    "studies/sequential_fix/sequential_fix_dev.json": (
        "OMP_NUM_THREADS=1 .venv/bin/python studies/sequential_fix/sequential_fix_study.py NAME HPARAMS_JSON ... "
        "(one process per pair of settings; the pairs are the JSON's settings)", "studies/sequential_fix/README.md"),
    **{f: ("recorded per part inside the file (" + where + ")", "the file") for f, where in (
        ("studies/memit_gemma/results.json", "parts[*].command and .commit; merge_command"),
        ("studies/rome_layer/rome_layer.json", "trace.command, sweeps[*].command"),
        ("studies/rome_layer/rome_layer_gemma.json", "trace.command, sweep.command"))},
    "studies/test_split/memit.json": (
        EVAL.format(t=1) + "--split test --editor memit --batch-size 464 --json --csv studies/test_split/memit.csv",
        "studies/test_split/README.md"),
}


def _git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()


def own_record(doc) -> tuple:
    """(commit, command) the file records itself (top level, or under "provenance"), None where it has none."""
    if not isinstance(doc, dict):
        return None, None
    prov = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
    return doc.get("commit") or prov.get("commit"), doc.get("command") or prov.get("command")


def side_record(path: Path) -> tuple:
    """(commit, command, source) from a side file naming the tree a run used, else Nones."""
    meta = path.with_name(path.name + ".meta.json")
    if meta.exists():
        m = json.loads(meta.read_text())
        return m.get("commit"), m.get("command"), meta.relative_to(ROOT).as_posix()
    txt = path.with_suffix(".meta.txt")
    if txt.exists():
        lines = dict(ln.split(": ", 1) for ln in txt.read_text().splitlines() if ": " in ln)
        tree = lines.get("tree", "")
        short = next((w for w in tree.split() if len(w) >= 7 and all(c in "0123456789abcdef" for c in w)), None)
        return (_git("rev-parse", short) if short else None), lines.get("command"), txt.relative_to(ROOT).as_posix()
    return None, None, None


def build() -> dict:
    index = {}
    for path in sorted(STUDIES.rglob("*.json")):
        rel = path.relative_to(ROOT).as_posix()
        if path == INDEX or rel.endswith(".meta.json") or "/.state" in rel or ".state/" in rel:
            continue
        commit, command = own_record(json.loads(path.read_text()))
        if commit and command:
            continue
        s_commit, s_command, source = side_record(path)
        entry = {}
        if commit or s_commit:
            entry.update(commit=commit or s_commit, commit_is="ran_at")
        else:
            first = _git("log", "--diff-filter=A", "--format=%H", "--", rel).splitlines()
            entry.update(commit=first[-1] if first else None, commit_is="committed_in")
        if command or s_command:
            entry.update(command=command or s_command, source="the file" if command else source)
        elif rel in COMMANDS:
            entry.update(command=COMMANDS[rel][0], source=COMMANDS[rel][1])
        else:
            entry.update(command=None, source=None)
        index[rel] = entry
    return index


if __name__ == "__main__":
    INDEX.write_text(json.dumps(build(), indent=1) + "\n")
    print(f"wrote {INDEX.relative_to(ROOT)}")
