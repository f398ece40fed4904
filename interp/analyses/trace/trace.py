"""Causal tracing (Meng et al. 2022, "Locating and Editing Factual Associations in GPT", section 2).

Corrupt the subject, restore one clean hidden state at a time, and see how much of the answer's probability
comes back: the states that bring it back are the ones that carry the fact.

    tr = causal_trace(model, "The Eiffel Tower is located in the city of", "Eiffel Tower")
    tr.peak("mlp", token="last_subject")   # where the MLP effect at the subject's last token peaks
    tr.plot(out="trace.png")                # ROME Figure 1 style heatmaps
    causal_trace(model, text, "The Eiffel Tower", corruption="replace", replacement="The Colosseum")  # STR

Over many fact records: :func:`interp.analyses.trace.trace_facts`.

What exactly is computed (all recorded in the result):

- Corruption (``corruption=``, see :mod:`interp.analyses.trace.corrupt`): ``"noise"`` adds Gaussian noise to the
  embeddings of the subject's tokens (the tokens whose characters overlap the subject's first occurrence in
  ``text``; BOS counts as position 0), ``samples`` seeded draws, every restoration using the same draws so that
  effects are paired comparisons; ``"replace"`` (symmetric token replacement) swaps the subject for another
  subject of the same token length: one corrupted run, the prompt's own tokens with the replacement's at the
  subject's positions.
- Baseline: ONE forward of ``samples + 1`` rows — row 0 clean (its hidden states are the restoration values and
  its probability is ``clean_prob``), rows 1.. corrupted (``corrupted_prob`` is their mean; ``samples`` is 1
  with replacement).
- Restorations, for every layer l and token t (tokens before the subject's first token are not computed: by
  causality their states are identical in the clean and corrupted runs, so their effect is exactly 0):
  ``resid``: the residual stream *after* block l (``blocks.{l}.hook_resid_post``, the block outputs the paper's
  code restores); ``mlp`` / ``attn``: the MLP / attention outputs (``hook_mlp_out`` / ``hook_attn_out``) of the
  ``window`` layers ``max(0, l - window//2) .. min(L, l + ceil(window/2)) - 1`` at token t, as in the paper.
- Indirect effect = mean over the corrupted runs of p(target | corrupted, state restored) - corrupted_prob.
  ``restored`` keeps the probabilities themselves (what ROME Figure 1 colours).
- Batching: every (kind, layer, token, corrupted run) restoration is one batch row. A forward starts from one
  row, becomes the ``samples`` corrupted runs at the embedding (with replacement the row is the corrupted run),
  and each restoration's rows only join the batch at the first layer they restore (``_grow_probs``: layers
  below are exactly the corrupted run's), which saves about 40% of the compute; ``method="plain"`` runs every
  row from the embedding (the reference). Forwards stop at the final residual; only the last position is
  normalized and unembedded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ...core.hooks import capture
from ...core.inputs import check_int, decode
from ...core.inputs import target_id as _scored_target
from ...core.progress import bar
from ...core.results import Result, jsonable, new_figure, save_fig
from .corrupt import (
    check_corruption,
    choose_replacement,
    noise_draws,
    noise_level,
    prompt_and_subject,
    replaced_tokens,
)

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
    noise: float | None  # None with corruption="replace"
    samples: int
    window: int
    seed: int
    seconds: float
    meta: dict = field(default_factory=dict)
    # What the caller asked for (None: the clean top-1). ``target`` is the token actually scored, which is only
    # the first token of a multi-token ``target_given``.
    target_given: str | int | None = None
    corruption: str = "noise"
    replacement: str | None = None  # the subject swapped in (corruption="replace")

    @property
    def corruption_label(self) -> str:
        if self.corruption == "replace":
            return f"subject replaced by {self.replacement!r}"
        return f"{self.samples} noise samples, std {self.noise:.3g}"

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
                  f"p clean {self.clean_prob:.3f}, corrupted {self.corrupted_prob:.3f} ({self.corruption_label})")]
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
        fig.suptitle(f"{self.text!r} → {self.target!r}\n(clean {self.clean_prob:.3f}, corrupted "
                     f"{self.corrupted_prob:.3f}; {self.corruption_label})", fontsize=8)
        if fig.get_layout_engine() is None:  # new_figure's constrained layout already fits the labels
            fig.tight_layout()
        return save_fig(fig, out)

    def view(self, *, kinds=None, value: str = "prob"):
        """Interactive heatmaps of ``plot()`` with hover values (``kinds``: a subset of the traced kinds)."""
        from .view import trace_view

        return trace_view(self, kinds=kinds, value=value)

    def to_json(self) -> dict:
        """The CLI's --json document: the effects grid (null where not traced) and the peaks (the long table would
        repeat the tokens)."""
        return jsonable({
            "result": "TraceResult", "summary": self.summary(), "text": self.text, "subject": self.subject,
            "target": self.target, "target_id": self.target_id, "target_given": self.target_given,
            "tokens": self.tokens, "subject_range": list(self.subject_range), "clean_prob": self.clean_prob,
            "corrupted_prob": self.corrupted_prob, "corruption": self.corruption, "replacement": self.replacement,
            "noise": self.noise, "samples": self.samples,
            "window": self.window, "seed": self.seed, "seconds": self.seconds, "state": "resid_post",
            "noise_basis": self.meta.get("noise_basis"),
            "peaks": {k: {"anywhere": self.peak(k), "last_subject": self.peak(k, "last_subject")}
                      for k in self.effects},
            "effects": {k: [[round(float(x), 6) for x in row] for row in v] for k, v in self.effects.items()}})



# ============================================================================================== public API
def causal_trace(model, text: str, subject: str, target=None, *, corruption: str = "noise",
                 replacement: str | None = None, candidates=None, noise: float | None = None,
                 samples: int | None = None, window: int = 10, seed: int = 0, kinds: Sequence[str] = KINDS,
                 positions=None, layers=None, method: str = "grow", chunk_tokens: int = 8192,
                 progress: bool = False) -> TraceResult:
    """Trace which hidden states carry the fact ``text`` → ``target`` about ``subject`` (see module docstring).

    target: None (the model's top-1 next token on the clean prompt), a string or a token id; a multi-token string
        is scored by its first token (the core target policy: a UserWarning names it, ``.target`` holds it).
    corruption: "noise" (Gaussian noise on the subject's embeddings, Meng et al.) or "replace" (symmetric token
        replacement: the subject swapped for another of the same token length, Zhang & Nanda 2023).
    replacement: with "replace", the subject swapped in (None: picked from ``candidates`` by the seeded rule of
        :func:`~interp.analyses.trace.corrupt.choose_replacement`; ``.replacement`` names it).
    candidates: with "replace" and no replacement, the subjects to pick from (None: the built-in list).
    noise: std of the Gaussian corruption (None: 3σ of subject embeddings; 0 allowed); an error with "replace".
    samples: noise draws (None: 10); with "replace" there is one corrupted run, so only None or 1 are allowed.
    positions: None (every token from the subject's first one) or a list of positions / "subject" (all its
        tokens) / "last_subject" / "last" to restore only there (other tokens then have effect NaN, and those
        before the subject 0).
    method: "grow" (default: per corrupted run one forward whose batch grows layer by layer, see ``_grow_probs``)
        or "plain" (every restoration a full row from the embedding on; the reference the tests compare with).
    chunk_tokens: batch rows x positions per forward (memory bound).
    """
    t0 = time.perf_counter()
    samples = check_corruption(corruption, noise=noise, samples=samples, replacement=replacement)
    if candidates is not None and (corruption != "replace" or replacement is not None):
        raise ValueError("candidates= is only searched with corruption='replace' and no replacement= given")
    kinds = check_trace_args(model, samples, window, kinds)
    if method not in _ENGINES:
        raise ValueError(f"method {method!r} not known; allowed: {', '.join(_ENGINES)}")
    toks, (s0, s1) = prompt_and_subject(model, text, subject)
    # Resolved before any forward so a bad target fails fast; None waits for the clean run's argmax.
    given = None if target is None else _scored_target(model, target).id
    n, L = toks.shape[1], model.n_layers
    pos_list = _positions(positions, s0, s1, n)
    layer_list = list(range(L)) if layers is None else sorted({model.check_layer(x) for x in layers})
    if not layer_list:
        raise ValueError("layers=[] restores nothing; pass None (all layers) or some layer indices")
    if corruption == "noise":
        noise, basis = noise_level(model, noise)
        corrupted = _Corrupted((s0, s1), draws=noise_draws(samples, s1 - s0, model.d_model, noise, seed))
    else:
        basis = None
        if replacement is None:
            replacement, new_toks, given = choose_replacement(model, text, subject, given, candidates, seed=seed)
        else:
            new_toks = replaced_tokens(model, text, subject, replacement, toks, (s0, s1))
        corrupted = _Corrupted((s0, s1), tokens=new_toks)
    names = sorted({h for k in kinds for layer in layer_list for h in _window_hooks(k, layer, window, L)})
    probs, clean_states, target_id = _baseline(model, toks, corrupted, given, names)
    clean_prob, low_runs = float(probs[0]), probs[1:]
    low = float(low_runs.mean())
    configs = [(_window_hooks(k, layer, window, L), pos) for k in kinds for layer in layer_list for pos in pos_list]
    p = _ENGINES[method](model, toks, corrupted, target_id, configs, clean_states,
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
                       corrupted_prob=low, corrupted_probs=low_runs, effects=effects, restored=restored,
                       noise=noise, samples=samples, window=window, seed=seed, seconds=time.perf_counter() - t0,
                       meta={"state": "resid_post", "noise_basis": basis, "positions": pos_list,
                             "layers": layer_list, "method": method}, target_given=target, corruption=corruption,
                       replacement=replacement)


# ============================================================================================== the engine
@dataclass(frozen=True)
class _Corrupted:
    """The corrupted runs: ``draws`` [S, n_subj, d_model] of noise for the subject's embeddings, or the prompt's
    ``tokens`` [1, n] with the replacement at the subject (S = 1). Replacement runs the replaced tokens
    themselves rather than adding the embedding difference: exact, and no hook on the embedding."""

    subj: tuple[int, int]
    draws: torch.Tensor | None = None
    tokens: torch.Tensor | None = None

    @property
    def S(self) -> int:
        return 1 if self.draws is None else self.draws.shape[0]

    def batch(self, toks, copies: int, clean_first: bool = False):
        """(token rows, hooks) of ``copies`` x S corrupted runs, after one clean row if ``clean_first``."""
        if self.draws is None:
            rows = self.tokens.repeat(copies, 1)
            return (torch.cat([toks, rows]) if clean_first else rows), []
        draws = self.draws.repeat(copies, 1, 1)
        if clean_first:
            draws = torch.cat([torch.zeros_like(draws[:1]), draws])
        return toks.repeat(draws.shape[0], 1), [("hook_embed", _corrupt(self.subj, draws))]

    def seed_row(self, toks):
        """(one token row, hooks) that become the S carriers where block 0 starts (``_grow_probs``)."""
        if self.draws is None:
            return self.tokens, []
        return toks, [("blocks.0.hook_resid_pre", _corrupt(self.subj, self.draws))]


def _baseline(model, toks, corrupted: _Corrupted, target, names):
    """One forward of samples + 1 rows (row 0 clean): target probabilities [samples + 1], the clean states of
    ``names`` ({name: [pos, d_model]} on the model's device, from row 0) and the target id."""
    states = {}

    def keep(name):
        def save(t, hook):
            states[name] = t[0].detach().clone()
        return save

    batch, hooks = corrupted.batch(toks, 1, clean_first=True)
    logits = _last_logits(model, batch, hooks + [(nm, keep(nm)) for nm in names])
    target_id = int(logits[0].argmax()) if target is None else _scored_target(model, target).id
    return logits.softmax(-1)[:, target_id], states, target_id


def _plain_probs(model, toks, corrupted: _Corrupted, target_id, configs, clean_states, *, chunk_tokens, progress,
                 desc) -> torch.Tensor:
    """p(target) for each restoration config x corrupted run -> [len(configs), samples], one full row each.

    A config is ``(hook_names, pos)``: the clean values of those hooks at position ``pos`` are written back.
    Row ``c * samples + s`` of a forward runs config ``c`` with corrupted run ``s``."""
    S, n = corrupted.S, toks.shape[1]
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
        batch, hooks = corrupted.batch(toks, len(chunk))
        hooks += [(nm, _restore(clean_states[nm], rows, poss)) for nm, (rows, poss) in rows_by_hook.items()]
        logits = _last_logits(model, batch, hooks)
        out.append(logits.softmax(-1)[:, target_id].reshape(len(chunk), S))
    return torch.cat(out)


def _grow_probs(model, toks, corrupted: _Corrupted, target_id, configs, clean_states, *, chunk_tokens, progress,
                desc) -> torch.Tensor:
    """Same result as ``_plain_probs``, at about 60% of the compute and in few large forwards.

    A restoration at layer l leaves every earlier layer exactly as in the corrupted run, so its rows need not
    exist before layer l. Each forward starts from ONE row of tokens; ``blocks.0.hook_resid_pre`` turns it into
    the ``samples`` corrupted runs (rows 0..S-1, the carriers). The noise is added there, to the embedding plus
    any position embedding: the same sum as adding it at ``hook_embed``, where the batch cannot grow yet (the
    causal mask is built from the embeddings' batch). (With replacement the one row is the replaced prompt and
    the only carrier.) At ``blocks.{j}.hook_resid_pre`` the configs whose first
    restored layer is j join as copies of the S carriers (S rows per config), and the restoration hooks write
    the clean states into their rows. The causal mask and position embeddings, computed for batch 1,
    broadcast over the grown batch. ``_grow_probs.last_carrier`` keeps the carriers' probabilities (= the
    corrupted runs', for checks)."""
    S, n = corrupted.S, toks.shape[1]
    first = [min(_layer_of(nm) for nm in hook_names) for hook_names, _ in configs]
    order = sorted(range(len(configs)), key=lambda c: first[c])
    per_fwd = max(1, chunk_tokens // (n * S) - 1)
    out = torch.empty(len(configs), S)
    chunks = [order[i:i + per_fwd] for i in range(0, len(order), per_fwd)]
    row, seed_hooks = corrupted.seed_row(toks)
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
        hooks = list(seed_hooks)
        hooks += [(f"blocks.{j}.hook_resid_pre", _join(k, S)) for j, k in sorted(joins.items())]
        hooks += [(nm, _restore(clean_states[nm], rows, poss)) for nm, (rows, poss) in rows_by_hook.items()]
        p = _last_logits(model, row, hooks).softmax(-1)[:, target_id]
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


def check_trace_args(model, samples, window, kinds) -> list[str]:
    """Checks shared by ``causal_trace`` and ``trace_facts``; returns the kinds as a list."""
    check_int("samples", samples, 1)
    check_int("window", window, 1)
    kinds = check_kinds(kinds)
    if model.d_mlp is None and "mlp" in kinds:
        raise ValueError(f"model {model.source} has no MLP layers; drop 'mlp' from kinds")
    return kinds
