"""Logit lens: ``interp.logit_lens(model, text, targets=..., k=5, positions=None)``.

Read the residual stream after the embedding and after every layer as if it were the last one: apply the
model's own final norm (``model.final_norm``: RMSNorm with its learned scale, or LayerNorm) and the unembedding,
and look at the next-token distribution each layer would predict.

Rows of the result are numbered 0..n_layers: row ``i`` is the residual entering block ``i``
(``blocks.{i}.hook_resid_pre``; row 0 is the embedding), and row ``n_layers`` is the final residual
(``blocks.{n_layers-1}.hook_resid_post``), whose lens is the model's own output distribution. Labels follow
TransformerLens's ``accumulated_resid``: ``"0_pre" .. "{n-1}_pre", "final"``. "A target becomes top-1 at row
``i``" therefore means: after ``i`` of the ``n_layers`` blocks.

Targets follow interp's one target policy (:func:`interp.core.inputs.target_id`): a token id or a string; a
string of several tokens is scored by its FIRST token (the token the model must predict next), with a
``UserWarning`` naming the split. The result keeps the text given as the label (``targets``) and names the token
actually scored (``scored_tokens``; also in ``to_json`` and the summary). Rank = number of vocabulary entries with
a strictly larger logit (0 = top-1).

The final row is the model's own output (its logits from the same forward pass): recomputing it with a matmul of
another shape reorders float32 sums, which moves SmolLM2's logits by up to ~3e-5; taking the model's own keeps
the lens's last row identical to ``model.run``. The other rows go through ``model.final_norm`` and ``W_U``.

Cost. One forward pass, capturing only the requested positions of the n_layers residuals ``resid_pre``. Their
unembedding is done in row chunks of ~64 MB of logits with one matmul each; per chunk: a block-max top-k, the
target logits, one log-sum-exp sweep (exp2 of log2(e)-scaled logits: several times faster than exp on CPU)
and one in-place comparison per target for its rank, so no softmax over the vocabulary is ever materialized.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..core.hooks import capture
from ..core.inputs import check_k, check_pos, decode, one_text, pad_rows, target_list
from ..core.inputs import positions as check_positions
from ..core.results import Result, new_figure, save_fig
from .attention import token_label

_CHUNK_ELEMS = 1 << 24  # logits per unembedding chunk (64 MB in float32)
PROB_FLOOR = 1e-12  # plot_targets draws smaller probabilities at this floor, hollow, and says so
_LOG2E = 1.4426950408889634


def resid_names(model) -> list[str]:
    """Hook names of the n_layers+1 lens rows: resid_pre of every block, then the final resid_post."""
    return [f"blocks.{i}.hook_resid_pre" for i in range(model.n_layers)] + \
        [f"blocks.{model.n_layers - 1}.hook_resid_post"]


def layer_labels(n_layers: int) -> list[str]:
    return [f"{i}_pre" for i in range(n_layers)] + ["final"]


# ---------------------------------------------------------------------------------------------- core maths
def _block_topk(logits: torch.Tensor, k: int, block: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of each row of ``logits`` [rows, V] via block maxima: the k blocks with the largest maxima hold the
    k largest entries, so one cheap max pass plus a top-k over k*block candidates replaces a full top-k."""
    rows, V = logits.shape
    nb = V // block
    if nb <= 2 * k or V < 4096:
        return logits.topk(k, -1)
    maxima = logits[:, : nb * block].reshape(rows, nb, block).amax(-1)
    if V % block:
        maxima = torch.cat([maxima, logits[:, nb * block:].amax(-1, keepdim=True)], 1)
    _, blocks = maxima.topk(k, -1)  # [rows, k]
    offs = torch.arange(block, device=logits.device)
    cand = (blocks[:, :, None] * block + offs).reshape(rows, -1)  # [rows, k*block]
    valid = cand < V
    vals = logits.gather(1, cand.clamp(max=V - 1)).masked_fill(~valid, float("-inf"))
    top_v, top_i = vals.topk(k, -1)
    return top_v, cand.gather(1, top_i)


def _summarise(logits: torch.Tensor, k: int, tgt: torch.Tensor, scratch: torch.Tensor | None = None
               ) -> dict[str, torch.Tensor]:
    """Top-k ids/probs and target logits/probs/ranks of each row of ``logits`` [rows, V] (float32; consumed:
    it is overwritten in place, so no softmax tensor is ever allocated). ``scratch``: a float buffer at least
    as large as ``logits``, reused between chunks."""
    T = len(tgt)
    top_v, top_i = _block_topk(logits, k)
    t_logits = logits.index_select(1, tgt)  # [rows, T]
    m = top_v[:, :1]
    if T:
        if scratch is None or scratch.numel() < logits.numel():
            scratch = torch.empty_like(logits)
        work = scratch.view(-1)[: logits.numel()].view(logits.shape)
        torch.sub(logits, m, out=work)
    else:
        work = logits.sub_(m)
    # log-sum-exp in one sweep; exp2 of the log2(e)-scaled logits is several times faster than exp on CPU
    lse = m[:, 0] + work.mul_(_LOG2E).exp2_().sum(-1).log()
    ranks = torch.empty(logits.shape[0], T, dtype=torch.long, device=logits.device)
    for j in range(T):
        # in-place float 0/1 comparison then a float sum (exact below 2**24): ~10x faster on CPU than
        # counting a bool tensor; the last target may consume the logits themselves
        dst = logits if j == T - 1 else work.copy_(logits)
        ranks[:, j] = dst.gt_(t_logits[:, j:j + 1]).sum(-1).long()
    return {"top_ids": top_i, "top_probs": (top_v - lse[:, None]).exp(), "target_logits": t_logits,
            "target_probs": (t_logits - lse[:, None]).exp(), "target_ranks": ranks}


def lens_stats(model, normed: torch.Tensor, k: int, target_ids: Sequence[int],
               final_logits: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Unembed ``normed`` [rows, d_model] (already through the final norm) in chunks of ~64 MB of logits and
    summarise each row (see :func:`_summarise`); then append the rows of ``final_logits`` [P, V] if given.
    Large chunks keep the matmul efficient and the number of tensor ops (each a sync point when threads
    share busy cores) small."""
    W_U = model.module.W_U  # [d_model, d_vocab] on the model's device
    b_U = getattr(model.module, "b_U", None)
    if b_U is not None and not bool(b_U.any()):
        b_U = None  # an all-zero bias (SmolLM2) would cost a pass over the logits for nothing
    dev = W_U.device
    normed = normed.to(dev, W_U.dtype)
    tgt = torch.tensor(list(target_ids), dtype=torch.long, device=dev)
    step = max(1, _CHUNK_ELEMS // model.d_vocab)
    parts, scratch = [], None
    with torch.no_grad():
        for s in range(0, normed.shape[0], step):
            logits = normed[s:s + step] @ W_U
            if b_U is not None:
                logits += b_U
            logits = logits.float()
            if scratch is None and len(tgt):
                scratch = torch.empty_like(logits)
            parts.append({key: v.cpu() for key, v in _summarise(logits, k, tgt, scratch).items()})
        if final_logits is not None:
            final = final_logits.to(dev, torch.float32, copy=True)  # consumed by _summarise
            parts.append({key: v.cpu() for key, v in _summarise(final, k, tgt).items()})
    return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}


# ---------------------------------------------------------------------------------------------- entry point
def logit_lens(model, text, *, targets=None, k: int = 5, positions=None) -> LogitLensResult:
    """Logit lens of ``text`` (string, BOS prepended, or token tensor) at ``positions`` (int, list, or None for
    every position) over the n_layers+1 residuals. ``targets``: a string / token id or a list of them (the target
    policy of :func:`interp.core.inputs.target_id`: a multi-token string is scored by its first token)."""
    return run_lens(model, text, targets=targets, k=k, positions=positions)


def run_lens(model, text, *, targets=None, k: int = 5, positions=None, translate=None) -> LogitLensResult:
    """The lens machinery shared by the logit and the tuned lens: ``translate`` (None: the logit lens) maps the
    stacked residuals [n_layers, P, d_model] to what goes through the final norm (the tuned lens's translators);
    the final row is the model's own output either way, and the result is marked ``tuned`` when translated."""
    toks = one_text(model, text)
    n = toks.shape[1]
    pos = check_positions(positions, n)
    k = check_k(model, k)
    tgts = target_list(model, targets)
    ids = [t.id for t in tgts]
    names = resid_names(model)[:-1]  # the final row is the model's own output, read from the same forward
    idx = torch.tensor(pos)
    store, logits = capture(model, toks, names, keep=_rows_at(model, idx))
    resid = torch.stack([store[nm] for nm in names])  # [n_layers, P, d_model]
    if translate is not None:
        resid = translate(resid)
    normed = model.final_norm(resid.reshape(-1, model.d_model))
    stats = lens_stats(model, normed, k, ids, final_logits=logits[0].index_select(0, idx.to(logits.device)))
    L1, P = model.n_layers + 1, len(pos)
    shaped = {key: v.reshape(L1, P, *v.shape[1:]) for key, v in stats.items()}
    return _result(model, toks[0], pos, shaped, tgts, tuned=translate is not None)


def logit_lens_last(model, texts: Sequence[str], targets: Sequence, *, k: int = 5) -> list[LogitLensResult]:
    """:func:`logit_lens` of each text at its last position, every text in one right-padded forward (a causal
    model's last real position never sees the padding after it), so the weights are read once for all of them.
    ``targets[i]``: text ``i``'s targets (as for :func:`logit_lens`). Each result equals ``logit_lens(model,
    texts[i], targets=targets[i], k=k, positions=[-1])`` up to float rounding."""
    if len(targets) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(targets)} target lists; give one per text")
    if not texts:
        return []
    k = check_k(model, k)
    rows = [one_text(model, t)[0] for t in texts]
    toks, lengths = pad_rows(model, [r.tolist() for r in rows])
    last = lengths - 1
    tgts = [target_list(model, t) for t in targets]
    union = sorted({t.id for ts in tgts for t in ts})
    names = resid_names(model)[:-1]
    home, ar = model.device, torch.arange(len(texts))

    def keep(name, t):  # each row's last position; a 2-D [pos, d_model] is shared by the batch
        rows_at = t[ar.to(t.device), last.to(t.device)] if t.ndim >= 3 else t.index_select(0, last.to(t.device))
        return rows_at.detach().to(home)

    store, logits = capture(model, toks, names, keep=keep)
    resid = torch.stack([store[nm] for nm in names], 1)                  # [R, n_layers, d_model]
    normed = model.final_norm(resid.reshape(-1, model.d_model))
    final = logits[ar.to(logits.device), last.to(logits.device)]         # [R, vocab]
    stats = lens_stats(model, normed, k, union, final_logits=final)      # rows: R * n_layers, then R
    R, L = len(texts), model.n_layers
    out = []
    for i, (row, ts) in enumerate(zip(rows, tgts)):
        cols = torch.tensor([union.index(t.id) for t in ts], dtype=torch.long)
        shaped = {}
        for key, v in stats.items():
            v = torch.cat([v[i * L:(i + 1) * L], v[R * L + i: R * L + i + 1]])        # [n_layers + 1, ...]
            if key.startswith("target_"):
                v = v.index_select(1, cols)
            shaped[key] = v[:, None]                                                   # one position
        out.append(_result(model, row, [int(last[i])], shaped, ts, tuned=False))
    return out


def _result(model, toks: torch.Tensor, pos: list[int], shaped: dict, tgts, *, tuned: bool) -> LogitLensResult:
    tok_strs = [decode(model, int(t)) for t in toks]
    return LogitLensResult(str_tokens=tok_strs, token_ids=toks.tolist(), positions=pos, top_ids=shaped["top_ids"],
                           top_probs=shaped["top_probs"], targets=[t.label for t in tgts],
                           target_ids=[t.id for t in tgts], target_logits=shaped["target_logits"],
                           target_probs=shaped["target_probs"], target_ranks=shaped["target_ranks"],
                           n_layers=model.n_layers, source=getattr(model, "source", ""),
                           decode=lambda i: decode(model, i), scored_tokens=[t.token for t in tgts], tuned=tuned)


def _rows_at(model, pos_index: torch.Tensor):
    """A ``capture`` keep-function taking the analysed positions of batch row 0, gathered on ``model.device``
    so a model spread over several devices still yields one stackable tensor."""
    home = model.device

    def keep(name, t):
        # [batch, pos, ...]; a 2-D [pos, d_model] is shared by the batch (e.g. a toy model's hook_pos_embed)
        return (t[0] if t.ndim >= 3 else t).detach().index_select(0, pos_index.to(t.device)).to(home)
    return keep


# ---------------------------------------------------------------------------------------------- result
@dataclass(repr=False)
class LogitLensResult(Result):
    str_tokens: list[str]  # the whole input (BOS included)
    token_ids: list[int]
    positions: list[int]  # analysed positions (indices into str_tokens)
    top_ids: torch.Tensor  # [n_layers+1, P, k]
    top_probs: torch.Tensor  # [n_layers+1, P, k]
    targets: list[str]
    target_ids: list[int]
    target_logits: torch.Tensor  # [n_layers+1, P, T]
    target_probs: torch.Tensor  # [n_layers+1, P, T]
    target_ranks: torch.Tensor  # [n_layers+1, P, T] (0 = top-1)
    n_layers: int
    source: str = ""
    decode: Callable[[int], str] = field(default=str, repr=False)
    _strs: dict = field(default_factory=dict, repr=False)
    # text of the token actually scored per target (differs from the label when a multi-token string is scored
    # by its first token); None -> the labels
    scored_tokens: list[str] | None = None
    tuned: bool = False  # rows 0..n_layers-1 read through a tuned lens's translators (interp.tuned_lens)

    def __post_init__(self):
        if self.scored_tokens is None:
            self.scored_tokens = list(self.targets)

    # -------------------------------------------------------------------------------------- access
    @property
    def kind(self) -> str:
        """"tuned" or "logit": which lens read the rows below the final one."""
        return "tuned" if self.tuned else "logit"

    @property
    def labels(self) -> list[str]:
        return layer_labels(self.n_layers)

    def token(self, token_id: int) -> str:
        if token_id not in self._strs:
            self._strs[token_id] = self.decode(int(token_id))
        return self._strs[token_id]

    def _col(self, pos: int) -> int:
        p = check_pos(pos, len(self.str_tokens))
        if p not in self.positions:
            raise ValueError(f"position {pos} was not analysed; analysed positions: {self.positions}")
        return self.positions.index(p)

    def _row(self, layer: int) -> int:
        L1 = self.n_layers + 1
        if isinstance(layer, bool) or not isinstance(layer, int) or not -L1 <= layer < L1:
            raise ValueError(f"lens layer {layer!r} out of range: allowed 0..{self.n_layers} (0 = embedding, "
                             f"{self.n_layers} = final residual) or -{L1}..-1")
        return layer % L1

    def _tgt(self, target) -> int:
        if not self.targets:
            raise ValueError("this lens has no targets; pass targets=[...] to logit_lens")
        if target is None:
            return 0
        if isinstance(target, int) and not isinstance(target, bool) and target in self.target_ids:
            return self.target_ids.index(target)
        if target in self.targets:
            return self.targets.index(target)
        raise ValueError(f"target {target!r} not in this lens; its targets: {self.targets}")

    def top(self, layer: int, pos: int = -1) -> list[tuple[str, float]]:
        """[(token, prob)] top-k at lens row ``layer`` and input position ``pos``."""
        r, c = self._row(layer), self._col(pos)
        return [(self.token(int(i)), float(p)) for i, p in zip(self.top_ids[r, c], self.top_probs[r, c])]

    def target_curve(self, target=None, pos: int = -1) -> dict[str, torch.Tensor]:
        """{"prob", "logit", "rank"} of one target over the n_layers+1 rows at ``pos``."""
        j, c = self._tgt(target), self._col(pos)
        return {"prob": self.target_probs[:, c, j], "logit": self.target_logits[:, c, j],
                "rank": self.target_ranks[:, c, j]}

    def first_top1(self, target=None, pos: int = -1, *, stable: bool = False) -> int | None:
        """First lens row where ``target`` is top-1 at ``pos`` (``stable=True``: from which it stays top-1 up
        to the final row). None if never."""
        ranks = self.target_curve(target, pos)["rank"].tolist()
        if stable:
            row = None
            for i in range(len(ranks) - 1, -1, -1):
                if ranks[i] != 0:
                    break
                row = i
            return row
        return next((i for i, r in enumerate(ranks) if r == 0), None)

    # -------------------------------------------------------------------------------------- tables
    def to_frame(self):
        """One row per (lens row, position): top-1 and top-k, and prob/logit/rank of each target."""
        import pandas as pd

        recs = []
        for r, label in enumerate(self.labels):
            for c, p in enumerate(self.positions):
                rec = {"layer": r, "label": label, "pos": p, "input": self.str_tokens[p],
                       "top1": self.token(int(self.top_ids[r, c, 0])), "p_top1": float(self.top_probs[r, c, 0]),
                       "top_k": " | ".join(f"{self.token(int(i))!r} {float(q):.3f}"
                                           for i, q in zip(self.top_ids[r, c], self.top_probs[r, c]))}
                for j, t in enumerate(self.targets):
                    rec[f"p({t})"] = float(self.target_probs[r, c, j])
                    rec[f"logit({t})"] = float(self.target_logits[r, c, j])
                    rec[f"rank({t})"] = int(self.target_ranks[r, c, j])
                recs.append(rec)
        return pd.DataFrame(recs).set_index(["layer", "pos"])

    def target_name(self, j: int) -> str:
        """Target ``j`` as the output names it: its label, plus the token scored when that differs."""
        t, tok = self.targets[j], self.scored_tokens[j]
        return repr(t) if t == tok else f"{t!r} (scored as its first token {tok!r})"

    def summary(self) -> str:
        last = self.positions[-1]
        s = (f"{self.kind} lens over {self.n_layers + 1} residuals x {len(self.positions)} positions"
             f" ({self.source}); final top-1 at {self.str_tokens[last]!r}: {self.top(-1, last)[0][0]!r}")
        for j, t in enumerate(self.targets):
            row = self.first_top1(t, last, stable=True)
            name = self.target_name(j)
            s += f"; {name} top-1 from row {row}" if row is not None else f"; {name} never stays top-1"
        return s

    def to_json(self) -> dict:
        """Top-k per (row, position) and each target's curves at the last analysed position; every target names
        the token actually scored (``scored_token``)."""
        out = {"result": type(self).__name__, "lens": self.kind, "summary": self.summary(),
               "tokens": self.str_tokens, "positions": self.positions, "layers": self.labels,
               "top": [[[{"token": tok, "prob": p} for tok, p in self.top(r, pos)] for pos in self.positions]
                       for r in range(self.n_layers + 1)],
               "scored_tokens": list(self.scored_tokens), "targets": {}}
        for j, t in enumerate(self.targets):
            c = len(self.positions) - 1
            out["targets"][t] = {"token_id": self.target_ids[j], "scored_token": self.scored_tokens[j],
                                 "position": self.positions[-1],
                                 "prob": self.target_probs[:, c, j].tolist(),
                                 "logit": self.target_logits[:, c, j].tolist(),
                                 "rank": self.target_ranks[:, c, j].tolist(),
                                 "first_top1_row": self.first_top1(t, self.positions[-1]),
                                 "stable_top1_row": self.first_top1(t, self.positions[-1], stable=True)}
        return out

    # -------------------------------------------------------------------------------------- plots
    def plot(self, *, out=None, max_chars: int = 8):
        """The logit-lens picture: lens rows (down, embedding at the bottom) x positions, coloured by the top-1
        probability and annotated with the top-1 token."""
        L1, P = self.n_layers + 1, len(self.positions)
        fig = new_figure(figsize=(min(2.0 + 0.9 * P, 24), min(1.5 + 0.28 * L1, 16)))
        ax = fig.add_subplot(1, 1, 1)
        probs = self.top_probs[:, :, 0].numpy()
        im = ax.imshow(probs, aspect="auto", origin="lower", cmap="Blues", vmin=0, vmax=1)
        size = max(4, min(8, 60 // max(P, 1) + 3))
        for r in range(L1):
            for c in range(P):
                tok = token_label(self.token(int(self.top_ids[r, c, 0])))
                ax.text(c, r, tok[:max_chars], ha="center", va="center", fontsize=size,
                        color="white" if probs[r, c] > 0.6 else "black")
        ax.set_xticks(range(P), [token_label(self.str_tokens[p])[:max_chars] for p in self.positions],
                      rotation=60, ha="right", fontsize=8)
        step = max(1, L1 // 16)
        ax.set_yticks(range(0, L1, step), [self.labels[i] for i in range(0, L1, step)], fontsize=8)
        ax.set_xlabel("input position (the lens predicts the NEXT token)")
        ax.set_ylabel("residual (after i blocks)")
        ax.set_title(f"{self.kind} lens: top-1 token and its probability ({self.source})", fontsize=10)
        fig.colorbar(im, ax=ax, label="top-1 probability", fraction=0.04)
        return save_fig(fig, out)

    def view(self, *, positions=None, max_bytes=None):
        """Interactive view: the lens table (hover a cell for its top-k) and each target's probability / rank
        curve at a chosen position; ``positions`` narrows it."""
        from .lens_view import lens_view

        return lens_view(self, positions=positions, max_bytes=max_bytes)

    def plot_targets(self, *, out=None, pos: int = -1):
        """Each target's probability (log scale) and rank by lens row at ``pos``."""
        c = self._col(pos)
        if not self.targets:
            raise ValueError("this lens has no targets; pass targets=[...] to logit_lens")
        fig = new_figure(figsize=(8, 5.5))
        ax_p, ax_r = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
        x = range(self.n_layers + 1)
        # a floor keeps the axis readable (early rows can put a target at 1e-30); what it hides is drawn hollow
        floor = PROB_FLOOR
        probs = self.target_probs[:, c, :].double()
        for j in range(len(self.targets)):
            name = self.target_name(j)
            line, = ax_p.plot(x, probs[:, j].clamp_min(floor).numpy(), marker=".", label=name)
            low = [i for i in x if probs[i, j] < floor]
            if low:
                ax_p.plot(low, [floor] * len(low), ls="none", marker="o", mfc="none", color=line.get_color())
            ax_r.plot(x, (self.target_ranks[:, c, j] + 1).numpy(), marker=".", label=name)
        if bool((probs < floor).any()):
            ax_p.axhline(floor, color="gray", ls=":", lw=1, label=f"below {floor:.0e}, drawn at it (hollow)")
        ax_p.set_yscale("log")
        ax_p.set_ylabel("probability")
        ax_p.legend(fontsize=8)
        ax_p.set_title(f"{self.kind} lens at position {self.positions[c]} "
                       f"({self.str_tokens[self.positions[c]]!r})", fontsize=10)
        ax_r.set_yscale("log")
        ax_r.invert_yaxis()
        ax_r.set_ylabel("rank + 1 (1 = top-1)")
        ax_r.set_xlabel("residual after i blocks (0 = embedding)")
        return save_fig(fig, out)
