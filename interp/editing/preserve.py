"""Subject keys MEMIT holds still (``preserve_weight`` μ; study "memit_shared").

MEMIT's prior ``λ tr(ΔW C ΔWᵀ)`` keeps the update small on the keys of running Wikipedia text, every token
alike. Edits of one relation that share a (true → new) pair (six Muslim-majority countries → Buddhism) move keys
that have a common part, "a Muslim-majority place after 'Most people in'", and the joint solve writes the common
part too: subjects the batch never names then follow it (dev: those six facts keep 100% of their unedited
neighbours edited one at a time, 44% edited together). The prior barely sees that part, because subject tokens
after a relation's words are a small share of running text.

With μ > 0 the solve also asks the keys of other subjects read exactly as the batch's facts are read (each
distinct rewrite prompt up to the subject, in every context template, at the subject's last token) to keep
their outputs: ``Σ_i |ΔW k_i - r_i|² + λ tr(ΔW C ΔWᵀ) + μ Σ_p tr(ΔW P_p ΔWᵀ)``, ``P_p = mean_j k_pj k_pjᵀ`` over
the preserved subjects ``j`` under prompt ``p``. ``P`` is a mean, like ``C``, so μ counts how many preserved keys
each prompt's statistics stand for. The subjects are the first ``preserve_count`` of
``records/preserve_subjects.json`` (Wikipedia titles that no shipped record or candidate pool names:
``data/build/build_preserve_subjects.py``) other than the batch's own; their keys are read once, from the model
before the edit, as ``C`` is.

The mean neighbour key (``neighbour_mean_weight`` ν). A neighbourhood prompt reads another subject bare, with nothing
before it but the prompt's own words; for a prompt that starts with the subject that is right after BOS, a reading
the Wikipedia statistics behind ``C`` hardly contain. Every subject read so shares a common part of its key, and a
batch of edits whose bare keys (the bare-key row γ) all ask for outputs can move that part. With ν > 0 the solve
also asks ``|ΔW m_p|² ≈ 0`` for ``m_p`` the mean bare key of the same ``preserve_count`` subjects under each
distinct prompt ``p``: ``+ ν Σ_p tr(ΔW m_p m_pᵀ ΔWᵀ)``, one direction per prompt, the common part alone, not the
subject-specific directions the edits need (``P_p`` above holds both). On dev (study "memit_shared", 464 facts at
once) it gave back about a fifth of the row's neighbourhood cost and lost some efficacy, so the default is ν = 0:
the rest of the cost lies along directions that subjects of one kind share.

Neighbours for v* (``vstar_neighbours`` N, :func:`vstar_neighbours`): per fact, the N subjects of the list whose
bare key under its prompt is nearest its own, which its v* then asks to keep their answers when given a share of
its step (:func:`interp.editing.vstar.edit_batch`). On dev it kept more neighbours and lost efficacy and paraphrase
at the rate the other remedies did, so the default is N = 0.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import lru_cache
from pathlib import Path

import torch

from ..core.caches import model_cache
from .base import notify
from .memit_solve import read_at
from .vstar import fill_subject, subject_token_index

SUBJECTS_FILE = Path(__file__).with_name("records") / "preserve_subjects.json"


@lru_cache(maxsize=1)
def subject_list() -> tuple[str, ...]:
    """Every subject of ``records/preserve_subjects.json``, in its (seeded, shuffled) order."""
    return tuple(json.loads(SUBJECTS_FILE.read_text(encoding="utf-8"))["subjects"])


def preserve_subjects(count: int, exclude=()) -> list[str]:
    """The first ``count`` subjects of the list that are not in ``exclude`` (compared lower-cased)."""
    pool = subject_list()
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(pool):
        raise ValueError(f"preserve_count={count!r}; allowed: an integer in 1..{len(pool)} (the subjects in "
                         f"{SUBJECTS_FILE.name})")
    skip = {s.lower() for s in exclude}
    return [s for s in pool if s.lower() not in skip][:count]


def nearest_subjects(model, prompt: str, batch_subjects, count: int, layer: int, pool=None) -> list[str]:
    """The ``count`` subjects of ``pool`` (default: the whole list; never ``batch_subjects``) whose bare key under
    ``prompt`` (the prompt up to the subject, no context template) at ``layer`` is most like one of
    ``batch_subjects``' (cosine after subtracting the pool's mean key, which every subject under the prompt shares).
    The pool's keys are kept in the model's cache."""
    pool = tuple(subject_list() if pool is None else pool)
    prefix = prompt[: prompt.index("{}") + 2]
    table = model_cache(model, "memit.preserve.pool")
    key = (prefix, int(layer), hashlib.sha256(json.dumps(pool).encode()).hexdigest()[:16])
    if key not in table:
        table[key] = torch.cat([c[layer] for c in _key_chunks(model, prefix, pool, [layer], ["{}"], 256)])
    keys = table[key]                                                                # [pool, d_mlp]
    mean = keys.mean(0)
    ours = torch.cat([c[layer] for c in _key_chunks(model, prefix, batch_subjects, [layer], ["{}"], 256)])
    unit = lambda x: (x - mean) / (x - mean).norm(dim=1, keepdim=True).clamp_min(1e-12)
    score = (unit(keys) @ unit(ours).T).max(1).values                                # [pool]
    skip = {s.lower() for s in batch_subjects}
    score[torch.tensor([s.lower() in skip for s in pool])] = -math.inf
    return [pool[i] for i in score.topk(min(count, len(pool) - len(skip))).indices.tolist()]


def vstar_neighbours(model, requests, layer: int, hp) -> list[list[str]] | None:
    """Per request (dict with prompt and subject), the ``hp.vstar_neighbours`` subjects of the whole list whose bare
    key under its prompt at ``layer`` (the range's last) is most like its own (:func:`nearest_subjects`): the
    subjects MEMIT's update would move most with it, which its v* asks to keep their answers
    (:func:`interp.editing.vstar.edit_batch`). None when ``hp.vstar_neighbours`` is 0. The list's keys are read
    once per distinct prompt prefix (about 45 s each on a 2-core CPU for SmolLM2) and kept in the model's cache."""
    if not hp.vstar_neighbours:
        return None
    if hp.vstar_neighbours > len(subject_list()) - 1:
        raise ValueError(f"vstar_neighbours={hp.vstar_neighbours}; allowed: at most {len(subject_list()) - 1} (the "
                         f"subjects of {SUBJECTS_FILE.name} they are chosen from, less one)")
    return [nearest_subjects(model, r["prompt"], [r["subject"]], hp.vstar_neighbours, layer) for r in requests]


def preserved_moments(model, prompts, subjects, layers, templates, *, chunk: int = 64) -> dict[int, torch.Tensor]:
    """``{layer: Σ_p P_p}`` [d_mlp, d_mlp] float64: for each distinct prompt ``p`` of ``prompts`` (with "{}" for
    the subject), the mean of ``k kᵀ`` over ``subjects`` (a list, or ``{prompt: list}``) × ``templates`` of the
    MLP key at ``layer`` at the subject's last token, read from the model as it is now. Only the text up to the
    subject reaches its key, so prompts with the same words before "{}" share one ``P`` (each counted once).
    Kept in the model's cache."""
    layers = [int(l) for l in layers]
    by_prefix = {}
    for p in prompts:
        by_prefix.setdefault(p[: p.index("{}") + 2], subjects[p] if isinstance(subjects, dict) else subjects)
    total = {l: torch.zeros(model.d_mlp, model.d_mlp, dtype=torch.float64) for l in layers}
    for per_layer in _prefix_means(model, "memit.preserve", by_prefix, layers, templates, chunk, outer=True):
        for l in layers:
            total[l] += per_layer[l]
    return total


def _prefix_means(model, name, by_prefix, layers, templates, chunk, *, outer: bool):
    """Per prefix of ``{prefix: subjects}``, in sorted order: ``{layer: mean}`` over subjects × templates of the
    MLP key ``k`` at the subject's last token (``outer``: of ``k kᵀ`` [d_mlp, d_mlp]; else of ``k`` [d_mlp]),
    float64, kept in the model's cache table ``name``."""
    table = model_cache(model, name)
    for prefix, subs in sorted(by_prefix.items()):
        digest = hashlib.sha256(json.dumps([list(subs), list(templates)]).encode()).hexdigest()[:16]
        key = (prefix, digest, tuple(layers))
        if key not in table:
            sums, rows = {l: 0.0 for l in layers}, 0
            for c in _key_chunks(model, prefix, subs, layers, templates, chunk):
                rows += c[layers[0]].shape[0]
                for l in layers:
                    sums[l] = sums[l] + (c[l].T @ c[l] if outer else c[l].sum(0))
            table[key] = {l: sums[l] / rows for l in layers}
        yield table[key]


def _key_chunks(model, prefix, subjects, layers, templates, chunk):
    """``{layer: [rows, d_mlp]}`` float64 per chunk of rows (subjects × templates, in that order): the MLP key at
    the subject's last token of ``prefix`` filled with the subject, in each context template."""
    rows, pos = [], []
    for s in subjects:
        for tpl in templates:
            text, end = fill_subject(tpl.replace("{}", prefix), s)
            p = subject_token_index(model, text, end, len(s))
            rows.append(model.encode(text, prepend_bos=True)[: p + 1])   # nothing after the subject reaches it
            pos.append(p)
    names = [f"blocks.{l}.mlp.hook_post" for l in layers]
    for store in read_at(model, rows, pos, names, chunk, "memit preserved keys"):
        yield {l: store[n] for l, n in zip(layers, names)}


def preserve_terms(model, requests, layers, hp, templates, progress=None) -> dict | None:
    """``{layer: μ Σ_p P_p}`` for a batch of MEMIT requests (dicts with prompt and subject) under ``hp``
    (``preserve_weight`` μ, ``preserve_count``, ``preserve_select``), plus ``ν Σ_p m_p m_pᵀ``
    (``neighbour_mean_weight``, :func:`mean_moments`), read from the model before the edit; None at μ = ν = 0.
    "first": the list's first subjects, the same for every prompt; "nearest": per prompt, those most like the
    batch's own subjects under it (:func:`nearest_subjects`, at the range's last layer)."""
    if not hp.preserve_weight and not hp.neighbour_mean_weight:
        return None
    own = [r["subject"] for r in requests]
    prompts = [r["prompt"] for r in requests]
    means = None
    if hp.neighbour_mean_weight:
        means = {l: float(hp.neighbour_mean_weight) * m for l, m in
                 mean_moments(model, prompts, preserve_subjects(hp.preserve_count, exclude=own), layers).items()}
        if not hp.preserve_weight:
            return means
    if hp.preserve_select == "nearest":
        preserve_subjects(hp.preserve_count)                                          # checks the count
        prefix = lambda p: p[: p.index("{}")]                     # prompts alike up to the subject share keys
        near = {prefix(p): nearest_subjects(model, p, [r["subject"] for r in requests if prefix(r["prompt"]) ==
                                                       prefix(p)], hp.preserve_count, layers[-1])
                for p in sorted({prefix(q): q for q in prompts}.values())}
        subjects = {p: near[prefix(p)] for p in prompts}
    else:
        subjects = preserve_subjects(hp.preserve_count, exclude=own)
    notify(progress, stage="preserve", subjects=hp.preserve_count, prompts=len(set(prompts)))
    moments = preserved_moments(model, prompts, subjects, layers, templates)
    return {l: float(hp.preserve_weight) * m + (0 if means is None else means[l]) for l, m in moments.items()}


def mean_moments(model, prompts, subjects, layers, *, chunk: int = 64) -> dict[int, torch.Tensor]:
    """``{layer: Σ_p m_p m_pᵀ}`` [d_mlp, d_mlp] float64, ``m_p`` the mean over ``subjects`` of the MLP key at the
    subject's last token of the distinct prompt prefix ``p`` read bare (no context template), as a neighbourhood
    prompt reads its subject. Kept in the model's cache."""
    layers = [int(l) for l in layers]
    by_prefix = {p[: p.index("{}") + 2]: subjects for p in prompts}
    total = {l: torch.zeros(model.d_mlp, model.d_mlp, dtype=torch.float64) for l in layers}
    for mean in _prefix_means(model, "memit.neighbour_mean", by_prefix, layers, ["{}"], chunk, outer=False):
        for l in layers:
            total[l] += torch.outer(mean[l], mean[l])
    return total
