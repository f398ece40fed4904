"""Logit lens: ``interp.lens.logit_lens(model, text, targets=..., k=5, positions=None)``.

Read the residual stream after the embedding and after every layer as if it were the last one: apply the
model's own final norm (``model.final_norm``: RMSNorm with its learned scale, or LayerNorm) and the unembedding,
and look at the next-token distribution each layer would predict.

Rows of the result are numbered 0..n_layers: row ``i`` is the residual entering block ``i``
(``blocks.{i}.hook_resid_pre``; row 0 is the embedding), and row ``n_layers`` is the final residual
(``blocks.{n_layers-1}.hook_resid_post``), whose lens is the model's own output distribution. Labels follow
TransformerLens's ``accumulated_resid``: ``"0_pre" .. "{n-1}_pre", "final"``. "A target becomes top-1 at row
``i``" therefore means: after ``i`` of the ``n_layers`` blocks.

Targets. A target is a token id or a string. A string that tokenizes to several tokens is scored by its FIRST
token (the token the model must predict next), with a ``UserWarning`` naming the split; ``targets=`` keeps the
full text as the label. An empty string, an id outside ``0..d_vocab-1`` or a string whose tokens include the
tokenizer's unknown token is a ``ValueError``. Rank = number of vocabulary entries with a strictly larger
logit (0 = top-1).

The final row is the model's own output (its logits from the same forward pass): recomputing it with a matmul of
another shape reorders float32 sums, which moves SmolLM2's logits by up to ~3e-5; taking the model's own keeps
the lens's last row identical to ``model.run``. The other rows go through ``model.final_norm`` and ``W_U``.

Cost. One forward pass, capturing only the requested positions of the n_layers residuals ``resid_pre``. Their
unembedding is done in row chunks of ~64 MB of logits with one matmul each; per chunk: a block-max top-k, the
target logits, one log-sum-exp sweep (exp2 of log2(e)-scaled logits: several times faster than exp on CPU)
and one in-place comparison per target for its rank, so no softmax over the vocabulary is ever materialized.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..core.results import Result, new_figure, save_fig
from ..core.hooks import StopForward

PROMPT = "The Eiffel Tower is located in the city of"
_CHUNK_ELEMS = 1 << 24  # logits per unembedding chunk (64 MB in float32)
_LOG2E = 1.4426950408889634


# ---------------------------------------------------------------------------------------------- input checks
def one_text(model, text) -> torch.Tensor:
    """``str`` or token tensor -> LongTensor [1, pos] (BOS prepended to strings); one text only."""
    if isinstance(text, str) and not text:
        raise ValueError("empty text: give at least one character to analyse")
    toks = model.to_tokens(text)
    if toks.shape[0] != 1:
        raise ValueError(f"one text at a time: got a batch of {toks.shape[0]}")
    return toks


def target_id(model, target, *, what: str = "target") -> tuple[int, str]:
    """A target token id and its label. Strings of several tokens use their first token (with a warning)."""
    if isinstance(target, bool) or not isinstance(target, (int, str)):
        if isinstance(target, torch.Tensor) and target.numel() == 1:
            target = int(target)
        else:
            raise ValueError(f"{what} {target!r}: expected a string (e.g. ' Paris') or a token id")
    if isinstance(target, int):
        if not 0 <= target < model.d_vocab:
            raise ValueError(f"{what} token id {target} not in the vocabulary: allowed 0..{model.d_vocab - 1}")
        return target, _decode(model, target)
    if not target:
        raise ValueError(f"{what} {target!r} is empty; give the continuation text, e.g. ' Paris'")
    ids = model.target_tokens(target)
    if not ids:
        raise ValueError(f"{what} {target!r} tokenizes to no tokens; give a non-empty continuation")
    unk = getattr(model.tokenizer, "unk_token_id", None)
    if unk is not None and unk in ids and target != getattr(model.tokenizer, "unk_token", None):
        raise ValueError(f"{what} {target!r} is not in the vocabulary (it maps to the unknown token {unk})")
    bad = [i for i in ids if not 0 <= i < model.d_vocab]
    if bad:
        raise ValueError(f"{what} {target!r} maps to token ids {bad} outside the model's vocabulary "
                         f"0..{model.d_vocab - 1}")
    if len(ids) > 1:
        pieces = [_decode(model, i) for i in ids]
        warnings.warn(f"{what} {target!r} is {len(ids)} tokens {pieces}; scoring its first token "
                      f"{pieces[0]!r} (the token predicted next)", UserWarning, stacklevel=3)
    return ids[0], target


def _target_list(model, targets) -> tuple[list[int], list[str]]:
    if targets is None:
        return [], []
    items = [targets] if isinstance(targets, (str, int, torch.Tensor)) else list(targets)
    pairs = [target_id(model, t) for t in items]
    return [i for i, _ in pairs], [label for _, label in pairs]


def _positions(model, positions, n: int) -> list[int]:
    if positions is None:
        return list(range(n))
    items = [positions] if isinstance(positions, int) else list(positions)
    if not items:
        raise ValueError(f"positions is empty; give indices in 0..{n - 1} (or -{n}..-1), or None for all")
    return [model.check_pos(p, n) for p in items]


def _check_k(model, k) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= model.d_vocab:
        raise ValueError(f"k={k!r} out of range: allowed 1..{model.d_vocab} (the vocabulary size)")
    return k


def _decode(model, token_id: int) -> str:
    tok = model.tokenizer
    return str(token_id) if tok is None else tok.decode([int(token_id)])


# ---------------------------------------------------------------------------------------------- capture
def capture(model, toks: torch.Tensor, names: Sequence[str], pos_index: torch.Tensor, *,
            stop_after: str | None = None) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """One forward of ``toks`` [1, n] keeping ``t[0, pos_index]`` of each named activation (gathered on the
    model's device ``model.device`` even when layers live on several devices; model dtype). Stops the forward
    right after ``stop_after`` fired (then logits is None). Hooks are attached through ``model.hooks`` and are
    always gone on return."""
    store: dict[str, torch.Tensor] = {}
    home = model.device

    def keep(name):
        def fn(t, hook):
            # [batch, pos, ...]; a 2-D [pos, d_model] is shared by the batch (e.g. a toy model's hook_pos_embed)
            rows = (t[0] if t.ndim >= 3 else t).index_select(0, pos_index.to(t.device))
            store[name] = rows.to(home)
            if name == stop_after and all(n in store for n in names):
                raise StopForward
        return fn

    logits = None
    with torch.no_grad(), model.hooks([(n, keep(n)) for n in dict.fromkeys(names)], description="interp capture"):
        try:
            logits = model.forward(toks)
        except StopForward:
            pass
    missing = [n for n in names if n not in store]
    if missing:
        raise RuntimeError(f"hooks {missing[:3]} did not fire during the forward pass")
    return store, logits


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
    every position) over the n_layers+1 residuals. ``targets``: a string / token id or a list of them."""
    toks = one_text(model, text)
    n = toks.shape[1]
    pos = _positions(model, positions, n)
    k = _check_k(model, k)
    ids, labels = _target_list(model, targets)
    names = resid_names(model)[:-1]  # the final row is the model's own output, read from the same forward
    idx = torch.tensor(pos)
    store, logits = capture(model, toks, names, idx)
    resid = torch.stack([store[nm] for nm in names])  # [n_layers, P, d_model]
    normed = model.final_norm(resid.reshape(-1, model.d_model))
    stats = lens_stats(model, normed, k, ids, final_logits=logits[0].index_select(0, idx.to(logits.device)))
    L1, P = model.n_layers + 1, len(pos)
    shaped = {key: v.reshape(L1, P, *v.shape[1:]) for key, v in stats.items()}
    tok_strs = [_decode(model, int(t)) for t in toks[0]]
    return LogitLensResult(str_tokens=tok_strs, token_ids=toks[0].tolist(), positions=pos, top_ids=shaped["top_ids"],
                           top_probs=shaped["top_probs"], targets=labels, target_ids=ids,
                           target_logits=shaped["target_logits"], target_probs=shaped["target_probs"],
                           target_ranks=shaped["target_ranks"], n_layers=model.n_layers,
                           source=getattr(model, "source", ""), decode=lambda i: _decode(model, i))


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

    # -------------------------------------------------------------------------------------- access
    @property
    def labels(self) -> list[str]:
        return layer_labels(self.n_layers)

    def token(self, token_id: int) -> str:
        if token_id not in self._strs:
            self._strs[token_id] = self.decode(int(token_id))
        return self._strs[token_id]

    def _col(self, pos: int) -> int:
        n = len(self.str_tokens)
        if isinstance(pos, bool) or not isinstance(pos, int) or not -n <= pos < n:
            raise ValueError(f"position {pos!r} out of range for a sequence of {n} tokens; allowed 0..{n - 1} "
                             f"or -{n}..-1")
        p = pos % n
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

    def summary(self) -> str:
        last = self.positions[-1]
        s = (f"logit lens over {self.n_layers + 1} residuals x {len(self.positions)} positions"
             f" ({self.source}); final top-1 at {self.str_tokens[last]!r}: {self.top(-1, last)[0][0]!r}")
        for t in self.targets:
            row = self.first_top1(t, last, stable=True)
            s += f"; {t!r} top-1 from row {row}" if row is not None else f"; {t!r} never stays top-1"
        return s

    def to_json(self) -> dict:
        out = {"tokens": self.str_tokens, "positions": self.positions, "layers": self.labels,
               "top": [[[{"token": tok, "prob": p} for tok, p in self.top(r, pos)] for pos in self.positions]
                       for r in range(self.n_layers + 1)],
               "targets": {}}
        for j, t in enumerate(self.targets):
            c = len(self.positions) - 1
            out["targets"][t] = {"token_id": self.target_ids[j], "position": self.positions[-1],
                                 "prob": self.target_probs[:, c, j].tolist(),
                                 "logit": self.target_logits[:, c, j].tolist(),
                                 "rank": self.target_ranks[:, c, j].tolist(),
                                 "first_top1_row": self.first_top1(t, self.positions[-1]),
                                 "stable_top1_row": self.first_top1(t, self.positions[-1], stable=True)}
        return out

    # -------------------------------------------------------------------------------------- plots
    def plot(self, out=None, *, max_chars: int = 8):
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
                tok = self.token(int(self.top_ids[r, c, 0])).replace("\n", "\\n")
                ax.text(c, r, tok[:max_chars], ha="center", va="center", fontsize=size,
                        color="white" if probs[r, c] > 0.6 else "black")
        ax.set_xticks(range(P), [repr(self.str_tokens[p])[1:-1][:max_chars] for p in self.positions],
                      rotation=60, ha="right", fontsize=8)
        step = max(1, L1 // 16)
        ax.set_yticks(range(0, L1, step), [self.labels[i] for i in range(0, L1, step)], fontsize=8)
        ax.set_xlabel("input position (the lens predicts the NEXT token)")
        ax.set_ylabel("residual (after i blocks)")
        ax.set_title(f"logit lens: top-1 token and its probability ({self.source})", fontsize=10)
        fig.colorbar(im, ax=ax, label="top-1 probability", fraction=0.04)
        return save_fig(fig, out)

    def plot_targets(self, out=None, *, pos: int = -1):
        """Each target's probability (log scale) and rank by lens row at ``pos``."""
        c = self._col(pos)
        if not self.targets:
            raise ValueError("this lens has no targets; pass targets=[...] to logit_lens")
        fig = new_figure(figsize=(8, 5.5))
        ax_p, ax_r = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
        x = range(self.n_layers + 1)
        for j, t in enumerate(self.targets):
            ax_p.plot(x, self.target_probs[:, c, j].clamp_min(1e-12).numpy(), marker=".", label=repr(t))
            ax_r.plot(x, (self.target_ranks[:, c, j] + 1).numpy(), marker=".", label=repr(t))
        ax_p.set_yscale("log")
        ax_p.set_ylabel("probability")
        ax_p.legend(fontsize=8)
        ax_p.set_title(f"logit lens at position {self.positions[c]} ({self.str_tokens[self.positions[c]]!r})",
                       fontsize=10)
        ax_r.set_yscale("log")
        ax_r.invert_yaxis()
        ax_r.set_ylabel("rank + 1 (1 = top-1)")
        ax_r.set_xlabel("residual after i blocks (0 = embedding)")
        return save_fig(fig, out)


# ---------------------------------------------------------------------------------------------- CLI, demo
def add_cli(subparsers) -> None:
    from ..cli import add_common

    p = subparsers.add_parser("lens", help="logit lens: each layer's next-token guess (and targets' rank)")
    p.add_argument("text", help="text to analyse (BOS is prepended)")
    p.add_argument("--target", action="append", default=None,
                   help="target continuation, e.g. ' Paris' (repeatable; several tokens -> first token)")
    p.add_argument("--k", type=int, default=5, help="top-k tokens per cell (default 5)")
    p.add_argument("--pos", type=int, action="append", default=None,
                   help="position(s) to analyse (repeatable; default: all)")
    p.add_argument("--out", default=None, help="save the heatmap as this PNG (and targets as <stem>_targets.png)")
    add_common(p)
    p.set_defaults(func=cli_lens)


def cli_lens(args, model=None) -> dict:
    from pathlib import Path

    if model is None:
        from ..cli import load_model

        model = load_model(args)
    res = logit_lens(model, args.text, targets=args.target, k=args.k, positions=args.pos)
    data = {"text": args.text, **res.to_json()}
    if args.out:
        res.plot(out=args.out)
        data["figures"] = [str(args.out)]
        if res.targets:
            out = Path(args.out)
            tpath = out.with_name(f"{out.stem}_targets{out.suffix or '.png'}")
            res.plot_targets(out=tpath)
            data["figures"].append(str(tpath))
    data["_text"] = _lens_text(res)
    return data


def _lens_text(res: LogitLensResult) -> str:
    pos = res.positions[-1]
    lines = [res.summary(), f"position {pos} ({res.str_tokens[pos]!r}): top-{res.top_ids.shape[-1]} by residual"]
    for r, label in enumerate(res.labels):
        tops = "  ".join(f"{t!r} {p:.2f}" for t, p in res.top(r, pos)[:3])
        tg = "".join(f"   {t!r}: p={float(res.target_probs[r, -1, j]):.3g} rank={int(res.target_ranks[r, -1, j])}"
                     for j, t in enumerate(res.targets))
        lines.append(f"  {label:>7}  {tops}{tg}")
    return "\n".join(lines)


def demo(model) -> None:
    res = logit_lens(model, PROMPT, targets=[" Paris"], positions=[-1])
    curve = res.target_curve(" Paris")
    first, stable = res.first_top1(" Paris"), res.first_top1(" Paris", stable=True)
    print(f"logit lens of {PROMPT!r} at the last token ({res.str_tokens[-1]!r}), {model.n_layers} layers:")
    for r in sorted(set(range(0, model.n_layers + 1, max(1, model.n_layers // 10))) | {model.n_layers}):
        t, p = res.top(r)[0]
        print(f"  after {r:2d} blocks: top-1 {t!r:<12} p={p:.2f}   ' Paris' p={float(curve['prob'][r]):.3g} "
              f"rank {int(curve['rank'][r])}")
    if first is None:
        print("  ' Paris' never becomes top-1")
    else:
        where = f"blocks.{first}.hook_resid_pre" if first < model.n_layers else "the final residual"
        print(f"  ' Paris' first becomes top-1 after {first} of {model.n_layers} blocks ({where})"
              + ("" if stable == first else f", stays top-1 from {stable} on" if stable is not None
                 else ", but is not top-1 at the end")
              + f"; final p={float(curve['prob'][-1]):.2f}")
