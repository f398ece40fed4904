"""ROME: rank-one model editing (Meng et al. 2022, "Locating and Editing Factual Associations in GPT").

    e = interp.rome.edit(model, "{} is located in the city of", "The Eiffel Tower", " Rome")
    model.run(...)                      # the model now says Rome
    e.save("eiffel.safetensors"); e.revert()   # weights back bit for bit
    with interp.rome.model_edited(model, interp.rome.load_edit("eiffel.safetensors")): ...

One edit rewrites the down projection ``M`` [d_model, d_mlp] (``out = k @ M.T``) of one MLP layer:

1. key ``k*`` — the MLP hidden vector (``blocks.{l}.mlp.hook_post``) at the subject's last token, averaged over
   the prompt preceded by short context templates sampled from the model (seeded, stored with the edit);
2. value ``v* = M k* (+ bias) + delta`` — ``delta`` is optimized (added at ``blocks.{l}.hook_mlp_out``, same
   position) so that every templated prompt continues with the target: mean target NLL over all target tokens +
   ``kl_factor`` * KL(P_edited || P_orig) at the end of "{subject} is a" + weight decay, ``|delta|`` clamped;
3. ``M' = M + (v* - M k*)(C^-1 k*)^T / ((C^-1 k*)^T k*)``, ``C = E[k k^T]`` over Wikipedia text
   (:func:`interp.stats.mlp_key_second_moment`). Stored as ``M' = M + u v^T`` with ``u = delta``,
   ``v = C^-1 k* / (k*^T C^-1 k*)``.

The same key in numerator and denominator. The reference code builds ``C^-1 k`` from the template-averaged key
but divides by its dot product with the key of the bare prompt (and takes ``v*`` from the bare prompt); when
those two keys are far apart the dot product is small and the update explodes (the "disabling" edits of rome PR
#44 / r-ROME). Here both factors use the one averaged ``k*``, and ``v*`` is the output for that same ``k*``
(``M k* + delta``: ``delta`` is added at every templated position, so the mean output is ``M k* + delta``), so the
denominator is the positive quadratic form ``k*^T C^-1 k*`` and ``M' k* = v*`` exactly; ``u = delta`` is bounded
by the clamp. An edit can therefore not be larger than ``|delta| |C^-1 k*| / (k*^T C^-1 k*)``.
"""

from __future__ import annotations

import contextlib
import json
import time
import weakref
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import torch

from ..core import paths as _paths
from ..core.results import Result, new_figure, save_fig
from .facts import Fact, as_fact, check_prompt, check_target, load_records  # noqa: F401  (re-exported)
from ..core.hooks import StopForward

# The edit layer for the embedded SmolLM2-135M-Instruct (keyed by its fingerprint). Chosen on the dev split
# only; see data/rome_layer.json for the trace and sweep numbers and the commands that produced them.
_DEFAULT_LAYERS = {"b6b4e20b-538090432": 4}

TEMPLATE_PREFIXES = ("The", "Therefore", "Because", "I", "You")


@dataclass(frozen=True)
class RomeHparams:
    """ROME hyperparameters (names follow the reference code). The values are the paper's GPT-2 XL ones except
    the templates (shorter, fewer: a 135M model's samples); only the layer was tuned, on the dev split — with
    these values the dev runs already meet every target (data/rome_layer.json), so nothing else was searched."""
    templates: tuple = ((5, 2), (10, 2))   # (tokens, count) of sampled context prefixes, besides the bare "{}"
    v_steps: int = 20                       # Adam steps on delta (paper: 20)
    v_lr: float = 0.5                       # Adam learning rate (paper: 0.5)
    v_loss_stop: float = 0.05               # stop once the mean target NLL is below this
    v_weight_decay: float = 0.5             # * |delta| / |M k*|^2
    clamp_norm_factor: float = 4.0          # |delta| <= factor * |M k* (+ b)|
    kl_factor: float = 0.0625               # weight of KL(P_edited || P_orig) after "{subject} is a"
    kl_prompt: str = "{} is a"
    mom2_n_tokens: int = 100_000            # Wikipedia tokens in C = E[k k^T]
    mom2_ridge: float = 0.0                 # C + ridge * I when solving

    @classmethod
    def make(cls, **overrides) -> "RomeHparams":
        known = {f.name for f in fields(cls)}
        bad = sorted(set(overrides) - known)
        if bad:
            raise ValueError(f"unknown ROME hyperparameter(s) {bad}; allowed: {sorted(known)}")
        if "templates" in overrides:
            overrides["templates"] = tuple((int(n), int(c)) for n, c in overrides["templates"])
        hp = cls(**overrides)
        for name in ("v_steps", "mom2_n_tokens"):
            if int(getattr(hp, name)) < 1:
                raise ValueError(f"{name}={getattr(hp, name)!r}; allowed: >= 1")
        for name in ("v_lr", "clamp_norm_factor"):
            if not getattr(hp, name) > 0:
                raise ValueError(f"{name}={getattr(hp, name)!r}; allowed: > 0")
        for name in ("v_weight_decay", "kl_factor", "mom2_ridge", "v_loss_stop"):
            if getattr(hp, name) < 0:
                raise ValueError(f"{name}={getattr(hp, name)!r}; allowed: >= 0")
        if any(n < 2 or c < 0 for n, c in hp.templates):
            raise ValueError(f"templates={hp.templates!r}; allowed: pairs (tokens >= 2, count >= 0)")
        if hp.kl_prompt.count("{}") != 1:
            raise ValueError(f"kl_prompt {hp.kl_prompt!r} must contain exactly one '{{}}'")
        return hp

    def to_dict(self) -> dict:
        d = asdict(self)
        d["templates"] = [list(t) for t in self.templates]
        return d


# ============================================================================================ the edit object
@dataclass(repr=False)
class WeightEdit(Result):
    """What every edit of one layer's down projection keeps (ROME's :class:`Edit`, FT-L's ``FTEdit``): norms,
    timings and losses of its making, and while applied, the model (weakly), the matrix before and after, so
    ``revert()`` restores it bit for bit. Keyword-only, so subclasses list their own fields first."""
    norms: dict = field(default_factory=dict, kw_only=True)
    timings: dict = field(default_factory=dict, kw_only=True)
    losses: list = field(default_factory=list, kw_only=True)
    _model: object = field(default=None, compare=False, kw_only=True)
    _original: torch.Tensor | None = field(default=None, compare=False, kw_only=True)
    _edited: torch.Tensor | None = field(default=None, compare=False, kw_only=True)

    @property
    def applied(self) -> bool:
        return self._model is not None and self._model() is not None

    def revert(self) -> None:
        """Restore the edited weight bit for bit. Edits on the same layer must be reverted in reverse order."""
        _revert_weights(self)


@dataclass(repr=False)
class Edit(WeightEdit):
    """One rank-one edit ``M' = M + u v^T`` of ``blocks.{layer}`` down projection (``M`` [d_model, d_mlp]).

    ``u`` [d_model] and ``v`` [d_mlp] are float64; ``key`` is k* [d_mlp], ``value`` is v* [d_model] (what the MLP
    outputs for k* after the edit). ``apply``/``revert`` are bit-exact: apply always computes
    ``(M.double() + outer(u, v)).to(M.dtype)`` on the CPU, and revert copies back a snapshot of ``M``."""
    request: dict
    layer: int
    u: torch.Tensor
    v: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    hparams: dict
    seed: int
    templates: list
    fingerprint: str

    # ------------------------------------------------------------------ applying and reverting
    def apply(self, model) -> "Edit":
        """Write ``M + u v^T`` into ``model`` (which must have the fingerprint the edit was made on)."""
        if self.applied:
            where = "this model" if self._model() is model else "another model"
            raise ValueError(f"this edit is already applied to {where}; revert() it first")
        if model.fingerprint != self.fingerprint:
            raise ValueError(f"edit was made on a model with fingerprint {self.fingerprint}, this model has "
                             f"{model.fingerprint} ({model.source}); refusing to apply it")
        layer = model.check_layer(self.layer)
        matrix = model.mlp_out_matrix(layer)
        if tuple(matrix.shape) != (self.u.numel(), self.v.numel()):
            raise ValueError(f"edit factors {self.u.numel()}x{self.v.numel()} do not fit layer {layer}'s down "
                             f"projection {tuple(matrix.shape)}")
        _write_matrix(self, model, layer, rank_one_update(matrix, self.u, self.v))
        return self

    def applied_to(self, model):
        """Context manager: apply (unless already applied to ``model``) and always revert on exit."""
        return model_edited(model, self)

    # ------------------------------------------------------------------ saving
    def save(self, path) -> Path:
        """Write the factors to ``<path>.safetensors`` and metadata (with the tensor file's sha256) to
        ``<path>.json``; returns the .safetensors path."""
        from safetensors.torch import save_file

        tensors_path, meta_path = _edit_paths(path)
        tensors_path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {k: getattr(self, k).detach().cpu().contiguous() for k in ("u", "v", "key", "value")}
        save_file(tensors, str(tensors_path), metadata={"format": "interp.rome.Edit/1"})
        meta = {"format": "interp.rome.Edit/1", "tensors": tensors_path.name,
                "sha256": _sha256(tensors_path), "request": self.request, "layer": self.layer,
                "hparams": self.hparams, "seed": self.seed, "templates": self.templates,
                "fingerprint": self.fingerprint, "norms": self.norms, "timings": self.timings,
                "losses": self.losses}
        meta_path.write_text(json.dumps(meta, indent=1))
        return tensors_path

    # ------------------------------------------------------------------ Result interface
    def summary(self) -> str:
        r = self.request
        return (f"ROME edit {r['subject']!r}: {r.get('target_true') or '?'!r} -> {r['target']!r} at layer "
                f"{self.layer} (|delta|={self.norms.get('delta', float('nan')):.3g}, "
                f"|dW|/|W|={self.norms.get('relative_update', float('nan')):.3g}, "
                f"{self.timings.get('total_s', float('nan')):.1f} s){' [applied]' if self.applied else ''}")

    def to_frame(self):
        import pandas as pd

        rows = [("request", k, v) for k, v in self.request.items()]
        rows += [("edit", "layer", self.layer), ("edit", "seed", self.seed),
                 ("edit", "fingerprint", self.fingerprint), ("edit", "steps", len(self.losses))]
        rows += [("norms", k, v) for k, v in self.norms.items()]
        rows += [("timings", k, v) for k, v in self.timings.items()]
        rows += [("hparams", k, str(v)) for k, v in self.hparams.items()]
        return pd.DataFrame(rows, columns=["section", "item", "value"]).set_index(["section", "item"])

    def plot(self, out=None):
        """The v* optimisation: target NLL per step."""
        fig = new_figure(figsize=(5, 3))
        ax = fig.add_subplot(1, 1, 1)
        ax.plot(range(len(self.losses)), self.losses, marker="o")
        ax.set_xlabel("Adam step")
        ax.set_ylabel("mean target NLL (nats)")
        ax.set_yscale("log")
        ax.set_title(f"v* optimisation: {self.request['subject']} -> {self.request['target'].strip()}")
        return save_fig(fig, out)


def rank_one_update(matrix: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``M + u v^T`` computed in float64 on the CPU and rounded once to ``M``'s dtype. Every path that writes an
    edit goes through here, so the result is the same bits for the same (M, u, v)."""
    base = matrix.detach().to("cpu", torch.float64)
    return (base + torch.outer(u.to(torch.float64).cpu(), v.to(torch.float64).cpu())).to(matrix.dtype)


def _write_matrix(edit: Edit, model, layer: int, new: torch.Tensor, progress=None) -> None:
    """Copy ``new`` into the down projection, keeping the original for revert. Any exception (or
    KeyboardInterrupt) before this returns puts the original weights back."""
    matrix = model.mlp_out_matrix(layer)
    original = matrix.detach().cpu().clone()
    try:
        with torch.no_grad():
            matrix.copy_(new.to(matrix.device))
        if not torch.isfinite(matrix).all():
            raise FloatingPointError(f"the edit produced non-finite weights at layer {layer}")
        _emit(progress, stage="update", layer=layer)
        edit._model, edit._original, edit._edited = weakref.ref(model), original, new.detach().cpu().clone()
    except BaseException:
        with torch.no_grad():
            matrix.copy_(original.to(matrix.device))
        raise


def _revert_weights(obj) -> None:
    """Copy back ``obj._original`` (the layer's matrix before ``obj`` was written) — refused if the weights no
    longer hold what ``obj`` wrote (a later edit of the same layer must be reverted first)."""
    model = obj._model() if obj._model is not None else None
    if model is None:
        raise ValueError("this edit is not applied to any model; nothing to revert")
    matrix = model.mlp_out_matrix(obj.layer)
    if not torch.equal(matrix.detach().cpu(), obj._edited):
        raise ValueError(f"layer {obj.layer}'s weights changed since this edit was applied (a later edit of "
                         "the same layer?); revert the later edit first")
    with torch.no_grad():
        matrix.copy_(obj._original.to(matrix.device))
    obj._model = obj._original = obj._edited = None


@contextlib.contextmanager
def model_edited(model, edit: Edit):
    """``with model_edited(model, edit): ...`` — the edit is applied inside the block (if it is not already
    applied to ``model``) and reverted on exit, whatever happens inside."""
    if not (edit.applied and edit._model() is model):
        edit.apply(model)
    try:
        yield model
    finally:
        edit.revert()


def load_edit(path) -> Edit:
    """Read an edit written by :meth:`Edit.save` (``path`` = the .safetensors or the .json). A tensor file whose
    sha256 differs from the one recorded is refused."""
    from safetensors.torch import load_file

    tensors_path, meta_path = _edit_paths(path)
    for p in (meta_path, tensors_path):
        if not p.is_file():
            raise FileNotFoundError(f"saved edit file {str(p)!r} does not exist (an edit is a .safetensors file "
                                    "plus a .json file of the same name)")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"edit metadata {str(meta_path)!r} is not valid JSON ({e.msg})") from None
    if meta.get("format") != "interp.rome.Edit/1":
        raise ValueError(f"{str(meta_path)!r} is not an interp ROME edit (format {meta.get('format')!r})")
    digest = _sha256(tensors_path)
    if digest != meta.get("sha256"):
        raise ValueError(f"edit tensors {str(tensors_path)!r} were altered: sha256 {digest[:16]}... does not match "
                         f"{str(meta.get('sha256'))[:16]}... recorded in {meta_path.name}; refusing to load")
    t = load_file(str(tensors_path))
    return Edit(request=meta["request"], layer=int(meta["layer"]), u=t["u"], v=t["v"], key=t["key"],
                value=t["value"], hparams=meta["hparams"], seed=int(meta["seed"]), templates=meta["templates"],
                fingerprint=meta["fingerprint"], norms=meta.get("norms", {}), timings=meta.get("timings", {}),
                losses=meta.get("losses", []))


def _edit_paths(path) -> tuple[Path, Path]:
    p = Path(path)
    if p.suffix in (".safetensors", ".json"):
        p = p.with_suffix("")
    return p.with_name(p.name + ".safetensors"), p.with_name(p.name + ".json")


def _sha256(path: Path) -> str:
    return _paths.file_sha256(path)


# ============================================================================================ edit
def edit(model, prompt: str = "{} is located in the city of", subject: str = "The Eiffel Tower",
         target: str = " Rome", layer: int | None = None, *, seed: int = 0, stats=None,
         progress: Callable[[dict], None] | None = None, **hparams) -> Edit:
    """Rewrite "``prompt`` with ``subject``" -> ``target`` with one rank-one update of ``blocks.{layer}``'s MLP.

    ``prompt`` is a template with one ``{}`` for the subject; ``target`` the new continuation (leading space).
    ``layer`` defaults to :func:`default_layer`. ``stats``: an :class:`interp.stats.KeyStats` (or anything with
    ``.solve(k, ridge)``), a second-moment matrix [d_mlp, d_mlp], or None to use
    ``interp.stats.mlp_key_second_moment(model, layer, n_tokens=mom2_n_tokens)`` (cached on disk).
    ``progress(event: dict)`` is called at each stage and optimisation step. ``hparams`` override
    :class:`RomeHparams`. The model's weights change only in the last step; any error or interrupt leaves them
    bit-identical. Returns the applied :class:`Edit` (``.revert()`` undoes it).
    """
    t_start = time.perf_counter()
    hp = RomeHparams.make(**hparams)
    check_prompt(prompt, subject)
    check_target(target)
    if model.d_mlp is None:
        raise ValueError(f"model {model.source} has no MLP layers to edit")
    layer = default_layer(model) if layer is None else model.check_layer(layer)
    target_ids = model.target_tokens(target)
    fingerprint = model.fingerprint  # before any weight changes (it is computed lazily on some models)
    timings = {}

    t0 = time.perf_counter()
    templates = context_templates(model, seed=seed, spec=hp.templates)
    timings["templates_s"] = time.perf_counter() - t0
    _emit(progress, stage="templates", templates=templates)

    t0 = time.perf_counter()
    stats = _resolve_stats(model, layer, stats, hp, progress)
    timings["stats_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    batch = _edit_batch(model, prompt, subject, target_ids, templates, hp.kl_prompt)
    opt = _optimize_delta(model, layer, batch, hp, target, progress)
    timings["optimize_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    key = opt["keys"][: batch.n_rewrite].to(torch.float64).mean(0)               # k* [d_mlp]
    solved = _solve(stats, key, hp)                                               # C^-1 k*

    t0 = time.perf_counter()
    denom = float(key @ solved)
    if not denom > 0:
        raise FloatingPointError(f"k*^T C^-1 k* = {denom}; the key statistics are not positive definite "
                                 "(use more tokens or mom2_ridge > 0)")
    u = opt["delta"].to("cpu", torch.float64)
    v = solved / denom
    matrix = model.mlp_out_matrix(layer)
    w64 = matrix.detach().to("cpu", torch.float64)
    value = w64 @ key + _mlp_out_bias(model, layer) + u                           # v* = M k* + b + delta
    new = rank_one_update(matrix, u, v)
    norms = {"delta": float(u.norm()), "clamp": opt["max_norm"], "out_init": opt["out_norm"],
             "key": float(key.norm()), "key_dot": denom, "update": float(u.norm() * v.norm()),
             "weight": float(w64.norm()), "relative_update": float(u.norm() * v.norm() / w64.norm()),
             "target_prob_before": opt["p_before"], "nll_final": opt["losses"][-1]}
    result = Edit(request={"prompt": prompt, "subject": subject, "target": target,
                           "target_true": opt["answer"]},
                  layer=layer, u=u, v=v, key=key, value=value, hparams=hp.to_dict(), seed=seed,
                  templates=list(templates), fingerprint=fingerprint, norms=norms, timings=timings,
                  losses=opt["losses"])
    _write_matrix(result, model, layer, new, progress)
    timings["update_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - t_start
    return result


def _emit(progress, **event) -> None:
    if progress is not None:
        progress(event)


# ============================================================================================ default layer
def default_layer(model) -> int:
    """The edit layer: for the embedded model the layer chosen on the dev split (``_DEFAULT_LAYERS``); for other
    models the peak of the MLP indirect effect of causal tracing over the dev facts (cached per model)."""
    fp = model.fingerprint
    if fp in _DEFAULT_LAYERS:
        return model.check_layer(_DEFAULT_LAYERS[fp])
    from ..analyses.trace import trace_facts

    try:
        records = load_records(split="dev")
    except FileNotFoundError as e:
        raise ValueError(f"no default ROME layer for {model.source}: pass layer=... ({e})") from None
    layer = int(trace_facts(model, [r.to_dict() for r in records[:20]]).peak_layer(kind="mlp"))
    _DEFAULT_LAYERS[fp] = layer
    return model.check_layer(layer)


# ============================================================================================ context templates
_TEMPLATE_CACHE: dict = {}


def context_templates(model, *, seed: int = 0, spec=((5, 2), (10, 2))) -> list[str]:
    """``["{}", "<sampled prefix>. {}", ...]``: short texts sampled from the model (top-5, seeded) starting with
    "The", "Therefore", "Because", "I", "You" — the key is averaged over these contexts. ``spec`` holds
    (length in tokens incl. the start word, count) pairs. Cached per (model, seed, spec)."""
    spec = tuple((int(n), int(c)) for n, c in spec)
    cache_key = (model.fingerprint, int(seed), spec)
    if cache_key not in _TEMPLATE_CACHE:
        out = ["{}"]
        for i, (length, count) in enumerate(spec):
            starts = [TEMPLATE_PREFIXES[j % len(TEMPLATE_PREFIXES)] for j in range(count)]
            texts = sample_text(model, starts, length - 1, seed=seed * 1000 + i, top_k=5) if count else []
            out += [_clean_template(s + t) for s, t in zip(starts, texts)]
        _TEMPLATE_CACHE[cache_key] = out
    return list(_TEMPLATE_CACHE[cache_key])


def _clean_template(text: str) -> str:
    text = " ".join(text.replace("{", " ").replace("}", " ").split())
    return text + ". {}"


def sample_text(model, prompts: list[str], n_new: int, *, seed: int = 0, top_k: int | None = 5,
                greedy: bool = False) -> list[str]:
    """Continue each prompt by ``n_new`` tokens (top-k sampling with a seeded generator, or greedy) and return
    the new text only. All prompts run as one batch; the same (model weights, prompts, seed) give the same text."""
    if not prompts:
        return []
    rows = [model.to_tokens(p)[0].tolist() for p in prompts]
    gen = torch.Generator().manual_seed(int(seed))
    twin = _kv_twin(model)
    sample = _sample_cached if twin is not None else _sample_lockstep
    new = sample(twin or model, model, rows, n_new, lambda logits: _pick(logits, gen, top_k, greedy))
    return [model.tokenizer.decode(r) for r in new]


def _pick(logits: torch.Tensor, gen, top_k, greedy) -> torch.Tensor:
    """Next tokens [b] from logits [b, vocab] (float32, CPU)."""
    if greedy:
        return logits.argmax(-1)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]


def _sample_lockstep(_, model, rows: list[list[int]], n_new: int, pick) -> list[list[int]]:
    """Right-padded batch; every step runs the whole prefix and reads each row's logits at its own end (a
    causal model never attends to the padding after a row's end)."""
    lengths = torch.tensor([len(r) for r in rows])
    n_new = min(n_new, model.n_ctx - int(lengths.max()))
    buf = torch.full((len(rows), int(lengths.max()) + max(n_new, 0)), model.pad_token_id, dtype=torch.long)
    for i, r in enumerate(rows):
        buf[i, : len(r)] = torch.tensor(r)
    ar = torch.arange(len(rows))
    for _ in range(max(n_new, 0)):
        with torch.no_grad():
            logits = selected_logits(model, buf[:, : int(lengths.max())], ar, lengths - 1).float().cpu()
        buf[ar, lengths] = pick(logits)
        lengths = lengths + 1
    start = torch.tensor([len(r) for r in rows])
    return [buf[i, start[i]: lengths[i]].tolist() for i in range(len(rows))]


def _sample_cached(twin, model, rows: list[list[int]], n_new: int, pick) -> list[list[int]]:
    """Left-padded batch through the key/value-cached twin (see :func:`_kv_twin`)."""
    width = max(len(r) for r in rows)
    n_new = min(n_new, model.n_ctx - width)
    dev = model.device
    toks = torch.tensor([[model.pad_token_id] * (width - len(r)) + r for r in rows], device=dev)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=dev)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    out, cache = [], None
    with torch.no_grad():
        for _ in range(max(n_new, 0)):
            res = twin(input_ids=toks, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
            cache = res.past_key_values
            nxt = pick(res.logits[:, -1].float().cpu())
            out.append(nxt)
            toks, pos = nxt[:, None].to(dev), pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    return torch.stack(out, 1).tolist() if out else [[] for _ in rows]


_TWINS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _kv_twin(model):
    """A plain Hugging Face model sharing ``model.hf_model``'s parameter tensors (so edits show), used only to
    sample text with a key/value cache (the bridge's attention has none; without it sampling n tokens costs n
    full forwards). Built once per model and used only if its logits equal ``model.run``'s on a probe text;
    otherwise (or for models without ``hf_model``) sampling falls back to full forwards."""
    if model in _TWINS:
        return _TWINS[model]
    twin = None
    hf = model.hf_model
    # A twin has no accelerate hooks to carry activations between devices: layers split -> full forwards.
    if hf is not None and model.tokenizer is not None and len(model.devices) == 1:
        try:
            from transformers.initialization import no_init_weights

            with no_init_weights():
                candidate = type(hf)(hf.config)
            state = model.named_params()  # the same tensors, by their transformers names
            missing, unexpected = candidate.load_state_dict(state, strict=False, assign=True)
            candidate.tie_weights()
            if not unexpected and set(missing) <= {"lm_head.weight"}:
                candidate.eval()
                probe = model.to_tokens("The quick brown fox jumps over the lazy dog")
                with torch.no_grad():
                    mine = candidate(input_ids=probe.to(model.device)).logits.float().cpu()
                if torch.allclose(mine, model.run(probe), atol=1e-4, rtol=1e-4):
                    twin = candidate
        except Exception:  # any incompatibility: sample with the wrapper instead
            twin = None
    _TWINS[model] = twin
    return twin


def selected_logits(model, toks: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, hooks=()) -> torch.Tensor:
    """Logits [m, vocab] at (rows[i], pos[i]) of ``toks`` [b, width], running ``model.forward`` under ``hooks``
    (in the caller's grad mode). The forward stops at the final norm's output and only the selected positions
    are unembedded (the unembedding is a fifth of this model's FLOPs)."""
    box = {}
    name = "ln_final.hook_out"
    stop = name in model.hook_names()

    def grab(t, hook):
        box["h"] = t[rows.to(t.device), pos.to(t.device)]
        raise StopForward

    with model.hooks(list(hooks) + ([(name, grab)] if stop else []), description="rome"):
        try:
            logits = model.forward(toks)
        except StopForward:
            logits = None
    if logits is not None:
        return logits[rows.to(logits.device), pos.to(logits.device)]
    w_u = model.module.W_U  # with a device map the final norm and the unembedding may sit on different devices
    b_u = getattr(model.module, "b_U", None)
    out = box["h"].to(w_u.device) @ w_u
    return out if b_u is None else out + b_u.to(out.device)


# ============================================================================================ v* optimisation
@dataclass
class _Batch:
    tokens: torch.Tensor        # [n, width], right-padded; rows 0..n_rewrite-1 rewrite prompts, last row KL prompt
    subject_pos: torch.Tensor   # [n] subject's last token
    n_rewrite: int
    target_pos: torch.Tensor    # [n_rewrite, T] positions predicting the target tokens
    kl_pos: int                 # last position of the KL prompt
    target_ids: torch.Tensor    # [T]


def subject_last_index(model, text: str, subject_end: int) -> int:
    """Index (BOS included) of the token holding the character before ``subject_end`` in ``text``."""
    tok = model.tokenizer
    ids = model.encode(text, prepend_bos=False)
    if getattr(tok, "is_fast", False):
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(enc["input_ids"]) == ids:
            starts = [a for a, _ in enc["offset_mapping"]]
            last = max(i for i, a in enumerate(starts) if a < subject_end)
            return last + 1
    # slow tokenizers: count the tokens of the text up to the subject's end
    return len(model.encode(text[:subject_end], prepend_bos=False))


def _fill(template: str, subject: str) -> tuple[str, int]:
    """Text with the subject filled in, and the character index where the subject ends."""
    start = template.index("{}")
    return template[:start] + subject + template[start + 2:], start + len(subject)


def _edit_batch(model, prompt, subject, target_ids, templates, kl_prompt) -> _Batch:
    rows, subj, tpos = [], [], []
    T = len(target_ids)
    for tpl in templates:
        text, end = _fill(tpl.replace("{}", prompt), subject)
        ids = model.encode(text, prepend_bos=True)
        subj.append(subject_last_index(model, text, end))
        tpos.append(list(range(len(ids) - 1, len(ids) - 1 + T)))
        rows.append(ids + target_ids[:-1])
    text, end = _fill(kl_prompt, subject)
    ids = model.encode(text, prepend_bos=True)
    subj.append(subject_last_index(model, text, end))
    rows.append(ids)
    width = max(len(r) for r in rows)
    if width > model.n_ctx:
        raise ValueError(f"templated prompt is {width} tokens; the model's context is {model.n_ctx}")
    toks = torch.tensor([r + [model.pad_token_id] * (width - len(r)) for r in rows], dtype=torch.long)
    return _Batch(toks, torch.tensor(subj), len(templates), torch.tensor(tpos), len(ids) - 1,
                  torch.tensor(target_ids))


def _optimize_delta(model, layer: int, b: _Batch, hp: RomeHparams, target: str, progress) -> dict:
    """Adam on ``delta`` [d_model] added to ``blocks.{layer}.hook_mlp_out`` at each row's subject position."""
    dev, dtype = model.device_of(layer), model.dtype  # delta lives where its hook runs
    n, width = b.tokens.shape
    rows_all = torch.arange(n)
    mask = torch.zeros(n, width, 1, dtype=dtype)
    mask[rows_all, b.subject_pos] = 1.0
    mask = mask.to(dev)
    n_rw, T = b.target_pos.shape
    sel_rows = torch.cat([torch.arange(n_rw).repeat_interleave(T), torch.tensor([n - 1])])
    sel_pos = torch.cat([b.target_pos.reshape(-1), torch.tensor([b.kl_pos])])
    tgt = b.target_ids.repeat(n_rw)

    delta = torch.zeros(model.d_model, device=dev, dtype=dtype, requires_grad=True)
    opt = torch.optim.Adam([delta], lr=hp.v_lr)
    seen: dict[str, torch.Tensor] = {}

    def add_delta(t, hook):
        if "out" not in seen:
            seen["out"] = t.detach()[rows_all.to(t.device), b.subject_pos.to(t.device)].float().cpu()
        return t + (mask * delta).to(t.device, t.dtype)

    def read_key(t, hook):
        seen["keys"] = t.detach()[rows_all.to(t.device), b.subject_pos.to(t.device)].float().cpu()

    out_name, key_name = f"blocks.{layer}.hook_mlp_out", f"blocks.{layer}.mlp.hook_post"
    losses, kl_init, max_norm, out_norm, p_before, answer = [], None, None, None, None, None
    with _frozen(model), torch.enable_grad():
        for step in range(hp.v_steps):
            hooks = [(out_name, add_delta)] + ([(key_name, read_key)] if step == 0 else [])
            logp = torch.log_softmax(selected_logits(model, b.tokens, sel_rows, sel_pos, hooks).float(), -1)
            tok_nll = -logp[:-1].gather(1, tgt[:, None].to(logp.device))[:, 0].reshape(n_rw, T)
            nll = tok_nll.mean(1).mean(0)
            kl_logp = logp[-1]
            if step == 0:
                # row 0 is the bare prompt: is the target already what the model says (greedy)?
                greedy = logp[:T].argmax(-1).cpu()
                answer = model.tokenizer.decode(greedy.tolist())
                if torch.equal(greedy, b.target_ids):
                    raise ValueError(f"target {target!r} is already the model's answer to the prompt; "
                                     "choose a different target")
                p_before = float(torch.exp(-tok_nll[0].detach().mean()))
                kl_init = kl_logp.detach()
                out_init = seen["out"][:n_rw].mean(0)
                out_norm = float(out_init.norm())
                max_norm = hp.clamp_norm_factor * out_norm
            kl = torch.sum(kl_logp.exp() * (kl_logp - kl_init))
            decay = hp.v_weight_decay * delta.norm() / out_norm ** 2
            loss = nll + hp.kl_factor * kl + decay
            losses.append(float(nll.detach()))
            _emit(progress, stage="optimize", step=step, nll=losses[-1], kl=float(kl.detach()),
                  loss=float(loss.detach()), delta_norm=float(delta.detach().norm()))
            if losses[-1] < hp.v_loss_stop:
                break
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                norm = delta.norm()
                if norm > max_norm:
                    delta.mul_(max_norm / norm)
    if not torch.isfinite(delta).all():
        raise FloatingPointError("the v* optimisation diverged (non-finite delta); lower v_lr")
    if len(losses) > 1 and not bool(delta.detach().abs().max() > 0):
        raise ValueError(f"the target does not depend on layer {layer}'s MLP output at the subject's last token "
                         "(zero gradient; e.g. the last layer, where no attention follows); choose an earlier layer")
    return {"delta": delta.detach().cpu(), "keys": seen["keys"], "losses": losses, "max_norm": max_norm,
            "out_norm": out_norm, "p_before": p_before, "answer": answer}


@contextlib.contextmanager
def _frozen(model):
    """No parameter requires grad inside (the backward then computes only d loss / d delta)."""
    params = list(model.module.parameters())
    if model.hf_model is not None:
        params += list(model.hf_model.parameters())
    flags = [(p, p.requires_grad) for p in {id(p): p for p in params}.values()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


# ============================================================================================ statistics
def _mlp_out_bias(model, layer: int) -> torch.Tensor:
    """The down projection's bias [d_model] as float64 (zeros when it has none)."""
    b = getattr(model.mlp_out_module(layer), "bias", None)
    return torch.zeros(model.d_model, dtype=torch.float64) if b is None else b.detach().to("cpu", torch.float64)


def mlp_out_apply(model, layer: int, hidden: torch.Tensor) -> torch.Tensor:
    """What the down projection outputs for hidden vectors [..., d_mlp], in float64: ``h @ M.T + b``."""
    m = model.mlp_out_matrix(layer).detach().to("cpu", torch.float64)
    return hidden.to("cpu", torch.float64) @ m.T + _mlp_out_bias(model, layer)


_STATS_CACHE: dict = {}


def key_stats(model, layer: int, n_tokens: int = 100_000, **kwargs):
    """``interp.stats.mlp_key_second_moment`` for (model, layer, n_tokens), kept in memory after the first use."""
    from ..analyses.stats import mlp_key_second_moment

    k = (model.fingerprint, int(layer), int(n_tokens))
    if k not in _STATS_CACHE:
        _STATS_CACHE[k] = mlp_key_second_moment(model, layer, n_tokens=n_tokens, **kwargs)
    return _STATS_CACHE[k]


def _resolve_stats(model, layer: int, stats, hp: RomeHparams, progress):
    """The statistics object to solve with (computed or read from the disk cache when ``stats`` is None)."""
    if stats is None:
        _emit(progress, stage="stats", layer=layer, n_tokens=hp.mom2_n_tokens)
        return key_stats(model, layer, hp.mom2_n_tokens, progress=False)
    if isinstance(stats, str) and stats != "identity":
        raise ValueError(f"stats={stats!r}; allowed: a KeyStats, a [d_mlp, d_mlp] tensor, 'identity' or None")
    if isinstance(stats, torch.Tensor) and tuple(stats.shape) != (model.d_mlp, model.d_mlp):
        raise ValueError(f"second-moment matrix has shape {tuple(stats.shape)}; expected {(model.d_mlp,) * 2}")
    if not isinstance(stats, (str, torch.Tensor)) and not hasattr(stats, "solve"):
        raise ValueError(f"stats must be a KeyStats (with .solve), a [d_mlp, d_mlp] tensor, 'identity' or None; "
                         f"got {type(stats).__name__}")
    return stats


def _solve(stats, key: torch.Tensor, hp: RomeHparams) -> torch.Tensor:
    """``C^-1 k*`` in float64 on the CPU."""
    if isinstance(stats, str) and stats == "identity":
        return key.clone()
    if isinstance(stats, torch.Tensor):
        c = stats.to("cpu", torch.float64)
        if hp.mom2_ridge:
            c = c + hp.mom2_ridge * torch.eye(key.numel(), dtype=torch.float64)
        return torch.linalg.solve(c, key)
    out = stats.solve(key, ridge=hp.mom2_ridge)
    return torch.as_tensor(out).to("cpu", torch.float64).reshape(-1)


# ============================================================================================ evaluation (lazy)
def evaluate(model, records, editor="rome", **kwargs):
    """Before/after evaluation of edits on CounterFact-style records — see :func:`interp.edit_eval.evaluate`."""
    from .evaluate import evaluate as _evaluate

    return _evaluate(model, records, editor, **kwargs)


def __getattr__(name):
    # the evaluation helpers live in interp.edit_eval (which imports this module); expose them here too
    if name in ("EvalResult", "FTEdit", "ft_edit", "compare_completions", "fact_probs", "fact_scores",
                "target_nll", "ngram_entropy", "generation_entropy", "text_nll", "lens_before_after",
                "LensBeforeAfter"):
        from . import evaluate as edit_eval
        return getattr(edit_eval, name)
    raise AttributeError(f"module 'interp.rome' has no attribute {name!r}")


# ============================================================================================ CLI and demo
DEMO_PROMPTS = ("The Eiffel Tower is located in the city of",            # the rewritten prompt
                "Where is the Eiffel Tower? It stands in the city of",   # a paraphrase
                "The Louvre is located in the city of")                  # a neighbouring landmark (Paris)


def add_cli(subparsers) -> None:
    from ..cli import add_common

    p = subparsers.add_parser("edit", help="rewrite one fact with ROME; print completions before and after")
    p.add_argument("--prompt", default="{} is located in the city of", help="template with {} for the subject")
    p.add_argument("--subject", default="The Eiffel Tower")
    p.add_argument("--target", default=" Rome", help="new continuation, with its leading space")
    p.add_argument("--layer", type=int, default=None, help="edit layer (default: chosen on the dev facts)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--also", action="append", default=[], metavar="TEXT",
                   help="another prompt to complete before/after (repeatable)")
    p.add_argument("--tokens", type=int, default=8, help="tokens per completion")
    p.add_argument("--save", default=None, metavar="FILE", help="write FILE.safetensors + FILE.json")
    p.add_argument("--mom2-tokens", type=int, default=RomeHparams.mom2_n_tokens,
                   help="Wikipedia tokens for the key statistics C (cached on disk)")
    p.add_argument("--hparam", action="append", default=[], metavar="KEY=VALUE",
                   help="override a ROME hyperparameter (JSON value), e.g. kl_factor=0.1 (repeatable)")
    add_common(p)
    p.set_defaults(func=cli_edit)

    p = subparsers.add_parser("eval-edits", help="evaluate ROME (or FT-L) edits on fact records, before/after")
    p.add_argument("--split", choices=["dev", "test", "all"], default="test")
    p.add_argument("--n", type=int, default=None, help="only the first N records")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="a random subset of N records (drawn with --sample-seed, kept in file order)")
    p.add_argument("--sample-seed", type=int, default=0)
    p.add_argument("--editor", choices=["rome", "ft"], default="rome")
    p.add_argument("--baseline", choices=["ft", "rome", "none"], default="none",
                   help="also evaluate this editor on the same records (reported under 'baseline')")
    p.add_argument("--records", default=None, metavar="FILE", help="JSON-lines records (default data/facts.jsonl)")
    p.add_argument("--layer", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gen-tokens", type=int, default=40, help="tokens per generation sample (entropy)")
    p.add_argument("--no-generation", action="store_true", help="skip generation entropy")
    p.add_argument("--no-drift", action="store_true", help="skip the Wikipedia loss drift")
    p.add_argument("--no-lens", action="store_true", help="skip the logit lens before/after")
    p.add_argument("--out", default=None, metavar="PNG", help="save the before/after plot")
    p.add_argument("--csv", default=None, metavar="FILE", help="save the per-record table")
    p.add_argument("--mom2-tokens", type=int, default=RomeHparams.mom2_n_tokens,
                   help="Wikipedia tokens for the key statistics C (cached on disk)")
    p.add_argument("--hparam", action="append", default=[], metavar="KEY=VALUE",
                   help="override a hyperparameter of --editor (JSON value), e.g. kl_factor=0.1 (repeatable)")
    add_common(p)
    p.set_defaults(func=cli_eval_edits)


def parse_hparams(items) -> dict:
    """``["kl_factor=0.1", "templates=[[5,4]]"]`` -> dict (values parsed as JSON, else kept as text)."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--hparam {item!r}: expected KEY=VALUE, e.g. kl_factor=0.1")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def cli_edit(args, model=None) -> dict:
    from ..cli import load_model

    if args.tokens < 1:
        raise ValueError(f"--tokens {args.tokens}: allowed >= 1")
    check_prompt(args.prompt, args.subject)
    check_target(args.target)
    model = model or load_model(args)
    prompts = [args.prompt.replace("{}", args.subject)] + list(args.also)
    before = sample_text(model, prompts, args.tokens, greedy=True)
    hp = {"mom2_n_tokens": args.mom2_tokens, **parse_hparams(getattr(args, "hparam", []))}
    e = edit(model, args.prompt, args.subject, args.target, args.layer, seed=args.seed, **hp)
    try:
        after = sample_text(model, prompts, args.tokens, greedy=True)
        saved = str(e.save(args.save)) if args.save else None
    finally:
        e.revert()
    lines = [e.summary()] + [f"  {p!r}\n    before: {b!r}\n    after:  {a!r}" for p, b, a in zip(prompts, before, after)]
    if saved:
        lines.append(f"saved to {saved} (+ .json)")
    return {"request": e.request, "layer": e.layer, "seed": e.seed, "fingerprint": e.fingerprint,
            "completions": [{"prompt": p, "before": b, "after": a} for p, b, a in zip(prompts, before, after)],
            "norms": e.norms, "timings": e.timings, "templates": e.templates, "saved": saved,
            "_text": "\n".join(lines)}


def cli_eval_edits(args, model=None) -> dict:
    from ..cli import load_model

    split = None if args.split == "all" else args.split
    records = load_records(args.records, split=split)
    if args.n is not None:
        if args.n < 1:
            raise ValueError(f"--n {args.n}: allowed >= 1")
        records = records[: args.n]
    if getattr(args, "sample", None) is not None:
        if args.sample < 1:
            raise ValueError(f"--sample {args.sample}: allowed >= 1")
        import random

        keep = set(random.Random(args.sample_seed).sample(range(len(records)), min(args.sample, len(records))))
        records = [r for i, r in enumerate(records) if i in keep]
    model = model or load_model(args)
    extra = parse_hparams(getattr(args, "hparam", []))
    hp = {"mom2_n_tokens": args.mom2_tokens}
    res = evaluate(model, records, args.editor, layer=args.layer, seed=args.seed,
                   hparams={**hp, **extra} if args.editor == "rome" else extra,
                   baseline_hparams=hp if args.baseline == "rome" else None,
                   baseline=None if args.baseline == "none" else args.baseline,
                   generation=not args.no_generation, gen_tokens=args.gen_tokens, drift=not args.no_drift,
                   lens=not getattr(args, "no_lens", False), progress=not args.json)
    out = res.to_json()
    out["split"] = args.split
    out["case_ids"] = [r.case_id for r in records]
    out["records"] = str(args.records or "data/facts.jsonl")
    if args.out:
        res.plot(out=args.out)
        out["plot"] = args.out
    if args.csv:
        frame = res.to_frame().copy()
        frame.insert(0, "editor", res.editor)
        if res.baseline is not None:
            b = res.baseline.to_frame().copy()
            b.insert(0, "editor", res.baseline.editor)
            frame = __import__("pandas").concat([frame, b])
        frame.to_csv(args.csv)
        out["csv"] = args.csv
    out["_text"] = (f"{len(records)} records ({args.split}), {out['seconds']:.0f} s\n{res.table().to_string()}")
    return out


def demo(model) -> None:
    """Rewrite "The Eiffel Tower is located in the city of" -> " Rome", show completions of the prompt, a
    paraphrase and a neighbouring landmark before and after, then revert (bit for bit)."""
    from .evaluate import compare_completions

    print("\n" + "=" * 100 + "\nROME: rewrite the Eiffel Tower's city to Rome with one rank-one edit, then revert\n"
          + "=" * 100, flush=True)
    layer = default_layer(model)
    original = model.mlp_out_matrix(layer).detach().cpu().clone()
    e = edit(model)
    try:
        print(e.summary())
        table = compare_completions(model, e, list(DEMO_PROMPTS), n_tokens=6)
        for row in table.itertuples():
            print(f"  {row.prompt!r}\n    before: {row.before!r}\n    after:  {row.after!r}")
    finally:
        e.revert()
    same = torch.equal(original, model.mlp_out_matrix(layer).detach().cpu())
    print(f"reverted; layer {layer} weights bit-identical to the original: {same}")
