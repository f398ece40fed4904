"""Activation caches, TransformerLens style: ``logits, cache = model.run_with_cache(texts)``.

``cache["blocks.3.hook_resid_pre"]``, or the shorthand ``cache["resid_pre", 3]`` / ``cache["pattern", 17]`` /
``cache["scale", 4, "ln1"]`` / ``cache["embed"]``, gives ``[batch, pos, ...]`` float32 tensors on the CPU. A cache
of a batch of texts of different lengths keeps the padding mask (``cache.mask`` [batch, pos], True on real
tokens) and each row's length, so per-prompt positions such as "the last real token" are ``cache.last``.

Stacking helpers: :meth:`Cache.accumulated_resid` (the residual entering every layer plus the final one, as the
logit lens reads it) and :meth:`Cache.stack_head_results` (each head's write ``z_h @ W_O[h]`` to the residual).
Saved and loaded as safetensors (tensors) + JSON metadata (model fingerprint, tokens); never pickled.

Gradients: :func:`activation_grads` runs one forward with the named activations kept in the graph, one backward
of a metric, and returns the activations and their gradients as two caches (the ingredients of attribution
patching). The graph is rooted at the embedding hooks, so it works whether or not the weights require grad, and
no parameter's ``.grad`` is touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Callable, Iterable

import torch

from .hooks import capture

# Shorthand -> hook name under blocks.{layer} (the TransformerLens vocabulary).
BLOCK_HOOKS = {
    "resid_pre": "hook_resid_pre", "resid_mid": "hook_resid_mid", "resid_post": "hook_resid_post",
    "attn_in": "hook_attn_in", "mlp_in": "hook_mlp_in", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out",
    "q_input": "hook_q_input", "k_input": "hook_k_input", "v_input": "hook_v_input",
    "q": "attn.hook_q", "k": "attn.hook_k", "v": "attn.hook_v", "z": "attn.hook_z",
    "rot_q": "attn.hook_rot_q", "rot_k": "attn.hook_rot_k", "result": "attn.hook_result",
    "attn_scores": "attn.hook_attn_scores", "pattern": "attn.hook_pattern",
    "pre": "mlp.hook_pre", "pre_linear": "mlp.hook_pre_linear", "post": "mlp.hook_post",
}
GLOBAL_HOOKS = {"embed": "hook_embed", "pos_embed": "hook_pos_embed", "unembed": "hook_unembed"}
# What run_with_cache(names=None) keeps: the points analyses read, each once (the bridge also has aliases).
DEFAULT_SHORT = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post", "q", "k", "v", "z", "pattern",
                 "pre", "post")
FORMAT = "interp.Cache/1"


def act_name(key, layer: int | None = None, sub: str | None = None) -> str:
    """A shorthand (``"resid_pre", 3``; ``"scale", 4, "ln1"``; ``"embed"``) -> the full hook name; full names pass
    through unchanged."""
    if isinstance(key, tuple):
        return act_name(*key)
    if not isinstance(key, str):
        raise KeyError(f"cache key {key!r}: give a hook name or a shorthand like ('resid_pre', 3)")
    if layer is None:
        return GLOBAL_HOOKS.get(key, key)
    if key in ("scale", "normalized"):
        ln = sub or "ln1"
        if ln not in ("ln1", "ln2"):
            raise KeyError(f"cache key ({key!r}, {layer}, {sub!r}): the norm is 'ln1' or 'ln2'")
        return f"blocks.{layer}.{ln}.hook_{key}"
    if key not in BLOCK_HOOKS:
        raise KeyError(f"shorthand {key!r} not known; allowed: {', '.join(sorted(BLOCK_HOOKS))}, 'scale', "
                       f"'normalized', or a full hook name")
    return f"blocks.{layer}.{BLOCK_HOOKS[key]}"


def default_names(model) -> list[str]:
    points = set(model.hook_names())
    learned_positions = "hook_pos_embed" in points and model.positional == "standard"  # rotary models: never fires
    names = [GLOBAL_HOOKS["embed"]] + ([GLOBAL_HOOKS["pos_embed"]] if learned_positions else [])
    for layer in range(model.n_layers):
        names += [n for n in (act_name(s, layer) for s in DEFAULT_SHORT) if n in points]
    return names


class Cache(Mapping):
    """Activations by hook name ([batch, pos, ...]); shorthand keys; padding mask; stacking helpers."""

    def __init__(self, acts: dict[str, torch.Tensor], model=None, *, tokens: torch.Tensor | None = None,
                 lengths: torch.Tensor | None = None, fingerprint: str | None = None):
        self._acts = dict(acts)
        self.model = model
        self.tokens = tokens
        if lengths is None and tokens is not None:
            lengths = torch.full((tokens.shape[0],), tokens.shape[1], dtype=torch.long)
        self.lengths = lengths
        self.fingerprint = fingerprint or (model.fingerprint if model is not None else None)

    # Mapping protocol: keys are full hook names; lookups also take shorthands.
    def __getitem__(self, key) -> torch.Tensor:
        name = act_name(key)
        try:
            return self._acts[name]
        except KeyError:
            raise KeyError(f"{name!r} not in this cache ({len(self._acts)} activations, e.g. "
                           f"{list(self._acts)[:3]}); pass names= to run_with_cache to keep it") from None

    def __iter__(self):
        return iter(self._acts)

    def __len__(self) -> int:
        return len(self._acts)

    def __contains__(self, key) -> bool:
        try:
            return act_name(key) in self._acts
        except KeyError:
            return False

    def __repr__(self) -> str:
        shape = tuple(self.tokens.shape) if self.tokens is not None else "?"
        return f"Cache({len(self)} activations, tokens {shape})"

    @property
    def mask(self) -> torch.Tensor:
        """bool [batch, pos]: True on real tokens, False on right padding."""
        width = self.tokens.shape[1]
        return torch.arange(width)[None, :] < self.lengths[:, None]

    @property
    def last(self) -> torch.Tensor:
        """[batch] index of each row's last real token."""
        return self.lengths - 1

    def at(self, key, pos) -> torch.Tensor:
        """``cache[key]`` at one position per row -> [batch, ...]; ``pos`` is an int (negative counts from each
        row's own end, so -1 is every prompt's last real token) or a [batch] tensor of indices."""
        acts = self[key]
        idx = torch.as_tensor(pos)
        if idx.ndim == 0:
            idx = idx.expand(acts.shape[0])
        idx = torch.where(idx < 0, self.lengths + idx, idx)
        return acts[torch.arange(acts.shape[0]), idx]

    # ---------------------------------------------------------------------------------------- stacking
    def accumulated_resid(self, layer: int | None = None, *, return_labels: bool = False):
        """The residual entering layers 0..layer-1 plus, for ``layer=None``, the final residual ->
        [n, batch, pos, d_model] (labels ``"0_pre" .. "final"``, as the logit lens's rows)."""
        n_layers = self._n_layers()
        top = n_layers if layer is None else layer
        names = [act_name("resid_pre", i) for i in range(top)]
        labels = [f"{i}_pre" for i in range(top)]
        if layer is None:
            names.append(act_name("resid_post", n_layers - 1))
            labels.append("final")
        out = torch.stack([self[n] for n in names])
        return (out, labels) if return_labels else out

    def stack_head_results(self, layer: int | None = None, *, return_labels: bool = False):
        """Each head's write to the residual, ``z_h @ W_O[h]`` (no output bias), for the heads of layers
        0..layer-1 (all for None) -> [n_heads_total, batch, pos, d_model] (labels ``"L{l}H{h}"``)."""
        if self.model is None:
            raise ValueError("stack_head_results needs the model's W_O: this cache was loaded without a model; "
                             "pass model= to Cache.load")
        top = self._n_layers() if layer is None else layer
        parts, labels = [], []
        for i in range(top):
            z = self["z", i]  # [batch, pos, head, d_head]
            parts.append(torch.einsum("bphd,hdm->hbpm", z, self.model.W_O(i)))
            labels += [f"L{i}H{h}" for h in range(z.shape[2])]
        out = torch.cat(parts)
        return (out, labels) if return_labels else out

    def _n_layers(self) -> int:
        if self.model is not None:
            return self.model.n_layers
        layers = {int(n.split(".")[1]) for n in self._acts if n.startswith("blocks.")}
        return max(layers) + 1

    # ---------------------------------------------------------------------------------------- files
    def save(self, path) -> Path:
        """``path`` (.safetensors) with every activation plus ``__tokens__``/``__lengths__``, and the metadata
        (format, fingerprint, names) in the safetensors header."""
        from safetensors.torch import save_file

        path = Path(path)
        if not path.parent.is_dir():
            raise FileNotFoundError(f"folder {str(path.parent)!r} does not exist; create it first")
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self._acts.items()}
        if self.tokens is not None:
            tensors["__tokens__"] = self.tokens.to("cpu").contiguous()
            tensors["__lengths__"] = self.lengths.to("cpu").contiguous()
        meta = {"format": FORMAT, "fingerprint": self.fingerprint or ""}
        save_file(tensors, str(path), metadata=meta)
        return path

    @classmethod
    def load(cls, path, model=None) -> "Cache":
        """Read a saved cache; with ``model``, refuse a cache made by another model (fingerprints differ)."""
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no cache file {str(path)!r}")
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        if meta.get("format") != FORMAT:
            raise ValueError(f"{str(path)!r} is not an interp cache (format {meta.get('format')!r}, expected "
                             f"{FORMAT!r})")
        fp = meta.get("fingerprint") or None
        if model is not None and fp and fp != model.fingerprint:
            raise ValueError(f"cache {str(path)!r} was made by model {fp}, not this model ({model.fingerprint})")
        tokens, lengths = tensors.pop("__tokens__", None), tensors.pop("__lengths__", None)
        return cls(tensors, model, tokens=tokens, lengths=lengths, fingerprint=fp)

    def to_json(self) -> dict:
        return {"activations": {k: list(v.shape) for k, v in self._acts.items()}, "fingerprint": self.fingerprint,
                "tokens": None if self.tokens is None else self.tokens.tolist()}


def _tokens_and_lengths(model, inp) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(inp, torch.Tensor):
        toks = model.to_tokens(inp)
        return toks, torch.full((toks.shape[0],), toks.shape[1], dtype=torch.long)
    texts = [inp] if isinstance(inp, str) else list(inp)
    toks = model.to_tokens(texts)
    return toks, torch.tensor(model.lengths(texts), dtype=torch.long)


def _wanted(model, names) -> list[str]:
    if names is None:
        return default_names(model)
    if callable(names):
        return [n for n in model.hook_names() if names(n)]
    items = [names] if isinstance(names, (str, tuple)) else list(names)
    out = [act_name(n) for n in items]
    if not out:
        raise ValueError("no activations asked for; pass hook names or shorthands like ('resid_pre', 3)")
    return out


def run_with_cache(model, inp, names=None) -> tuple[torch.Tensor, Cache]:
    """One forward -> (logits [batch, pos, vocab], :class:`Cache`), float32 on the CPU. ``names``: hook names,
    shorthands, a predicate on names, or None for the usual points of every layer."""
    toks, lengths = _tokens_and_lengths(model, inp)
    store, logits = capture(model, toks.to(model.device), _wanted(model, names),
                            keep=lambda name, t: t.detach().to("cpu", torch.float32), description="run_with_cache")
    return logits.detach().to("cpu", torch.float32), Cache(store, model, tokens=toks, lengths=lengths)


def graph_roots(model) -> list[tuple[str, Callable]]:
    """Hooks that make the embeddings require grad, so the forward builds a graph even for frozen weights."""
    def root(t, hook):
        return t if t.requires_grad else t.detach().requires_grad_(True)
    roots = ["hook_embed"] + (["hook_pos_embed"] if model.positional == "standard" else [])
    return [(n, root) for n in roots if n in set(model.hook_names())]


def activation_grads(model, inp, names, metric: Callable[[torch.Tensor, Cache], torch.Tensor]
                     ) -> tuple[torch.Tensor, Cache, Cache]:
    """One forward and one backward -> (metric per prompt [batch], activations, d(sum of metric)/d(activation)).

    ``metric(logits, cache) -> [batch]`` (logits on the model's device, with grad; the cache gives tokens and
    lengths). The gradient of the SUM over prompts equals each prompt's own gradient, since prompts do not
    interact. Activations and gradients come back as float32 CPU caches with the same names."""
    toks, lengths = _tokens_and_lengths(model, inp)
    wanted = _wanted(model, names)
    info = Cache({}, model, tokens=toks, lengths=lengths)
    store, logits = capture(model, toks.to(model.device), wanted, keep=lambda name, t: t, grad=True,
                            hooks=graph_roots(model), description="activation_grads")
    with torch.enable_grad():
        values = metric(logits, info)
        values = check_metric_output(values, toks.shape[0])
        grads = torch.autograd.grad(values.sum(), [store[n] for n in wanted], allow_unused=True)
    cpu = lambda t: t.detach().to("cpu", torch.float32)  # noqa: E731
    acts = {n: cpu(store[n]) for n in wanted}
    dacts = {n: (torch.zeros_like(acts[n]) if g is None else cpu(g)) for n, g in zip(wanted, grads)}
    return (cpu(values), Cache(acts, model, tokens=toks, lengths=lengths),
            Cache(dacts, model, tokens=toks, lengths=lengths))


def check_metric_output(values, batch: int) -> torch.Tensor:
    """A metric must give one number per prompt: a tensor [batch] (a scalar is accepted for a batch of one)."""
    if not isinstance(values, torch.Tensor):
        raise ValueError(f"the metric returned {type(values).__name__}; it must return a tensor with one value "
                         f"per prompt, shape [{batch}]")
    if values.ndim == 0 and batch == 1:
        values = values[None]
    if tuple(values.shape) != (batch,):
        raise ValueError(f"the metric returned shape {tuple(values.shape)}; it must return one value per prompt, "
                         f"shape [{batch}]")
    return values


def names_for(short: str, layers: Iterable[int]) -> list[str]:
    """``names_for("z", range(4))`` -> the hook names of that shorthand at those layers."""
    return [act_name(short, layer) for layer in layers]
