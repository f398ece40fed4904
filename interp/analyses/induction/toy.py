"""A tiny attention-only transformer with TransformerLens hook names.

TransformerLens 4 removed `HookedTransformer`, so the toy model used to reproduce
the induction-head phase change is written here, nanoGPT-style, on top of
`HookedRootModule` / `HookPoint` (both still part of TransformerLens 4.x).

It exposes the same hook names as the TransformerBridge wraps of pretrained
models (`hook_embed`, `blocks.{l}.hook_resid_pre`, `blocks.{l}.attn.hook_pattern`,
`blocks.{l}.attn.hook_z`, ...), so `interp.Model.from_module(AttnOnlyTransformer(cfg))`
wraps it and the same analysis code runs on it and on the embedded model.

Architecture (following Olsson et al. 2022's small attention-only models and
the logged recipe in the reference notes): token embedding + learned position
embedding, `n_layers` blocks of causal multi-head attention added to the
residual stream, no MLPs, no LayerNorm, untied unembedding. Token 0 is reserved
as BOS (`cfg.bos_token_id`): the training data starts every sequence with it,
exactly like the [BOS] + R + R detection prompts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint


@dataclass
class ToyConfig:
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    d_vocab: int = 64
    n_ctx: int = 64
    bos_token_id: int = 0
    # PyTorch's own defaults: N(0, 1) embeddings (nn.Embedding) and std 1/sqrt(3 * d_model) for the
    # matrices (nn.Linear's kaiming-uniform). With GPT-2's 0.02 everywhere the attention logits start
    # tiny and the induction plateau lasted > 2,000 steps in our runs; these break it in ~1,100.
    embed_std: float = 1.0
    init_std: float | None = None  # None: 1 / sqrt(3 * d_model)

    def __post_init__(self):
        for field in ("n_layers", "d_model", "n_heads", "d_vocab", "n_ctx"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ToyConfig.{field}={value!r}: must be an integer >= 1")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"ToyConfig.d_model={self.d_model} must be divisible by n_heads={self.n_heads}"
            )
        if not 0 <= self.bos_token_id < self.d_vocab:
            raise ValueError(
                f"ToyConfig.bos_token_id={self.bos_token_id} out of range [0, {self.d_vocab - 1}]"
            )

    # Fields TransformerLens-style code reads from `cfg`.
    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def n_key_value_heads(self) -> int:
        return self.n_heads  # plain multi-head attention, no grouped queries

    d_mlp = None  # attention-only
    attn_only = True
    normalization_type = None
    positional_embedding_type = "standard"
    device = torch.device("cpu")
    dtype = torch.float32

    def to_dict(self) -> dict:
        return asdict(self)


class Attention(nn.Module):
    """Causal multi-head attention with weights stored per head, TransformerLens layout.

    W_Q, W_K, W_V: [n_heads, d_model, d_head];  W_O: [n_heads, d_head, d_model].
    No biases: the toy model does not need them and it keeps the OV/QK circuits exact.
    """

    def __init__(self, cfg: ToyConfig):
        super().__init__()
        self.cfg = cfg
        shape_in = (cfg.n_heads, cfg.d_model, cfg.d_head)
        self.W_Q = nn.Parameter(torch.empty(shape_in))
        self.W_K = nn.Parameter(torch.empty(shape_in))
        self.W_V = nn.Parameter(torch.empty(shape_in))
        self.W_O = nn.Parameter(torch.empty(cfg.n_heads, cfg.d_head, cfg.d_model))
        # Causal mask built once; sliced to the prompt length in forward.
        mask = torch.tril(torch.ones(cfg.n_ctx, cfg.n_ctx, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)
        self.hook_q = HookPoint()  # [batch, pos, head, d_head]
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_attn_scores = HookPoint()  # [batch, head, q, k]
        self.hook_pattern = HookPoint()  # [batch, head, q, k]
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [batch, pos, d_model] -> attention output [batch, pos, d_model]."""
        b, n, _ = x.shape
        h, e = self.cfg.n_heads, self.cfg.d_head
        # One matmul per projection with the heads folded into the output dim;
        # per-head einsums lower to slow batched matmuls on CPU.
        q = self.hook_q((x @ self.W_Q.transpose(0, 1).reshape(-1, h * e)).view(b, n, h, e))
        k = self.hook_k((x @ self.W_K.transpose(0, 1).reshape(-1, h * e)).view(b, n, h, e))
        v = self.hook_v((x @ self.W_V.transpose(0, 1).reshape(-1, h * e)).view(b, n, h, e))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [batch, head, pos, d_head]
        if self._pattern_hooked():
            z = self._attend_explicit(q, k, v)
        else:
            # Nobody is looking at the pattern (e.g. during training): use the fused
            # kernel, ~3x faster on CPU. Same maths up to float rounding.
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        z = self.hook_z(z.transpose(1, 2))  # [batch, pos, head, d_head]
        return z.reshape(b, n, h * e) @ self.W_O.reshape(h * e, -1)

    def _pattern_hooked(self) -> bool:
        return any(hp.fwd_hooks or hp.bwd_hooks for hp in (self.hook_attn_scores, self.hook_pattern))

    def _attend_explicit(self, q, k, v) -> torch.Tensor:
        """q, k, v: [batch, head, pos, d_head] -> z [batch, head, pos, d_head], firing
        hook_attn_scores and hook_pattern ([batch, head, q_pos, k_pos])."""
        n = q.shape[2]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.cfg.d_head)
        scores = self.hook_attn_scores(scores.masked_fill(~self.mask[:n, :n], float("-inf")))
        pattern = self.hook_pattern(scores.softmax(dim=-1))
        return pattern @ v


class Block(nn.Module):
    """One attention-only residual block. resid_mid == resid_post (there is no MLP)."""

    def __init__(self, cfg: ToyConfig):
        super().__init__()
        self.attn = Attention(cfg)
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, resid: torch.Tensor) -> torch.Tensor:
        resid = self.hook_resid_pre(resid)
        resid = self.hook_resid_mid(resid + self.hook_attn_out(self.attn(resid)))
        return self.hook_resid_post(resid)


class AttnOnlyTransformer(HookedRootModule):
    """Attention-only transformer. tokens [batch, pos] -> logits [batch, pos, d_vocab]."""

    def __init__(self, cfg: ToyConfig | None = None, *, seed: int | None = 0):
        super().__init__()
        self.cfg = cfg = cfg or ToyConfig()
        self.W_E = nn.Parameter(torch.empty(cfg.d_vocab, cfg.d_model))
        self.W_pos = nn.Parameter(torch.empty(cfg.n_ctx, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.W_U = nn.Parameter(torch.empty(cfg.d_model, cfg.d_vocab))
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.hook_pos_embed = HookPoint()
        self.init_weights(seed)
        self.setup()  # registers every HookPoint under its dotted name

    @torch.no_grad()
    def init_weights(self, seed: int | None) -> None:
        """Normal init (embed_std for W_E / W_pos, init_std for the matrices) from a private
        generator, so the initialization is reproducible without touching the global RNG."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        std = self.cfg.init_std if self.cfg.init_std is not None else (3 * self.cfg.d_model) ** -0.5
        for name, p in self.named_parameters():
            scale = self.cfg.embed_std if name in ("W_E", "W_pos") else std
            p.copy_(torch.randn(p.shape, generator=gen) * scale)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() == 1:
            tokens = tokens[None]
        n = tokens.shape[1]
        if n > self.cfg.n_ctx:
            raise ValueError(f"sequence length {n} exceeds the context window n_ctx={self.cfg.n_ctx}")
        # F.embedding, not W_E[tokens]: the backward of advanced indexing accumulates with
        # several threads in a nondeterministic order on CPU (seen with 2 threads).
        resid = self.hook_embed(F.embedding(tokens, self.W_E)) + self.hook_pos_embed(self.W_pos[:n])
        for block in self.blocks:
            resid = block(resid)
        return resid @ self.W_U

    @property
    def device(self) -> torch.device:
        return self.W_E.device

    @property
    def bos_token_id(self) -> int:
        return self.cfg.bos_token_id

    # --- checkpointing (safetensors) -------------------------------------------------

    def save(self, path) -> None:
        """Write the weights as safetensors with the config in the metadata."""
        import json

        from safetensors.torch import save_file

        tensors = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(tensors, str(path), metadata={"toy_config": json.dumps(self.cfg.to_dict())})

    @classmethod
    def load(cls, path) -> AttnOnlyTransformer:
        import json

        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if "toy_config" not in meta:
            raise ValueError(f"{path}: not an AttnOnlyTransformer checkpoint (no 'toy_config' metadata)")
        model = cls(ToyConfig(**json.loads(meta["toy_config"])), seed=None)
        model.load_state_dict(load_file(str(path)))
        return model


# --- a model with a known answer -------------------------------------------------------

@torch.no_grad()
def handmade_induction_model(d_vocab: int = 16, n_ctx: int = 32, sharpness: float = 40.0) -> AttnOnlyTransformer:
    """A 2-layer, 2-head model whose weights are set by hand (no training):

    * L0H0 is an exact previous-token head: position q attends to q - 1 and writes the token
      it sees into a "previous token" subspace;
    * L1H0 is an exact induction head: its query is the current token, its key the previous
      token written by L0H0 (K-composition), so it attends to the token after each earlier
      occurrence of the current token and copies it to the output (copying score +1);
    * every other head (and L1H0 when nothing matches) rests on BOS.

    Residual layout (d_model = 2 * d_vocab + n_ctx): [token one-hot | position one-hot |
    previous-token one-hot]. d_head = d_model / 2 >= n_ctx so positions fit one-hot in a head.
    `sharpness` is the attention logit of a match (a miss is ~e^-sharpness times as likely).
    """
    V, N = d_vocab, n_ctx
    cfg = ToyConfig(n_layers=2, d_model=2 * V + N, n_heads=2, d_vocab=V, n_ctx=N)
    if cfg.d_head < N:
        raise ValueError(f"n_ctx={N} too large for d_vocab={V}: need d_head = {cfg.d_head} >= n_ctx")
    model = AttnOnlyTransformer(cfg, seed=None)
    for p in model.parameters():
        p.zero_()
    tok, pos, prev = 0, V, V + N  # subspace offsets
    s = sharpness * math.sqrt(cfg.d_head)  # undo the 1/sqrt(d_head) of the attention scores
    model.W_E[:, tok:tok + V] = torch.eye(V)
    model.W_pos[:, pos:pos + N] = torch.eye(N)
    model.W_U[tok:tok + V, :] = torch.eye(V)

    def rest_on_bos(attn, head, weight=1.0):
        # every position queries direction 0 of the head; only position 0's key has it
        attn.W_Q[head, pos:pos + N, 0] = s
        attn.W_K[head, pos, 0] = weight

    a0, a1 = model.blocks[0].attn, model.blocks[1].attn
    # L0H0: previous-token head. Query position i -> head dim i; key position j -> head dim j + 1.
    a0.W_Q[0, pos:pos + N, :N] = s * torch.eye(N)
    a0.W_K[0, pos:pos + N - 1, 1:N] = torch.eye(N - 1)
    a0.W_V[0, tok:tok + V, :V] = torch.eye(V)
    a0.W_O[0, :V, prev:prev + V] = torch.eye(V)  # writes the attended token into "previous token"
    rest_on_bos(a0, 1)
    # L1H0: induction head. Query: current token; key: previous token (from L0H0); value: token.
    a1.W_Q[0, tok:tok + V, 1:V + 1] = s * torch.eye(V)
    a1.W_K[0, prev:prev + V, 1:V + 1] = torch.eye(V)
    rest_on_bos(a1, 0, weight=0.5)  # half a match: BOS only wins when no earlier occurrence exists
    a1.W_V[0, tok:tok + V, :V] = torch.eye(V)
    a1.W_O[0, :V, tok:tok + V] = 5 * torch.eye(V)  # copy, and outvote the current token's direct path
    rest_on_bos(a1, 1)
    return model
