"""Mixture-of-experts blocks: what a routed MLP is made of, in one place.

A mixture-of-experts block replaces the dense MLP: RMSNorm → attention, then RMSNorm → a router that scores
``n_experts`` gated MLPs ("experts") per token, keeps the ``top_k`` best, and adds their outputs weighted by the
router's weights. TransformerBridge exposes the routing (``blocks.{l}.mlp.gate.hook_out``: router logits;
``hook_expert_weights`` [tokens, n_experts], zero for unchosen experts; ``hook_expert_indices`` [tokens, top_k];
all flattened over batch x position) and the block's input and output (``mlp.hook_in`` / ``hook_mlp_out``). The
experts themselves run inside transformers' fused loop, with no hook: their hidden vectors and outputs are
recomputed here from the block's input and the expert weights, exactly as that loop computes them, so that

    hook_mlp_out = sum_e  weight[e] * down_e(act(gate_e x) * up_e x)

holds to float rounding (checked by the tests), per expert and per token.

``tiny_moe_transformers`` builds small random Mixtral / OLMoE models offline (no download).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .arch import unwrap


# ----------------------------------------------------------------------------------------------- tiny models
def tiny_moe_transformers(arch: str, tok, *, n_layers: int, d_model: int, n_heads: int, n_kv_heads: int | None,
                          d_mlp: int, d_vocab: int, n_ctx: int, n_experts: int = 4, top_k: int = 2):
    """(random transformers model, bridge adapter name) of a mixture-of-experts architecture."""
    if not (isinstance(n_experts, int) and n_experts >= 2):
        raise ValueError(f"n_experts={n_experts!r}; allowed: an integer >= 2")
    if not (isinstance(top_k, int) and 1 <= top_k <= n_experts):
        raise ValueError(f"top_k={top_k!r}; allowed: 1..n_experts ({n_experts})")
    kv = n_kv_heads or max(1, n_heads // 2)
    if n_heads % kv:
        raise ValueError(f"n_heads={n_heads} must be a multiple of n_kv_heads={kv}")
    common = {"vocab_size": d_vocab, "hidden_size": d_model, "intermediate_size": d_mlp,
              "num_hidden_layers": n_layers, "num_attention_heads": n_heads, "num_key_value_heads": kv,
              "max_position_embeddings": n_ctx, "num_experts_per_tok": top_k, "tie_word_embeddings": False,
              "bos_token_id": tok.bos_token_id, "eos_token_id": tok.bos_token_id, "pad_token_id": tok.bos_token_id,
              "attn_implementation": "eager"}
    if arch == "mixtral":
        from transformers import MixtralConfig, MixtralForCausalLM

        cfg = MixtralConfig(num_local_experts=n_experts, sliding_window=None, architectures=["MixtralForCausalLM"],
                            **common)
        return MixtralForCausalLM(cfg), "mistralai/Mixtral-8x7B-v0.1"
    if arch == "olmoe":
        from transformers import OlmoeConfig, OlmoeForCausalLM

        cfg = OlmoeConfig(num_experts=n_experts, architectures=["OlmoeForCausalLM"], **common)
        return OlmoeForCausalLM(cfg), "allenai/OLMoE-1B-7B-0924"
    raise ValueError(f"arch {arch!r} is not a mixture-of-experts architecture; allowed: 'mixtral', 'olmoe'")


# ----------------------------------------------------------------------------------------------- structure
def _block(model, layer: int):
    return unwrap(model.module.blocks[model.check_layer(layer)].mlp)


def is_moe(model) -> bool:
    """Whether the model's MLPs are routed mixtures of experts."""
    if model.attn_only or model.n_layers == 0:
        return False
    return getattr(_block(model, 0), "experts", None) is not None


def check_moe(model, what: str = "this analysis") -> None:
    if not is_moe(model):
        raise ValueError(f"{what} needs a mixture-of-experts model; {model.source} has dense MLPs")


def n_experts(model) -> int:
    check_moe(model, "n_experts")
    return int(_block(model, 0).experts.num_experts)


def top_k(model) -> int:
    check_moe(model, "top_k")
    block = _block(model, 0)
    return int(getattr(block, "top_k", None) or block.gate.top_k)


def check_expert(model, expert) -> int:
    n = n_experts(model)
    if not isinstance(expert, int) or isinstance(expert, bool) or not 0 <= expert < n:
        raise ValueError(f"expert {expert!r} out of range: this model has {n} experts per layer, allowed 0..{n - 1}")
    return expert


def hooks(layer: int) -> dict[str, str]:
    """The bridge's routing hook names of ``layer`` (router tensors are flattened over batch x position)."""
    return {"input": f"blocks.{layer}.mlp.hook_in", "logits": f"blocks.{layer}.mlp.gate.hook_out",
            "weights": f"blocks.{layer}.mlp.gate.hook_expert_weights",
            "indices": f"blocks.{layer}.mlp.gate.hook_expert_indices", "output": f"blocks.{layer}.hook_mlp_out"}


def expert_matrices(model, layer: int, expert: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(gate [d_mlp, d_model], up [d_mlp, d_model], down [d_model, d_mlp])`` of one expert (views)."""
    experts = _block(model, layer).experts
    expert = check_expert(model, expert)
    gate_up = experts.gate_up_proj[expert]
    down = experts.down_proj[expert]
    if getattr(experts, "is_transposed", False):  # [d_model, 2 d_mlp] / [d_mlp, d_model] layout
        gate_up, down = gate_up.T, down.T
    gate, up = gate_up.chunk(2, dim=0)
    return gate, up, down


def expert_hidden(model, layer: int, x: torch.Tensor, expert: int) -> torch.Tensor:
    """The expert's neurons: ``act(gate x) * up x`` [..., d_mlp] for block inputs ``x`` [..., d_model]."""
    gate, up, _ = expert_matrices(model, layer, expert)
    act = _block(model, layer).experts.act_fn
    x = x.to(gate.device, gate.dtype)
    with torch.no_grad():
        return act(F.linear(x, gate)) * F.linear(x, up)


def expert_outputs(model, layer: int, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each expert's weighted write ``weight[e] * down_e(hidden_e)`` -> [..., n_experts, d_model] (zero where the
    router did not choose the expert). ``x`` [..., d_model] block inputs, ``weights`` [..., n_experts]."""
    outs = []
    for e in range(n_experts(model)):
        _, _, down = expert_matrices(model, layer, e)
        with torch.no_grad():
            out = F.linear(expert_hidden(model, layer, x, e), down)
        outs.append(out * weights[..., e:e + 1].to(out.device, out.dtype))
    return torch.stack(outs, dim=-2)


def ablate_experts(model, layer: int, experts) -> list:
    """Hooks that remove ``experts`` of ``layer`` from every token's mixture: their router weights are set to 0
    (the other chosen experts keep their weights; nothing is renormalised)."""
    check_moe(model, "ablating an expert")
    layer = model.check_layer(layer)
    idx = sorted({check_expert(model, e) for e in ([experts] if isinstance(experts, int) else experts)})
    if not idx:
        raise ValueError("no experts given; pass an expert index or a list of them")

    def zero(t, hook):
        return t.index_fill(-1, torch.tensor(idx, device=t.device), 0.0)

    return [(hooks(layer)["weights"], zero)]
