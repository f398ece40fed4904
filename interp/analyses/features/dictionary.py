"""A sparse dictionary at one site of one model: an SAE (reads a hook, rebuilds the same hook) or a transcoder (reads
the MLP's input after its pre-norm, predicts the MLP's write), optionally with a skip matrix.

The computation, for x [n, d_in] read at ``site.read`` and y [n, d_out] the target at ``site.write``::

    z    = x / in_scale                                   # [n, d_in]   scalar normalisation (E|z|^2 = d_in)
    pre  = (z - b_dec·[sae]) @ W_enc + b_enc              # [n, width]  (an SAE subtracts its decoder bias first)
    a    = act(pre)                                       # [n, width]  topk: ReLU, then keep the k largest
    ŷ    = (a @ W_dec + b_dec + z @ W_skip) * out_scale   # [n, d_out]  W_skip only with skip=True

``act`` is ``topk`` (the k largest of ReLU(pre); exactly k entries kept, ties broken by index), ``jumprelu``
(``pre`` where ``pre > threshold``, else 0: Gemma Scope's dictionaries) or ``relu``. The sparse code is returned
as ``(values, indices)`` [n, k] for topk, which is what the decoder needs: a gather of k rows per token
(``embedding_bag``), not a [n, width] by [width, d_out] product.

A dictionary records the model it was made for (fingerprint, d_model, layers); :meth:`Dictionary.check` refuses
another model with a message that names both.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

ACTIVATIONS = ("topk", "jumprelu", "relu")
KINDS = ("transcoder", "sae")
FORMAT = "interp-dictionary-1"


@dataclass(frozen=True)
class Site:
    """Where a dictionary reads (``read`` hook) and what it predicts (``write`` hook) in a model."""

    kind: str
    layer: int | None
    read: str
    write: str

    @classmethod
    def transcoder(cls, model, layer: int) -> "Site":
        layer = model.check_layer(layer)
        # The MLP reads its pre-norm's output (mlp.hook_in) and its write is what the residual receives
        # (hook_mlp_out: after Gemma's post-feedforward norm), so a spliced transcoder replaces the whole branch.
        return cls("transcoder", layer, f"blocks.{layer}.mlp.hook_in", f"blocks.{layer}.hook_mlp_out")

    @classmethod
    def sae(cls, model, hook: str) -> "Site":
        names = set(model.hook_names())
        if hook not in names:
            import difflib

            close = difflib.get_close_matches(hook, sorted(names), n=3)
            raise ValueError(f"unknown hook {hook!r} for an SAE; allowed: one of the model's {len(names)} hook "
                             f"names, e.g. 'blocks.6.hook_resid_post'" + (f"; did you mean {close}?" if close else ""))
        layer = int(hook.split(".")[1]) if hook.startswith("blocks.") else None
        return cls("sae", layer, hook, hook)


def model_info(model) -> dict:
    return {"model_fingerprint": model.fingerprint, "model": model.source, "d_model": model.d_model,
            "n_layers": model.n_layers}


class Dictionary(torch.nn.Module):
    """See the module docstring. Parameters in float32 (training) or the loaded file's dtype."""

    def __init__(self, d_in: int, d_out: int, width: int, *, k: int | None = None, activation: str = "topk",
                 skip: bool = False, site: Site | None = None, model: dict | None = None, meta: dict | None = None,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r}; allowed: {', '.join(ACTIVATIONS)}")
        for name, v in (("d_in", d_in), ("d_out", d_out), ("width", width)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}={v!r}; allowed: a positive integer")
        if activation == "topk" and (not isinstance(k, int) or isinstance(k, bool) or not 1 <= k < width):
            raise ValueError(f"k={k!r} with width={width}; allowed: an integer with 1 <= k < width (k >= width "
                             "keeps every latent, which is no longer sparse)")
        self.d_in, self.d_out, self.width, self.k, self.activation = d_in, d_out, width, k, activation
        self.site, self.model, self.meta = site, dict(model or {}), dict(meta or {})
        self.W_enc = torch.nn.Parameter(torch.zeros(d_in, width, dtype=dtype))
        self.b_enc = torch.nn.Parameter(torch.zeros(width, dtype=dtype))
        self.W_dec = torch.nn.Parameter(torch.zeros(width, d_out, dtype=dtype))
        self.b_dec = torch.nn.Parameter(torch.zeros(d_out, dtype=dtype))
        self.W_skip = torch.nn.Parameter(torch.zeros(d_in, d_out, dtype=dtype)) if skip else None
        self.threshold = torch.nn.Parameter(torch.zeros(width, dtype=dtype), requires_grad=False) \
            if activation == "jumprelu" else None
        self.register_buffer("in_scale", torch.ones((), dtype=torch.float32))
        self.register_buffer("out_scale", torch.ones((), dtype=torch.float32))

    # ------------------------------------------------------------------------------------------ building
    @property
    def kind(self) -> str:
        return self.site.kind if self.site else ("sae" if self.d_in == self.d_out and self.W_skip is None
                                                 else "transcoder")

    @property
    def skip(self) -> bool:
        return self.W_skip is not None

    @torch.no_grad()
    def init_(self, seed: int, in_scale: float = 1.0, out_scale: float = 1.0) -> "Dictionary":
        """Seeded start: unit-norm decoder rows, encoder = decoder transposed, zero biases and skip."""
        g = torch.Generator().manual_seed(seed)
        w = torch.randn(self.width, self.d_out, generator=g, dtype=torch.float32)
        w /= w.norm(dim=1, keepdim=True)
        self.W_dec.copy_(w)
        if self.d_in == self.d_out:
            self.W_enc.copy_(w.T)
        else:
            self.W_enc.copy_(torch.randn(self.d_in, self.width, generator=g) / self.d_in ** 0.5)
        for p in (self.b_enc, self.b_dec, self.W_skip):
            if p is not None:
                p.zero_()
        self.in_scale.fill_(in_scale)
        self.out_scale.fill_(out_scale)
        return self

    # ------------------------------------------------------------------------------------------ computation
    def pre(self, z: torch.Tensor) -> torch.Tensor:
        """Encoder pre-activations [n, width] of normalised inputs ``z`` [n, d_in]."""
        if self.kind == "sae":
            z = z - self.b_dec
        return z @ self.W_enc + self.b_enc

    def sparse(self, pre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(values, indices)`` of the active latents: [n, k] for topk; [n, width] (zeros included) otherwise."""
        if self.activation == "topk":
            vals, idx = pre.topk(self.k, dim=-1, sorted=False)
            return F.relu(vals), idx
        if self.activation == "jumprelu":
            vals = F.relu(pre) * (pre > self.threshold)
        else:
            vals = F.relu(pre)
        idx = torch.arange(self.width, device=pre.device).expand(pre.shape[0], -1)
        return vals, idx

    def decode_sparse(self, vals: torch.Tensor, idx: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        """Normalised reconstruction [n, d_out] from ``(values, indices)`` (plus the skip term of ``z``)."""
        out = F.embedding_bag(idx, self.W_dec, per_sample_weights=vals.to(self.W_dec.dtype), mode="sum") \
            if self.activation == "topk" else vals.to(self.W_dec.dtype) @ self.W_dec
        out = out + self.b_dec
        if self.W_skip is not None and z is not None:
            out = out + z @ self.W_skip
        return out

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Dense latent activations [..., width] of raw inputs ``x`` [..., d_in] (zeros where inactive)."""
        shape = x.shape[:-1]
        z = self.normalise(x)
        vals, idx = self.sparse(self.pre(z))
        dense = torch.zeros(z.shape[0], self.width, dtype=vals.dtype, device=vals.device)
        dense.scatter_(1, idx, vals)
        return dense.reshape(*shape, self.width)

    def decode(self, acts: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        """Raw-scale output [..., d_out] of dense latent activations ``acts`` [..., width] (``x``: the raw input,
        for the skip term)."""
        shape = acts.shape[:-1]
        out = acts.reshape(-1, self.width).to(self.W_dec.dtype) @ self.W_dec + self.b_dec
        if self.W_skip is not None and x is not None:
            out = out + self.normalise(x) @ self.W_skip
        return (out * self.out_scale).reshape(*shape, self.d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Raw-scale reconstruction [..., d_out] of raw inputs ``x`` [..., d_in]."""
        shape = x.shape[:-1]
        z = self.normalise(x)
        vals, idx = self.sparse(self.pre(z))
        return (self.decode_sparse(vals, idx, z) * self.out_scale).reshape(*shape, self.d_out)

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """Inputs [..., d_in] as the encoder reads them: [n, d_in], divided by ``in_scale``."""
        if x.shape[-1] != self.d_in:
            raise ValueError(f"input has width {x.shape[-1]}; this dictionary reads d_in={self.d_in}")
        return x.reshape(-1, self.d_in).to(self.W_enc.dtype) / self.in_scale

    # ------------------------------------------------------------------------------------------ checks
    def check(self, model) -> "Dictionary":
        """Refuse a model this dictionary was not made for (fingerprint, or d_model / layer when it records no
        fingerprint, e.g. a published dictionary)."""
        fp = self.model.get("model_fingerprint")
        if fp and fp != model.fingerprint:
            raise ValueError(f"this dictionary was trained on model {self.model.get('model')} ({fp}); the model "
                             f"given is {model.source} ({model.fingerprint}): load the dictionaries made for it")
        for width, what in ((self.d_in, "d_in"), (self.d_out, "d_out")):
            if width != model.d_model:
                raise ValueError(f"this dictionary's {what} is {width}; the model's d_model is {model.d_model}")
        if self.site is not None and self.site.layer is not None and self.site.layer >= model.n_layers:
            raise ValueError(f"this dictionary is for layer {self.site.layer}; the model has {model.n_layers}")
        return self

    # ------------------------------------------------------------------------------------------ files
    def config(self) -> dict:
        return {"format": FORMAT, "d_in": self.d_in, "d_out": self.d_out, "width": self.width, "k": self.k,
                "activation": self.activation, "skip": self.skip,
                "site": asdict(self.site) if self.site else None, "model": self.model, "meta": self.meta}

    def state(self) -> dict:
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        return {"tensors": tensors, "meta": self.config()}

    def save(self, path) -> Path:
        """``path`` (safetensors) + ``path.json`` (config and SHA-256), written atomically."""
        from ..accumulate import write_state

        return write_state(_tensor_path(path), self.state())

    @classmethod
    def from_state(cls, state: dict) -> "Dictionary":
        cfg, t = state["meta"], state["tensors"]
        if cfg.get("format") != FORMAT:
            raise ValueError(f"not an interp dictionary (format {cfg.get('format')!r}, expected {FORMAT!r})")
        site = Site(**cfg["site"]) if cfg.get("site") else None
        d = cls(cfg["d_in"], cfg["d_out"], cfg["width"], k=cfg["k"], activation=cfg["activation"],
                skip=cfg["skip"], site=site, model=cfg.get("model"), meta=cfg.get("meta"),
                dtype=t["W_enc"].dtype)
        missing = set(d.state_dict()) - set(t)
        if missing:
            raise ValueError(f"dictionary file lacks tensors {sorted(missing)}")
        d.load_state_dict({k: t[k] for k in d.state_dict()})
        return d

    @classmethod
    def load(cls, path) -> "Dictionary":
        """Read what :meth:`save` wrote (checked against its SHA-256; never unpickled)."""
        from ..accumulate import read_state

        return cls.from_state(read_state(_tensor_path(path)))

    def extra_repr(self) -> str:
        where = f"{self.site.read} -> {self.site.write}, " if self.site else ""
        k = f"k={self.k}, " if self.k else ""
        return f"{where}{self.d_in}->{self.width}->{self.d_out}, {self.activation}, {k}skip={self.skip}"


def _tensor_path(path) -> Path:
    p = Path(path)
    if p.suffix == ".json":
        return p.with_suffix(".safetensors")
    return p if p.suffix == ".safetensors" else p.with_name(p.name + ".safetensors")


@dataclass
class DictionarySet:
    """The dictionaries trained together (one per layer for transcoders), and how they were made."""

    dictionaries: dict = field(default_factory=dict)  # site key (layer int, or hook name) -> Dictionary
    settings: dict = field(default_factory=dict)
    start: "DictionarySet | None" = None  # the same dictionaries as training started (the "at init" baseline)

    def __getitem__(self, key):
        try:
            return self.dictionaries[key]
        except KeyError:
            raise KeyError(f"no dictionary for {key!r}; this set has {sorted(self.dictionaries, key=str)}") from None

    def __iter__(self):
        return iter(self.dictionaries.items())

    def __len__(self) -> int:
        return len(self.dictionaries)

    @property
    def layers(self) -> list:
        return sorted(self.dictionaries, key=lambda k: (not isinstance(k, int), k if isinstance(k, int) else 0, str(k)))

    def check(self, model) -> "DictionarySet":
        for d in self.dictionaries.values():
            d.check(model)
        if self.start is not None:
            self.start.check(model)
        return self

    def save(self, folder) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for key, d in self.dictionaries.items():
            d.save(folder / _file_stem(key))
        if self.start is not None:
            self.start.save(folder / "start")
        (folder / "settings.json").write_text(json.dumps(self.settings, indent=1, sort_keys=True, default=str))
        return folder

    @classmethod
    def load(cls, folder) -> "DictionarySet":
        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"no dictionary folder {folder}")
        out = {}
        for side in sorted(folder.glob("*.json")):
            if side.name == "settings.json" or side.name.startswith("."):
                continue
            d = Dictionary.load(side)
            out[d.site.layer if d.site and d.site.kind == "transcoder" else (d.site.read if d.site else side.stem)] = d
        if not out:
            raise FileNotFoundError(f"no interp dictionaries (*.safetensors + *.json) in {folder}")
        settings = json.loads((folder / "settings.json").read_text()) if (folder / "settings.json").exists() else {}
        start = cls.load(folder / "start") if (folder / "start").is_dir() else None
        return cls(dict(sorted(out.items(), key=lambda kv: str(kv[0]).zfill(4))), settings, start)


def _file_stem(key) -> str:
    return f"layer_{key:02d}" if isinstance(key, int) else str(key).replace("/", "_")
