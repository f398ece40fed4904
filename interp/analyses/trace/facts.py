"""Causal tracing over many facts (Meng et al. 2022, Figure 2): the indirect effect at the last subject token,
averaged over fact records, per layer — the layer where the MLP effect peaks is ROME's edit layer.

Each record is traced by :func:`interp.analyses.trace.causal_trace` at its last subject token only. With
``corruption="replace"`` each record's subject is swapped for another record's subject of the same token length
— the same relation first (a subject of the same kind keeps the prompt in distribution), then any other record,
then the built-in list — picked by the seeded rule of :func:`~interp.analyses.trace.corrupt.choose_replacement`
(the model's answer on the replaced prompt must differ from the record's target).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from ...core.inputs import target_id as scored_target
from ...core.progress import bar
from ...core.results import Result, jsonable, new_figure, save_fig
from .corrupt import check_corruption, choose_replacement, noise_level, subject_groups
from .trace import causal_trace, check_trace_args


# ============================================================================================== result
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

    @property
    def corruption_label(self) -> str:
        if self.meta.get("corruption") == "replace":
            return "subjects replaced (same token length)"
        return f"{self.samples} noise samples"

    def summary(self) -> str:
        return (f"average indirect effect at the last subject token over {len(self.records)} facts "
                f"({self.corruption_label}): " +
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
                "records": jsonable(self.records), "corruption": self.meta.get("corruption", "noise"),
                "samples": self.samples, "window": self.window,
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
               f"facts, {self.corruption_label}, window {self.window}")
        ax.legend(fontsize=8)
        if fig.get_layout_engine() is None:  # new_figure's constrained layout already fits the labels
            fig.tight_layout()
        return save_fig(fig, out)

# ============================================================================================== public API
def trace_facts(model, records: Iterable[dict], *, samples: int | None = None, window: int = 10,
                kinds: Sequence[str] = ("mlp",), corruption: str = "noise", noise: float | None = None,
                seed: int = 0, progress: bool = True) -> FactTraceResult:
    """Indirect effect per layer at the last subject token, averaged over facts.

    records: dicts (or ``interp.editing.facts.Fact``) with ``subject`` and ``prompt`` — a template with "{}"
    (filled with the subject) or a full prompt containing the subject — and optionally ``target_true`` (str, or
    {"str": ...}; scored by the core target policy) and ``relation``; without ``target_true`` the model's top-1
    next token is the target. corruption: "noise" (``samples`` draws, default 10) or "replace" (one run per
    record, the replacement chosen as in the module docstring; ``.records[i]["replacement"]`` names it). Use
    the dev split of the fact records (interp/editing/records/facts.jsonl) to choose the edit layer:
    ``trace_facts(model, interp.editing.facts.load_records(split="dev")).peak_layer("mlp")``."""
    t0 = time.perf_counter()
    samples = check_corruption(corruption, noise=noise, samples=samples, replacement=None)
    kinds = check_trace_args(model, samples, window, kinds)
    records = list(records)
    if not records:
        raise ValueError("no records given; pass dicts with 'prompt' and 'subject'")
    prompts = [fact_prompt(rec) for rec in records]  # every record checked before the first trace
    noise = noise_level(model, noise)[0] if corruption == "noise" else None
    pool = [(subject, _field(rec, "relation", _field(rec, "relation_id"))) for rec, (_, subject, _) in
            zip(records, prompts)]
    per_kind = {k: [] for k in kinds}
    clean, corrupted, used = [], [], []
    for i, rec in enumerate(bar(records, desc="trace facts", enabled=progress, unit="fact")):
        text, subject, target = prompts[i]
        with warnings.catch_warnings():
            # Many facts have multi-token targets; each record names its scored token instead of one warning each.
            warnings.filterwarnings("ignore", message=".*scoring its first token", category=UserWarning)
            kw = {"noise": noise, "samples": samples}
            if corruption == "replace":
                given = None if target is None else scored_target(model, target).id
                kw = {"replacement": choose_replacement(model, text, subject, given, subject_groups(pool, i),
                                                        seed=seed)[0]}
            tr = causal_trace(model, text, subject, target, corruption=corruption, window=window, seed=seed,
                              kinds=kinds, positions=["last_subject"], **kw)
        for k in kinds:
            per_kind[k].append(tr.effects[k][:, tr.last_subject])
        clean.append(tr.clean_prob)
        corrupted.append(tr.corrupted_prob)
        used.append({"case_id": _field(rec, "case_id"), "text": text, "subject": subject, "target": tr.target,
                     "target_given": target, "replacement": tr.replacement})
    return FactTraceResult(effects={k: torch.stack(v) for k, v in per_kind.items()}, records=used,
                           clean_probs=torch.tensor(clean), corrupted_probs=torch.tensor(corrupted),
                           samples=samples, window=window, seconds=time.perf_counter() - t0,
                           meta={"noise": noise, "seed": seed, "state": "resid_post", "corruption": corruption})


def _field(rec, name, default=None):
    return rec.get(name, default) if isinstance(rec, dict) else getattr(rec, name, default)


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
