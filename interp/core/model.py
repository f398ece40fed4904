"""``interp.Model``: one wrapper around a hookable transformer (a TransformerBridge, or a HookedRootModule you
wrote) that every analyzer uses.

Reads  — ``run``, ``cache``, ``resid``, ``resid_stack``, ``attn_out``, ``mlp_out``, ``head_out``.
Writes — ``hooks`` (the one mechanism), and built on it ``patch``, ``steer``, ``ablate_heads``,
         ``ablate_neurons``; all context managers that nest and always detach.
Weights — ``mlp_out_weight``, ``mlp_in_weights``, ``snapshot`` / ``restore`` (bit-exact), ``summary``.

BOS policy (used by every analyzer): every string gets the model's BOS token prepended (``<|im_start|>``,
id 1, on the embedded SmolLM2; the tokenizer does not add it itself). Token tensors pass through unchanged.
All returned tensors are detached float32 on the CPU, whatever device the model runs on.

Placement — ``device`` (the input embedding's: where tokens go), ``devices``, ``device_of(layer)``,
``device_map`` and ``placement_summary()``. With a device map (``interp.load(device_map=...)``) layers live on
different devices: hook functions receive tensors on their layer's device, so anything combined with them is
moved to ``t.device`` (and weight updates are written on the weight's own device).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Callable, Iterable, Sequence

import torch

from . import arch, generation, interventions
from . import cache as cache_mod
from .hooks import HookFn, HookSet, capture
from .inputs import as_int, check_pos, one_text

POINTS = ("pre", "mid", "post")


class Model:
    def __init__(self, module: torch.nn.Module, tokenizer=None, *, hf_model=None, name: str | None = None,
                 fingerprint: str | None = None, source: str | None = None):
        self.module = module
        self.tokenizer = tokenizer
        self.hf_model = hf_model
        self.name = name or type(module).__name__
        self.source = source or self.name
        self._fingerprint = fingerprint
        self.load_seconds: float | None = None
        cfg = module.cfg
        self.cfg = cfg
        self.n_layers: int = cfg.n_layers
        self.n_heads: int = cfg.n_heads
        self.n_kv_heads: int = getattr(cfg, "n_key_value_heads", None) or cfg.n_heads
        self.d_model: int = cfg.d_model
        self.d_head: int = cfg.d_head
        self.d_vocab: int = cfg.d_vocab
        self.n_ctx: int = cfg.n_ctx
        self.attn_only: bool = bool(getattr(cfg, "attn_only", False))
        self.d_mlp: int | None = None if self.attn_only else getattr(cfg, "d_mlp", None)
        self.gated_mlp: bool = bool(getattr(cfg, "gated_mlp", False))
        norm = getattr(cfg, "normalization_type", None)
        self.norm: str | None = {"RMS": "rms", "RMSPre": "rms", "LN": "ln", "LNPre": "ln"}.get(norm, None)
        self.positional: str = getattr(cfg, "positional_embedding_type", "standard")
        self._hookset = HookSet(module.hook_dict)

    @classmethod
    def from_module(cls, module: torch.nn.Module, tokenizer=None, *, name: str | None = None) -> "Model":
        """Wrap a HookedRootModule you wrote (e.g. :class:`interp.analyses.induction.AttnOnlyTransformer`)
        that uses the TransformerLens hook names and has a ``cfg`` with n_layers, n_heads, d_model, d_head,
        d_vocab, n_ctx."""
        if not hasattr(module, "hook_dict") or not hasattr(module, "cfg"):
            raise ValueError("module must be a HookedRootModule with a cfg (n_layers, n_heads, d_model, ...)")
        return cls(module, tokenizer, name=name or type(module).__name__)

    # ------------------------------------------------------------------------------------------ basics
    def __repr__(self) -> str:
        where = self.placement_summary() if len(self.devices) > 1 else str(self.device)
        return (f"Model({self.source}: {self.n_layers} layers, {self.n_heads} heads ({self.n_kv_heads} KV), "
                f"d_model {self.d_model}, d_mlp {self.d_mlp}, vocab {self.d_vocab}, on {where})")

    # ------------------------------------------------------------------------------------------ placement
    @property
    def device(self) -> torch.device:
        """Where input tokens go: the input embedding's device (with a device map, other layers may live on
        other devices — see :attr:`devices` and :meth:`device_of`)."""
        embed = self.hf_model.get_input_embeddings() if self.hf_model is not None else None
        if embed is not None:
            return arch.module_device(embed)
        return next(self.module.parameters()).device

    @property
    def devices(self) -> list[torch.device]:
        """Every device holding parameters, in the order the forward pass first reaches them."""
        return list(dict.fromkeys(p.device for p in self._params_root().parameters()))

    def device_of(self, layer: int) -> torch.device:
        """Device of ``blocks.{layer}`` (its weights, and the activations its hooks see)."""
        return arch.module_device(self.module.blocks[self.check_layer(layer)])

    @property
    def device_map(self) -> dict | None:
        """The accelerate placement ``{module name: device}`` the model was loaded with, or None."""
        hf_map = getattr(self.hf_model, "hf_device_map", None) if self.hf_model is not None else None
        return dict(hf_map) if hf_map else None

    def placement_summary(self) -> str:
        """Which parts live where, e.g. ``cuda:0: embedding, layers 0-14 | cuda:1: layers 15-29, final norm,
        unembedding``."""
        return arch.placement_summary(self)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.module.parameters()).dtype

    @property
    def bos_token_id(self) -> int:
        tok_bos = getattr(self.tokenizer, "bos_token_id", None)
        return tok_bos if tok_bos is not None else int(getattr(self.cfg, "bos_token_id", 0) or 0)

    # ------------------------------------------------------------------------------------------ checks
    def check_layer(self, layer: int, *, allow_end: bool = False) -> int:
        """Normalize ``layer`` (negative counts from the end); ValueError naming the allowed range otherwise."""
        n = self.n_layers + (1 if allow_end else 0)
        layer = as_int(layer)  # numpy / torch integer scalars (as found in DataFrames) are fine
        if not isinstance(layer, (int,)) or isinstance(layer, bool) or not -n <= layer < n:
            raise ValueError(f"layer {layer!r} out of range: this model has {self.n_layers} layers, allowed "
                             f"0..{n - 1} or -{n}..-1")
        return layer % n

    def check_head(self, head: int) -> int:
        head = as_int(head)
        if not isinstance(head, int) or isinstance(head, bool) or not -self.n_heads <= head < self.n_heads:
            raise ValueError(f"head {head!r} out of range: this model has {self.n_heads} heads per layer, "
                             f"allowed 0..{self.n_heads - 1}")
        return head % self.n_heads

    check_pos = staticmethod(check_pos)

    def check_neurons(self, layer: int, neurons) -> list[int]:
        if self.d_mlp is None:
            raise ValueError(f"this model ({self.source}) has no MLP layers")
        idx = [neurons] if isinstance(neurons, int) else list(neurons)
        if not idx:
            raise ValueError("no neurons given; pass an index or a list of indices")
        for i in idx:
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < self.d_mlp:
                raise ValueError(f"neuron {i!r} out of range for layer {layer}: allowed 0..{self.d_mlp - 1}")
        return idx

    def check_vector(self, vector, width: int | None = None, what: str = "vector") -> torch.Tensor:
        width = width or self.d_model
        v = torch.as_tensor(vector, dtype=torch.float32)
        if v.shape[-1:] != (width,):
            raise ValueError(f"{what} has shape {tuple(v.shape)}; its last dimension must be d_model={width}")
        return v

    def check_point(self, point: str) -> str:
        if point not in POINTS:
            raise ValueError(f"residual point {point!r} not known; allowed: {', '.join(POINTS)}")
        return point

    # ------------------------------------------------------------------------------------------ tokens
    def to_tokens(self, inp, prepend_bos: bool = True) -> torch.Tensor:
        """``str | list[str] | Tensor`` -> LongTensor [batch, pos]; lists are right-padded (see ``pad_mask``)."""
        if isinstance(inp, torch.Tensor):
            toks = inp.long()
            if toks.ndim == 1:
                toks = toks[None]
            if toks.ndim != 2 or toks.shape[-1] == 0:
                raise ValueError(f"token tensor has shape {tuple(inp.shape)}; expected [pos] or [batch, pos], pos>0")
            if toks.numel() and (int(toks.min()) < 0 or int(toks.max()) >= self.d_vocab):
                raise ValueError(f"token ids must lie in 0..{self.d_vocab - 1}; got {int(toks.min())}..{int(toks.max())}")
            return toks
        texts = [inp] if isinstance(inp, str) else list(inp)
        if not texts:
            raise ValueError("no text given: expected a non-empty string or a non-empty list of strings")
        rows = [self.encode(t, prepend_bos) for t in texts]
        width = max(len(r) for r in rows)
        if width > self.n_ctx:
            raise ValueError(f"text is {width} tokens long; this model's context allows at most {self.n_ctx}")
        pad = self.pad_token_id
        return torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long)

    def encode(self, text: str, prepend_bos: bool = True) -> list[int]:
        """One text -> token ids (BOS first unless ``prepend_bos=False``); the one place interp tokenizes."""
        if not isinstance(text, str):
            raise ValueError(f"expected text (str), got {type(text).__name__}")
        if not text:
            raise ValueError("empty text: give at least one character to analyse")
        if self.tokenizer is None:
            raise ValueError(f"model {self.source} has no tokenizer; pass token ids as a tensor")
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return ([self.bos_token_id] if prepend_bos else []) + list(ids)

    @property
    def pad_token_id(self) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        return pad if pad is not None else self.bos_token_id

    def lengths(self, texts: Sequence[str], prepend_bos: bool = True) -> list[int]:
        """Token counts (BOS included) of each text, for indexing right-padded batches."""
        return [len(self.encode(t, prepend_bos)) for t in texts]

    def to_str_tokens(self, inp, prepend_bos: bool = True) -> list[str]:
        toks = self.to_tokens(inp, prepend_bos)
        if toks.shape[0] != 1:
            raise ValueError("to_str_tokens takes one text or one row of tokens")
        if self.tokenizer is None:
            return [str(int(t)) for t in toks[0]]
        return [self.tokenizer.decode([int(t)]) for t in toks[0]]

    def target_tokens(self, target: str) -> list[int]:
        """Token ids of a target continuation (no BOS). Empty target -> ValueError."""
        if not isinstance(target, str) or not target:
            raise ValueError(f"target {target!r} is empty; give the continuation text, e.g. ' Paris'")
        return self.encode(target, prepend_bos=False)

    def to_single_token(self, target: str) -> int:
        ids = self.target_tokens(target)
        if len(ids) != 1:
            pieces = [self.tokenizer.decode([i]) for i in ids]
            raise ValueError(f"target {target!r} is {len(ids)} tokens {pieces}, not one token; choose a single-token "
                             "target (mind the leading space) or use a multi-token API")
        return ids[0]

    # ------------------------------------------------------------------------------------------ running
    def forward(self, inp, **kwargs) -> torch.Tensor:
        """Raw forward on the model's device: logits [batch, pos, vocab], gradients as the caller's mode allows.
        ``kwargs`` go to the bridge (an attention mask, position ids, a key/value cache: :mod:`.prefix`)."""
        toks = self.to_tokens(inp).to(self.device)
        return self.module(toks, **kwargs)

    def run(self, inp, *, stop_at_layer: int | None = None, grad: bool = False) -> torch.Tensor:
        """Logits [batch, pos, d_vocab]; with ``stop_at_layer=L``, the residual entering layer L instead
        ([batch, pos, d_model]; L may be n_layers for the final residual before the final norm). With
        ``grad=True`` the logits stay on the model's device, attached to the autograd graph (hooks active
        around the call are part of it); otherwise they are detached float32 on the CPU."""
        if grad:
            if stop_at_layer is not None:
                raise ValueError("grad=True returns the logits; combine it with hooks, not with stop_at_layer")
            with torch.enable_grad():
                return self.forward(inp)
        if stop_at_layer is None:
            with torch.no_grad():
                return _cpu(self.forward(inp))
        layer = self.check_layer(stop_at_layer, allow_end=True)
        name = self._resid_name(layer)
        return self._run_until(inp, name)

    def run_with_cache(self, inp, names=None):
        """``(logits, cache)`` as in TransformerLens: ``cache["resid_pre", 3]``, ``cache["pattern", 17]``,
        ``cache.accumulated_resid()``, ``cache.save(path)``. ``inp``: a text, a list of texts (right-padded;
        ``cache.mask``/``cache.lengths``), or tokens. ``names``: hook names or shorthands (default: the usual
        points of every layer). See :mod:`interp.core.cache`."""
        return cache_mod.run_with_cache(self, inp, names)

    def _resid_name(self, layer: int) -> str:
        """Hook name of the residual entering ``layer`` (layer == n_layers: the final residual)."""
        if layer == self.n_layers:
            return f"blocks.{self.n_layers - 1}.hook_resid_post"
        return f"blocks.{layer}.hook_resid_pre"

    def _run_until(self, inp, name: str) -> torch.Tensor:
        store, _ = capture(self, inp, [name], keep=lambda n, t: _cpu(t), stop=True, description="stop_at_layer")
        return store[name]

    def cache(self, inp, names: Iterable[str] | Callable[[str], bool], *, logits: bool = False):
        """Capture only the named activations -> ``{name: Tensor}`` (batch dim kept; CPU float32).
        ``names`` is a list of hook names or a predicate on names. With ``logits=True``: ``(logits, cache)``."""
        if callable(names):
            wanted = [n for n in self._hookset.points if names(n)]
        elif isinstance(names, str):
            wanted = [names]
        else:
            wanted = list(names)
        if not wanted:
            raise ValueError("no hook names selected to cache; pass names like 'blocks.0.hook_resid_pre'")
        store, out = capture(self, inp, wanted, keep=lambda name, t: _cpu(t), description="cache")
        return (_cpu(out), store) if logits else store

    def generate(self, text: str, max_new_tokens: int = 20, *, n: int | None = None, temperature: float = 0.0,
                 top_k: int | None = None, seed: int = 0, stop_at_eos: bool = True):
        """Continue ``text``: greedy when ``temperature == 0``, else sampled (seeded). Returns the continuation
        (without the prompt) as a str, or a list of ``n`` continuations when ``n`` is given.

        Hooks active around the call (steering, patching, ablation) act on every step exactly as they do in
        ``run``: with any hook attached each step re-runs the whole sequence; with none (and one device) a
        key/value-cached twin gives the same tokens faster (:mod:`interp.core.generation`)."""
        return generation.generate(self, text, max_new_tokens, n=n, temperature=temperature, top_k=top_k,
                                   seed=seed, stop_at_eos=stop_at_eos)

    # ------------------------------------------------------------------------------------------ residual reads
    def _one(self, text) -> torch.Tensor:
        return one_text(self, text)

    def resid(self, text, layer: int, point: str = "pre", pos: int | None = None) -> torch.Tensor:
        """Residual stream at ``blocks.{layer}.hook_resid_{point}`` -> [pos, d_model] (or [d_model] at ``pos``)."""
        layer, point, toks = self.check_layer(layer), self.check_point(point), self._one(text)
        if pos is not None:
            pos = self.check_pos(pos, toks.shape[1])
        name = f"blocks.{layer}.hook_resid_{point}"
        out = self.cache(toks, [name])[name][0]
        return out if pos is None else out[pos]

    def resid_stack(self, text) -> torch.Tensor:
        """Residual entering every layer plus the final residual -> [n_layers + 1, pos, d_model]."""
        names = [self._resid_name(layer) for layer in range(self.n_layers + 1)]
        c = self.cache(self._one(text), names)
        return torch.stack([c[n][0] for n in names])

    def attn_out(self, text, layer: int) -> torch.Tensor:
        """Attention output of ``layer`` added to the residual -> [pos, d_model]."""
        name = f"blocks.{self.check_layer(layer)}.hook_attn_out"
        return self.cache(self._one(text), [name])[name][0]

    def mlp_out(self, text, layer: int) -> torch.Tensor:
        """MLP output of ``layer`` added to the residual -> [pos, d_model]."""
        if self.attn_only:
            raise ValueError(f"model {self.source} is attention-only; it has no MLP output")
        name = f"blocks.{self.check_layer(layer)}.hook_mlp_out"
        return self.cache(self._one(text), [name])[name][0]

    def head_out(self, text, layer: int) -> torch.Tensor:
        """Each head's write to the residual, ``z_h @ W_O[h]`` -> [pos, n_heads, d_model] (no output bias; the
        heads sum to ``attn_out`` minus ``b_O``)."""
        layer = self.check_layer(layer)
        name = f"blocks.{layer}.attn.hook_z"
        z = self.cache(self._one(text), [name])[name][0]  # [pos, head, d_head]
        return torch.einsum("phd,hdm->phm", z, self.W_O(layer))

    # ------------------------------------------------------------------------------------------ weights (views)
    @property
    def W_E(self) -> torch.Tensor:
        """[d_vocab, d_model] on CPU."""
        return _cpu(self.module.W_E)

    @property
    def W_U(self) -> torch.Tensor:
        """[d_model, d_vocab] on CPU."""
        return _cpu(self.module.W_U)

    @property
    def b_U(self) -> torch.Tensor | None:
        b = getattr(self.module, "b_U", None)
        return None if b is None else _cpu(b)

    def W_O(self, layer: int) -> torch.Tensor:
        """[n_heads, d_head, d_model] on CPU."""
        return _cpu(self.module.blocks[self.check_layer(layer)].attn.W_O)

    def b_O(self, layer: int) -> torch.Tensor | None:
        b = getattr(self.module.blocks[self.check_layer(layer)].attn, "b_O", None)
        return None if b is None else _cpu(b)

    def W_V(self, layer: int) -> torch.Tensor:
        """[n_kv_heads, d_model, d_head] on CPU (query head h reads KV group h // (n_heads // n_kv_heads))."""
        return _cpu(self.module.blocks[self.check_layer(layer)].attn.W_V)

    def kv_group(self, head: int) -> int:
        return self.check_head(head) // (self.n_heads // self.n_kv_heads)

    def final_norm(self, resid: torch.Tensor) -> torch.Tensor:
        """The model's own final norm (RMSNorm / LayerNorm with its learned scale), on ``resid`` [..., d_model]."""
        norm = self._final_norm_module()
        if norm is None:
            return resid
        with torch.no_grad():
            return _cpu(norm(resid.to(arch.module_device(norm), self.dtype)))  # the norm may sit on the last device

    def _final_norm_module(self):
        return arch.final_norm_module(self)

    def unembedding(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(W_U [d_model, d_vocab], b_U [d_vocab] or None)`` as the model holds them: on their own device, in
        the model's dtype, not copied (for analyses that unembed many rows on the device; read only)."""
        return self.module.W_U, getattr(self.module, "b_U", None)

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """Normalized residual [..., d_model] -> logits [..., d_vocab]."""
        with torch.no_grad():
            w = self.module.W_U
            out = x.to(w.device, w.dtype) @ w
            b = getattr(self.module, "b_U", None)
            return _cpu(out if b is None else out + b.to(out.device))

    def norm_eps(self) -> float:
        norm = self._final_norm_module()
        return float(getattr(norm, "variance_epsilon", None) or getattr(norm, "eps", None) or self.cfg.eps)

    def final_norm_weight(self) -> torch.Tensor | None:
        """The final norm's effective learned multiplier [d_model] (``1 + w`` on Gemma; see :mod:`arch`)."""
        return arch.norm_gain(self, self._final_norm_module())

    def norm_weight(self, layer: int, which: str = "ln1") -> torch.Tensor | None:
        """Effective learned multiplier [d_model] of ``blocks.{layer}.ln1`` (before attention) or ``ln2`` (before
        the MLP), or None when the model has no such norm or it has no scale."""
        if which not in ("ln1", "ln2"):
            raise ValueError(f"which={which!r}; allowed: 'ln1' (before attention), 'ln2' (before the MLP)")
        return arch.norm_gain(self, getattr(self.module.blocks[self.check_layer(layer)], which, None))

    def final_norm_bias(self) -> torch.Tensor | None:
        norm = self._final_norm_module()
        b = getattr(norm, "bias", None) if norm is not None else None
        return None if b is None else _cpu(b)

    # ------------------------------------------------------------------------------------------ hooks
    def hooks(self, hooks: Iterable[tuple[str, HookFn]], description: str = ""):
        """The one hook mechanism: ``with model.hooks([(name, fn), ...]): ...`` — always detached on exit."""
        return self._hookset.attach(hooks, description)

    def hook_names(self) -> list[str]:
        return list(self._hookset.points)

    def active_hooks(self) -> list[tuple[str, str]]:
        """``[(hook_name, description)]`` attached by interp right now."""
        return self._hookset.active()

    def attached_hook_count(self) -> int:
        """Every torch hook on every HookPoint (interp's or anyone's) — zero when nothing is attached."""
        return self._hookset.count_torch_hooks()

    # Interventions: argument checks and hook functions live in interventions.py; these attach them.
    def patch(self, layer: int, point: str, pos, value):
        """Replace the residual at ``blocks.{layer}.hook_resid_{point}``, at ``pos`` (an int, a list of ints, or
        None for all) with a tensor (broadcast to [batch, positions, d_model]: e.g. [d_model] or
        [positions, d_model]) or with ``fn(resid_at_pos) -> tensor``."""
        return self.hooks(interventions.patch(self, layer, point, pos, value),
                          description=f"patch L{layer} {point} pos={pos}")

    def steer(self, vector, layer: int, *, scale: float = 1.0, point: str = "pre", pos=None):
        """Add ``scale * vector`` ([d_model]) to the residual at (layer, point), at ``pos`` (int, list, or None for
        every position)."""
        return self.hooks(interventions.steer(self, vector, layer, scale=scale, point=point, pos=pos),
                          description=f"steer L{layer} {point} pos={pos} scale={scale}")

    def ablate_heads(self, heads: Sequence[tuple[int, int]], mode: str = "zero", mean_over=None):
        """Zero- or mean-ablate heads' outputs (on ``attn.hook_z``). ``mean`` replaces a head's z by its mean over
        batch and positions of ``mean_over`` (text/tokens), or of the current input if ``mean_over`` is None."""
        return self.hooks(interventions.ablate_heads(self, heads, mode, mean_over),
                          description=f"ablate heads {mode} {sorted(heads)}")

    def ablate_neurons(self, layer: int, neurons, mode: str = "zero", mean_over=None, *, values=None):
        """Zero- or mean-ablate MLP neurons (on ``mlp.hook_post``, the vector multiplying the down projection).

        ``mean`` sets each neuron to its mean over batch and positions of ``mean_over`` (text/tokens), or of the
        current input if ``mean_over`` is None; or, with ``values`` (one number per neuron, in the order given,
        e.g. a corpus scan's ``NeuronScan.mean_of(neurons)``), to those precomputed means."""
        return self.hooks(interventions.ablate_neurons(self, layer, neurons, mode, mean_over, values),
                          description=f"ablate neurons L{layer} {mode}{' values' if values is not None else ''}")

    # ------------------------------------------------------------------------------------------ weights for editing
    def _params_root(self) -> torch.nn.Module:
        return self.hf_model if self.hf_model is not None else self.module

    def named_params(self) -> dict[str, torch.nn.Parameter]:
        """Parameters by their Hugging Face names (``model.layers.5.mlp.down_proj.weight``); tied ones once. (The
        bridge wraps each HF module and keeps it as ``_original_component``; that step is left out of the names.)"""
        return {n.replace("._original_component", ""): p for n, p in self._params_root().named_parameters()}

    def param(self, name: str) -> torch.nn.Parameter:
        params = self.named_params()
        if name not in params:
            raise ValueError(f"no parameter {name!r}; e.g. {list(params)[:3]}")
        return params[name]

    def _mlp(self, layer: int):
        if self.d_mlp is None:
            raise ValueError(f"model {self.source} has no MLP layers")
        return self.module.blocks[self.check_layer(layer)].mlp

    def mlp_out_module(self, layer: int) -> torch.nn.Module:
        """The MLP's down projection (``nn.Linear`` [d_model, d_mlp] weight, or GPT-2 ``Conv1D`` [d_mlp, d_model])."""
        out = self._mlp(layer).out
        return arch.unwrap(out)

    def mlp_out_weight(self, layer: int) -> torch.nn.Parameter:
        return self.mlp_out_module(layer).weight

    def mlp_out_orientation(self, layer: int) -> str:
        """'linear' (weight [d_model, d_mlp]) or 'conv1d' (weight [d_mlp, d_model])."""
        return "conv1d" if type(self.mlp_out_module(layer)).__name__ == "Conv1D" else "linear"

    def mlp_out_matrix(self, layer: int) -> torch.Tensor:
        """A view [d_model, d_mlp] of the down projection's weight data, whatever its storage orientation:
        ``out = hidden @ M.T (+ bias)``. In-place changes to the view change the model."""
        w = self.mlp_out_weight(layer).data
        return w.T if self.mlp_out_orientation(layer) == "conv1d" else w

    def mlp_in_weights(self, layer: int) -> dict[str, torch.nn.Parameter]:
        """The MLP's input projections: ``{"gate": ..., "in": ...}`` on gated MLPs, ``{"in": ...}`` on GPT-2."""
        mlp, out = self._mlp(layer), {}
        for key in ("gate", "in"):
            sub = getattr(mlp, key, None)
            if sub is not None:
                out[key] = arch.unwrap(sub).weight
        return out

    def param_name(self, param: torch.nn.Parameter) -> str:
        for n, p in self.named_params().items():
            if p is param:
                return n
        raise ValueError("parameter does not belong to this model")

    def snapshot(self, names: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
        """Copies of parameters (all, or the named ones) for a bit-exact :meth:`restore`."""
        params = self.named_params()
        keys = list(params) if names is None else list(names)
        for k in keys:
            if k not in params:
                raise ValueError(f"no parameter {k!r} to snapshot; e.g. {list(params)[:3]}")
        return {k: params[k].detach().clone() for k in keys}

    def edited(self, edit):
        """``with model.edited(edit): ...`` — apply a weight edit inside the block and always revert it on exit,
        bit for bit. Any object with ``apply(model)`` and ``revert()`` works (a ROME ``Edit``, an FT-L ``FTEdit``):
        the model knows the protocol, not the editors. An edit whose ``applied_model`` is already this model is
        not applied again (and is still reverted on exit)."""
        @contextlib.contextmanager
        def applied():
            if getattr(edit, "applied_model", None) is not self:
                edit.apply(self)
            try:
                yield self
            finally:
                edit.revert()

        return applied()

    def restore(self, snapshot: dict[str, torch.Tensor]) -> None:
        params = self.named_params()
        with torch.no_grad():
            for k, v in snapshot.items():
                params[k].copy_(v)

    @property
    def fingerprint(self) -> str:
        """Hash of the architecture and the weights as first seen (computed on first use, then kept)."""
        if self._fingerprint is None:
            h = hashlib.sha256(json.dumps(self.arch_facts(), sort_keys=True, default=str).encode())
            self._fingerprint = self.weights_digest(h)[:16]
        return self._fingerprint

    def weights_digest(self, h=None) -> str:
        """SHA-256 over every parameter's name and bytes, now: equal digests mean bit-identical weights (what
        "an edit reverts exactly" is checked with). ``h`` continues an existing hashlib object."""
        h = hashlib.sha256() if h is None else h
        for name, p in sorted(self.named_params().items()):
            h.update(name.encode())
            h.update(p.detach().to("cpu").contiguous().numpy().tobytes())
        return h.hexdigest()

    # ------------------------------------------------------------------------------------------ summary
    def arch_facts(self) -> dict:
        return {"layers": self.n_layers, "heads": self.n_heads, "kv_heads": self.n_kv_heads,
                "d_model": self.d_model, "d_head": self.d_head, "d_mlp": self.d_mlp,
                "vocab": self.d_vocab, "context": self.n_ctx, "norm": self.norm,
                "positions": self.positional, "gated_mlp": self.gated_mlp}

    def architecture(self) -> dict:
        """Every architecture fact: the sizes of :meth:`arch_facts` and where models differ (embedding scale, norm
        gain, post-norms, QK norm, local layers and window, MLP activation, tied embeddings)."""
        return {**self.arch_facts(), **arch.features(self)}

    def summary(self):
        """DataFrame: parameter counts per component (embedding, attention, FFN, norms, ...) with their share,
        then architecture facts."""
        return arch.summary_frame(self)


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.float32)
