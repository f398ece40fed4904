"""Device placement: one device for the whole model, or its layers spread over several with accelerate.

``check_placement`` validates the placement arguments of :func:`interp.load` before anything is read (so a bad map
costs no load time); :func:`dispatch` places an already-loaded transformers model and records the map in
``hf_model.hf_device_map``. Bad maps are refused with the entry at fault: unknown modules (with a suggestion),
parameters left unmapped, devices this machine lacks, disk/meta offload, CPU mixed with GPUs, tied weights split.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import warnings

import torch


# ----------------------------------------------------------------------------------------------- devices
def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"`` picks cuda, then mps, then cpu; anything else must be a device torch accepts."""
    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device {device!r} is not a device; use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but CUDA is not available here; use 'cpu' or 'auto'")
    return dev


def resolve_dtype(dtype) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    table = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float64": torch.float64}
    if dtype not in table:
        raise ValueError(f"dtype {dtype!r} not understood; allowed: {sorted(table)} or a torch.dtype")
    return table[dtype]


def fast_matmul_dtype(device) -> torch.dtype:
    """bfloat16 where matrix products in it run natively (a CUDA GPU that supports it, a CPU with AVX512-BF16 or
    AMX-BF16), else float32. Without native support oneDNN emulates bfloat16 products some 500x slower than float32
    (a [256, 576] x [576, 49152] product: 17 s instead of 0.03 s), so the choice is made from the hardware, not
    assumed. ``ONEDNN_MAX_CPU_ISA`` capped below the BF16 instruction sets counts as no support."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    if dev.type != "cpu":
        return torch.float32
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if cap and cap != "ALL" and "BF16" not in cap and "AMX" not in cap and "AVX10" not in cap:
        return torch.float32
    try:
        flags = torch.cpu.get_capabilities()
    except (AttributeError, RuntimeError):  # an older torch: no way to ask, so the safe choice
        return torch.float32
    return torch.bfloat16 if flags.get("avx512_bf16") or flags.get("amx_bf16") else torch.float32


# ----------------------------------------------------------------------------------------------- device maps
DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
_ALLOWED_DEVICES = "'cpu', 'cuda', 'cuda:N', an int GPU index N, or 'mps'"


def check_placement(device, device_map, max_memory) -> torch.device | None:
    """Check the combination of placement arguments before anything is loaded -> the single device, or None
    when a device map places the model."""
    if device_map is None:
        if max_memory is not None:
            raise ValueError(f"max_memory={max_memory!r} given without device_map; max_memory only caps what a "
                             f"device_map strategy {DEVICE_MAP_STRATEGIES} puts on each device")
        return resolve_device(device)
    if device is not None:
        raise ValueError(f"device={device!r} and device_map={_short(device_map)} both given; pass one: device "
                         "puts the whole model on one device, device_map spreads its layers over several")
    if isinstance(device_map, str):
        if device_map not in DEVICE_MAP_STRATEGIES:
            raise ValueError(f"device_map {device_map!r} not understood; allowed: one of {DEVICE_MAP_STRATEGIES} "
                             "or a dict {module name: device} (for the whole model on one device use device=)")
        if max_memory is not None:
            _normalize_max_memory(max_memory)
    elif isinstance(device_map, dict):
        if max_memory is not None:
            raise ValueError(f"max_memory={max_memory!r} given with an explicit device_map dict, which already "
                             f"places every module; use max_memory with a strategy {DEVICE_MAP_STRATEGIES}")
        if not device_map:
            raise ValueError("device_map is an empty dict; map module names to devices, e.g. "
                             "{'model.embed_tokens': 0, 'model.layers.0': 0, ..., 'lm_head': 1}")
        for key, value in device_map.items():  # fail before the (slow) load; module names are checked after
            _map_target(value, f"device_map[{key!r}]")
    else:
        raise ValueError(f"device_map of type {type(device_map).__name__} not understood; allowed: one of "
                         f"{DEVICE_MAP_STRATEGIES} or a dict {{module name: device}}")
    return None


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 4] + "...}"


def dispatch(hf_model, device_map, *, max_memory=None) -> dict:
    """Place an already-loaded transformers model's modules on devices (accelerate's ``dispatch_model``) and
    record the placement in ``hf_model.hf_device_map`` (set even when every entry is one device).

    ``device_map`` is a strategy from :data:`DEVICE_MAP_STRATEGIES` (accelerate's ``infer_auto_device_map``
    over ``max_memory`` or all free memory, keeping each decoder layer whole) or a dict
    ``{module name: device}`` that must give a device to every parameter, with values from
    ``'cpu', 'cuda', 'cuda:N', N (a GPU index), 'mps'``. Modules holding only buffers that the dict leaves out
    (e.g. Llama's ``model.rotary_emb``) go with the input embedding. Tied parameters must share a device.
    Offloading ('disk', 'meta', or 'cpu' next to GPUs) is refused: weights must stay resident on the module
    that uses them so analyzers can read and edit them in place. Returns the final map."""
    from accelerate import dispatch_model

    if isinstance(device_map, str):
        resolved = check_device_map(hf_model, _infer_device_map(hf_model, device_map, max_memory),
                                     inferred=device_map)
    else:
        resolved = check_device_map(hf_model, device_map)
    with quiet("accelerate"):
        dispatch_model(hf_model, device_map=resolved, main_device=_as_torch_device(_embedding_target(
            hf_model, resolved)))
    hf_model.hf_device_map = dict(resolved)
    return hf_model.hf_device_map


def _infer_device_map(hf_model, strategy: str, max_memory) -> dict:
    from accelerate import infer_auto_device_map
    from accelerate.utils import get_balanced_memory, get_max_memory

    no_split = sorted(getattr(hf_model, "_no_split_modules", None) or [])
    memory = _normalize_max_memory(max_memory) if max_memory is not None else None
    with quiet("accelerate"):
        if strategy == "sequential":
            memory = get_max_memory(memory)
        else:  # transformers' "auto" is "balanced" too
            memory = get_balanced_memory(hf_model, max_memory=memory, no_split_module_classes=no_split,
                                         low_zero=strategy == "balanced_low_0")
        inferred = dict(infer_auto_device_map(hf_model, max_memory=memory, no_split_module_classes=no_split))
    spilled = [k for k, v in inferred.items() if str(v) in ("disk", "meta")]
    if spilled:
        raise ValueError(f"device_map={strategy!r} cannot fit the model in {memory} bytes: it would offload "
                         f"{spilled[:4]} to disk, which interp does not support (weights must stay resident to be "
                         "read and edited); give a larger max_memory or more devices")
    return inferred


def _normalize_max_memory(max_memory) -> dict:
    """{0: "20GiB", "cuda:1": 2**34, "cpu": "8GB"} -> accelerate's {0: bytes, 1: bytes, "cpu": bytes}."""
    from accelerate.utils import convert_file_size_to_int

    if not isinstance(max_memory, dict) or not max_memory:
        raise ValueError(f"max_memory={max_memory!r} not understood; allowed: a dict {{device: size}}, e.g. "
                         "{0: '20GiB', 1: '20GiB'} or {'cpu': '8GB'}")
    out = {}
    for key, size in max_memory.items():
        target = _map_target(key, f"max_memory key {key!r}")
        try:
            out[target] = convert_file_size_to_int(size) if isinstance(size, str) else int(size)
        except (ValueError, TypeError):
            out[target] = -1
        if out[target] < 0 or isinstance(size, bool):
            raise ValueError(f"max_memory[{key!r}] = {size!r} is not a size; allowed: bytes as an int >= 0 or a "
                             "string like '20GiB' / '500MB'")
    return out


def _map_target(value, what: str):
    """A device-map value -> accelerate's normal form: an int GPU index, 'cpu' or 'mps'. ValueError naming
    ``what`` when the value is not a device, or a device this machine does not have."""
    bad = f"{what}: {value!r} is not usable"
    if isinstance(value, str) and value.strip().lower() in ("disk", "meta"):
        raise ValueError(f"{bad}: offloading to {value!r} is not supported (analyzers read and edit weights "
                         f"in place, so they must stay resident); allowed: {_ALLOWED_DEVICES}")
    if isinstance(value, bool) or not isinstance(value, (int, str, torch.device)):
        raise ValueError(f"{bad}; allowed: {_ALLOWED_DEVICES}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{bad}: GPU indices start at 0; allowed: {_ALLOWED_DEVICES}")
        dev = torch.device("cuda", value)
    else:
        try:
            dev = torch.device(value)
        except (RuntimeError, TypeError):
            raise ValueError(f"{bad}: not a device; allowed: {_ALLOWED_DEVICES}") from None
    if dev.type == "cpu":
        return "cpu"
    if dev.type == "mps":
        if getattr(torch.backends, "mps", None) is None or not torch.backends.mps.is_available():
            raise ValueError(f"{bad}: MPS is not available here; allowed here: {_devices_here()}")
        return "mps"
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{bad}: CUDA is not available here; allowed here: {_devices_here()}")
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(f"{bad}: this machine has {torch.cuda.device_count()} CUDA device(s); allowed here: "
                             f"{_devices_here()}")
        return index
    raise ValueError(f"{bad}: device type {dev.type!r} not supported; allowed: {_ALLOWED_DEVICES}")


def _devices_here() -> str:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    have = ["'cpu'"] + ([f"'cuda:0'..'cuda:{gpus - 1}' or 0..{gpus - 1}"] if gpus else [])
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        have.append("'mps'")
    return ", ".join(have)


def _as_torch_device(target) -> torch.device:
    return torch.device("cuda", target) if isinstance(target, int) else torch.device(target)


def _covering_key(keys, name: str):
    """The most specific device-map key whose module contains ``name`` (a module or parameter name)."""
    covering = [k for k in keys if k == "" or name == k or name.startswith(k + ".")]
    return max(covering, key=len, default=None)


def check_device_map(hf_model, device_map: dict, *, inferred: str | None = None) -> dict:
    """Validate a {module name: device} map against the model -> the normalized map, with buffer-only modules
    it left out added on the input embedding's device."""
    modules = dict(hf_model.named_modules())
    names = [n for n in modules if n]
    out = {}
    for key, value in device_map.items():
        if not isinstance(key, str) or key not in modules:
            close = difflib.get_close_matches(str(key), names, n=3)
            hint = f"; did you mean {close}?" if close else ""
            tops = [n for n in names if n.count(".") <= 1][:6]
            raise ValueError(f"device_map key {key!r} names no module of this model; keys are module names "
                             f"such as {tops} (or '' for the whole model){hint}")
        out[key] = _map_target(value, f"device_map[{key!r}]")
    keys = sorted(out)
    for a in keys:
        for b in keys:
            if a != b and (a == "" or b.startswith(a + ".")):
                raise ValueError(f"device_map keys {a!r} and {b!r} overlap ({b!r} lies inside {a!r}); give each "
                                 "module one device")
    for pname, _ in hf_model.named_parameters(remove_duplicate=False):
        if _covering_key(keys, pname) is None:
            unit = _first_unmapped_ancestor(pname, keys)
            raise ValueError(f"device_map gives no device to parameter {pname!r}; add {unit!r} (or a module "
                             f"containing it) to the map")
    # Buffer-only modules the map left out (rotary tables) would stay where they are; run them with the input.
    embed = _embedding_target(hf_model, out)
    for bname, _ in hf_model.named_buffers(remove_duplicate=False):
        if _covering_key(keys, bname) is None:
            owner = _first_unmapped_ancestor(bname, keys)
            out.setdefault(owner, embed)
    _check_tied(hf_model, out)
    targets = set(out.values())
    gpus = targets - {"cpu"}  # GPU indices (or 'mps')
    if gpus and "cpu" in targets:
        where = sorted(k for k, v in out.items() if v == "cpu")[:4]
        if inferred:
            cause = (f"device_map={inferred!r} could not fit the model on the GPUs (within max_memory, if given), "
                     f"so it put {where} on ['cpu']")
        else:
            cause = (f"device_map puts {where} on ['cpu'] and other modules on GPUs "
                     f"{sorted(gpus, key=str)}")
        raise ValueError(f"{cause}: accelerate would offload those weights (copied in at every call), which the "
                         "bridge refuses and weight edits could not reach; map every module to a GPU (raise "
                         "max_memory, or use more GPUs), or everything to 'cpu'")
    return out


def _first_unmapped_ancestor(name: str, keys) -> str:
    """The shortest module prefix of ``name`` that contains no device-map key: the unit to add to the map."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        prefix = ".".join(parts[:i])
        if not any(k == prefix or k.startswith(prefix + ".") for k in keys):
            return prefix
    return ".".join(parts[:-1])


def _embedding_target(hf_model, device_map: dict):
    """Where the input tokens go: the map's device for the input embedding (else its first entry)."""
    embed = hf_model.get_input_embeddings() if hasattr(hf_model, "get_input_embeddings") else None
    for name, module in hf_model.named_modules():
        if module is embed:
            key = _covering_key(device_map, name + ".weight")
            if key is not None:
                return device_map[key]
    return next(iter(device_map.values()))


def _check_tied(hf_model, device_map: dict) -> None:
    from accelerate.utils import find_tied_parameters

    for group in find_tied_parameters(hf_model):
        placed = {p: device_map[_covering_key(device_map, p)] for p in group}
        if len(set(placed.values())) > 1:
            where = ", ".join(f"{p!r} (module {_covering_key(device_map, p)!r}) on {d!r}" for p, d in placed.items())
            raise ValueError(f"device_map splits tied parameters that share one tensor: {where}; map these "
                             "modules to the same device")


@contextlib.contextmanager
def quiet(logger: str):
    """Silence a library's warnings and its logger below ERROR (its chatter about loading is not the user's)."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        log.setLevel(level)
