"""Shared fixtures: the embedded model is loaded once per session (the first load builds the cache)."""

import os

import matplotlib
import pytest
import torch

matplotlib.use("Agg")
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


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
