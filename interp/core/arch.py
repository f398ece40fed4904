"""Architecture access in one place: which module is the final norm, which HF module a bridge component wraps,
where each part lives, and how parameters group into components. Everything that reads the bridge's or the
Hugging Face model's internals by name goes through here or through :class:`~interp.core.model.Model`.
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
    facts = {"source": model.source, **model.arch_facts(), "device": str(model.device), "dtype": str(model.dtype),
             "devices": ", ".join(str(d) for d in model.devices), "placement": model.placement_summary()}
    rows += [{"section": "architecture", "item": k, "value": v, "share": None} for k, v in facts.items()]
    return pd.DataFrame(rows).set_index(["section", "item"])
