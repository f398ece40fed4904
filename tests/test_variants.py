"""Down projections kept, written and varied per row (interp.editing.matrices): each group of a batch computes what
the model with that group's matrices written in computes, through the bridge and through the KV-cached twin."""

import pytest
import torch

from interp.core import generation
from interp.editing.matrices import kept_matrices, row_matrices, written_matrices


def _noisy(model, layer, seed, scale=0.05):
    w = model.mlp_out_matrix(layer).detach().clone()
    g = torch.Generator().manual_seed(seed)
    return w + scale * w.abs().mean() * torch.randn(w.shape, generator=g) * 20


def _digest(model):
    return torch.cat([p.detach().flatten() for p in model.named_params().values()]).double().sum().item()


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_gpt2"])
def test_each_group_computes_its_written_model(request, name):
    model = request.getfixturevalue(name)
    d0 = _digest(model)
    layers = [0, model.n_layers - 1]
    variants = [{0: _noisy(model, 0, 1)}, {}, {0: _noisy(model, 0, 2), layers[1]: _noisy(model, layers[1], 3)}]
    toks = torch.randint(1, model.d_vocab, (5, 7), generator=torch.Generator().manual_seed(0))
    groups = torch.tensor([2, 0, 1, 0, 2])
    with torch.no_grad(), row_matrices(model, variants, groups):
        mixed = model.run(toks)
    assert _digest(model) == d0
    for i, g in enumerate(groups.tolist()):
        with written_matrices(model, variants[g]):
            alone = model.run(toks[i:i + 1])
        assert torch.allclose(mixed[i], alone[0], atol=1e-5, rtol=1e-5), (i, g)
    plain = model.run(toks)
    assert not torch.allclose(mixed[0], plain[0], atol=1e-3)  # the variant did change the row
    assert _digest(model) == d0 and model.attached_hook_count() == 0


def test_sampling_through_the_kv_twin_sees_each_rows_matrices(tiny_llama):
    model = tiny_llama
    assert generation.kv_twin(model) is not None  # the cached path is the one under test
    variants = [{0: _noisy(model, 0, 5, scale=1.0)}, {0: _noisy(model, 0, 6, scale=1.0)}]
    rows = [[1, 5, 9, 3], [1, 7, 2, 8], [1, 5, 9, 3]]
    greedy = generation.sampler(temperature=0.0)
    with row_matrices(model, variants, torch.tensor([0, 1, 1])):
        mixed = generation.sample_ids(model, rows, 6, greedy, fast=True)
    for i, g in enumerate([0, 1, 1]):
        with written_matrices(model, variants[g]):
            assert generation.sample_ids(model, [rows[i]], 6, greedy, fast=True)[0] == mixed[i]
            # and the bridge (re-running the prefix) agrees with the twin
            assert generation.sample_ids(model, [rows[i]], 6, greedy, fast=False)[0] == mixed[i]
    assert mixed[0] != mixed[2]  # same prompt, other matrices


def test_bad_input_and_every_exit_restore_the_model(tiny_llama):
    model = tiny_llama
    d0 = _digest(model)
    good = {0: _noisy(model, 0, 7)}
    with pytest.raises(ValueError, match="groups hold values 0..2; allowed: 0..1"):
        with row_matrices(model, [good, {}], torch.tensor([0, 2])):
            pass
    with pytest.raises(ValueError, match="shape"):
        with row_matrices(model, [{0: torch.zeros(3, 3)}], torch.tensor([0])):
            pass
    with pytest.raises(ValueError, match="a forward of 3 rows inside a context for 2 rows"):
        with row_matrices(model, [good, {}], torch.tensor([0, 1])):
            model.run(torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(RuntimeError, match="boom"):
        with written_matrices(model, good):
            assert not torch.equal(model.mlp_out_matrix(0), model.mlp_out_matrix(0).new_zeros(1))
            raise RuntimeError("boom")
    with pytest.raises(KeyboardInterrupt):
        with kept_matrices(model, [0]):
            model.mlp_out_matrix(0).add_(1.0)
            raise KeyboardInterrupt
    assert _digest(model) == d0
    module = model.mlp_out_module(0)
    assert "forward" not in module.__dict__  # the class's forward again
    twin = generation.kv_twin(model)
    assert all("forward" not in m.__dict__ for m in twin.modules())
