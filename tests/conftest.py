"""Shared fixtures: the embedded model is loaded once per session (the first load builds the cache)."""

import os

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

# `make test` runs two pytest-xdist workers. Each takes one thread, and so does each notebook kernel it starts
# (notebooks/execute.py caps the kernel's torch.set_num_threads at INTERP_KERNEL_THREADS): two processes of two
# threads each on two cores slow each other far more than twice (OpenMP barriers wait on a descheduled thread).
# In one process (pytest without -n) the tests keep both cores.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER:
    torch.set_num_threads(1)
    os.environ["INTERP_KERNEL_THREADS"] = "1"
else:
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


# The tests of a class go to one worker together, so that a slow module fixture they share is built once, not once
# per worker: dev_eval (test_edit_eval.py) was built on both workers (67 s and 66 s) and unchanged (test_scale.py)
# too (47 s and 47 s), measured 2026-12-07 on the AMD EPYC. xdist's own --dist loadgroup does not group under
# pytest 9 (the group suffix it writes to a test's id is not read any more), hence this scheduler.
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None                                      # --dist loadfile etc. keep xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    class ClassesTogether(LoadScopeScheduling):
        """Units in the collected order (pytest_collection_modifyitems): a class, or one test; xdist tops each
        worker up a unit at a time while two or fewer of its tests are waiting."""

        def _split_scope(self, nodeid: str) -> str:
            parts = nodeid.split("::")
            return "::".join(parts[:2]) if len(parts) > 2 else nodeid

    config.option.loadscopereorder = False               # keep the collected order: the notebooks first
    return ClassesTogether(config, log)


def pytest_collection_modifyitems(session, config, items):
    """The notebook runs first, last-numbered first (09 is the longest, minutes each): handed out a test (or a class)
    at a time, two or three ahead, the two workers share them and the thousand short tests fill the gaps, instead
    of one worker ending the suite alone inside a notebook. Every worker collects the same order (xdist requires
    it)."""
    notebooks = [i for i in items if i.originalname == "test_notebook_executes"]
    notebooks.sort(key=lambda i: i.name, reverse=True)
    rest = [i for i in items if i.originalname != "test_notebook_executes"]
    items[:] = notebooks + rest


@pytest.fixture(scope="session")
def embedded():
    import interp

    return interp.load(device="cpu")


@pytest.fixture(scope="session")
def gemma():
    """Gemma 3 270M from its chunk packages (on a clean machine the first load assembles, dequantizes, caches)."""
    import interp

    return interp.load("gemma3-270m", device="cpu")


@pytest.fixture(scope="session")
def tiny_llama():
    import interp

    return interp.load_tiny("llama", seed=0)


@pytest.fixture(scope="session")
def tiny_gpt2():
    import interp

    return interp.load_tiny("gpt2", seed=0)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def tiny3(request):
    """A 3-layer tiny model of each family and its MLP key statistics at layers 0 and 1 (MEMIT's solve tests)."""
    import interp
    from interp.analyses.stats import mlp_key_second_moments

    m = interp.load_tiny(request.param, seed=0, n_layers=3)
    return m, mlp_key_second_moments(m, [0, 1], n_tokens=3000, cache=False, progress=False)


@pytest.fixture(autouse=True)
def _no_hook_leaks(request):
    """Every test must leave every model it touched with zero attached hooks."""
    yield
    for name in ("embedded", "gemma", "tiny_llama", "tiny_gpt2"):
        if name in request.fixturenames:
            model = request.getfixturevalue(name)
            assert model.attached_hook_count() == 0, f"{request.node.name} leaked hooks on {name}: " \
                                                     f"{model.active_hooks()}"
