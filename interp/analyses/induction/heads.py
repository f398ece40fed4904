"""Induction heads: detect them in any model (the causal checks are in :mod:`.causal`, in-context learning in
:mod:`.icl`).

An induction head completes [A][B] ... [A] -> [B]: from the second [A] it attends
to the token *after* the earlier [A] and copies it (Elhage et al. 2021, Olsson
et al. 2022). Everything here goes through :class:`interp.Model`, so the same code
scores the embedded SmolLM2, a tiny random model, or the attention-only toy model
trained from scratch in :mod:`interp.analyses.induction.train`.

Detection input: [BOS] + R + R, where R is `seq_len` random *ordinary* tokens,
drawn without replacement inside each row (so every token of the second copy has
exactly one earlier occurrence). Ordinary tokens = every id of the model's
vocabulary that is not a special/added token and not BOS: on SmolLM2 the ids
0..16 are specials (`<|endoftext|>`, `<|im_start|>`, `<repo_name>`, ...) so R is
drawn from 17..49151; on the toy model, its whole vocabulary except BOS (id 0).

Scores (one value per (layer, head), all from attention patterns captured with
`model.cache(tokens, names=[...hook_pattern])`, one batched forward, no full cache):

* induction score: mean attention from each position of the second copy to the
  token after its earlier occurrence (the "induction stripe", offset 1 - seq_len).
  A perfect induction head scores 1.
* prefix-matching score (Olsson et al.): on [BOS] + R repeated 4 times, the
  attention each token of copies 2..4 pays, summed, to the tokens that followed
  its earlier copies; averaged over those tokens. Computed on its own input.
* previous-token score: mean attention from each position to the one before it.
* duplicate-token score: mean attention from each token of the second copy to
  the same token in the first copy.
* copying score: the OV-circuit eigenvalue ratio sum(lambda) / sum(|lambda|) of
  the full OV circuit W_E W_OV W_U (Elhage et al.; +1 = the head copies the token
  it attends to, -1 = it suppresses it). Computed from weights, with the RMSNorm /
  LayerNorm scales folded in, via the d_head x d_head matrix W_O W_U W_E W_V that
  has the same non-zero eigenvalues (the vocab x vocab matrix is too large). With
  grouped-query attention, query head h reads KV group h // (n_heads // n_kv_heads).

Why not TransformerLens's `detect_head(..., "induction_head")`? Its default "mul"
measure is sum(pattern * detection_pattern) / sum(pattern): the attention mass on
the induction targets divided by the *whole* attention mass of every query row,
including the BOS row and all L + 1 rows of the first copy, whose targets do not
exist. On [BOS] + R + R (2L + 1 rows, each summing to 1) only L rows can score, so
a perfect induction head gets L / (2L + 1) ~ 0.5 and the number is not on a
0..1 scale. The induction score here averages only over the rows where an
induction target exists, so a perfect head scores 1 (see the known-answer test).
"""

from __future__ import annotations

import textwrap
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ...core import arch
from ...core.hooks import capture
from ...core.inputs import check_int
from ...core.results import Result, jsonable, new_figure, save_fig
from .view import induction_view

SCORES = ["induction_score", "prefix_matching_score", "previous_token_score",
          "duplicate_token_score", "copying_score"]


# ----------------------------------------------------------------------------- inputs

def ordinary_token_ids(model) -> torch.Tensor:
    """Ids random detection sequences are drawn from: the whole vocabulary minus BOS,
    special and added tokens (and ids beyond the tokenizer's vocabulary). [n_ids] long."""
    n = model.d_vocab
    tok = model.tokenizer
    special = {model.bos_token_id}
    if tok is not None:
        special |= set(getattr(tok, "all_special_ids", []) or [])
        special |= set(getattr(tok, "added_tokens_decoder", {}) or {})
        n = min(n, len(tok))
    keep = torch.ones(n, dtype=torch.bool)
    keep[[i for i in special if 0 <= i < n]] = False
    return keep.nonzero()[:, 0]


def token_range_description(model) -> str:
    ids = ordinary_token_ids(model)
    lo, hi = int(ids.min()), int(ids.max())
    gaps = (hi - lo + 1) - len(ids)
    return f"ids {lo}..{hi}" + (f" minus {gaps} special ids" if gaps else "") + f" ({len(ids)} tokens)"


def check_seq_len(model, seq_len: int, repeats: int = 2) -> int:
    """seq_len must be >= 2 and [BOS] + R * repeats must fit the context and the ordinary vocabulary."""
    most = min((model.n_ctx - 1) // repeats, len(ordinary_token_ids(model)))
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or not 2 <= seq_len <= most:
        raise ValueError(f"seq_len={seq_len!r} out of range: allowed 2..{most} for {repeats} repeats on this "
                         f"model (context {model.n_ctx}, {len(ordinary_token_ids(model))} ordinary tokens)")
    return seq_len


def check_positive(name: str, value, most: int | None = None) -> int:
    # Not core.inputs.check_int: this module's messages read "out of range: allowed 1..N", which callers match.
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 or (most is not None and value > most):
        allowed = f"1..{most}" if most is not None else ">= 1"
        raise ValueError(f"{name}={value!r} out of range: allowed {allowed}")
    return value


def repeated_tokens(model, seq_len: int, batch: int, *, repeats: int = 2, seed: int = 0) -> torch.Tensor:
    """[BOS] + R * repeats with R random ordinary tokens, distinct within each row.
    Returns [batch, 1 + repeats * seq_len] long. Seeded: same seed, same tokens."""
    check_seq_len(model, seq_len, repeats)
    check_positive("batch", batch)
    ids = ordinary_token_ids(model)
    gen = torch.Generator().manual_seed(seed)
    # Without replacement per row: argsort of uniform noise picks seq_len distinct ids.
    pick = torch.rand(batch, len(ids), generator=gen).argsort(dim=-1)[:, :seq_len]
    rand = ids[pick]
    bos = torch.full((batch, 1), model.bos_token_id, dtype=torch.long)
    return torch.cat([bos] + [rand] * repeats, dim=1)


# ----------------------------------------------------------------------------- patterns

def pattern_names(model) -> list[str]:
    return [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.n_layers)]


def attention_patterns(model, tokens: torch.Tensor, *, logits: bool = False):
    """One forward capturing only the attention patterns.
    Returns a list over layers of [batch, n_heads, q_pos, k_pos] (and the logits if asked)."""
    names = pattern_names(model)
    if not logits:  # stop after the last layer's pattern: the unembedding (262k columns on Gemma) is skipped
        cache, _ = capture(model, tokens, names, keep=lambda n, t: t.detach().to("cpu", torch.float32), stop=True,
                           description="attention patterns")
        return [cache[n] for n in names]
    logit_t, cache = model.cache(tokens, names, logits=True)
    return [cache[n] for n in names], logit_t


def stripe_score(patterns: list[torch.Tensor], offset: int, first_query: int) -> torch.Tensor:
    """Mean attention on the diagonal key = query + offset, over queries >= first_query
    and the batch. patterns: list over layers of [batch, head, q, k] -> [n_layers, n_heads]."""
    scores = []
    for p in patterns:
        diag = p.diagonal(offset=offset, dim1=-2, dim2=-1)  # [batch, head, n - |offset|]
        q0 = -offset  # query index of diag element 0 (offset <= 0)
        scores.append(diag[..., first_query - q0:].mean(dim=(0, -1)))
    return torch.stack(scores)


def induction_score(patterns, seq_len: int) -> torch.Tensor:
    """[BOS] + R + R: query 1 + seq_len + i (second copy of R[i]) -> key 2 + i (token after
    the first R[i]); offset 1 - seq_len. -> [n_layers, n_heads]"""
    return stripe_score(patterns, offset=1 - seq_len, first_query=1 + seq_len)


def previous_token_score(patterns) -> torch.Tensor:
    """Mean attention from every position q >= 1 to q - 1. -> [n_layers, n_heads]"""
    return stripe_score(patterns, offset=-1, first_query=1)


def duplicate_token_score(patterns, seq_len: int) -> torch.Tensor:
    """[BOS] + R + R: second copy of R[i] -> first copy of R[i]; offset -seq_len. -> [n_layers, n_heads]"""
    return stripe_score(patterns, offset=-seq_len, first_query=1 + seq_len)


def prefix_matching_score(patterns, seq_len: int, repeats: int) -> torch.Tensor:
    """[BOS] + R * repeats: for each token of copies 2..repeats, the attention summed over
    the tokens that followed its earlier copies (Olsson et al.), averaged. -> [n_layers, n_heads]"""
    n = 1 + repeats * seq_len
    mask = torch.zeros(n, n)
    q = torch.arange(n)
    for back in range(1, repeats):  # the copy `back` repeats earlier
        rows = q[q >= 1 + back * seq_len]
        mask[rows, rows + 1 - back * seq_len] = 1
    queries = slice(1 + seq_len, n)
    return torch.stack([torch.einsum("bhqk,qk->hq", p[:, :, queries], mask[queries]) / p.shape[0]
                        for p in patterns]).mean(-1)


def per_position_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of predicting tokens[:, t + 1] at position t, averaged over the batch.
    logits [batch, pos, vocab], tokens [batch, pos] -> [pos - 1] (index t = target position t + 1)."""
    logp = logits[:, :-1].float().log_softmax(-1)
    return -logp.gather(-1, tokens[:, 1:, None])[..., 0].mean(0)


def half_losses(loss_by_pos: torch.Tensor, seq_len: int) -> tuple[float, float]:
    """(first-half, repeated-half) loss on [BOS] + R + R. Each half skips its first target
    (R[0] after BOS, and R[0] after the end of the first copy: neither is predictable), so
    both average seq_len - 1 targets: first copy R[1..] and second copy R[1..]."""
    first = loss_by_pos[1:seq_len]  # targets at positions 2..seq_len
    repeated = loss_by_pos[seq_len + 1: 2 * seq_len]  # targets at positions seq_len+2..2*seq_len
    return float(first.mean()), float(repeated.mean())


# ----------------------------------------------------------------------------- copying (weights)

def copying_score(model) -> torch.Tensor:
    """OV eigenvalue ratio sum(lambda) / sum(|lambda|) of W_E W_V W_O W_U per head,
    norm scales folded in (ln1 into W_V, any post-attention norm into W_O, ln_final into W_U; their 1/rms
    factors are positive scalars, which leave the ratio unchanged). -> [n_layers, n_heads]"""
    W_U = model.W_U  # [d_model, vocab]
    lnf = model.final_norm_weight()
    if lnf is not None:
        W_U = lnf[:, None] * W_U
    # Same non-zero eigenvalues as the vocab x vocab circuit (cyclic permutation):
    # eig(W_E W_V W_O W_U) = eig(W_O (W_U W_E) W_V), a d_head x d_head problem.
    UE = W_U @ model.W_E  # [d_model, d_model]
    group = model.n_heads // model.n_kv_heads
    out = torch.zeros(model.n_layers, model.n_heads)
    for layer in range(model.n_layers):
        W_V, W_O = model.W_V(layer), model.W_O(layer)  # [kv, d_model, d_head], [heads, d_head, d_model]
        ln1 = model.norm_weight(layer, "ln1")
        if ln1 is not None:
            W_V = ln1[None, :, None] * W_V
        post = arch.post_norm_gain(model, layer, "attn")  # Gemma: the head's write is normed again
        if post is not None:
            W_O = W_O * post
        for head in range(model.n_heads):
            lam = torch.linalg.eigvals((W_O[head] @ UE @ W_V[head // group]).double())
            out[layer, head] = float(lam.sum().real / lam.abs().sum().clamp_min(1e-30))
    return out


# ----------------------------------------------------------------------------- detection

def induction_scores(model, *, seq_len: int = 50, batch: int = 16, seed: int = 0,
                     tokens: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The cheap scan: one forward on [BOS] + R + R capturing only the patterns.
    Returns {"induction", "previous_token", "duplicate_token"}: [n_layers, n_heads] each,
    "loss_by_pos": [2 * seq_len], "tokens"."""
    if tokens is None:
        tokens = repeated_tokens(model, seq_len, batch, seed=seed)
    patterns, logits = attention_patterns(model, tokens, logits=True)
    return {"induction": induction_score(patterns, seq_len),
            "previous_token": previous_token_score(patterns),
            "duplicate_token": duplicate_token_score(patterns, seq_len),
            "loss_by_pos": per_position_loss(logits, tokens),
            "tokens": tokens, "patterns": patterns}


@dataclass(repr=False)
class InductionScan(Result):
    """Per-head scores of one detection scan (see the module docstring for the definitions)."""

    scores: dict  # name -> [n_layers, n_heads] tensor
    loss_by_pos: torch.Tensor  # [2 * seq_len]: loss of the target at position t + 1
    seq_len: int
    prefix_seq_len: int
    batch: int
    seed: int
    token_range: str
    model_name: str
    top_patterns: dict = field(default_factory=dict)  # (layer, head) -> [q, k] pattern of row 0
    tokens: torch.Tensor | None = None
    seconds: float = 0.0

    @property
    def loss_first_half(self) -> float:
        return half_losses(self.loss_by_pos, self.seq_len)[0]

    @property
    def loss_repeated_half(self) -> float:
        return half_losses(self.loss_by_pos, self.seq_len)[1]

    def to_frame(self):
        import pandas as pd

        n_layers, n_heads = self.scores["induction_score"].shape
        rows = []
        for layer in range(n_layers):
            for head in range(n_heads):
                row = {"layer": layer, "head": head}
                row.update({k: float(v[layer, head]) for k, v in self.scores.items()})
                rows.append(row)
        return pd.DataFrame(rows).set_index(["layer", "head"])

    def top(self, k: int = 10, by: str = "induction_score"):
        """The k heads with the highest `by` score, best first (a DataFrame)."""
        if by not in self.scores:
            raise ValueError(f"score {by!r} not known; allowed: {', '.join(self.scores)}")
        return self.to_frame().sort_values(by, ascending=False).head(check_int("k", k, 1))

    def top_heads(self, k: int = 10, by: str = "induction_score") -> list[tuple[int, int]]:
        return [(int(layer), int(head)) for layer, head in self.top(k, by).index]

    def summary(self) -> str:
        (layer, head), = self.top_heads(1)
        best = float(self.scores["induction_score"][layer, head])
        return (f"{self.model_name}: best induction head L{layer}H{head} (score {best:.3f}); loss first half "
                f"{self.loss_first_half:.3f}, repeated half {self.loss_repeated_half:.3f} nats "
                f"([BOS]+R+R, seq_len {self.seq_len}, batch {self.batch}, seed {self.seed}, {self.token_range})")

    def to_json(self) -> dict:
        """The scan's settings and losses, and every head's scores, best induction score first."""
        heads = [{"layer": int(layer), "head": int(head), **{k: float(v) for k, v in row.items()}}
                 for (layer, head), row in self.top(len(self.to_frame())).iterrows()]
        return {"result": "InductionScan", "summary": self.summary(), "model": self.model_name,
                "seq_len": self.seq_len, "prefix_seq_len": self.prefix_seq_len, "batch": self.batch,
                "seed": self.seed, "token_range": self.token_range, "loss_first_half": self.loss_first_half,
                "loss_repeated_half": self.loss_repeated_half, "loss_by_pos": jsonable(self.loss_by_pos),
                "heads": heads, "seconds": self.seconds}

    def view(self):
        """Interactive heatmaps (layer x head) of every score, with hover values."""
        return induction_view(self)

    def plot(self, *, out=None, n_patterns: int = 3):
        """Heatmaps (layers x heads) of each score, the per-position loss, and the
        patterns of the top induction heads with their stripe."""
        names = list(self.scores)
        n_pat = min(n_patterns, len(self.top_patterns))
        ncols = max(len(names), 1 + n_pat)
        fig = new_figure(figsize=(3.2 * ncols, 7.0), layout="constrained")
        for i, name in enumerate(names):
            ax = fig.add_subplot(2, ncols, i + 1)
            vals = self.scores[name].numpy()
            im = ax.imshow(vals, aspect="auto", cmap="RdBu_r" if name == "copying_score" else "viridis",
                           vmin=-1 if name == "copying_score" else 0, vmax=1)
            ax.set(title=name.replace("_score", "").replace("_", " "), xlabel="head", ylabel="layer")
            if vals.shape[1] <= 16:
                ax.set_xticks(range(vals.shape[1]))
            fig.colorbar(im, ax=ax, shrink=0.8)
        ax = fig.add_subplot(2, ncols, ncols + 1)
        pos = np.arange(1, len(self.loss_by_pos) + 1)
        ax.plot(pos, self.loss_by_pos.numpy(), lw=1)
        ax.axvline(self.seq_len + 0.5, color="gray", ls="--", lw=0.8)
        ax.set(title="loss by position", xlabel="target position", ylabel="nats")
        for j, ((layer, head), pat) in enumerate(list(self.top_patterns.items())[:n_pat]):
            ax = fig.add_subplot(2, ncols, ncols + 2 + j)
            ax.imshow(pat.numpy(), cmap="viridis", vmin=0, vmax=1)
            score = float(self.scores["induction_score"][layer, head])
            ax.set(title=f"L{layer}H{head} pattern (ind {score:.2f})", xlabel="key", ylabel="query")
        # the whole summary, wrapped to the figure's width (about 14 characters per inch at 9 pt)
        fig.suptitle(textwrap.fill(self.summary(), width=int(13 * fig.get_figwidth())), fontsize=9)
        return save_fig(fig, out)


def induction_heads(model, *, seq_len: int = 50, batch: int = 16, seed: int = 0,
                    prefix_seq_len: int | None = None, copying: bool = True,
                    n_patterns: int = 3) -> InductionScan:
    """Score every head of `model` (an interp.Model). One forward on [BOS] + R + R (induction,
    previous-token, duplicate-token, per-position loss), one on [BOS] + R * 4 (prefix matching),
    both capturing only attention patterns; the copying score comes from the weights.
    prefix_seq_len defaults to seq_len, shortened to fit 4 copies in the context."""
    t0 = time.perf_counter()
    check_seq_len(model, seq_len, 2)
    if prefix_seq_len is None:
        prefix_seq_len = min(seq_len, (model.n_ctx - 1) // 4)
    check_seq_len(model, prefix_seq_len, 4)
    scan = induction_scores(model, seq_len=seq_len, batch=batch, seed=seed)
    prefix_tokens = repeated_tokens(model, prefix_seq_len, batch, repeats=4, seed=seed + 1)
    prefix = prefix_matching_score(attention_patterns(model, prefix_tokens), prefix_seq_len, 4)
    scores = {"induction_score": scan["induction"], "prefix_matching_score": prefix,
              "previous_token_score": scan["previous_token"],
              "duplicate_token_score": scan["duplicate_token"]}
    if copying:
        scores["copying_score"] = copying_score(model)
    best = scan["induction"].flatten().argsort(descending=True)[:n_patterns].tolist()
    top = {divmod(i, model.n_heads): scan["patterns"][i // model.n_heads][0, i % model.n_heads].clone()
           for i in best}  # (layer, head) -> [q, k] pattern of the first row, for the plot
    return InductionScan(scores=scores, loss_by_pos=scan["loss_by_pos"], seq_len=seq_len,
                         prefix_seq_len=prefix_seq_len, batch=batch, seed=seed,
                         token_range=token_range_description(model), model_name=model.source,
                         top_patterns=top, tokens=scan["tokens"], seconds=time.perf_counter() - t0)

