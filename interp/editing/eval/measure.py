"""The measurements of the edit evaluation (:mod:`interp.editing.eval.run`), each for many records at once.

- :func:`measure_probs`: for every record, P(target_new) and P(target_true) (length-normalized, ``exp(-mean
  per-token NLL)``) on its rewrite, paraphrase, neighbourhood (and other-paraphrase) prompts, plus whether the
  scored target's first token is the top-1 next token; every prompt of every record in one padded forward (rows
  that are the same tokens — a prompt followed by a one-token target — run once);
- :func:`generation_entropies`: seeded top-5 samples of every record's generation prompts in one batch (the KV
  cache when no hook is attached, :mod:`interp.core.generation`), each record with its own generator;
- the loss drift on Wikipedia texts is :mod:`interp.editing.drift`'s;
- :func:`lens_rows` / :func:`lens_rows_many`: the logit lens of the rewrite prompt (of every record in one forward).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections import Counter
from typing import Mapping, Sequence

import torch

from ...analyses.lens import logit_lens_last
from ...core.generation import sample_text, sample_text_groups, selected_logits
from ...core.inputs import pad_rows
from ..facts import Fact
from ..matrices import row_matrices

# Prompt groups of a record: (group, metric name, which target must win: 0 = target_new, 1 = target_true).
GROUPS = (("rewrite", "efficacy", 0), ("paraphrase", "paraphrase", 0), ("neighborhood", "neighborhood", 1),
          ("paraphrase_other", "paraphrase_other", 0), ("neighborhood_unedited", "neighborhood_unedited", 1))
OTHER_KEY = "paraphrase_prompts_other"  # record key of the second paraphrase set (scored on its own)


# ============================================================================================ probabilities
def score_prompts(model, prompts: Sequence[str], targets: Sequence[str], *, batch_size: int = 64,
                  variants: Sequence[Mapping] | None = None, groups: Sequence[int] | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(nll, top1)``: mean per-token NLL (nats, float64 [n]) of ``targets[i]`` continuing ``prompts[i]`` and the
    model's top-1 next token after the prompt (long [n]). Tokens: BOS + the prompt's tokens + the target's
    tokens (tokenized on its own, as the edits do). Identical token rows run once; ``batch_size`` rows a forward.
    ``variants`` / ``groups``: prompt ``i`` is scored under the down projections ``variants[groups[i]]``
    (:func:`interp.editing.matrices.row_matrices`; rows are shared only within a group)."""
    if len(prompts) != len(targets):
        raise ValueError(f"{len(prompts)} prompts but {len(targets)} targets")
    groups = [0] * len(prompts) if groups is None else [int(g) for g in groups]
    if len(groups) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(groups)} groups")
    enc_p: dict[str, list[int]] = {}
    enc_t: dict[str, list[int]] = {}
    rows: dict[tuple, int] = {}
    pairs = []  # (row index, prompt length, target ids)
    for p, t, g in zip(prompts, targets, groups):
        pt = enc_p[p] if p in enc_p else enc_p.setdefault(p, model.to_tokens(p)[0].tolist())
        tt = enc_t[t] if t in enc_t else enc_t.setdefault(t, model.target_tokens(t))
        key = (g, tuple(pt + tt[:-1]))
        pairs.append((rows.setdefault(key, len(rows)), len(pt), tt))
    unique = list(rows)
    # rows of like length share a forward: a chunk is padded to its longest row
    order = sorted(range(len(unique)), key=lambda r: len(unique[r][1]))
    wanted_of: dict[int, list[int]] = {}
    for r, n, tt in pairs:
        wanted_of.setdefault(r, []).extend(n - 1 + i for i in range(len(tt)))
    logp_at: dict[tuple[int, int], torch.Tensor] = {}
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        wanted = [(j, r, p) for j, r in enumerate(chunk) for p in sorted(set(wanted_of[r]))]
        toks, _ = pad_rows(model, [list(unique[r][1]) for r in chunk])
        sel_r = torch.tensor([j for j, _, _ in wanted])
        sel_p = torch.tensor([p for _, _, p in wanted])
        with torch.no_grad(), _under(model, variants, [unique[r][0] for r in chunk]):
            logp = torch.log_softmax(selected_logits(model, toks, sel_r, sel_p).to(torch.float64).cpu(), -1)
        logp_at.update({(r, p): logp[i] for i, (_, r, p) in enumerate(wanted)})
    nll, top1 = [], []
    for r, n, tt in pairs:
        nll.append(torch.stack([-logp_at[(r, n - 1 + i)][tok] for i, tok in enumerate(tt)]).mean())
        top1.append(int(logp_at[(r, n - 1)].argmax()))
    return torch.stack(nll), torch.tensor(top1, dtype=torch.long)


def target_nll(model, prompts: Sequence[str], targets: Sequence[str], *, batch_size: int = 64) -> torch.Tensor:
    """Mean per-token NLL (nats) of ``targets[i]`` continuing ``prompts[i]`` -> float64 [n] (see
    :func:`score_prompts`)."""
    return score_prompts(model, prompts, targets, batch_size=batch_size)[0]


def fact_groups(fact: Fact, edited: frozenset = frozenset()) -> dict[str, list[str]]:
    """The scored prompt groups of a record; ``paraphrase_other`` only when it has ``paraphrase_prompts_other``.
    ``neighborhood_unedited``: the neighbourhood prompts that are not in ``edited``, the rewrite prompts of the
    batch the record is edited with. A neighbour whose own fact the batch rewrites should change; counting it as
    collateral damage measures the batch's make-up, not the editor's specificity (at 464 facts in one batch, 56%
    of the project's test neighbourhood prompts name an edited subject)."""
    groups = {"rewrite": [fact.text], "paraphrase": list(fact.paraphrase_prompts),
              "neighborhood": list(fact.neighborhood_prompts)}
    other = (getattr(fact, "extra", None) or {}).get(OTHER_KEY)
    if other:
        if not isinstance(other, (list, tuple)) or not all(isinstance(s, str) and s.strip() for s in other):
            raise ValueError(f"record {fact.case_id!r}: {OTHER_KEY} must be a list of non-empty strings, got "
                             f"{other!r:.120}")
        groups["paraphrase_other"] = list(other)
    groups["neighborhood_unedited"] = [q for q in groups["neighborhood"] if q not in edited]
    return groups


def measure_probs(model, facts: Sequence[Fact], variants: Sequence[Mapping] | None = None,
                  edited: Sequence[frozenset] | None = None) -> list[dict]:
    """Per record ``{"probs": {group: [n, 2] (P(new), P(true))}, "hits": {group: bool [n]}}``: every prompt of
    every record scored in one batch (:func:`score_prompts`; a prompt in two groups is scored once). ``hits``: the
    target the group wants (target_new on rewrite / paraphrases, target_true on neighbours) has its first token as
    the top-1 next token. ``variants``: record ``i`` is measured under the down projections ``variants[i]`` (see
    :func:`measure`); ``edited``: record ``i``'s batch's rewrite prompts (:func:`fact_groups`; default: its own)."""
    uniq, which = distinct_variants(variants, len(facts))
    edited = [frozenset([f.text]) for f in facts] if edited is None else list(edited)
    if len(edited) != len(facts):
        raise ValueError(f"{len(facts)} records but {len(edited)} edited sets; give one per record")
    prompts, targets, row_groups, spans = [], [], [], []
    for f, v, e in zip(facts, which, edited):
        groups = fact_groups(f, e)
        k = len(prompts) // 2
        for g in groups.values():
            for p in g:
                prompts += [p, p]
                targets += [f.target_new, f.target_true]
                row_groups += [v, v]
        spans.append((groups, k))
    nll, top1 = (score_prompts(model, prompts, targets, variants=uniq, groups=row_groups) if prompts
                 else (torch.zeros(0), torch.zeros(0)))
    p = torch.exp(-nll).reshape(-1, 2)  # [prompt, (new, true)]
    first = top1.reshape(-1, 2)[:, 0]   # the top-1 token does not depend on the target
    out = []
    for f, (groups, k) in zip(facts, spans):
        want = {0: model.target_tokens(f.target_new)[0], 1: model.target_tokens(f.target_true)[0]}
        probs, hits = {}, {}
        for name, _, side in GROUPS:
            if name not in groups:
                continue
            n = len(groups[name])
            probs[name], hits[name] = p[k: k + n], first[k: k + n] == want[side]
            k += n
        out.append({"probs": probs, "hits": hits})
    return out


def fact_probs(model, fact: Fact) -> dict[str, torch.Tensor]:
    """{"rewrite"|"paraphrase"|"neighborhood"[|"paraphrase_other"]: (P(new), P(true)) [n, 2]}, length-normalized
    probabilities."""
    return measure_probs(model, [fact])[0]["probs"]


def fact_scores(probs: dict[str, torch.Tensor], hits: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
    """The paper's scores and magnitudes from :func:`fact_probs` (fractions in 0..1, magnitudes in -1..1) and,
    with ``hits`` (:func:`measure_probs`), the strict accuracy form ``*_acc``: the share of prompts whose wanted
    target is the top-1 next token. A group the record lacks (``paraphrase_other``) scores NaN."""
    out = {}
    for group, metric, side in GROUPS:
        pr = probs.get(group)
        if pr is None or len(pr) == 0:
            out[f"{metric}_score"] = out[f"{metric}_magnitude"] = float("nan")
            if hits is not None:
                out[f"{metric}_acc"] = float("nan")
            continue
        win, lose = pr[:, side], pr[:, 1 - side]
        out[f"{metric}_score"] = float((win > lose).double().mean())
        out[f"{metric}_magnitude"] = float((win - lose).mean())
        if hits is not None:
            out[f"{metric}_acc"] = float(hits[group].double().mean())
    return out


# ============================================================================================ generation
def ngram_entropy(text: str, ns=(2, 3), weights=(2 / 3, 4 / 3)) -> float:
    """The ROME paper's generation entropy of one text: mean over n of weight_n * entropy (bits) of its word
    n-gram distribution (words: runs of letters/digits, or single punctuation marks)."""
    words = re.findall(r"\w+|[^\w\s]", text.lower())
    vals = []
    for n, w in zip(ns, weights):
        grams = Counter(tuple(words[i: i + n]) for i in range(len(words) - n + 1))
        total = sum(grams.values())
        h = -sum(c / total * math.log2(c / total) for c in grams.values()) if total else 0.0
        vals.append(w * h)
    return sum(vals) / len(vals)


def generation_entropy(model, prompts: Sequence[str], *, n_tokens: int = 40, seed: int = 0
                       ) -> tuple[float, list[str]]:
    """(mean n-gram entropy, texts) of seeded top-5 samples of ``n_tokens`` continuing each prompt."""
    texts = sample_text(model, list(prompts), n_tokens, seed=seed, top_k=5)
    return sum(ngram_entropy(p + t) for p, t in zip(prompts, texts)) / len(texts), texts


def generation_entropies(model, prompt_groups: Sequence[Sequence[str]], *, n_tokens: int = 40,
                         seeds: Sequence[int], variants: Sequence[Mapping] | None = None
                         ) -> list[tuple[float, list[str]]]:
    """:func:`generation_entropy` of several records in one batch, record ``g`` seeded ``seeds[g]`` (the same
    samples as one call per record) and, with ``variants``, sampled under the down projections ``variants[g]``."""
    uniq, which = distinct_variants(variants, len(prompt_groups))
    with _under(model, uniq, [v for v, g in zip(which, prompt_groups) for _ in g]):
        samples = sample_text_groups(model, prompt_groups, n_tokens, seeds=seeds, top_k=5)
    out = []
    for prompts, texts in zip(prompt_groups, samples):
        out.append((sum(ngram_entropy(p + t) for p, t in zip(prompts, texts)) / len(texts), texts))
    return out


# ============================================================================================ logit lens
def lens_rows(model, fact: Fact) -> dict[str, float | None]:
    """Logit lens of the rewrite prompt's last position (``interp.lens.logit_lens``): first lens row from which
    the first token of target_new (resp. target_true) stays top-1, and their final-row probabilities."""
    return lens_rows_many(model, [fact])[0]


def lens_rows_many(model, facts: Sequence[Fact], variants: Sequence[Mapping] | None = None) -> list[dict]:
    """:func:`lens_rows` of every record in one forward (``interp.analyses.lens.logit_lens_last``), record ``i``
    under the down projections ``variants[i]`` when given."""
    uniq, which = distinct_variants(variants, len(facts))
    ids = [[model.target_tokens(f.target_new)[0], model.target_tokens(f.target_true)[0]] for f in facts]
    with _under(model, uniq, which):
        lenses = logit_lens_last(model, [f.text for f in facts], ids, k=1)
    out = []
    for lens, (new_id, true_id) in zip(lenses, ids):
        new, true = lens.target_curve(new_id), lens.target_curve(true_id)
        out.append({"lens_new_row": lens.first_top1(new_id, stable=True),
                    "lens_true_row": lens.first_top1(true_id, stable=True),
                    "lens_p_new": float(new["prob"][-1]), "lens_p_true": float(true["prob"][-1]),
                    "_curves": {"p_new": new["prob"].tolist(), "p_true": true["prob"].tolist()}})
    return out


def _under(model, variants: list | None, groups: Sequence[int]):
    """:func:`interp.editing.matrices.row_matrices` for the rows of a batch (row ``i`` under ``variants[groups[i]]``),
    or nothing without variants."""
    if variants is None:
        return contextlib.nullcontext()
    return row_matrices(model, variants, torch.tensor(list(groups), dtype=torch.long))


def distinct_variants(variants: Sequence[Mapping] | None, n: int) -> tuple[list | None, list[int]]:
    """``(distinct variants, index of each record's)``: records that share one variant object (a batch edited
    together) share its rows' group."""
    if variants is None:
        return None, [0] * n
    if len(variants) != n:
        raise ValueError(f"{n} records but {len(variants)} variants; give one per record")
    uniq, index = [], {}
    for v in variants:
        index.setdefault(id(v), len(uniq))
        if index[id(v)] == len(uniq):
            uniq.append(v)
    return uniq, [index[id(v)] for v in variants]


def measure(model, facts: Sequence[Fact], seeds: Sequence[int], *, variants: Sequence[Mapping] | None = None,
            edited: Sequence[frozenset] | None = None, generation: bool = True, gen_tokens: int = 40,
            lens: bool = True) -> list[dict]:
    """Per record, every before/after measurement except the drift: scores in both forms, generation entropy
    (and the first sample), logit-lens rows (``_curves`` holds the lens curves).

    ``variants``: one ``{layer: down projection}`` per record (edited matrices kept after an edit was reverted):
    record ``i`` is measured as if they were written into the model. The probabilities and samples of all records
    run batched with each row under its own matrices (:func:`interp.editing.matrices.row_matrices`), the lenses too.
    ``edited``: per record, the rewrite prompts of its batch (:func:`fact_groups`)."""
    probs = measure_probs(model, facts, variants, edited)
    gens = (generation_entropies(model, [f.generation_prompts for f in facts], n_tokens=gen_tokens, seeds=seeds,
                                 variants=variants)
            if generation else [(float("nan"), [None])] * len(facts))
    lenses = lens_rows_many(model, facts, variants) if lens else [{}] * len(facts)
    out = []
    for pr, (ent, texts), lens_row in zip(probs, gens, lenses):
        row = fact_scores(pr["probs"], pr["hits"])
        row["gen_entropy"], row["gen_text"] = ent, texts[0]
        row.update(lens_row)
        out.append(row)
    return out
