"""make test's two workers: the tests of a class run on one worker (tests/conftest.py's scheduler), so a module
fixture they share is built once; the other tests still spread over both workers."""

import os
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).parent / "conftest.py"

TMP_CONFTEST = f'''
import importlib.util, os
import pytest

_spec = importlib.util.spec_from_file_location("interp_tests_conftest", {str(CONFTEST)!r})
_m = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_m)
pytest_xdist_make_scheduler = _m.pytest_xdist_make_scheduler


def record(name):
    with open(os.environ["RAN_LOG"], "a") as f:
        f.write(f"{{name}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
'''

TMP_TESTS = '''
import time
import pytest
from conftest import record


class TestShared:
    @pytest.mark.parametrize("i", range(6))
    def test_in_class(self, i):
        time.sleep(0.2)
        record(f"class-{i}")


@pytest.mark.parametrize("i", range(6))
def test_alone(i):
    time.sleep(0.2)
    record(f"alone-{i}")
'''


def test_a_class_runs_on_one_worker_and_the_rest_spreads(tmp_path):
    (tmp_path / "conftest.py").write_text(TMP_CONFTEST)
    (tmp_path / "test_x.py").write_text(TMP_TESTS)
    log = tmp_path / "ran.txt"
    env = {**os.environ, "RAN_LOG": str(log)}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "test_x.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    ran = dict(line.split() for line in log.read_text().splitlines())
    assert len(ran) == 12
    assert len({w for n, w in ran.items() if n.startswith("class-")}) == 1, ran
    assert len(set(ran.values())) == 2, ran      # two workers took part: the rest was not all sent to one
