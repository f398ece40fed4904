"""The value v* of a ROME or MEMIT edit: the context templates, the rows it is optimised on and the optimisation.

``edit_batch`` builds one edit's rows: the rewrite prompt in every context template followed by the target, then
the KL prompt, each with the index of the subject token the edit writes at. ``optimize_deltas`` runs Adam on one
vector ``delta`` per edit, added at those positions, for several edits at once: each edit has its own delta,
Adam, clamp and stop, and only their forwards are shared (a step of one edit's six short rows uses the CPU
poorly; ROME's evaluation makes a chunk of independent edits together, :func:`interp.editing.rome.edits_together`).
The tokens before each row's subject position do not depend on delta, so they run once and every step runs the
rows' tails against their kept keys and values (:mod:`interp.editing.prefix`): on the test split a step runs about a
quarter of the padded positions the whole rows have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..core import arch
from ..core.caches import model_cache
from ..core.generation import sample_text
from ..core.inputs import pad_rows
from .base import frozen_params, notify
from .prefix import split_rows, tail_logits

TEMPLATE_PREFIXES = ("The", "Therefore", "Because", "I", "You")


def context_templates(model, *, seed: int = 0, spec=((5, 2), (10, 2))) -> list[str]:
    """``["{}", "<sampled prefix>. {}", ...]``: short texts sampled from the model (top-5, seeded) starting with
    "The", "Therefore", "Because", "I", "You" — the key is averaged over these contexts. ``spec`` holds
    (length in tokens incl. the start word, count) pairs. Cached per (model, seed, spec) in the model's cache
    (``"rome.templates"``): later edits of the same model reuse the texts sampled the first time."""
    spec = tuple((int(n), int(c)) for n, c in spec)
    table = model_cache(model, "rome.templates")
    cache_key = (int(seed), spec)
    if cache_key not in table:
        out = ["{}"]
        for i, (length, count) in enumerate(spec):
            starts = [TEMPLATE_PREFIXES[j % len(TEMPLATE_PREFIXES)] for j in range(count)]
            texts = sample_text(model, starts, length - 1, seed=seed * 1000 + i, top_k=5) if count else []
            out += [_clean_template(s + t) for s, t in zip(starts, texts)]
        table[cache_key] = out
    return list(table[cache_key])


def _clean_template(text: str) -> str:
    text = " ".join(text.replace("{", " ").replace("}", " ").split())
    return text + ". {}"


@dataclass
class EditBatch:
    tokens: torch.Tensor        # [n, width], right-padded; rows 0..n_rewrite-1 rewrite prompts, then the KL prompt,
                                # then the neighbour prompts (if any)
    subject_pos: torch.Tensor   # [n] subject's last token
    n_rewrite: int
    target_pos: torch.Tensor    # [n_rewrite, T] positions predicting the target tokens
    kl_pos: int                 # last position of the KL prompt
    target_ids: torch.Tensor    # [T]
    lengths: torch.Tensor       # [n] tokens in each row
    neighbour_pos: torch.Tensor | None = None   # [m] last position of each neighbour row (rows n_rewrite+1..)
    neighbour_share: float = 0.0                # the share of delta added at a neighbour row's subject
    neighbour_weight: float = 0.0               # weight of their mean KL(P_edited || P_orig) in the loss

    @property
    def n_neighbours(self) -> int:
        return 0 if self.neighbour_pos is None else len(self.neighbour_pos)

    def delta_scale(self) -> torch.Tensor:
        """[n] how much of delta each row gets at its subject: 1, a neighbour row ``neighbour_share``."""
        return torch.cat([torch.ones(self.n_rewrite + 1), torch.full((self.n_neighbours,), self.neighbour_share)])


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


def fill_subject(template: str, subject: str) -> tuple[str, int]:
    """Text with the subject filled in, and the character index where the subject ends."""
    start = template.index("{}")
    return template[:start] + subject + template[start + 2:], start + len(subject)


def subject_token_index(model, text: str, subject_end: int, n_chars: int, which: int = -1) -> int:
    """Index (BOS included) of the subject's token ``which`` (-1: its last, 0: its first) in ``text``, where the
    subject is the ``n_chars`` characters ending at ``subject_end``."""
    last = subject_last_index(model, text, subject_end)
    first = subject_last_index(model, text, subject_end - n_chars + 1)
    n = last - first + 1
    if not -n <= which < n:
        raise ValueError(f"subject_token={which}; allowed: -{n}..{n - 1} ({text[subject_end - n_chars:subject_end]!r} "
                         f"is {n} token(s) in {text!r})")
    return first + which % n


def edit_batch(model, prompt, subject, target_ids, templates, kl_prompt, subject_token: int = -1, *,
               neighbours=(), neighbour_share: float = 0.0, neighbour_weight: float = 0.0) -> EditBatch:
    """The v* optimisation's rows: the prompt in every context template followed by the target (all but its last
    token), then the KL prompt; with the edited subject token's index in each row (``subject_token``, counted in
    the subject: -1 its last token). ``neighbours``: other subjects whose bare prompt is read too, with
    ``neighbour_share`` of delta added at their subject, and asked (weight ``neighbour_weight``) to keep their
    next-token distribution: a delta that subjects like this one would follow if they got part of it is
    penalised (MEMIT's spread gives similar keys part of each update; study "memit_shared")."""
    rows, subj, tpos = [], [], []
    T = len(target_ids)
    for tpl in templates:
        text, end = fill_subject(tpl.replace("{}", prompt), subject)
        ids = model.encode(text, prepend_bos=True)
        subj.append(subject_token_index(model, text, end, len(subject), subject_token))
        tpos.append(list(range(len(ids) - 1, len(ids) - 1 + T)))
        rows.append(ids + target_ids[:-1])
    text, end = fill_subject(kl_prompt, subject)
    ids = model.encode(text, prepend_bos=True)
    subj.append(subject_token_index(model, text, end, len(subject), subject_token))
    rows.append(ids)
    kl_pos, last = len(ids) - 1, []
    for other in neighbours:
        text, end = fill_subject(prompt, other)
        ids = model.encode(text, prepend_bos=True)
        subj.append(subject_token_index(model, text, end, len(other), subject_token))
        rows.append(ids)
        last.append(len(ids) - 1)
    toks, lengths = pad_rows(model, rows)
    return EditBatch(toks, torch.tensor(subj), len(templates), torch.tensor(tpos), kl_pos, torch.tensor(target_ids),
                     lengths, torch.tensor(last, dtype=torch.long) if neighbours else None, float(neighbour_share),
                     float(neighbour_weight))


def optimize_delta(model, layer: int, b: EditBatch, hp, target: str, progress, *, value_hook: str | None = None,
                   answered: str = "raise") -> dict:
    """Adam on ``delta`` [d_model] added to the down projection's output (``arch.mlp_value_hook``: where
    ``M k (+ b)`` is read, before any post-norm) at each row's subject position. ``value_hook`` names another
    hook point to optimise at instead (MEMIT: the residual after the last edited layer); the clamp is then
    relative to that hook's value. ``hp``: anything with ROME's v_* / clamp / kl fields. Returns delta, the
    keys at ``layer``, the per-step NLL, the clamp, the mean initial value at the hook (``out_init``) and its
    norm, the target's probability before and the model's greedy answer. A target that already is the greedy
    answer of the bare prompt raises (``answered="raise"``) or leaves delta 0 (``"keep"``, ``answered`` True)."""
    return optimize_deltas(model, layer, [b], hp, [target], progress, value_hook=value_hook, answered=answered)[0]


@dataclass
class _State:
    """One edit's optimisation: its rows among all (``first``, ``n``), delta, Adam and what step 0 measured."""
    b: EditBatch
    target: str
    first: int
    n: int
    delta: torch.Tensor
    opt: torch.optim.Optimizer
    losses: list
    done: bool = False
    answered: bool = False
    kl_init: torch.Tensor | None = None
    nb_init: torch.Tensor | None = None
    out_init: torch.Tensor | None = None
    out_norm: float | None = None
    max_norm: float | None = None
    p_before: float | None = None
    answer: str | None = None
    keys: torch.Tensor | None = None


def optimize_deltas(model, layer: int, batches: Sequence[EditBatch], hp, targets: Sequence[str], progress=None, *,
                    value_hook: str | None = None, answered: str = "raise") -> list[dict]:
    """:func:`optimize_delta` of several edits (``batches[i]`` for ``targets[i]``) at once, each as it would be
    optimised alone: every step runs the rows of the edits still going in one forward, each row with its own
    edit's delta; each edit stops on its own, and its rows leave the later forwards."""
    dev, dtype = model.device_of(layer), model.dtype  # delta lives where its hook runs
    sizes = [b.tokens.shape[0] for b in batches]
    firsts = torch.tensor([0] + sizes).cumsum(0).tolist()
    rows = [r[:k].tolist() for b in batches for r, k in zip(b.tokens, b.lengths)]
    everything = split_rows(model, rows, torch.cat([b.subject_pos for b in batches]))
    states = []
    for b, target, first, n in zip(batches, targets, firsts, sizes):
        delta = torch.zeros(model.d_model, device=dev, dtype=dtype, requires_grad=True)
        states.append(_State(b, target, first, n, delta, torch.optim.Adam([delta], lr=hp.v_lr), []))
    out_name, key_name = value_hook or arch.mlp_value_hook(model, layer), f"blocks.{layer}.mlp.hook_post"
    with frozen_params(model), torch.enable_grad():
        for step in range(hp.v_steps):
            going = [s for s in states if not s.done]
            if not going:
                break
            stepping = _step(model, everything, going, step, hp, out_name, key_name, answered, progress,
                             several=len(states) > 1)
            if not stepping:
                continue
            for s, _ in stepping:
                s.opt.zero_grad()
            sum(loss for _, loss in stepping).backward()
            for s, _ in stepping:
                s.opt.step()
                with torch.no_grad():
                    norm = s.delta.norm()
                    if not torch.isfinite(norm):  # checked before the clamp, which would zero an overflowed delta
                        why = "is NaN" if torch.isnan(norm) else "overflowed"
                        raise FloatingPointError(f"the v* optimisation diverged (the delta's norm {why}); lower v_lr")
                    if norm > s.max_norm:
                        s.delta.mul_(s.max_norm / norm)
    out = []
    for s in states:  # (every delta was checked finite after each of its steps)
        if len(s.losses) > 1 and not bool(s.delta.detach().abs().max() > 0):  # (an answered target stops at step 0)
            raise ValueError(f"the target does not depend on layer {layer}'s MLP output at the subject's last "
                             "token (zero gradient; e.g. the last layer, where no attention follows); choose an "
                             "earlier layer")
        out.append({"delta": s.delta.detach().cpu(), "keys": s.keys, "losses": s.losses, "max_norm": s.max_norm,
                    "out_norm": s.out_norm, "p_before": s.p_before, "answer": s.answer, "out_init": s.out_init,
                    "answered": s.answered})
    return out


def _step(model, everything, going: list[_State], step: int, hp, out_name: str, key_name: str, answered: str,
          progress, several: bool) -> list[tuple[_State, torch.Tensor]]:
    """One forward of the rows of the edits ``going``; records each edit's NLL (and, at step 0, what the edit
    starts from), marks the edits that are done, and returns ``(edit, loss)`` for those that take an Adam step."""
    dev = going[0].delta.device
    idx = torch.cat([torch.arange(s.first, s.first + s.n) for s in going])
    split = everything if len(idx) == everything.tokens.shape[0] else everything.select(idx)
    local = torch.arange(len(idx))
    subj = split.columns(local, torch.cat([s.b.subject_pos for s in going]))         # in split.tokens' columns
    owner = torch.cat([torch.full((s.n,), i) for i, s in enumerate(going)])
    mask = torch.zeros(len(idx), split.tokens.shape[1], 1, dtype=model.dtype)
    mask[local, subj, 0] = torch.cat([s.b.delta_scale() for s in going]).to(model.dtype)
    mask = mask.to(dev)
    sel_rows, sel_pos, tgt, r0 = [], [], [], 0
    for s in going:
        n_rw, T = s.b.target_pos.shape
        m = s.b.n_neighbours
        sel_rows += [r0 + j for j in range(n_rw) for _ in range(T)] + [r0 + n_rw + j for j in range(m + 1)]
        sel_pos += s.b.target_pos.reshape(-1).tolist() + [s.b.kl_pos] + ([] if not m else s.b.neighbour_pos.tolist())
        tgt += s.b.target_ids.repeat(n_rw).tolist()
        r0 += s.n
    seen: dict[str, torch.Tensor] = {}

    def add_delta(t, hook):
        if "out" not in seen:
            seen["out"] = t.detach()[local.to(t.device), subj.to(t.device)].float().cpu()
        deltas = torch.stack([s.delta for s in going])[owner.to(dev)]                   # [rows, d_model]
        return t + (mask * deltas[:, None, :]).to(t.device, t.dtype)

    def read_key(t, hook):
        seen["keys"] = t.detach()[local.to(t.device), subj.to(t.device)].float().cpu()

    hooks = [(out_name, add_delta)] + ([(key_name, read_key)] if step == 0 else [])
    logp = torch.log_softmax(tail_logits(model, split, torch.tensor(sel_rows), torch.tensor(sel_pos), hooks).float(),
                             -1)
    tgt = torch.tensor(tgt)
    stepping, k, t0, r0 = [], 0, 0, 0
    for s in going:
        n_rw, T = s.b.target_pos.shape
        part = logp[k: k + n_rw * T + 1]
        nb_logp = logp[k + n_rw * T + 1: k + n_rw * T + 1 + s.b.n_neighbours]          # [m, vocab]
        tok_nll = -part[:-1].gather(1, tgt[t0: t0 + n_rw * T, None].to(part.device))[:, 0].reshape(n_rw, T)
        nll = tok_nll.mean(1).mean(0)
        kl_logp = part[-1]
        if step == 0:
            _start(model, s, part, tok_nll, seen, r0, hp, answered)
            s.nb_init = nb_logp.detach()
            if s.answered:  # answered="keep" (MEMIT, a later round): nothing to write, delta stays 0
                s.losses.append(float(nll.detach()))
                s.done = True
        k, t0, r0 = k + n_rw * T + 1 + s.b.n_neighbours, t0 + n_rw * T, r0 + s.n
        if s.done:
            continue
        kl = torch.sum(kl_logp.exp() * (kl_logp - s.kl_init))
        decay = hp.v_weight_decay * s.delta.norm() / s.out_norm ** 2
        loss = nll + hp.kl_factor * kl + decay
        extra = {"target": s.target} if several else {}
        if s.b.n_neighbours:
            nb_kl = torch.sum(nb_logp.exp() * (nb_logp - s.nb_init), -1).mean()
            loss = loss + s.b.neighbour_weight * nb_kl
            extra["neighbour_kl"] = float(nb_kl.detach())
        s.losses.append(float(nll.detach()))
        notify(progress, stage="optimize", step=step, nll=s.losses[-1], kl=float(kl.detach()),
               loss=float(loss.detach()), delta_norm=float(s.delta.detach().norm()), **extra)
        if s.losses[-1] < hp.v_loss_stop:
            s.done = True
            continue
        stepping.append((s, loss))
    return stepping


def _start(model, s: _State, part, tok_nll, seen, r0: int, hp, answered: str) -> None:
    """What step 0 measures for edit ``s``: its keys, whether the target already is the model's greedy answer to
    the bare prompt (row 0), the target's probability, the KL reference and the clamp."""
    n_rw, T = s.b.target_pos.shape
    greedy = part[:T].argmax(-1).cpu()
    s.answer = model.tokenizer.decode(greedy.tolist())
    s.answered = torch.equal(greedy, s.b.target_ids)
    if s.answered and answered == "raise":
        raise ValueError(f"target {s.target!r} is already the model's answer to the prompt; choose a different "
                         "target")
    s.keys = seen["keys"][r0: r0 + n_rw + 1]                   # (the neighbour rows are not this subject's)
    s.p_before = float(torch.exp(-tok_nll[0].detach().mean()))
    s.kl_init = part[-1].detach()
    s.out_init = seen["out"][r0: r0 + n_rw].mean(0)
    s.out_norm = float(s.out_init.norm())
    s.max_norm = hp.clamp_norm_factor * s.out_norm
