"""The attention-only toy model: hook names, wrapping by interp.Model, paths, checkpoints, data."""

import pytest
import torch

from interp.analyses.induction import AttnOnlyTransformer, ToyConfig, handmade_induction_model
from interp.core.model import Model

SMALL = ToyConfig(n_layers=2, d_model=32, n_heads=4, d_vocab=20, n_ctx=24)


@pytest.fixture()
def toy():
    return AttnOnlyTransformer(SMALL, seed=0)


def tokens(batch=3, pos=10, seed=0):
    return torch.randint(1, SMALL.d_vocab, (batch, pos), generator=torch.Generator().manual_seed(seed))


def test_hook_names_match_the_bridge_vocabulary(toy):
    names = set(toy.hook_dict)
    for layer in range(SMALL.n_layers):
        for suffix in ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out",
                       "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_attn_scores",
                       "attn.hook_pattern", "attn.hook_z"):
            assert f"blocks.{layer}.{suffix}" in names
    assert "hook_embed" in names


def test_wrapped_by_interp_model_with_expected_shapes(toy):
    model = Model.from_module(toy)
    assert (model.n_layers, model.n_heads, model.n_kv_heads, model.d_head) == (2, 4, 4, 8)
    assert model.d_mlp is None and model.bos_token_id == 0
    cache = model.cache(tokens(), ["blocks.1.attn.hook_pattern", "blocks.0.attn.hook_z", "blocks.0.attn.hook_q"])
    assert cache["blocks.1.attn.hook_pattern"].shape == (3, 4, 10, 10)
    assert cache["blocks.0.attn.hook_z"].shape == (3, 10, 4, 8)
    assert cache["blocks.0.attn.hook_q"].shape == (3, 10, 4, 8)
    pattern = cache["blocks.1.attn.hook_pattern"]
    assert torch.allclose(pattern.sum(-1), torch.ones(3, 4, 10), atol=1e-5)
    assert torch.all(pattern.triu(1) == 0)  # causal
    assert model.W_V(0).shape == (4, 32, 8) and model.W_O(1).shape == (4, 8, 32)
    assert model.attached_hook_count() == 0


def test_fused_and_explicit_attention_agree(toy):
    # Training uses the fused kernel; hooking the pattern switches to the explicit path.
    model = Model.from_module(toy)
    toks = tokens()
    fused = model.run(toks)
    with model.hooks([("blocks.0.attn.hook_pattern", lambda t, hook: None)]):
        explicit = model.run(toks)
    assert torch.allclose(fused, explicit, atol=1e-5)


def test_seeded_init_and_safetensors_round_trip(toy, tmp_path):
    same = AttnOnlyTransformer(SMALL, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(toy.state_dict().values(), same.state_dict().values()))
    other = AttnOnlyTransformer(SMALL, seed=1)
    assert not torch.equal(toy.W_E, other.W_E)
    path = tmp_path / "toy.safetensors"
    toy.save(path)
    back = AttnOnlyTransformer.load(path)
    assert back.cfg == toy.cfg
    toks = tokens()
    assert torch.equal(back(toks), toy(toks))


def test_bad_config_and_input_raise_value_error(toy):
    with pytest.raises(ValueError, match="d_model=30 must be divisible by n_heads=4"):
        ToyConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="n_layers=0"):
        ToyConfig(n_layers=0)
    with pytest.raises(ValueError, match="bos_token_id=20 out of range"):
        ToyConfig(d_vocab=20, bos_token_id=20)
    with pytest.raises(ValueError, match="sequence length 30 exceeds the context window n_ctx=24"):
        toy(tokens(pos=30))


def test_handmade_model_ablating_the_previous_token_head_breaks_induction():
    # K-composition in the known-answer model: L1H0's key is what L0H0 writes.
    from interp.analyses.induction import induction_scores

    model = Model.from_module(handmade_induction_model())
    assert induction_scores(model, seq_len=10, batch=4)["induction"][1, 0] > 0.99
    with model.ablate_heads([(0, 0)], mode="zero"):
        assert induction_scores(model, seq_len=10, batch=4)["induction"][1, 0] < 0.05
    with model.ablate_heads([(0, 1)], mode="zero"):
        assert induction_scores(model, seq_len=10, batch=4)["induction"][1, 0] > 0.99
