"""Published dictionaries from a local folder, and interp's in the same layouts: EleutherAI's sparsify, SAELens,
and Gemma Scope 2. Only safetensors and JSON are read (never a pickle); every layout is written by the tests and
read back, and a round trip leaves the dictionary's outputs unchanged.

Orientation and scale, as each library computes (sources in studies/features_sparsify/layouts.md):

- sparsify (one folder per hookpoint, ``cfg.json`` + ``sae.safetensors``): ``encoder.weight`` [W, d_in],
  ``encoder.bias``, ``W_dec`` [W, d], ``b_dec``, ``W_skip`` [d, d] applied as ``x @ W_skip.T``; TopK after ReLU;
  a plain SAE subtracts ``b_dec`` from its input. Optional ``in_norm`` / ``out_norm`` buffers (its input/output
  normalisation: ``x · √d / in_norm`` in, ``· out_norm / √d`` out) are read when present. Hookpoints are module
  names: ``layers.L.mlp`` (a transcoder, or an SAE on the MLP output), ``layers.L`` (the residual after block L),
  with or without a ``model.`` prefix.
- SAELens (``cfg.json`` + ``sae_weights.safetensors``): ``W_enc`` [d_in, W], ``W_dec`` [W, d_out], ``W_skip``
  [d_out, d_in] applied as ``x @ W_skip.T``, ``threshold`` for JumpReLU; ``apply_b_dec_to_input`` for SAEs.
- Gemma Scope 2 transcoders (``config.json`` + ``params.safetensors``): ``w_enc`` [d_in, W], ``w_dec`` [W, d],
  ``b_enc``, ``b_dec``, ``threshold`` (JumpReLU), ``affine_skip_connection`` [d, d] applied as ``x @ skip``;
  read from ``pre_feedforward_layernorm``'s output, written at ``post_feedforward_layernorm``'s output — in
  interp's names ``mlp.hook_in`` -> ``hook_mlp_out``, the sites interp's own transcoders use.

interp's dictionaries keep scalar input/output scales; a layout without them gets the scales folded into the
weights on export (same function, different numbers).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch

from .dictionary import Dictionary, DictionarySet, Site

LAYOUTS = ("interp", "sparsify", "saelens", "gemmascope")


def _read_tensors(path: Path) -> dict:
    from safetensors.torch import load_file

    if not path.is_file():
        raise FileNotFoundError(f"no {path.name} in {path.parent}")
    return load_file(str(path))


def _write(folder: Path, name: str, tensors: dict, cfg: dict, cfg_name: str) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous().float() for k, v in tensors.items()}, str(folder / name))
    (folder / cfg_name).write_text(json.dumps(cfg, indent=1))
    return folder


def _folded(d: Dictionary) -> dict:
    """Raw-scale weights: pre = x @ W_enc + b_enc (after subtracting b_dec for an SAE); out = a @ W_dec + b_dec +
    x @ W_skip."""
    s_in, s_out = float(d.in_scale), float(d.out_scale)
    out = {"W_enc": d.W_enc.detach() / s_in, "b_enc": d.b_enc.detach().clone(), "W_dec": d.W_dec.detach() * s_out,
           "b_dec": d.b_dec.detach() * s_out}
    if d.W_skip is not None:
        out["W_skip"] = d.W_skip.detach() * (s_out / s_in)
    if d.threshold is not None:
        out["threshold"] = d.threshold.detach().clone()
    if d.kind == "sae" and abs(s_in - s_out) > 1e-6 * s_in:
        raise ValueError("an SAE with different input and output scales cannot be written without its scales")
    return out


def _from_folded(t: dict, *, site: Site | None, k, activation: str, meta: dict, model: dict | None = None,
                 in_scale: float = 1.0, out_scale: float = 1.0) -> Dictionary:
    d_in, width = t["W_enc"].shape
    d_out = t["W_dec"].shape[1]
    if t["W_dec"].shape[0] != width:
        raise ValueError(f"encoder width {width} and decoder rows {t['W_dec'].shape[0]} disagree")
    d = Dictionary(d_in, d_out, width, k=k, activation=activation, skip="W_skip" in t, site=site, model=model,
                   meta=meta)
    with torch.no_grad():
        d.W_enc.copy_(t["W_enc"] * in_scale)
        d.b_enc.copy_(t["b_enc"])
        d.W_dec.copy_(t["W_dec"] / out_scale)
        d.b_dec.copy_(t["b_dec"] / out_scale)
        if "W_skip" in t:
            d.W_skip.copy_(t["W_skip"] * (in_scale / out_scale))
        if d.threshold is not None:
            d.threshold.copy_(t["threshold"])
        d.in_scale.fill_(in_scale)
        d.out_scale.fill_(out_scale)
    return d.eval()


# ============================================================================================== sparsify
_HOOKPOINT = re.compile(r"^(?:model\.)?layers\.(\d+)(\.mlp)?$")


def _sparsify_site(model, hookpoint: str, transcode: bool) -> Site:
    m = _HOOKPOINT.match(hookpoint)
    if not m:
        raise ValueError(f"sparsify hookpoint {hookpoint!r} not understood; allowed: 'layers.L.mlp' or "
                         "'layers.L' (optionally prefixed 'model.')")
    L = int(m.group(1))
    if model is not None:
        model.check_layer(L)
    if m.group(2):
        if transcode:
            return Site("transcoder", L, f"blocks.{L}.mlp.hook_in", f"blocks.{L}.hook_mlp_out")
        return Site("sae", L, f"blocks.{L}.hook_mlp_out", f"blocks.{L}.hook_mlp_out")
    if transcode:
        raise ValueError(f"a transcoder at {hookpoint!r} (a whole block) is not supported; allowed: 'layers.L.mlp'")
    return Site("sae", L, f"blocks.{L}.hook_resid_post", f"blocks.{L}.hook_resid_post")


def _sparsify_hookpoint(site: Site) -> str:
    if site.kind == "transcoder" and site.read == f"blocks.{site.layer}.mlp.hook_in":
        return f"layers.{site.layer}.mlp"
    if site.kind == "sae" and site.read == f"blocks.{site.layer}.hook_resid_post":
        return f"layers.{site.layer}"
    if site.kind == "sae" and site.read == f"blocks.{site.layer}.hook_mlp_out":
        return f"layers.{site.layer}.mlp"
    raise ValueError(f"sparsify has no hookpoint for {site.read} -> {site.write}")


def save_sparsify(dictionaries, folder) -> Path:
    """Write each dictionary as sparsify writes it: ``folder/<hookpoint>/{cfg.json, sae.safetensors}``."""
    folder = Path(folder)
    for d in _each(dictionaries):
        if d.activation != "topk":
            raise ValueError(f"sparsify stores TopK dictionaries; this one is {d.activation}")
        f = _folded(d)
        tensors = {"encoder.weight": f["W_enc"].T, "encoder.bias": f["b_enc"], "W_dec": f["W_dec"], "b_dec": f["b_dec"]}
        if "W_skip" in f:
            tensors["W_skip"] = f["W_skip"].T
        cfg = {"activation": "topk", "expansion_factor": max(1, d.width // d.d_in), "normalize_decoder": True,
               "num_latents": d.width, "k": d.k, "multi_topk": False, "skip_connection": d.skip,
               "transcode": d.kind == "transcoder", "d_in": d.d_in}
        _write(folder / _sparsify_hookpoint(d.site), "sae.safetensors", tensors, cfg, "cfg.json")
    return folder


def load_sparsify(folder, model=None) -> DictionarySet:
    """Every ``<hookpoint>/{cfg.json, sae.safetensors}`` under ``folder`` (sparsify 1.x; EleutherAI's published
    skip-transcoders)."""
    folder = Path(folder)
    found = {}
    for cfg_path in sorted(folder.rglob("cfg.json")):
        sub = cfg_path.parent
        if not (sub / "sae.safetensors").is_file():
            continue
        cfg = json.loads(cfg_path.read_text())
        if cfg.get("activation", "topk") != "topk" or cfg.get("multi_topk"):
            raise ValueError(f"{sub}: activation {cfg.get('activation')!r} (multi_topk={cfg.get('multi_topk')}); "
                             "allowed: plain topk")
        raw = _read_tensors(sub / "sae.safetensors")
        d = raw["encoder.weight"].shape[1]
        t = {"W_enc": raw["encoder.weight"].T.float(), "b_enc": raw["encoder.bias"].float(),
             "W_dec": raw["W_dec"].float(), "b_dec": raw["b_dec"].float()}
        if "W_skip" in raw:
            t["W_skip"] = raw["W_skip"].T.float()
        s_in = float(raw["in_norm"].reshape(-1)[0]) / math.sqrt(d) if "in_norm" in raw else 1.0
        s_out = float(raw["out_norm"].reshape(-1)[0]) / math.sqrt(d) if "out_norm" in raw else 1.0
        hookpoint = sub.name if _HOOKPOINT.match(sub.name) else sub.parent.name  # <hookpoint>/seedN/
        site = _sparsify_site(model, hookpoint, bool(cfg.get("transcode")))
        # Raw-scale weights in, the stored scales kept as this dictionary's own.
        t = {"W_enc": t["W_enc"] / s_in, "b_enc": t["b_enc"], "W_dec": t["W_dec"] * s_out, "b_dec": t["b_dec"] * s_out,
             **({"W_skip": t["W_skip"] * (s_out / s_in)} if "W_skip" in t else {})}
        found[site.layer if site.kind == "transcoder" else site.read] = _from_folded(
            t, site=site, k=int(cfg["k"]), activation="topk", meta={"source": str(sub), "layout": "sparsify"},
            in_scale=s_in, out_scale=s_out)
    if not found:
        raise FileNotFoundError(f"no sparsify dictionaries (<hookpoint>/cfg.json + sae.safetensors) under {folder}")
    return _finish(found, model, folder, "sparsify")


# ============================================================================================== SAELens
def save_saelens(d: Dictionary, folder, model_name: str = "") -> Path:
    """One dictionary as SAELens saves it (``cfg.json`` + ``sae_weights.safetensors``)."""
    f = _folded(d)
    tensors = {"W_enc": f["W_enc"], "b_enc": f["b_enc"], "W_dec": f["W_dec"], "b_dec": f["b_dec"]}
    if "W_skip" in f:
        tensors["W_skip"] = f["W_skip"].T
    if "threshold" in f:
        tensors["threshold"] = f["threshold"]
    arch = {("topk", "sae"): "topk", ("jumprelu", "sae"): "jumprelu", ("relu", "sae"): "standard",
            ("jumprelu", "transcoder"): "jumprelu_skip_transcoder" if d.skip else "jumprelu_transcoder",
            ("relu", "transcoder"): "skip_transcoder" if d.skip else "transcoder"}.get((d.activation, d.kind))
    if arch is None:
        raise ValueError(f"SAELens has no {d.activation} {d.kind} architecture (it has topk/jumprelu/relu SAEs and "
                         "relu/jumprelu transcoders); write a TopK transcoder with save_sparsify")
    cfg = {"architecture": arch, "d_in": d.d_in, "d_sae": d.width, "d_out": d.d_out, "dtype": "float32",
           "device": "cpu", "apply_b_dec_to_input": d.kind == "sae", "normalize_activations": "none",
           "reshape_activations": "none",
           "metadata": {"model_name": model_name or d.model.get("model", ""), "hook_name": d.site.read if d.site else "",
                        "hook_name_out": d.site.write if d.site else "", "prepend_bos": True}}
    if d.activation == "topk":
        cfg["k"] = d.k
    return _write(Path(folder), "sae_weights.safetensors", tensors, cfg, "cfg.json")


def load_saelens(folder, model=None) -> Dictionary:
    """One SAELens dictionary folder (standard / topk / jumprelu SAEs, transcoders, skip-transcoders)."""
    folder = Path(folder)
    cfg = json.loads((folder / "cfg.json").read_text()) if (folder / "cfg.json").is_file() else None
    if cfg is None:
        raise FileNotFoundError(f"no cfg.json in {folder}")
    raw = _read_tensors(folder / "sae_weights.safetensors")
    arch = cfg.get("architecture", "standard")
    activation = "topk" if arch in ("topk", "batchtopk") else "jumprelu" if "jumprelu" in arch else "relu"
    transcoder = "transcoder" in arch
    if not transcoder and cfg.get("apply_b_dec_to_input") is False:
        raise ValueError(f"{folder}: an SAE with apply_b_dec_to_input=false is not supported")
    md = cfg.get("metadata") or cfg
    hook, hook_out = md.get("hook_name") or md.get("hook_point"), md.get("hook_name_out")
    site = None
    if hook:
        layer = int(hook.split(".")[1]) if hook.startswith("blocks.") else None
        site = Site("transcoder" if transcoder else "sae", layer,
                    _interp_hook(hook) if transcoder else hook, hook_out or hook)
    t = {k: raw[k].float() for k in ("W_enc", "b_enc", "W_dec", "b_dec")}
    if "W_skip" in raw:
        t["W_skip"] = raw["W_skip"].T.float()
    if "threshold" in raw:
        t["threshold"] = raw["threshold"].float()
    d = _from_folded(t, site=site, k=cfg.get("k") if activation == "topk" else None, activation=activation,
                     meta={"source": str(folder), "layout": "saelens", "architecture": arch})
    return d.check(model) if model is not None else d


def _interp_hook(hook: str) -> str:
    # SAELens names a transcoder's input blocks.L.hook_mlp_in (= the MLP's pre-norm output; interp: mlp.hook_in)
    m = re.match(r"^blocks\.(\d+)\.(hook_mlp_in|ln2\.hook_normalized)$", hook)
    return f"blocks.{m.group(1)}.mlp.hook_in" if m else hook


# ============================================================================================== Gemma Scope 2
_GS_IN = re.compile(r"^model\.layers\.(\d+)\.pre_feedforward_layernorm\.output$")


def save_gemmascope(d: Dictionary, folder, model_name: str = "") -> Path:
    """A JumpReLU (or TopK, marked) transcoder in Gemma Scope 2's layout."""
    if d.kind != "transcoder" or d.site is None:
        raise ValueError("Gemma Scope 2's layout here is for transcoders at an MLP")
    f = _folded(d)
    tensors = {"w_enc": f["W_enc"], "b_enc": f["b_enc"], "w_dec": f["W_dec"], "b_dec": f["b_dec"],
               "threshold": f.get("threshold", torch.zeros(d.width))}
    if "W_skip" in f:
        tensors["affine_skip_connection"] = f["W_skip"]
    L = d.site.layer
    cfg = {"hf_hook_point_in": f"model.layers.{L}.pre_feedforward_layernorm.output",
           "hf_hook_point_out": f"model.layers.{L}.post_feedforward_layernorm.output", "width": d.width,
           "model_name": model_name or d.model.get("model", ""), "architecture": "jump_relu",
           "l0": d.k or 0, "affine_connection": d.skip, "type": "transcoder"}
    if d.activation != "jumprelu":
        raise ValueError(f"Gemma Scope 2 stores JumpReLU transcoders; this one is {d.activation}")
    return _write(Path(folder), "params.safetensors", tensors, cfg, "config.json")


def load_gemmascope(folder, model=None) -> DictionarySet:
    """Every Gemma Scope 2 transcoder folder (``config.json`` + ``params.safetensors``) at or under ``folder``."""
    folder = Path(folder)
    found = {}
    for cfg_path in sorted(list(folder.glob("config.json")) + list(folder.glob("*/config.json"))):
        sub = cfg_path.parent
        cfg = json.loads(cfg_path.read_text())
        m = _GS_IN.match(cfg.get("hf_hook_point_in", ""))
        if cfg.get("type", "transcoder") != "transcoder" or not m:
            raise ValueError(f"{sub}: not a Gemma Scope transcoder at an MLP (hf_hook_point_in "
                             f"{cfg.get('hf_hook_point_in')!r})")
        L = int(m.group(1))
        raw = _read_tensors(sub / "params.safetensors")
        t = {"W_enc": raw["w_enc"].float(), "b_enc": raw["b_enc"].float(), "W_dec": raw["w_dec"].float(),
             "b_dec": raw["b_dec"].float(), "threshold": raw["threshold"].float()}
        if "affine_skip_connection" in raw:
            t["W_skip"] = raw["affine_skip_connection"].float()
        site = Site("transcoder", L, f"blocks.{L}.mlp.hook_in", f"blocks.{L}.hook_mlp_out")
        found[L] = _from_folded(t, site=site, k=None, activation="jumprelu",
                                meta={"source": str(sub), "layout": "gemmascope", "config": cfg})
    if not found:
        raise FileNotFoundError(f"no Gemma Scope transcoders (config.json + params.safetensors) at or under {folder}")
    return _finish(found, model, folder, "gemmascope")


# ============================================================================================== any layout
def load_dictionaries(folder, model=None, layout: str | None = None):
    """Dictionaries from a local folder in any known layout (``layout=None``: told apart by their files)."""
    folder = Path(folder)
    if layout is None:
        if not folder.exists():
            raise FileNotFoundError(f"no dictionary folder {folder}")
        if (folder / "sae_weights.safetensors").is_file():
            layout = "saelens"
        elif any(folder.glob("**/params.safetensors")):
            layout = "gemmascope"
        elif any(folder.glob("**/sae.safetensors")):
            layout = "sparsify"
        else:
            layout = "interp"
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; allowed: {', '.join(LAYOUTS)}")
    if layout == "interp":
        out = DictionarySet.load(folder)
        return out.check(model) if model is not None else out
    if layout == "saelens":
        return load_saelens(folder, model)
    return {"sparsify": load_sparsify, "gemmascope": load_gemmascope}[layout](folder, model)



def save_dictionaries(dictionaries, folder, layout: str = "interp", **kwargs) -> Path:
    """Write ``dictionaries`` to ``folder`` in ``layout`` (one of :data:`LAYOUTS`; SAELens and Gemma Scope hold one
    dictionary per folder); :func:`load_dictionaries` reads each back."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; allowed: {', '.join(LAYOUTS)}")
    if layout == "interp":
        as_set = dictionaries if isinstance(dictionaries, DictionarySet) else None
        if as_set is None:
            raise TypeError("the interp layout writes a DictionarySet; give one (or layout='saelens' for one dictionary)")
        return as_set.save(folder)
    if layout == "sparsify":
        return save_sparsify(dictionaries, folder)
    return {"saelens": save_saelens, "gemmascope": save_gemmascope}[layout](dictionaries, folder, **kwargs)

def _each(dictionaries):
    if isinstance(dictionaries, Dictionary):
        return [dictionaries]
    if isinstance(dictionaries, DictionarySet):
        return [d for _, d in dictionaries]
    return list(dictionaries)


def _finish(found: dict, model, folder, layout) -> DictionarySet:
    out = DictionarySet(dict(sorted(found.items(), key=lambda kv: str(kv[0]).zfill(4))),
                        {"source": str(folder), "layout": layout})
    return out.check(model) if model is not None else out
