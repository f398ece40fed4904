"""Second-moment statistics of MLP keys: C = E[k k^T] over natural text, the matrix ROME solves with.

k is the MLP hidden vector at one layer — the input of the down projection, ``blocks.{l}.mlp.hook_post``
(act(gate) * up on gated MLPs, act(pre) on GPT-2) — at every real token of a text corpus.

    stats = mlp_key_second_moment(model, layer=8)      # 100,000 tokens of the embedded Wikipedia summaries
    stats.mom2            # float64 [d_mlp, d_mlp], uncentered E[k k^T]
    stats.solve(k)        # C^-1 k in float64 (Cholesky), what the ROME update needs
    stats.condition_number()

Policies (all recorded in ``stats.meta``):

- Tokens: each document is BOS + its text truncated to ``max_len`` tokens (``core.corpus.token_batches``).
  Padding positions never count. **BOS positions do not count either**: the BOS state is a context-free outlier
  (the attention sink, with very large activations on most models) that is never the key of an edited fact, and
  the reference ROME code computes its statistics on GPT-2 text without a BOS. With ``n_tokens`` the scan stops
  at exactly that many counted tokens (the last document may be cut).
- Accumulation: the activations come out of the model in its dtype and are summed in float64 (sum of k k^T, sum
  of k, count). ``KeyStats`` is an ``accumulate.Accumulator`` whose ``merge`` adds the three sums, so shards
  computed anywhere (other processes, torch.distributed ranks via ``accumulate.reduce``) combine exactly (up to
  float64 summation order).
- Speed: the scan is ``accumulate.scan``: only the one hook is captured and the forward stops right after it,
  so layers above ``layer``, the final norm and the unembedding never run.
- Shards: ``offset`` / ``n_docs`` select the corpus documents ``offset .. offset + n_docs - 1``; two processes
  scanning disjoint ranges and ``a.merge(b)`` give the one-pass result. When the shard boundaries are multiples
  of ``batch_size`` the batches (hence the float32 activations) are bitwise the ones of the one-pass run, and
  the results agree to float64 rounding; otherwise batch padding shapes differ and they agree to float32 noise.
  Example (two processes, then one merge)::

      a = mlp_key_second_moment(model, 8, n_tokens=None, offset=0, n_docs=512)      # process 1
      b = mlp_key_second_moment(model, 8, n_tokens=None, offset=512, n_docs=512)    # process 2
      c = a.merge(b)   # == mlp_key_second_moment(model, 8, n_tokens=None, n_docs=1024), to float64 rounding

  (``KeyStats.save`` / ``KeyStats.load`` move a shard between processes.)
- Cache: ``core.paths.cache_dir()/stats/<model fingerprint>/<key>.safetensors`` (float64 sums + count; the
  metadata is in the safetensors header) with a ``.json`` sidecar holding the metadata and the SHA-256 of the
  tensor file. Never pickle. A truncated or altered file fails the check and is recomputed (with a warning).
- Resume: every ``checkpoint_every`` batches the partial sums and the number of documents consumed are written
  to ``<key>.partial.safetensors`` (+ ``.json``); an interrupted run (Ctrl-C, a crash, a killed process) called
  again with the same arguments continues from the last checkpoint and gives bitwise the result of an
  uninterrupted run. A KeyboardInterrupt arriving between batches also checkpoints the state at that point.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core import moe
from ..core import paths as _paths
from ..core.corpus import wiki_documents
from ..core.inputs import check_int
from ..core.results import Result, jsonable, new_figure, save_fig
from .accumulate import Accumulator, remove_state, scan

FORMAT_VERSION = 1
CORPORA = ("wiki",)


# ============================================================================================== accumulator
@dataclass(repr=False, eq=False)
class KeyStats(Result, Accumulator):
    """Running float64 sums of MLP keys k [d_mlp] at one layer: ``moment_sum`` = Σ k kᵀ, ``sum`` = Σ k, ``count``.

    ``mom2`` = moment_sum / count is C = E[k kᵀ] (uncentered). ``merge`` adds the sums exactly, so ranks reduce it
    by summing (``reduction = "sum"``)."""

    reduction = "sum"
    summed = ("moment_sum", "sum", "count")

    layer: int
    moment_sum: torch.Tensor  # float64 [d_mlp, d_mlp]
    sum: torch.Tensor  # float64 [d_mlp]
    count: int = 0
    meta: dict = field(default_factory=dict)
    _memo: dict = field(default_factory=dict, init=False, compare=False)

    @classmethod
    def empty(cls, layer: int, d_mlp: int, meta: dict | None = None, device="cpu") -> KeyStats:
        return cls(layer, torch.zeros(d_mlp, d_mlp, dtype=torch.float64, device=device),
                   torch.zeros(d_mlp, dtype=torch.float64, device=device), 0, dict(meta or {}))

    @property
    def d_mlp(self) -> int:
        return self.sum.shape[0]

    @property
    def hook_names(self) -> list[str]:
        return [f"blocks.{self.layer}.mlp.hook_post"]

    # ------------------------------------------------------------------------------------------ accumulate
    def add(self, batch, acts: dict) -> None:
        """Add the keys of a scan batch: the hook's activation at the batch's counted positions."""
        (k,) = acts.values()
        self.add_keys(k[batch.counted.to(k.device)])

    def add_keys(self, k: torch.Tensor) -> None:
        """Add keys ``k`` [n, d_mlp] (any float dtype); summed in float64."""
        k = k.reshape(-1, self.d_mlp).to(self.moment_sum.device, torch.float64)
        self.moment_sum.addmm_(k.T, k)
        self.sum += k.sum(0)
        self.count += k.shape[0]
        self._memo.clear()

    def merge(self, other: KeyStats) -> KeyStats:
        """A new KeyStats with the sums of both (exact: float64 sums and integer counts add). The two must come
        from the same model (fingerprint), layer, corpus and token policy; their document ranges are listed."""
        if not isinstance(other, KeyStats):
            raise ValueError(f"can only merge KeyStats, got {type(other).__name__}")  # noqa: TRY004
        if (other.layer, other.d_mlp) != (self.layer, self.d_mlp):
            raise ValueError(f"cannot merge statistics of layer {other.layer} (d_mlp {other.d_mlp}) into layer "
                             f"{self.layer} (d_mlp {self.d_mlp})")
        for key in ("model_fingerprint", "corpus", "max_len", "bos", "hook"):
            a, b = self.meta.get(key), other.meta.get(key)
            if a is not None and b is not None and a != b:
                raise ValueError(f"cannot merge statistics with different {key}: {a!r} vs {b!r}")
        meta = {k: v for k, v in self.meta.items() if other.meta.get(k) == v}
        meta["shards"] = _shards(self.meta) + _shards(other.meta)
        meta["seconds"] = self.meta.get("seconds", 0.0) + other.meta.get("seconds", 0.0)
        return KeyStats(self.layer, self.moment_sum + other.moment_sum.to(self.moment_sum.device),
                        self.sum + other.sum.to(self.sum.device), self.count + other.count, meta)

    # ------------------------------------------------------------------------------------------ derived
    @property
    def mom2(self) -> torch.Tensor:
        """C = E[k kᵀ], float64 [d_mlp, d_mlp] (uncentered)."""
        if "mom2" not in self._memo:
            self._check_nonempty()
            self._memo["mom2"] = self.moment_sum / self.count
        return self._memo["mom2"]

    @property
    def mean(self) -> torch.Tensor:
        """E[k], float64 [d_mlp]."""
        self._check_nonempty()
        return self.sum / self.count

    def covariance(self) -> torch.Tensor:
        """Centered covariance E[k kᵀ] - E[k] E[k]ᵀ (ROME uses the uncentered ``mom2``)."""
        m = self.mean
        return self.mom2 - torch.outer(m, m)

    def eigenvalues(self) -> torch.Tensor:
        """Eigenvalues of C, descending, float64 [d_mlp]."""
        if "eig" not in self._memo:
            self._memo["eig"] = torch.linalg.eigvalsh(self.mom2).flip(0)
        return self._memo["eig"]

    def condition_number(self) -> float:
        """λ_max / λ_min of C (inf when C is singular: fewer tokens than d_mlp, or dead units)."""
        ev = self.eigenvalues()
        lo = float(ev[-1])
        return math.inf if lo <= 0 else float(ev[0]) / lo

    def solve(self, k: torch.Tensor, ridge: float = 0.0) -> torch.Tensor:
        """x = (C + ridge·I)⁻¹ k in float64, for k [d_mlp] or [n, d_mlp] (returns the same shape, float64).

        ``ridge`` is absolute (same units as C; ``stats.mom2.diagonal().mean()`` gives the scale). The default 0
        solves with C itself, as the paper does; a positive ridge trades exactness for stability when C is
        ill-conditioned. A C that is not positive definite (e.g. fewer tokens than d_mlp) raises ValueError
        asking for a ridge. Uses a Cholesky factor kept per ridge value."""
        if not (isinstance(ridge, (int, float)) and ridge >= 0 and math.isfinite(ridge)):
            raise ValueError(f"ridge={ridge!r}; allowed: a finite number >= 0")
        k = torch.as_tensor(k)
        if k.shape[-1:] != (self.d_mlp,) or k.ndim not in (1, 2):
            raise ValueError(f"k has shape {tuple(k.shape)}; expected [d_mlp={self.d_mlp}] or [n, {self.d_mlp}]")
        chol = self._cholesky(float(ridge))
        rhs = k.to(chol.device, torch.float64)
        x = torch.cholesky_solve(rhs.reshape(-1, self.d_mlp).T, chol).T
        return x.reshape(k.shape)

    def _cholesky(self, ridge: float) -> torch.Tensor:
        key = ("chol", ridge)
        if key not in self._memo:
            a = self.mom2 + ridge * torch.eye(self.d_mlp, dtype=torch.float64, device=self.mom2.device)
            chol, info = torch.linalg.cholesky_ex(a)
            if int(info) != 0:
                raise ValueError(f"C (layer {self.layer}, {self.count} tokens) is not positive definite with "
                                 f"ridge={ridge} (condition number {self.condition_number():.3g}); collect more "
                                 "tokens or pass ridge > 0")
            self._memo[key] = chol
        return self._memo[key]

    def _check_nonempty(self):
        if self.count <= 0:
            raise ValueError(f"statistics of layer {self.layer} hold no tokens yet")

    # ------------------------------------------------------------------------------------------ serialization
    def state_dict(self) -> dict:
        """``{"tensors": {moment_sum, sum, count}, "meta": {...}}``: safetensors-ready CPU tensors (float64 sums,
        int64 count) and JSON-able metadata (layer included)."""
        tensors = {"moment_sum": self.moment_sum.detach().cpu().contiguous(),
                   "sum": self.sum.detach().cpu().contiguous(),
                   "count": torch.tensor([self.count], dtype=torch.int64)}
        return {"tensors": tensors, "meta": {**_json_meta(self.meta), "layer": self.layer}}

    @classmethod
    def from_state_dict(cls, state: dict) -> KeyStats:
        t, meta = state["tensors"], dict(state["meta"])
        for name in ("moment_sum", "sum", "count"):
            if name not in t:
                raise ValueError(f"state has no tensor {name!r}; found {sorted(t)}")
        d = t["sum"].shape[-1]
        if t["moment_sum"].shape != (d, d) or t["moment_sum"].dtype != torch.float64:
            raise ValueError(f"moment_sum has shape {tuple(t['moment_sum'].shape)} {t['moment_sum'].dtype}; "
                             f"expected float64 [{d}, {d}]")
        return cls(int(meta["layer"]), t["moment_sum"], t["sum"].to(torch.float64), int(t["count"].reshape(-1)[0]),
                   meta)

    # ------------------------------------------------------------------------------------------ display
    def summary(self) -> str:
        if self.count == 0:
            return f"KeyStats(layer {self.layer}, empty)"
        return (f"KeyStats(layer {self.layer}, {self.count:,} tokens, d_mlp {self.d_mlp}, "
                f"condition number {self.condition_number():.3g})")

    def to_frame(self):
        """One row per MLP unit: mean E[k_i], second moment C_ii, std, and C's eigenvalue of the same rank
        (``eigenvalue`` column, descending; rank, not unit, indexed)."""
        import pandas as pd

        mean, diag = self.mean, self.mom2.diagonal()
        var = (diag - mean ** 2).clamp_min(0)
        return pd.DataFrame({"mean": mean.cpu().numpy(), "second_moment": diag.cpu().numpy(),
                             "std": var.sqrt().cpu().numpy(), "eigenvalue": self.eigenvalues().cpu().numpy()},
                            index=pd.RangeIndex(self.d_mlp, name="unit"))

    def to_json(self) -> dict:
        """The summary, the scalars and the metadata (the per-unit table is ``to_frame()``; it has d_mlp rows)."""
        empty = self.count == 0
        return {"result": "KeyStats", "summary": self.summary(), "layer": self.layer, "count": self.count,
                "d_mlp": self.d_mlp, "condition_number": None if empty else jsonable(self.condition_number()),
                "meta": _json_meta(self.meta)}

    def plot(self, *, out=None):
        """Left: eigenvalue spectrum of C (log scale). Right: second moment C_ii per unit, sorted."""
        fig = new_figure(figsize=(10, 3.6))
        ax1, ax2 = fig.subplots(1, 2)
        ev = self.eigenvalues().clamp_min(1e-30).cpu().numpy()
        ax1.semilogy(ev)
        ax1.set(title=f"spectrum of C, layer {self.layer} (cond {self.condition_number():.3g})",
                xlabel="rank", ylabel="eigenvalue")
        diag = self.mom2.diagonal().sort(descending=True).values.cpu().numpy()
        ax2.semilogy(diag)
        ax2.set(title=f"E[k_i²] per unit ({self.count:,} tokens)", xlabel="unit (sorted)", ylabel="second moment")
        fig.tight_layout()
        return save_fig(fig, out)


def _shards(meta: dict) -> list:
    if "shards" in meta:
        return list(meta["shards"])
    return [{"offset": meta.get("offset"), "docs": meta.get("docs_consumed"), "count": meta.get("count")}]


# ============================================================================================== collection
def mlp_key_second_moment(model, layer: int, *, n_tokens: int | None = 100_000, corpus="wiki", batch_size: int = 8,
                          max_len: int = 128, cache: bool = True, progress: bool = True, offset: int = 0,
                          n_docs: int | None = None, checkpoint_every: int = 25,
                          callback: Callable[[dict], None] | None = None) -> KeyStats:
    """C = E[k kᵀ] of the MLP keys at ``layer`` over ``corpus`` (see the module docstring for every policy).

    corpus: ``"wiki"`` (the embedded Wikipedia summaries, fixed order) or a sequence of texts.
    n_tokens: stop after exactly this many counted tokens (None: scan every selected document).
    offset, n_docs: scan documents ``offset .. offset + n_docs - 1`` only (the shard API; n_docs None = to the
        end). Both limits apply; whichever is reached first ends the scan.
    cache: read/write the result (and resumable checkpoints) under ``cache_dir()/stats/``.
    callback: called after every batch with ``{"batches", "docs_consumed", "count"}``; it may raise (e.g.
        KeyboardInterrupt) to stop — the state after the last whole batch is checkpointed when ``cache``.
    """
    layer = model.check_layer(layer)
    if model.d_mlp is None:
        raise ValueError(f"model {model.source} has no MLP layers; key statistics need one")
    if moe.is_moe(model):
        raise ValueError(f"model {model.source} has routed mixture-of-experts MLPs; key statistics are defined for "
                         "one dense MLP's hidden vector (mlp.hook_post is the block's output here)")
    check_int("n_tokens", n_tokens, 1, allow_none=True)
    check_int("batch_size", batch_size, 1)
    check_int("max_len", max_len, 2)
    check_int("offset", offset, 0)
    check_int("n_docs", n_docs, 1, allow_none=True)
    check_int("checkpoint_every", checkpoint_every, 1)
    docs, corpus_id = _select_documents(corpus, offset, n_docs)
    meta = request_meta(model, layer, corpus_id=corpus_id, n_tokens=n_tokens, offset=offset, n_docs=n_docs,
                        max_len=max_len)
    path = cache_path(meta) if cache else None
    if path is not None:
        done = _try_load(path, meta)
        if done is not None:
            return done
    state, start_doc = None, 0
    if path is not None:
        state, start_doc = _try_resume(path, meta)
    if state is None:
        state = KeyStats.empty(layer, model.d_mlp, meta, device=model.device_of(layer))
    t0 = time.perf_counter() - state.meta.get("seconds", 0.0)

    def mark(info):  # the metadata that makes the sums a resumable checkpoint
        state.meta["docs_consumed"] = info["docs_consumed"]
        state.meta["seconds"] = time.perf_counter() - t0

    def checkpoint(info):
        mark(info)
        state.save(_partial_path(path))

    def on_batch(info):
        mark(info)
        if callback is not None:
            callback({"batches": info["batches"], "docs_consumed": info["docs_consumed"], "count": state.count})

    scan(model, docs, state, batch_size=batch_size, max_len=max_len, start_doc=start_doc,
         n_tokens=None if n_tokens is None else n_tokens - state.count, progress=progress,
         desc=f"C at layer {layer}", checkpoint=checkpoint if path is not None else None,
         checkpoint_every=checkpoint_every, callback=on_batch)
    if state.count == 0:
        raise ValueError(f"no tokens counted at layer {layer}: every selected document is empty after BOS")
    state.meta["seconds"] = time.perf_counter() - t0
    state.meta["count"] = state.count
    state.meta["tokens_per_s"] = state.count / max(state.meta["seconds"], 1e-9)
    state.meta["condition_number"] = state.condition_number()
    if path is not None:
        state.save(path)
        remove_state(_partial_path(path))
    return state


def mlp_key_second_moments(model, layers, *, n_tokens: int | None = 100_000, corpus="wiki", batch_size: int = 8,
                           max_len: int = 128, cache: bool = True, progress: bool = True) -> dict[int, KeyStats]:
    """:func:`mlp_key_second_moment` for several layers in one corpus scan -> ``{layer: KeyStats}``.

    Layers already in the disk cache are read from it; the others share one scan (the forward stops after the
    deepest of them), so k layers cost one pass instead of k. The batches, token policy, metadata and cache files
    are the single-layer ones, so each result equals (bit for bit, same batches and the same float64 sums) what
    ``mlp_key_second_moment(model, layer, ...)`` gives, and either function reads the other's cache. No partial
    checkpoints: an interrupted multi-layer scan starts over."""
    wanted = sorted({model.check_layer(layer) for layer in layers})
    if not wanted:
        raise ValueError("layers is empty; give at least one layer")
    if model.d_mlp is None or moe.is_moe(model):
        return {layer: mlp_key_second_moment(model, layer, n_tokens=n_tokens, corpus=corpus) for layer in wanted}
    check_int("n_tokens", n_tokens, 1, allow_none=True)
    check_int("batch_size", batch_size, 1)
    check_int("max_len", max_len, 2)
    docs, corpus_id = _select_documents(corpus, 0, None)
    out, todo = {}, {}
    for layer in wanted:
        meta = request_meta(model, layer, corpus_id=corpus_id, n_tokens=n_tokens, offset=0, n_docs=None,
                            max_len=max_len)
        done = _try_load(cache_path(meta), meta) if cache else None
        if done is not None:
            out[layer] = done
        else:
            todo[layer] = KeyStats.empty(layer, model.d_mlp, meta, device=model.device_of(layer))
    if todo:
        acc = _LayerSet(todo)
        t0 = time.perf_counter()
        info = {}
        scan(model, docs, acc, batch_size=batch_size, max_len=max_len, n_tokens=n_tokens, progress=progress,
             desc=f"C at layers {sorted(todo)}", callback=info.update)
        seconds = time.perf_counter() - t0
        for layer, state in todo.items():
            if state.count == 0:
                raise ValueError(f"no tokens counted at layer {layer}: every document is empty after BOS")
            state.meta.update(docs_consumed=info.get("docs_consumed"), seconds=seconds, count=state.count,
                              tokens_per_s=state.count / max(seconds, 1e-9), layers_in_scan=sorted(todo),
                              condition_number=state.condition_number())
            if cache:
                state.save(cache_path(state.meta))
            out[layer] = state
    return {layer: out[layer] for layer in wanted}


class _LayerSet(Accumulator):
    """Several layers' KeyStats filled by one scan (only what :func:`scan` needs: hook names and ``add``)."""

    def __init__(self, states: dict[int, KeyStats]):
        self.states = states
        self.hook_names = [name for s in states.values() for name in s.hook_names]

    def add(self, batch, acts: dict) -> None:
        for state in self.states.values():
            (name,) = state.hook_names
            k = acts[name]
            state.add_keys(k[batch.counted.to(k.device)])


def request_meta(model, layer: int, *, corpus_id: str, n_tokens, offset: int, n_docs, max_len: int) -> dict:
    """What a statistics request is (the cache key and its policies), as recorded in ``KeyStats.meta``."""
    return {"format": FORMAT_VERSION, "model_fingerprint": model.fingerprint, "model": model.source,
            "layer": layer, "hook": f"blocks.{layer}.mlp.hook_post", "corpus": corpus_id, "n_tokens": n_tokens,
            "offset": offset, "n_docs": n_docs, "max_len": max_len, "bos": "excluded", "padding": "excluded"}


def _select_documents(corpus, offset: int, n_docs: int | None) -> tuple[list, str]:
    if isinstance(corpus, str):
        if corpus not in CORPORA:
            raise ValueError(f"corpus {corpus!r} not known; allowed: {', '.join(CORPORA)}, or a list of texts")
        return wiki_documents(n=n_docs, offset=offset), corpus
    texts = list(corpus)
    if not texts or not all(isinstance(t, str) and t for t in texts):
        raise ValueError("corpus must be 'wiki' or a non-empty list of non-empty texts")
    h = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12]
    end = None if n_docs is None else offset + n_docs
    docs = texts[offset:end]
    if not docs:
        raise ValueError(f"no documents in range offset={offset}, n_docs={n_docs}; the corpus has {len(texts)}")
    return docs, f"texts:{len(texts)}:{h}"


# ============================================================================================== disk cache
def stats_dir() -> Path:
    return _paths.cache_dir() / "stats"


def cache_path(meta: dict) -> Path:
    """Where the statistics of the request ``meta`` (:func:`request_meta`) are cached."""
    corpus = meta["corpus"].replace(":", "-")
    tok = "all" if meta["n_tokens"] is None else str(meta["n_tokens"])
    docs = "end" if meta["n_docs"] is None else str(meta["n_docs"])
    stem = f"L{meta['layer']}_{corpus}_{tok}tok_len{meta['max_len']}_docs{meta['offset']}+{docs}_v{FORMAT_VERSION}"
    return stats_dir() / meta["model_fingerprint"] / f"{stem}.safetensors"


def _partial_path(path: Path) -> Path:
    return path.with_name(path.name.replace(".safetensors", ".partial.safetensors"))


_KEY_FIELDS = ("format", "model_fingerprint", "layer", "hook", "corpus", "n_tokens", "offset", "n_docs", "max_len",
               "bos")


def _same_key(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in _KEY_FIELDS)


def _try_load(path: Path, meta: dict) -> KeyStats | None:
    if not path.exists() and not path.with_suffix(".json").exists():
        return None
    try:
        stats = KeyStats.load(path)
    except (ValueError, FileNotFoundError, OSError) as e:
        warnings.warn(f"statistics cache {path} is unusable ({e}); recomputing", stacklevel=3)
        return None
    if not _same_key(stats.meta, meta):
        warnings.warn(f"statistics cache {path} was written for other settings; recomputing", stacklevel=3)
        return None
    return stats


def _try_resume(path: Path, meta: dict) -> tuple[KeyStats | None, int]:
    part = _partial_path(path)
    if not part.exists():
        return None, 0
    try:
        state = KeyStats.load(part)
    except (ValueError, FileNotFoundError, OSError) as e:
        warnings.warn(f"checkpoint {part} is unusable ({e}); starting over", stacklevel=3)
        return None, 0
    if not _same_key(state.meta, meta) or "docs_consumed" not in state.meta:
        return None, 0
    start = int(state.meta["docs_consumed"])  # relative to offset
    state.meta.update({k: v for k, v in meta.items() if k not in state.meta})
    state.meta["resumed_at_docs"] = start
    return state, start


def _json_meta(meta: dict) -> dict:
    """Metadata as JSON (non-finite floats as strings: an infinite condition number stays readable)."""
    out = {}
    for k, v in meta.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = str(v)
        out[k] = v
    return json.loads(json.dumps(out, default=str))
