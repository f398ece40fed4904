"""Architecture access in one place: which module is the final norm, which HF module a bridge component wraps,
where each part lives, and how parameters group into components. Everything that reads the bridge's or the
Hugging Face model's internals by name goes through here or through :class:`~interp.core.model.Model`.

Where architectures differ, the difference is stated here once and every analysis asks:

- norm gain (:func:`norm_gain`): RMSNorm multiplies by ``w`` (Llama) or by ``1 + w`` (Gemma; the bridge marks it
  ``cfg.rmsnorm_uses_offset``). Every "learned scale" interp reports is the effective multiplier.
- post-norms (:func:`post_norm_module`, :func:`frozen_post_norm`, :func:`pre_norm_hook`): Gemma normalises the
  attention and MLP outputs again before adding them, so the residual receives ``norm(out)``, not ``out``.
  ``hook_attn_out`` / ``hook_mlp_out`` are that normed write on every architecture; the raw output (what a head
  or a neuron adds up to) is :func:`pre_norm_hook`. With the post-norm's 1/rms frozen at its actual value the
  map is linear, so per-head and per-neuron parts still sum exactly to the write.
- embedding scale (:func:`embed_scale`): Gemma multiplies the token embedding by √d_model (``hook_embed`` shows
  the scaled value; ``W_E`` is the unscaled table).
- attention window (:func:`attention_window`, :func:`layer_kinds`): Gemma's sliding-window (local) layers see the
  last ``sliding_window`` tokens only; the others are global.
- the MLP write the ROME value is optimised at (:func:`mlp_value_hook`): the down projection's own output.
"""

from __future__ import annotations

import itertools

import torch


def unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face module a bridge component wraps (the module itself when it is not wrapped)."""
    return getattr(module, "original_component", None) or module


def module_device(module: torch.nn.Module) -> torch.device:
    """Device of a module's first parameter (else buffer); CPU for a module that holds neither."""
    first = next(itertools.chain(module.parameters(), module.buffers()), None)
    return torch.device("cpu") if first is None else first.device


def final_norm_module(model) -> torch.nn.Module | None:
    """The final norm (the HF module inside the bridge's ``ln_final``), or None for models without one."""
    ln = getattr(model.module, "ln_final", None)
    return None if ln is None else unwrap(ln)


def placement_summary(model) -> str:
    """Which parts live where, e.g. ``cuda:0: embedding, layers 0-14 | cuda:1: layers 15-29, final norm,
    unembedding``."""
    parts: dict[torch.device, list[str]] = {}

    def put(dev, label):
        parts.setdefault(dev, []).append(label)

    put(model.device, "embedding")
    runs: list[list] = []  # [device, first layer, last layer]
    for layer in range(model.n_layers):
        dev = model.device_of(layer)
        if runs and runs[-1][0] == dev:
            runs[-1][2] = layer
        else:
            runs.append([dev, layer, layer])
    for dev, first, last in runs:
        put(dev, f"layer {first}" if first == last else f"layers {first}-{last}")
    norm = final_norm_module(model)
    if norm is not None and next(norm.parameters(), None) is not None:
        put(module_device(norm), "final norm")
    put(model.module.W_U.device, "unembedding")
    return " | ".join(f"{dev}: {', '.join(labels)}" for dev, labels in parts.items())


def component_of(name: str) -> str:
    """The component a parameter (by its HF or bridge name) belongs to, for the parameter-count table."""
    n = name.lower()
    if any(k in n for k in ("norm", "ln_", ".ln", "ln1", "ln2", "ln_f")):
        return "norms"
    if any(k in n for k in ("wpe", "pos_embed", "w_pos")):
        return "position embedding"
    if any(k in n for k in ("lm_head", "unembed", "w_u")):
        return "unembedding"
    if any(k in n for k in ("embed_tokens", "wte", "w_e", "embed.")):
        return "embedding"
    if any(k in n for k in ("attn", "self_attn")):
        return "attention"
    if "mlp" in n:
        return "ffn"
    return "other"


def summary_frame(model):
    """DataFrame: parameter counts per component with their share, then the architecture facts."""
    import pandas as pd

    counts: dict[str, int] = {}
    for name, p in model.named_params().items():
        comp = component_of(name)
        counts[comp] = counts.get(comp, 0) + p.numel()
    total = sum(counts.values())
    rows = [{"section": "parameters", "item": k, "value": v, "share": v / total}
            for k, v in sorted(counts.items(), key=lambda kv: -kv[1])]
    rows.append({"section": "parameters", "item": "total", "value": total, "share": 1.0})
    facts = {"source": model.source, **model.arch_facts(), **features(model), "device": str(model.device),
             "dtype": str(model.dtype),
             "devices": ", ".join(str(d) for d in model.devices), "placement": model.placement_summary()}
    rows += [{"section": "architecture", "item": k, "value": v, "share": None} for k, v in facts.items()]
    return pd.DataFrame(rows).set_index(["section", "item"])


# ----------------------------------------------------------------------------------------------- differences
_POST = {"attn": "ln1_post", "mlp": "ln2_post"}


def norm_offset(model) -> bool:
    """Whether the model's RMSNorms multiply by ``1 + w`` (Gemma) instead of ``w``."""
    return bool(getattr(model.cfg, "rmsnorm_uses_offset", False))


def norm_gain(model, module) -> torch.Tensor | None:
    """The effective learned multiplier [d] of a norm module (``1 + w`` on Gemma, ``w`` elsewhere), as a CPU
    float32 copy; None when the module has no scale."""
    w = getattr(unwrap(module), "weight", None) if module is not None else None
    if w is None:
        return None
    w = w.detach().to("cpu", torch.float32)
    return w + 1.0 if norm_offset(model) else w.clone()


def _check_which(which: str) -> str:
    if which not in _POST:
        raise ValueError(f"which={which!r}; allowed: 'attn', 'mlp'")
    return which


def post_norm_module(model, layer: int, which: str) -> torch.nn.Module | None:
    """The HF norm applied to the attention (``which="attn"``) or MLP (``"mlp"``) output before it joins the
    residual (Gemma's ``post_attention_layernorm`` / ``post_feedforward_layernorm``), or None."""
    block = model.module.blocks[model.check_layer(layer)]
    ln = getattr(block, _POST[_check_which(which)], None)
    return None if ln is None else unwrap(ln)


def has_post_norms(model) -> bool:
    return model.n_layers > 0 and post_norm_module(model, 0, "attn") is not None


def pre_norm_hook(model, layer: int, which: str) -> str:
    """Hook holding the attention / MLP output *before* any post-norm (the sum of the heads' ``z_h W_O[h]`` /
    of the neurons' writes); the same as ``hook_attn_out`` / ``hook_mlp_out`` on models without post-norms."""
    layer = model.check_layer(layer)
    if post_norm_module(model, layer, which) is None:
        return f"blocks.{layer}.hook_{_check_which(which)}_out"
    return f"blocks.{layer}.{which}.hook_out"


def mlp_value_hook(model, layer: int) -> str:
    """Where the MLP's down projection output can be read and changed: ``W_out k (+ b)`` exactly, so a ROME
    value ``v*`` found there is what the rank-one update must produce."""
    return pre_norm_hook(model, layer, "mlp")


def frozen_post_norm(model, layer: int, which: str, pre: torch.Tensor) -> torch.Tensor | None:
    """The multiplier ``g`` [..., d_model] with ``post_norm(pre) = pre * g``: the norm's gain over its scale
    frozen at ``pre``'s own rms (float64). Parts of ``pre`` times ``g`` then sum to the residual write exactly
    (up to the model's float32 rounding). None for models without post-norms."""
    norm = post_norm_module(model, layer, which)
    if norm is None:
        return None
    eps = float(getattr(norm, "variance_epsilon", None) or getattr(norm, "eps", None) or model.cfg.eps)
    gain = norm_gain(model, norm).double()
    x = pre.double()
    return gain * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def post_norm_gain(model, layer: int, which: str) -> torch.Tensor | None:
    """The post-norm's learned multiplier [d_model] (its data-dependent 1/rms left out), or None."""
    norm = post_norm_module(model, layer, which)
    return None if norm is None else norm_gain(model, norm)


def embed_scale(model) -> float:
    """The factor the token embedding is multiplied by before the first block (√d_model on Gemma, else 1)."""
    hf = getattr(model, "hf_model", None)
    embed = hf.get_input_embeddings() if hf is not None else None
    scale = getattr(embed, "embed_scale", None)
    return 1.0 if scale is None else float(scale)


def layer_kinds(model) -> list[str]:
    """``"local"`` (sliding-window attention) or ``"global"`` for each layer."""
    cfg = getattr(getattr(model, "hf_model", None), "config", None)
    types = getattr(cfg, "layer_types", None) if getattr(cfg, "sliding_window", None) else None
    if not types:
        return ["global"] * model.n_layers
    return ["local" if t == "sliding_attention" else "global" for t in types]


def attention_window(model, layer: int) -> int | None:
    """How many positions (the query's own included) a query of ``layer`` can attend to; None = all before it."""
    if layer_kinds(model)[model.check_layer(layer)] == "global":
        return None
    return int(model.hf_model.config.sliding_window)


def attention_mask(model, layer: int, n: int) -> torch.Tensor:
    """[n, n] bool: which keys (columns) a query (row) of ``layer`` may attend to — causal, and inside the
    sliding window on local layers."""
    q = torch.arange(n)
    allowed = q[:, None] >= q[None, :]
    window = attention_window(model, layer)
    return allowed if window is None else allowed & (q[:, None] - q[None, :] < window)


def attn_scale(model) -> float:
    """The factor on q . k before the softmax: ``query_pre_attn_scalar ** -0.5`` (Gemma), else d_head ** -0.5."""
    cfg = getattr(getattr(model, "hf_model", None), "config", None)
    scalar = getattr(cfg, "query_pre_attn_scalar", None)
    return float(scalar) ** -0.5 if scalar else model.d_head ** -0.5


def features(model) -> dict:
    """The architecture facts where models differ (for ``summary()`` and ``interp info``)."""
    kinds = layer_kinds(model)
    local = [i for i, k in enumerate(kinds) if k == "local"]
    cfg = getattr(getattr(model, "hf_model", None), "config", None)
    tied = bool(getattr(cfg, "tie_word_embeddings", False)) if cfg is not None else None
    act = getattr(cfg, "hidden_activation", None) or getattr(cfg, "hidden_act", None)
    return {"embed_scale": round(embed_scale(model), 4), "norm_gain": "1 + w" if norm_offset(model) else "w",
            "post_norms": has_post_norms(model), "qk_norm": _has_qk_norm(model),
            "local_layers": ", ".join(map(str, local)) if local else "none",
            "window": attention_window(model, local[0]) if local else None,
            "mlp_activation": act, "tied_embeddings": tied}


def _has_qk_norm(model) -> bool:
    attn = getattr(model.module.blocks[0], "attn", None) if model.n_layers else None
    return attn is not None and getattr(unwrap(attn), "q_norm", None) is not None
