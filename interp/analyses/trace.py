"""Causal tracing (Meng et al. 2022, "Locating and Editing Factual Associations in GPT", section 2).

Corrupt the subject, restore one clean hidden state at a time, and see how much of the answer's probability
comes back: the states that bring it back are the ones that carry the fact.

    tr = causal_trace(model, "The Eiffel Tower is located in the city of", "Eiffel Tower")
    tr.peak("mlp", token="last_subject")   # where the MLP effect at the subject's last token peaks
    tr.plot(out="trace.png")                # ROME Figure 1 style heatmaps

What exactly is computed (all recorded in the result):

- Corruption: Gaussian noise N(0, noise²) added at ``hook_embed`` to the token embeddings of the subject's tokens
  (the tokens whose characters overlap the subject's first occurrence in ``text``; BOS counts as position 0).
  Default ``noise = 3σ`` where σ is the standard deviation of all entries of ``hook_embed`` over the tokens of
  the first 1,000 article titles of the embedded Wikipedia corpus — the paper takes σ over the subjects of its
  fact set, and Wikipedia titles are subjects. (Without the corpus package σ falls back to the std of W_E.)
  The ``samples`` noise draws come from ``torch.Generator().manual_seed(seed)``; every restoration uses the same
  draws, so effects are paired comparisons.
- Baseline: ONE forward of ``samples + 1`` rows — row 0 clean (its hidden states are the restoration values and
  its probability is ``clean_prob``), rows 1.. corrupted (``corrupted_prob`` is their mean).
- Restorations, for every layer l and token t (tokens before the subject's first token are not computed: by
  causality their states are identical in the clean and corrupted runs, so their effect is exactly 0):
  ``resid``: the residual stream *after* block l (``blocks.{l}.hook_resid_post``, the block outputs the paper's
  code restores); ``mlp`` / ``attn``: the MLP / attention outputs (``hook_mlp_out`` / ``hook_attn_out``) of the
  ``window`` layers ``max(0, l - window//2) .. min(L, l + ceil(window/2)) - 1`` at token t, as in the paper.
- Indirect effect = mean over noise samples of p(target | corrupted, state restored) - corrupted_prob.
  ``restored`` keeps the probabilities themselves (what ROME Figure 1 colours).
- Batching: every (kind, layer, token, noise draw) restoration is one batch row. A forward starts from one
  row, becomes the ``samples`` corrupted runs at the embedding, and each restoration's rows only join the batch
  at the first layer they restore (``_grow_probs``: layers below are exactly the corrupted run's), which saves
  about 40% of the compute; ``method="plain"`` runs every row from
  the embedding (the reference). Forwards stop at the final residual; only the last position is normalized
  and unembedded.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from ..core.caches import model_cache
from ..core.corpus import wiki_documents
from ..core.hooks import capture
from ..core.inputs import check_int, decode
from ..core.inputs import target_id as _scored_target
from ..core.progress import bar
from ..core.results import Result, jsonable, new_figure, save_fig

KINDS = ("resid", "mlp", "attn")
_HOOK = {"resid": "hook_resid_post", "mlp": "hook_mlp_out", "attn": "hook_attn_out"}
_CMAP = {"resid": "Purples", "mlp": "Greens", "attn": "Reds"}
_TITLE = {"resid": "residual (after block)", "mlp": "MLP output", "attn": "attention output"}


# ============================================================================================== results
@dataclass(repr=False, eq=False)
class TraceResult(Result):
    """Causal trace of one prompt. ``effects[kind]`` and ``restored[kind]`` are float32 [n_layers, n_tokens]."""

    text: str
    subject: str
    target: str
    target_id: int
    tokens: list[str]
    subject_range: tuple[int, int]  # token positions [start, end), BOS at 0
    clean_prob: float
    corrupted_prob: float
    corrupted_probs: torch.Tensor  # [samples]
    effects: dict[str, torch.Tensor]
    restored: dict[str, torch.Tensor]
    noise: float
    samples: int
    window: int
    seed: int
    seconds: float
    meta: dict = field(default_factory=dict)
    # What the caller asked for (None: the clean top-1). ``target`` is the token actually scored, which is only
    # the first token of a multi-token ``target_given``.
    target_given: str | int | None = None

    @property
    def n_layers(self) -> int:
        return next(iter(self.effects.values())).shape[0]

    @property
    def last_subject(self) -> int:
        return self.subject_range[1] - 1

    def _kind(self, kind: str | None) -> str:
        kind = kind or next(iter(self.effects))
        if kind not in self.effects:
            raise ValueError(f"kind {kind!r} was not traced; available: {', '.join(self.effects)}")
        return kind

    def peak(self, kind: str | None = None, token: int | str | None = None) -> dict:
        """The largest indirect effect of ``kind``: ``{"layer", "token", "token_str", "effect", "prob"}``.
        ``token``: None (anywhere), a position, ``"last_subject"`` or ``"last"``."""
        kind = self._kind(kind)
        eff = self.effects[kind].nan_to_num(nan=-math.inf)  # NaN: not traced
        if token is None:
            flat = int(eff.argmax())
            layer, pos = divmod(flat, eff.shape[1])
        else:
            pos = self._position(token)
            layer = int(eff[:, pos].argmax())
        return {"kind": kind, "layer": layer, "token": pos, "token_str": self.tokens[pos],
                "effect": float(self.effects[kind][layer, pos]), "prob": float(self.restored[kind][layer, pos])}

    def _position(self, token) -> int:
        n = len(self.tokens)
        if token == "last_subject":
            return self.last_subject
        if token == "last":
            return n - 1
        if isinstance(token, int) and not isinstance(token, bool) and -n <= token < n:
            return token % n
        raise ValueError(f"token {token!r} not known; allowed: a position in 0..{n - 1}, 'last_subject', 'last'")

    def summary(self) -> str:
        parts = [(f"trace of {self.target!r} after {self.text!r} (subject {self.subject!r}): "
                  f"p clean {self.clean_prob:.3f}, corrupted {self.corrupted_prob:.3f}")]
        for kind in self.effects:
            pk = self.peak(kind, "last_subject")
            parts.append(f"{kind} peak at last subject token: layer {pk['layer']} (+{pk['effect']:.3f})")
        return "; ".join(parts)

    def to_frame(self):
        """Long format: one row per (kind, layer, token) with the restored probability and the indirect effect."""
        import pandas as pd

        rows = []
        s0, s1 = self.subject_range
        for kind in self.effects:
            eff, prob = self.effects[kind], self.restored[kind]
            for layer in range(eff.shape[0]):
                for pos, tok in enumerate(self.tokens):
                    rows.append({"kind": kind, "layer": layer, "pos": pos, "token": tok,
                                 "subject": s0 <= pos < s1, "restored_prob": float(prob[layer, pos]),
                                 "effect": float(eff[layer, pos])})
        return pd.DataFrame(rows)

    def plot(self, kind: str | None = None, *, out=None, value: str = "prob"):
        """Heatmaps in the style of ROME Figure 1: tokens on y (subject tokens marked *), layers on x. ``kind``
        None draws every traced kind side by side. ``value``: "prob" (p(target) with the state restored, as in
        the paper) or "effect" (minus the corrupted probability)."""
        if value not in ("prob", "effect"):
            raise ValueError(f"value {value!r} not known; allowed: 'prob', 'effect'")
        kinds = list(self.effects) if kind is None else [self._kind(kind)]
        n = len(self.tokens)
        fig = new_figure(figsize=(4.2 * len(kinds) + 0.6, 0.32 * n + 1.6))
        axes = fig.subplots(1, len(kinds), squeeze=False)[0]
        s0, s1 = self.subject_range
        labels = [repr(t)[1:-1] + ("*" if s0 <= i < s1 else "") for i, t in enumerate(self.tokens)]
        for ax, k in zip(axes, kinds):
            data = (self.restored if value == "prob" else self.effects)[k].numpy()
            im = ax.imshow(data.T, aspect="auto", cmap=_CMAP[k], interpolation="nearest",
                           vmin=min(0.0, float(data.min())) if value == "effect" else self.corrupted_prob)
            ax.set_yticks(range(n), labels, fontsize=8)
            ax.set_xlabel("layer" + (f" (window {self.window})" if k != "resid" else ""))
            ax.set_title(f"restore {_TITLE[k]}", fontsize=10)
            cb = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.02)
            cb.set_label(f"p({self.target.strip() or self.target!r})" if value == "prob" else "indirect effect",
                         fontsize=8)
        fig.suptitle(f"{self.text!r} → {self.target!r}  (clean {self.clean_prob:.3f}, corrupted "
                     f"{self.corrupted_prob:.3f}, {self.samples} samples, noise {self.noise:.3g})", fontsize=9)
        fig.tight_layout()
        return save_fig(fig, out)

    def to_json(self) -> dict:
        """The CLI's --json document: the effects grid (null where not traced) and the peaks (the long table would
        repeat the tokens)."""
        return jsonable({
            "result": "TraceResult", "summary": self.summary(), "text": self.text, "subject": self.subject,
            "target": self.target, "target_id": self.target_id, "target_given": self.target_given,
            "tokens": self.tokens, "subject_range": list(self.subject_range), "clean_prob": self.clean_prob,
            "corrupted_prob": self.corrupted_prob, "noise": self.noise, "samples": self.samples,
            "window": self.window, "seed": self.seed, "seconds": self.seconds, "state": "resid_post",
            "noise_basis": self.meta.get("noise_basis"),
            "peaks": {k: {"anywhere": self.peak(k), "last_subject": self.peak(k, "last_subject")}
                      for k in self.effects},
            "effects": {k: [[round(float(x), 6) for x in row] for row in v] for k, v in self.effects.items()}})

    to_dict = to_json  # deprecated spelling, kept for one release


@dataclass(repr=False, eq=False)
class FactTraceResult(Result):
    """Indirect effects at the last subject token over many facts: ``effects[kind]`` float32 [n_facts, n_layers]."""

    effects: dict[str, torch.Tensor]
    records: list[dict]
    clean_probs: torch.Tensor  # [n_facts]
    corrupted_probs: torch.Tensor  # [n_facts]
    samples: int
    window: int
    seconds: float
    meta: dict = field(default_factory=dict)

    def mean(self, kind: str = "mlp") -> torch.Tensor:
        """Average indirect effect per layer [n_layers]."""
        return self._eff(kind).mean(0)

    def ci95(self, kind: str = "mlp") -> torch.Tensor:
        """Half-width of the normal-approximation 95% interval of the per-layer mean [n_layers]."""
        e = self._eff(kind)
        if e.shape[0] < 2:
            return torch.full((e.shape[1],), float("nan"))
        return 1.96 * e.std(0, unbiased=True) / math.sqrt(e.shape[0])

    def peak_layer(self, kind: str = "mlp") -> int:
        """Layer with the largest average indirect effect — for ``mlp``, the default ROME edit layer."""
        return int(self.mean(kind).argmax())

    def _eff(self, kind):
        if kind not in self.effects:
            raise ValueError(f"kind {kind!r} was not traced; available: {', '.join(self.effects)}")
        return self.effects[kind]

    def summary(self) -> str:
        return (f"average indirect effect at the last subject token over {len(self.records)} facts: " +
                ", ".join(f"{k} peaks at layer {self.peak_layer(k)} (+{float(self.mean(k).max()):.3f})"
                          for k in self.effects))

    def to_frame(self):
        import pandas as pd

        rows = []
        for kind in self.effects:
            m, ci = self.mean(kind), self.ci95(kind)
            for layer in range(m.shape[0]):
                rows.append({"kind": kind, "layer": layer, "mean_effect": float(m[layer]),
                             "ci95": float(ci[layer]), "n_facts": self.effects[kind].shape[0]})
        return pd.DataFrame(rows)

    def to_json(self) -> dict:
        return {**super().to_json(), "peak_layers": {k: self.peak_layer(k) for k in self.effects},
                "records": jsonable(self.records), "samples": self.samples, "window": self.window,
                "seconds": self.seconds}

    def plot(self, *, out=None):
        """Average indirect effect per layer with its 95% band, one line per kind (the paper's Figure 2 style)."""
        fig = new_figure(figsize=(6.5, 3.6))
        ax = fig.subplots()
        colors = {"resid": "tab:purple", "mlp": "tab:green", "attn": "tab:red"}
        for kind in self.effects:
            m, ci = self.mean(kind).numpy(), self.ci95(kind).numpy()
            x = range(len(m))
            ax.plot(x, m, color=colors[kind], label=f"{kind} (peak {self.peak_layer(kind)})")
            ax.fill_between(x, m - ci, m + ci, color=colors[kind], alpha=0.2)
        ax.set(xlabel="layer", ylabel="average indirect effect", title=f"last subject token, {len(self.records)} "
               f"facts, {self.samples} samples, window {self.window}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        return save_fig(fig, out)


# ============================================================================================== public API
def causal_trace(model, text: str, subject: str, target=None, *, noise: float | None = None, samples: int = 10,
                 window: int = 10, seed: int = 0, kinds: Sequence[str] = KINDS, positions=None, layers=None,
                 method: str = "grow", chunk_tokens: int = 8192, progress: bool = False) -> TraceResult:
    """Trace which hidden states carry the fact ``text`` → ``target`` about ``subject`` (see module docstring).

    target: None (the model's top-1 next token on the clean prompt), a string or a token id; a multi-token string
        is scored by its first token (the core target policy: a UserWarning names it, ``.target`` holds it).
    noise: std of the Gaussian corruption (None: 3σ of subject embeddings; 0 allowed).
    positions: None (every token from the subject's first one) or a list of positions / "subject" (all its
        tokens) / "last_subject" / "last" to restore only there (other tokens then have effect NaN, and those
        before the subject 0).
    method: "grow" (default: per noise draw one forward whose batch grows layer by layer, see ``_grow_probs``)
        or "plain" (every restoration a full row from the embedding on; the reference the tests compare with).
    chunk_tokens: batch rows x positions per forward (memory bound).
    """
    t0 = time.perf_counter()
    kinds = _check_common(model, samples, window, kinds)
    if method not in _ENGINES:
        raise ValueError(f"method {method!r} not known; allowed: {', '.join(_ENGINES)}")
    toks, (s0, s1) = _prompt_and_subject(model, text, subject)
    # Resolved before any forward so a bad target fails fast; None waits for the clean run's argmax.
    given = None if target is None else _scored_target(model, target).id
    n, L = toks.shape[1], model.n_layers
    noise, basis = _noise_level(model, noise)
    draws = _noise_draws(samples, s1 - s0, model.d_model, noise, seed)
    pos_list = _positions(positions, s0, s1, n)
    layer_list = list(range(L)) if layers is None else sorted({model.check_layer(x) for x in layers})
    if not layer_list:
        raise ValueError("layers=[] restores nothing; pass None (all layers) or some layer indices")
    names = sorted({h for k in kinds for layer in layer_list for h in _window_hooks(k, layer, window, L)})
    probs, clean_states, target_id = _baseline(model, toks, (s0, s1), draws, given, names)
    clean_prob, corrupted = float(probs[0]), probs[1:]
    low = float(corrupted.mean())
    configs = [(_window_hooks(k, layer, window, L), pos) for k in kinds for layer in layer_list for pos in pos_list]
    p = _ENGINES[method](model, toks, (s0, s1), draws, target_id, configs, clean_states,
                         chunk_tokens=chunk_tokens, progress=progress, desc="causal trace")
    p = p.mean(1).reshape(len(kinds), len(layer_list), len(pos_list))
    effects, restored = {}, {}
    for i, kind in enumerate(kinds):
        grid = torch.full((L, n), float("nan"))
        grid[:, :s0] = low  # before the subject: identical states in both runs, nothing to restore
        grid[torch.tensor(layer_list)[:, None], torch.tensor(pos_list)[None, :]] = p[i]
        restored[kind] = grid
        effects[kind] = grid - low
    return TraceResult(text=text, subject=subject, target=decode(model, target_id), target_id=target_id,
                       tokens=model.to_str_tokens(toks), subject_range=(s0, s1), clean_prob=clean_prob,
                       corrupted_prob=low, corrupted_probs=corrupted, effects=effects, restored=restored,
                       noise=noise, samples=samples, window=window, seed=seed, seconds=time.perf_counter() - t0,
                       meta={"state": "resid_post", "noise_basis": basis, "positions": pos_list,
                             "layers": layer_list, "method": method}, target_given=target)


def trace_facts(model, records: Iterable[dict], *, samples: int = 10, window: int = 10,
                kinds: Sequence[str] = ("mlp",), noise: float | None = None, seed: int = 0,
                progress: bool = True) -> FactTraceResult:
    """Indirect effect per layer at the last subject token, averaged over facts.

    records: dicts (or ``interp.editing.facts.Fact``) with ``subject`` and ``prompt`` — a template with "{}"
    (filled with the subject) or a full prompt containing the subject — and optionally ``target_true`` (str, or
    {"str": ...}; scored by the core target policy); without it the model's top-1 next token is the target. Use
    the dev split of data/facts.jsonl to choose the edit layer:
    ``trace_facts(model, interp.editing.facts.load_records(split="dev")).peak_layer("mlp")``."""
    t0 = time.perf_counter()
    kinds = _check_common(model, samples, window, kinds)
    records = list(records)
    if not records:
        raise ValueError("no records given; pass dicts with 'prompt' and 'subject'")
    noise, _ = _noise_level(model, noise)
    per_kind = {k: [] for k in kinds}
    clean, corrupted, used = [], [], []
    for rec in bar(records, desc="trace facts", enabled=progress, unit="fact"):
        text, subject, target = fact_prompt(rec)
        with warnings.catch_warnings():
            # Many facts have multi-token targets; each record names its scored token instead of one warning each.
            warnings.filterwarnings("ignore", message=".*scoring its first token", category=UserWarning)
            tr = causal_trace(model, text, subject, target, noise=noise, samples=samples, window=window,
                              seed=seed, kinds=kinds, positions=["last_subject"])
        for k in kinds:
            per_kind[k].append(tr.effects[k][:, tr.last_subject])
        clean.append(tr.clean_prob)
        corrupted.append(tr.corrupted_prob)
        case_id = rec.get("case_id") if isinstance(rec, dict) else getattr(rec, "case_id", None)
        used.append({"case_id": case_id, "text": text, "subject": subject, "target": tr.target,
                     "target_given": target})
    return FactTraceResult(effects={k: torch.stack(v) for k, v in per_kind.items()}, records=used,
                           clean_probs=torch.tensor(clean), corrupted_probs=torch.tensor(corrupted),
                           samples=samples, window=window, seconds=time.perf_counter() - t0,
                           meta={"noise": noise, "seed": seed, "state": "resid_post"})


def fact_prompt(rec) -> tuple[str, str, str | None]:
    """(text, subject, target) of a fact record (a dict, or an ``interp.editing.facts.Fact``): "{}" in the prompt is
    replaced by the subject."""
    if hasattr(rec, "to_dict"):
        rec = rec.to_dict()
    if not isinstance(rec, dict) or "prompt" not in rec or "subject" not in rec:
        raise ValueError(f"record {rec!r} needs 'prompt' and 'subject'")
    prompt, subject = rec["prompt"], rec["subject"]
    text = prompt.replace("{}", subject, 1) if "{}" in prompt else prompt
    target = rec.get("target_true")
    if isinstance(target, dict):
        target = target.get("str")
    if isinstance(target, str) and target and not target.startswith(" ") and not text.endswith(" "):
        target = " " + target  # CounterFact stores targets without the leading space
    return text, subject, target or None


# ============================================================================================== the engine
def _baseline(model, toks, subj, draws, target, names):
    """One forward of samples + 1 rows (row 0 clean): target probabilities [samples + 1], the clean states of
    ``names`` ({name: [pos, d_model]} on the model's device, from row 0) and the target id."""
    states = {}

    def keep(name):
        def save(t, hook):
            states[name] = t[0].detach().clone()
        return save

    batch = toks.repeat(draws.shape[0] + 1, 1)
    zero = torch.zeros_like(draws[:1])
    hooks = [("hook_embed", _corrupt(subj, torch.cat([zero, draws])))] + [(nm, keep(nm)) for nm in names]
    logits = _last_logits(model, batch, hooks)
    target_id = int(logits[0].argmax()) if target is None else _scored_target(model, target).id
    return logits.softmax(-1)[:, target_id], states, target_id


def _plain_probs(model, toks, subj, draws, target_id, configs, clean_states, *, chunk_tokens, progress,
                 desc) -> torch.Tensor:
    """p(target) for each restoration config x noise draw -> [len(configs), samples], one full row each.

    A config is ``(hook_names, pos)``: the clean values of those hooks at position ``pos`` are written back.
    Row ``c * samples + s`` of a forward runs config ``c`` with noise draw ``s``."""
    S, n = draws.shape[0], toks.shape[1]
    per_fwd = max(1, chunk_tokens // (S * n))
    out = []
    for start in bar(range(0, len(configs), per_fwd), desc=desc, enabled=progress, unit="forward"):
        chunk = configs[start:start + per_fwd]
        rows_by_hook: dict[str, tuple[list[int], list[int]]] = {}
        for c, (hook_names, pos) in enumerate(chunk):
            for nm in hook_names:
                rows, poss = rows_by_hook.setdefault(nm, ([], []))
                rows.extend(range(c * S, (c + 1) * S))
                poss.extend([pos] * S)
        hooks = [("hook_embed", _corrupt(subj, draws.repeat(len(chunk), 1, 1)))]
        hooks += [(nm, _restore(clean_states[nm], rows, poss)) for nm, (rows, poss) in rows_by_hook.items()]
        logits = _last_logits(model, toks.repeat(len(chunk) * S, 1), hooks)
        out.append(logits.softmax(-1)[:, target_id].reshape(len(chunk), S))
    return torch.cat(out)


def _grow_probs(model, toks, subj, draws, target_id, configs, clean_states, *, chunk_tokens, progress,
                desc) -> torch.Tensor:
    """Same result as ``_plain_probs``, at about 60% of the compute and in few large forwards.

    A restoration at layer l leaves every earlier layer exactly as in the corrupted run, so its rows need not
    exist before layer l. Each forward starts from ONE row of tokens; ``blocks.0.hook_resid_pre`` turns it into
    the ``samples`` corrupted runs (rows 0..S-1, the carriers). The noise is added there, to the embedding plus
    any position embedding: the same sum as adding it at ``hook_embed``, where the batch cannot grow yet (the
    causal mask is built from the embeddings' batch). At ``blocks.{j}.hook_resid_pre`` the configs whose first
    restored layer is j join as copies of the S carriers (S rows per config), and the restoration hooks write
    the clean states into their rows. The causal mask and position embeddings, computed for batch 1,
    broadcast over the grown batch. ``_grow_probs.last_carrier`` keeps the carriers' probabilities (= the
    corrupted runs', for checks)."""
    S, n = draws.shape[0], toks.shape[1]
    first = [min(_layer_of(nm) for nm in hook_names) for hook_names, _ in configs]
    order = sorted(range(len(configs)), key=lambda c: first[c])
    per_fwd = max(1, chunk_tokens // (n * S) - 1)
    out = torch.empty(len(configs), S)
    chunks = [order[i:i + per_fwd] for i in range(0, len(order), per_fwd)]
    for chunk in bar(chunks, desc=desc, enabled=progress, unit="forward"):
        joins: dict[int, int] = {}
        rows_by_hook: dict[str, tuple[list[int], list[int]]] = {}
        for i, c in enumerate(chunk):  # sorted by first layer: configs join in this order
            joins[first[c]] = joins.get(first[c], 0) + 1
            hook_names, pos = configs[c]
            for nm in hook_names:
                rows, poss = rows_by_hook.setdefault(nm, ([], []))
                rows.extend(range(S * (i + 1), S * (i + 2)))
                poss.extend([pos] * S)
        # [1, n, d] -> [S, n, d] where block 0 starts: the causal mask, made from the embeddings, keeps batch 1
        hooks = [("blocks.0.hook_resid_pre", _corrupt(subj, draws))]
        hooks += [(f"blocks.{j}.hook_resid_pre", _join(k, S)) for j, k in sorted(joins.items())]
        hooks += [(nm, _restore(clean_states[nm], rows, poss)) for nm, (rows, poss) in rows_by_hook.items()]
        p = _last_logits(model, toks, hooks).softmax(-1)[:, target_id]
        if p.shape[0] != S * (len(chunk) + 1):
            raise RuntimeError(f"grown batch has {p.shape[0]} rows, expected {S * (len(chunk) + 1)}")
        out[chunk] = p[S:].reshape(len(chunk), S)
        _grow_probs.last_carrier = p[:S]
    return out


_ENGINES = {"grow": _grow_probs, "plain": _plain_probs}


def _join(k: int, S: int):
    """Hook appending ``k`` copies of the S carrier rows (the corrupted runs) to the batch."""
    def grow(t, hook):
        return torch.cat([t, t[:S].repeat(k, *([1] * (t.ndim - 1)))])
    return grow


def _layer_of(hook_name: str) -> int:
    return int(hook_name.split(".")[1])


def _last_logits(model, batch, hooks) -> torch.Tensor:
    """Run ``batch`` with ``hooks``; stop at the final residual and unembed only the last position ->
    float32 CPU [batch, d_vocab]."""
    final = f"blocks.{model.n_layers - 1}.hook_resid_post"
    store, _ = capture(model, batch, [final], keep=lambda name, t: t[:, -1].detach(), stop=True, hooks=hooks,
                       description="causal_trace")
    return model.unembed(model.final_norm(store[final]))


def _corrupt(subj, noise):
    """Hook adding ``noise`` [rows, n_subj, d_model] to the embeddings at the subject positions (a batch of one
    row is first repeated to ``rows``)."""
    s0, s1 = subj

    def add(t, hook):
        out = t.expand(noise.shape[0], *t.shape[1:]).clone() if t.shape[0] == 1 else t.clone()
        out[:, s0:s1] += noise.to(t.device, t.dtype)
        return out
    return add


def _restore(clean, rows, poss):
    """Hook writing the clean state ``clean`` [pos, d] back at (row, pos) pairs."""
    r, p = torch.tensor(rows), torch.tensor(poss)

    def put(t, hook):
        out = t.clone()
        out[r.to(t.device), p.to(t.device)] = clean[p.to(clean.device)].to(t.device, t.dtype)
        return out
    return put


def _window_hooks(kind: str, layer: int, window: int, n_layers: int) -> tuple[str, ...]:
    if kind == "resid":
        return (f"blocks.{layer}.hook_resid_post",)
    lo, hi = max(0, layer - window // 2), min(n_layers, layer - (-window // 2))
    return tuple(f"blocks.{j}.{_HOOK[kind]}" for j in range(lo, hi))


def _positions(positions, s0, s1, n) -> list[int]:
    if positions is None:
        return list(range(s0, n))
    out = []
    for p in positions:
        if p == "subject":
            out.extend(range(s0, s1))
            continue
        if p == "last_subject":
            p = s1 - 1
        elif p == "last":
            p = n - 1
        elif not (isinstance(p, int) and not isinstance(p, bool) and -n <= p < n):
            raise ValueError(f"position {p!r} not allowed: a position in 0..{n - 1}, 'subject', 'last_subject' or "
                             "'last'")
        out.append(p % n)
    return sorted(set(out))


# ============================================================================================== inputs
def check_kinds(kinds) -> list[str]:
    """``kinds`` as a list of distinct names from KINDS (one string allowed)."""
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds or len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds {bad or kinds!r} not allowed; give distinct names from: {', '.join(KINDS)}")
    return kinds


def _check_common(model, samples, window, kinds):
    check_int("samples", samples, 1)
    check_int("window", window, 1)
    kinds = check_kinds(kinds)
    if model.d_mlp is None and "mlp" in kinds:
        raise ValueError(f"model {model.source} has no MLP layers; drop 'mlp' from kinds")
    return kinds


def _prompt_and_subject(model, text, subject) -> tuple[torch.Tensor, tuple[int, int]]:
    """Tokens [1, n] (BOS first) and the subject's token range [start, end)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text {text!r} is empty; give the prompt, e.g. 'The Eiffel Tower is located in'")
    if not isinstance(subject, str) or not subject.strip():
        raise ValueError(f"subject {subject!r} is empty; give the subject as it appears in the prompt")
    char0 = text.find(subject)
    if char0 < 0:
        raise ValueError(f"subject {subject!r} not found in the prompt {text!r} (the match is case-sensitive)")
    char1 = char0 + len(subject)
    toks = model.to_tokens(text)
    enc = model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if [model.bos_token_id] + list(enc["input_ids"]) != toks[0].tolist():
        raise ValueError(f"tokenizer offsets disagree with model.to_tokens for {text!r}")
    hits = [i + 1 for i, (a, b) in enumerate(enc["offset_mapping"]) if a < char1 and b > char0]
    if not hits:
        raise ValueError(f"subject {subject!r} covers no token of {text!r}")
    return toks, (hits[0], hits[-1] + 1)


def check_noise(noise) -> float | None:
    """None (the default scale) or a finite std >= 0."""
    if noise is not None and (not isinstance(noise, (int, float)) or isinstance(noise, bool) or not noise >= 0
                              or math.isinf(noise)):
        raise ValueError(f"noise={noise!r}; allowed: a finite number >= 0 (std of the Gaussian), or None")
    return None if noise is None else float(noise)


def _noise_level(model, noise) -> tuple[float, str]:
    """(std of the corruption, where it came from)."""
    if check_noise(noise) is not None:
        return float(noise), "given"
    return 3.0 * embedding_std(model), model_cache(model, "trace.noise")["basis"]


def embedding_std(model, n_titles: int = 1000) -> float:
    """σ of subject embeddings: std of all entries of ``hook_embed`` over the tokens (BOS excluded) of the first
    ``n_titles`` Wikipedia article titles of the embedded corpus; std of W_E if the corpus is not installed."""
    memo = model_cache(model, "trace.noise")
    if memo.get("n_titles") != n_titles:
        try:
            titles = [d.title for d in wiki_documents(n=n_titles)]
        except FileNotFoundError:
            memo.update(n_titles=n_titles, std=float(model.W_E.std()), basis="std of W_E entries")
            return memo["std"]
        ids = torch.tensor([i for t in titles for i in model.encode(t, prepend_bos=False)])[None, : model.n_ctx]
        store, _ = capture(model, ids, ["hook_embed"], stop=True, description="embedding_std")
        memo.update(n_titles=n_titles, std=float(store["hook_embed"].float().std()),
                    basis=f"std of hook_embed over the tokens of {n_titles} Wikipedia titles")
    return memo["std"]


def _noise_draws(samples, n_subj, d_model, noise, seed) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return noise * torch.randn(samples, n_subj, d_model, generator=g)
