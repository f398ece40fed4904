"""How causal tracing corrupts the subject: where the subject's tokens are, and the two corruptions.

- ``"noise"`` (Meng et al. 2022): Gaussian noise N(0, noise²) added at ``hook_embed`` to the subject's token
  embeddings. Default ``noise = 3σ`` where σ is the standard deviation of all entries of ``hook_embed`` over the
  tokens of the first 1,000 article titles of the embedded Wikipedia corpus — the paper takes σ over the
  subjects of its fact set, and Wikipedia titles are subjects. (Without the corpus package σ falls back to the
  std of W_E.) The ``samples`` draws come from ``torch.Generator().manual_seed(seed)``.
- ``"replace"``, symmetric token replacement (STR; Zhang & Nanda 2023, "Towards Best Practices of Activation
  Patching"): the subject is swapped for another subject of the same token length, so the corrupted run is an
  ordinary in-distribution prompt (noise pushes the embeddings off the distribution the model was trained on,
  which can inflate effects). One deterministic corrupted run, no samples.

  The replacement must cover exactly the subject's token positions in the prompt, with every other token
  unchanged (checked by tokenizing the prompt with the replacement substituted, so a merge across the subject's
  boundary is caught). Without an explicit ``replacement``, :func:`choose_replacement` picks one: the
  candidates (default :data:`SUBJECTS`, a built-in list of landmarks, people, places and organisations) are put
  in a ``random.Random(seed)`` order; those that fit the subject's positions are run on the prompt, and the
  first whose top-1 next token is NOT the target is taken — a replacement the model maps to the same answer
  (the Louvre for the Eiffel Tower: both in Paris) would corrupt nothing. Candidate groups are searched in turn
  (``trace_facts``: same-relation subjects first, then other records', then the built-in list).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import torch

from ...core import arch
from ...core.caches import model_cache
from ...core.corpus import wiki_documents
from ...core.hooks import capture

CORRUPTIONS = ("noise", "replace")

# Mixed kinds and token lengths, so that most subjects find a same-length partner (the byte-level tiny models
# count characters: short city names cover 5-9 bytes).
SUBJECTS = (
    "The Colosseum", "The Statue of Liberty", "The Sydney Opera House", "The Golden Gate Bridge",
    "The Empire State Building", "The Brandenburg Gate", "The Space Needle", "The Parthenon", "The Taj Mahal",
    "The Kremlin", "The Great Wall", "The Acropolis", "The White House", "The Tower Bridge", "The Vatican",
    "Big Ben", "Mount Everest", "Stonehenge", "Times Square", "Machu Picchu", "Buckingham Palace",
    "Albert Einstein", "Isaac Newton", "Marie Curie", "Charles Darwin", "William Shakespeare", "Leonardo da Vinci",
    "Wolfgang Amadeus Mozart", "Ludwig van Beethoven", "Pablo Picasso", "Napoleon Bonaparte", "Barack Obama",
    "Nelson Mandela", "Mahatma Gandhi", "Cleopatra", "Aristotle", "Plato", "Galileo Galilei", "Nikola Tesla",
    "Microsoft", "Toyota", "Google", "Samsung", "Nokia", "Volkswagen", "Ferrari", "Sony", "IKEA", "Coca-Cola",
    "Berlin", "London", "Madrid", "Vienna", "Tokyo", "Moscow", "Cairo", "Sydney", "Toronto", "Chicago", "Mumbai",
    "Istanbul", "Amsterdam", "Stockholm", "Budapest", "Lisbon", "Prague", "Dublin", "Athens", "Warsaw",
    "Germany", "Japan", "Brazil", "Canada", "Egypt", "India", "Mexico", "Norway", "Australia", "Argentina",
    "The Amazon River", "The Nile", "The Sahara Desert", "The Pacific Ocean", "Lake Victoria", "The Alps",
    "Harvard University", "The United Nations", "NASA", "The Red Cross", "Manchester United", "Real Madrid",
)


# ============================================================================================== the subject
def prompt_and_subject(model, text, subject) -> tuple[torch.Tensor, tuple[int, int]]:
    """Tokens [1, n] (BOS first) and the subject's token range [start, end): the tokens whose characters overlap
    the subject's first occurrence in ``text``."""
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


def check_corruption(corruption, *, noise, samples, replacement) -> int:
    """The number of corrupted runs: ``samples`` (default 10) with noise, 1 with replacement. Settings that belong
    to the other corruption are errors rather than silently ignored."""
    if corruption not in CORRUPTIONS:
        raise ValueError(f"corruption={corruption!r} not known; allowed: {', '.join(map(repr, CORRUPTIONS))}")
    if corruption == "noise":
        if replacement is not None:
            raise ValueError(f"replacement={replacement!r} only applies to corruption='replace' "
                             "(the default corruption is Gaussian noise)")
        return 10 if samples is None else samples
    if noise is not None:
        raise ValueError(f"noise={noise!r} only applies to corruption='noise'; symmetric token replacement adds no "
                         "noise (leave noise=None)")
    if samples not in (None, 1) or isinstance(samples, bool):
        raise ValueError(f"samples={samples!r} with corruption='replace': the replacement run is deterministic, so "
                         "there is exactly one corrupted run; allowed: 1 or None")
    if replacement is not None and (not isinstance(replacement, str) or not replacement.strip()):
        raise ValueError(f"replacement={replacement!r}; allowed: a non-empty subject string, or None to pick one")
    return 1


# ============================================================================================== replacement
def replaced_tokens(model, text, subject, replacement, toks=None, subj=None) -> torch.Tensor:
    """The prompt's tokens [1, n] with ``replacement`` in place of the subject's first occurrence; ValueError
    unless it covers exactly the subject's token positions with every other token unchanged."""
    if toks is None or subj is None:
        toks, subj = prompt_and_subject(model, text, subject)
    char0 = text.find(subject)
    new_text = text[:char0] + replacement + text[char0 + len(subject):]
    new_toks, (r0, r1) = prompt_and_subject(model, new_text, replacement)
    s0, s1 = subj
    if (r1 - r0) != (s1 - s0):
        raise ValueError(f"replacement {replacement!r} is {r1 - r0} tokens in the prompt but subject {subject!r} is "
                         f"{s1 - s0}; symmetric token replacement needs equal token lengths")
    if new_toks.shape[1] != toks.shape[1] or (r0, r1) != subj or not torch.equal(
            torch.cat([new_toks[0, :s0], new_toks[0, s1:]]), torch.cat([toks[0, :s0], toks[0, s1:]])):
        raise ValueError(f"replacement {replacement!r} has the subject's {s1 - s0} tokens but changes the "
                         f"tokenization around them ({new_toks.shape[1]} vs {toks.shape[1]} prompt tokens); pick "
                         "another replacement")
    return new_toks


def choose_replacement(model, text, subject, target_id: int | None, candidates=None, *, seed: int = 0,
                       batch: int = 32) -> tuple[str, torch.Tensor, int | None]:
    """(replacement, its prompt tokens [1, n], the target id) by the rule in the module docstring. ``candidates``:
    None (:data:`SUBJECTS`), a list of strings, or a list of such lists searched in turn. ``target_id`` None: the
    clean run's top-1 (computed here and returned)."""
    groups = [SUBJECTS] if candidates is None else list(candidates)
    if groups and all(isinstance(c, str) for c in groups):
        groups = [groups]
    toks, subj = prompt_and_subject(model, text, subject)
    if target_id is None:
        target_id = int(_top1(model, toks)[0])
    tried = 0
    for group in groups:
        order = sorted({c for c in group if isinstance(c, str) and c.strip() and c != subject})
        random.Random(seed).shuffle(order)  # sorted first: the pick must not depend on the candidates' order
        fits = []
        for cand in order:
            try:
                fits.append((cand, replaced_tokens(model, text, subject, cand, toks, subj)))
            except ValueError:
                continue
        tried += len(order)
        for i in range(0, len(fits), batch):
            chunk = fits[i:i + batch]
            top = _top1(model, torch.cat([t for _, t in chunk]))
            for (cand, new_toks), t in zip(chunk, top.tolist()):
                if t != target_id:
                    return cand, new_toks, target_id
    raise ValueError(f"no replacement found for subject {subject!r} ({subj[1] - subj[0]} tokens in {text!r}) among "
                     f"{tried} candidates: none covers the same token positions and changes the model's answer; "
                     "pass replacement=... (a subject of the same token length)")


def _top1(model, toks) -> torch.Tensor:
    final = f"blocks.{model.n_layers - 1}.hook_resid_post"
    store, _ = capture(model, toks, [final], keep=lambda name, t: t[:, -1].detach(), stop=True,
                       description="choose_replacement")
    return model.unembed(model.final_norm(store[final])).argmax(-1).cpu()


# ============================================================================================== noise
def check_noise(noise) -> float | None:
    """None (the default scale) or a finite std >= 0."""
    if noise is not None and (not isinstance(noise, (int, float)) or isinstance(noise, bool) or not noise >= 0
                              or math.isinf(noise)):
        raise ValueError(f"noise={noise!r}; allowed: a finite number >= 0 (std of the Gaussian), or None")
    return None if noise is None else float(noise)


def noise_level(model, noise) -> tuple[float, str]:
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
            # hook_embed is the scaled table (Gemma: x sqrt(d_model)), so the fallback scales W_E the same way
            memo.update(n_titles=n_titles, std=float(model.W_E.std()) * arch.embed_scale(model),
                        basis="std of W_E entries x the embedding scale")
            return memo["std"]
        ids = torch.tensor([i for t in titles for i in model.encode(t, prepend_bos=False)])[None, : model.n_ctx]
        store, _ = capture(model, ids, ["hook_embed"], stop=True, description="embedding_std")
        memo.update(n_titles=n_titles, std=float(store["hook_embed"].float().std()),
                    basis=f"std of hook_embed over the tokens of {n_titles} Wikipedia titles")
    return memo["std"]


def noise_draws(samples, n_subj, d_model, noise, seed) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return noise * torch.randn(samples, n_subj, d_model, generator=g)


def subject_groups(records: Sequence[tuple[str, str | None]], index: int) -> list[list[str]]:
    """Candidate groups for record ``index`` of (subject, relation) pairs: the other subjects of the same relation,
    then the other records' subjects, then :data:`SUBJECTS`."""
    relation = records[index][1]
    same = [s for i, (s, r) in enumerate(records) if i != index and relation is not None and r == relation]
    other = [s for i, (s, r) in enumerate(records) if i != index and s not in same]
    return [same, other, list(SUBJECTS)]
