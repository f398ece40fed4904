"""Every stored study result can be traced to the code and command that made it (issue 35): each
``studies/**/*.json`` records its commit and command, or ``studies/provenance.json`` (built by
``studies/provenance_index.py``) holds the best record there is; and the CLI's ``--json`` output carries its own."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT / "studies"
INDEX = json.loads((STUDIES / "provenance.json").read_text())
HEX40 = re.compile(r"[0-9a-f]{40}")


def _results():
    for path in sorted(STUDIES.rglob("*.json")):
        rel = path.relative_to(ROOT).as_posix()
        if rel != "studies/provenance.json" and not rel.endswith(".meta.json") and ".state/" not in rel:
            yield rel, path


def _indexer():
    """studies/provenance_index.py, whose reading of a file's own record the test shares (they cannot disagree)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("provenance_index", STUDIES / "provenance_index.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_stored_result_names_its_commit_and_command():
    missing, own_record = [], _indexer().own_record
    for rel, path in _results():
        commit, command = own_record(json.loads(path.read_text()))
        if commit and command:
            assert HEX40.match(str(commit)), f"{rel}: commit {commit!r} is not a full hash"
            continue
        entry = INDEX.get(rel)
        if not entry or not entry.get("commit") or not entry.get("command"):
            missing.append(rel)
            continue
        assert HEX40.fullmatch(entry["commit"]), (rel, entry)
        assert entry["commit_is"] in ("ran_at", "committed_in"), (rel, entry)
    assert not missing, (f"stored results with no commit and command, in the file or in studies/provenance.json: "
                         f"{missing}; record them in the file, or add the command to studies/provenance_index.py "
                         f"and run it")


def test_the_index_names_only_existing_files():
    stale = [rel for rel in INDEX if not (ROOT / rel).exists()]
    assert not stale, f"studies/provenance.json names files that are gone: {stale} (run studies/provenance_index.py)"


def test_the_cli_json_carries_its_provenance(capsys):
    from interp.cli import main

    assert main(["info", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    prov = doc["provenance"]
    assert prov["command"] == "interp info --json" and prov["version"]
    assert prov["commit"] is None or HEX40.fullmatch(prov["commit"])
    assert {"cpu", "cores", "threads", "torch", "python"} <= set(prov["machine"])


def test_an_installed_copy_inside_another_checkout_reports_no_commit(monkeypatch):
    from interp.core import provenance as prov

    if (ROOT / ".git").exists():  # run from a checkout: its commit
        assert HEX40.fullmatch(prov.provenance("x")["commit"] or "")
    monkeypatch.setattr(prov, "ROOT", ROOT / "interp")  # as if the package lay in a folder of some repository
    doc = prov.provenance("x")
    assert doc["commit"] is None and doc["dirty"] is None and doc["command"] == "x"
