"""Reading a GGUF file held in memory: its metadata, its tensor table, and each tensor dequantized to float32.

transformers' own GGUF path parses the 262,144-entry vocabulary of Gemma 3 with gguf-py's ``GGUFReader`` three
times (config, tokenizer, weights: ~50 s on a laptop CPU); this reader walks the header once with ``struct`` and
skips string arrays it is not asked for, so a cold load spends its time on dequantizing, not on parsing.
Dequantization itself is gguf-py's (``gguf.quants.dequantize``), the reference implementation of the block formats.

The format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): magic ``GGUF``, version, tensor count,
metadata count; the metadata key/values; the tensor table (name, dims fastest-first, ggml type, offset); then the
tensor data from the next ``general.alignment`` boundary. Nothing is executed or unpickled.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
          7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
_STRING, _ARRAY = 8, 9
_PLAIN = {0: np.float32, 1: np.float16}  # ggml types stored as values, not blocks (BF16 handled apart)
_BF16 = 30


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # torch order (ggml lists the fastest-moving dimension first)
    ggml_type: int
    offset: int  # from the start of the data section
    nbytes: int


@dataclass
class GGUF:
    metadata: dict
    tensors: dict[str, TensorInfo]
    data: np.ndarray  # the whole file as uint8
    data_start: int

    @property
    def architecture(self) -> str:
        return self.metadata["general.architecture"]

    def arch_key(self, key: str, default=None):
        """``{architecture}.{key}`` from the metadata (e.g. ``block_count``)."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    def raw(self, name: str) -> np.ndarray:
        info = self.tensors[name]
        start = self.data_start + info.offset
        return self.data[start:start + info.nbytes]

    def tensor(self, name: str) -> np.ndarray:
        """The tensor ``name`` as float32 in torch order (dequantized when stored in blocks)."""
        if name not in self.tensors:
            raise KeyError(f"GGUF has no tensor {name!r}; e.g. {list(self.tensors)[:4]}")
        info, raw = self.tensors[name], self.raw(name)
        if info.ggml_type in _PLAIN:
            return raw.view(_PLAIN[info.ggml_type]).astype(np.float32).reshape(info.shape)
        if info.ggml_type == _BF16:
            return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(info.shape)
        from gguf.quants import dequantize

        return np.ascontiguousarray(dequantize(raw, info.ggml_type), dtype=np.float32).reshape(info.shape)


def read_gguf(data, *, keep_arrays: tuple[str, ...] = (), source: str = "GGUF") -> GGUF:
    """Parse ``data`` (bytes-like: the whole file). String arrays are kept only for the keys in ``keep_arrays``
    (e.g. ``tokenizer.ggml.tokens``); others are recorded as their length. Numeric arrays are kept."""
    blob = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if len(blob) < 24 or bytes(blob[:4]) != b"GGUF":
        raise ValueError(f"{source} is not a GGUF file (it does not start with the magic bytes 'GGUF')")
    version, n_tensors, n_meta = struct.unpack_from("<IQQ", blob, 4)
    if version not in (2, 3):
        raise ValueError(f"{source} is GGUF version {version}; this reader handles versions 2 and 3")
    mv, pos, metadata = memoryview(blob), 24, {}
    for _ in range(n_meta):
        key, pos = _string(mv, pos)
        (kind,) = struct.unpack_from("<I", mv, pos)
        metadata[key], pos = _value(mv, pos + 4, kind, key in keep_arrays)
    tensors = {}
    for _ in range(n_tensors):
        name, pos = _string(mv, pos)
        (n_dims,) = struct.unpack_from("<I", mv, pos)
        dims = struct.unpack_from(f"<{n_dims}Q", mv, pos + 4)
        ggml_type, offset = struct.unpack_from("<IQ", mv, pos + 4 + 8 * n_dims)
        pos += 4 + 8 * n_dims + 12
        shape = tuple(reversed(dims))
        tensors[name] = TensorInfo(name, shape, ggml_type, offset, _nbytes(ggml_type, shape, name))
    align = int(metadata.get("general.alignment", 32))
    data_start = (pos + align - 1) // align * align
    end = max((data_start + t.offset + t.nbytes for t in tensors.values()), default=data_start)
    if end > len(blob):
        raise ValueError(f"{source} is truncated: its tensors need {end} bytes, it has {len(blob)}")
    return GGUF(metadata, tensors, blob, data_start)


def _string(mv: memoryview, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", mv, pos)
    return bytes(mv[pos + 8:pos + 8 + n]).decode("utf-8"), pos + 8 + n


def _value(mv: memoryview, pos: int, kind: int, keep: bool):
    if kind in _SCALAR:
        (v,) = struct.unpack_from(_SCALAR[kind], mv, pos)
        return v, pos + struct.calcsize(_SCALAR[kind])
    if kind == _STRING:
        return _string(mv, pos)
    if kind != _ARRAY:
        raise ValueError(f"GGUF metadata value of unknown type {kind}")
    inner, count = struct.unpack_from("<IQ", mv, pos)
    pos += 12
    if inner in _NUMPY:
        width = np.dtype(_NUMPY[inner]).itemsize
        values = np.frombuffer(mv, dtype=_NUMPY[inner], count=count, offset=pos).tolist()
        return values, pos + count * width
    if inner != _STRING:
        raise ValueError(f"GGUF metadata holds an array of type {inner}; only numbers and strings are read")
    if keep:
        out = []
        for _ in range(count):
            s, pos = _string(mv, pos)
            out.append(s)
        return out, pos
    for _ in range(count):  # skipped: walking the lengths is all it costs
        (n,) = struct.unpack_from("<Q", mv, pos)
        pos += 8 + n
    return count, pos


def _nbytes(ggml_type: int, shape: tuple[int, ...], name: str) -> int:
    n = int(np.prod(shape)) if shape else 1
    if ggml_type in _PLAIN:
        return n * np.dtype(_PLAIN[ggml_type]).itemsize
    if ggml_type == _BF16:
        return 2 * n
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise ValueError(f"tensor {name!r} has ggml type {ggml_type}, which gguf-py does not know") from None
    return n // block * size
