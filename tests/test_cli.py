"""The command line: every subcommand is registered, --json prints exactly one JSON document, errors are clean."""

import json
import subprocess
import sys

import pytest

from interp import cli


def run_json(capsys, *argv):
    code = cli.main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)  # exactly one document, nothing else on stdout


def test_every_analyzer_module_is_present_and_registers_commands():
    assert all(hasattr(m, "add_cli") for m in cli.COMMAND_MODULES)
    parser = cli.build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)
    assert {"info", "run", "lens", "dla", "attention", "neurons", "induction", "reproduce-induction", "trace",
            "edit", "eval-edits"} <= commands


def test_sigterm_stops_a_command_as_ctrl_c_does(monkeypatch, capsys):
    """TERM becomes a KeyboardInterrupt inside the command (where the trainers checkpoint on it: test_features'
    resume test), the command exits 130, and the process's TERM handler is the one it had before."""
    import os
    import signal
    import time

    from interp.cli import features
    reached = []

    def handler(args, model=None):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)               # the signal is delivered by here
        except KeyboardInterrupt:
            reached.append("interrupted")
            raise
        pytest.fail("SIGTERM did not interrupt the command")

    monkeypatch.setattr(features, "cli_train", handler)
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["features", "train"]) == 130
    assert reached == ["interrupted"]
    assert "interrupted (signal SIGTERM)" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_every_subcommand_takes_json():
    names = []
    for name, sub in cli.commands():
        names.append(name)
        assert any("--json" in a.option_strings for a in sub._actions), name
    assert {"features train", "features show", "features encode", "lens"} <= set(names)


def test_info_json(capsys, embedded):
    code, doc = run_json(capsys, "info")
    assert code == 0
    assert doc["architecture"]["layers"] == 30 and doc["architecture"]["kv_heads"] == 3
    assert doc["parameters"]["total"] == sum(p.numel() for p in embedded.hf_model.parameters())
    assert doc["parameters"]["ffn"] == max(v for k, v in doc["parameters"].items() if k != "total")


def test_run_json_matches_the_model(capsys, embedded):
    code, doc = run_json(capsys, "run", "The Eiffel Tower is located in the city of", "--top", "3")
    assert code == 0 and [r["rank"] for r in doc["top"]] == [1, 2, 3]
    logits = embedded.run("The Eiffel Tower is located in the city of")[0, -1]
    assert doc["top"][0]["token_id"] == int(logits.argmax()) and doc["top"][0]["token"] == " Paris"
    assert doc["top"][0]["logit"] == pytest.approx(float(logits.max()), abs=1e-4)


def test_errors_are_one_json_document(capsys):
    code, doc = run_json(capsys, "run", "", "--top", "3")
    assert code == 2 and "empty text" in doc["error"]
    code, doc = run_json(capsys, "run", "hello", "--top", "0")
    assert code == 2 and "--top 0" in doc["error"]


def test_console_script_runs_in_a_subprocess():
    proc = subprocess.run([sys.executable, "-m", "interp.cli", "run", "Paris is the capital of", "--top", "2",
                           "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["top"]) == 2


def test_lens_and_dla_flag_errors_come_before_the_model_loads(capsys, monkeypatch):
    from interp.core import loading

    monkeypatch.setattr(loading, "load", lambda *a, **k: pytest.fail("the model was loaded before the flag check"))
    code, doc = run_json(capsys, "lens", "hello", "--k", "0")
    assert code == 2 and "--k" in doc["error"]
    code, doc = run_json(capsys, "dla", "hello", "--token", " Paris", "--top", "-3")
    assert code == 2 and "--top -3" in doc["error"]


def test_lens_dla_attention_json_name_what_they_score(capsys, embedded):
    text = "The Eiffel Tower is located in the city of"
    code, doc = run_json(capsys, "lens", text, "--target", " Paris", "--pos", "-1")
    assert code == 0 and doc["targets"][" Paris"]["scored_token"] == " Paris" and doc["layers"][-1] == "final"
    code, doc = run_json(capsys, "dla", text, "--token", " Paris", "--baseline", " London", "--top", "3")
    assert code == 0 and (doc["scored_token"], doc["baseline_scored_token"]) == (" Paris", " London")
    assert len(doc["top"]) == 3
    code, doc = run_json(capsys, "attention", text, "--layer", "-1", "--head", "0")
    assert code == 0 and doc["layer"] == embedded.n_layers - 1 and len(doc["pattern"]) == len(doc["tokens"])
