"""Text generation: one sampler and one decoding loop, with two ways to compute each step's logits.

- the hooked path re-runs the whole prefix through the bridge every step, so hooks attached around the call
  (``steer``, ``patch``, ``ablate_*``, an edit's own hooks) act on every step exactly as in ``Model.run``;
- the fast path feeds one token per step through a key/value-cached twin of the Hugging Face model that shares
  the model's parameter tensors (so weight edits show). The twin has no HookPoints, so it is taken only when no
  hook at all is attached (``model.attached_hook_count() == 0``) and the model sits on one device (the twin has
  no accelerate hooks to move activations between devices). Both paths give the same tokens (tested).

``Model.generate`` (one prompt, ``n`` samples, EOS handling) and :func:`sample_text` (a batch of prompts, the
editing layer's templates and generation entropy) both go through :func:`sample_ids` and :func:`pick`.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from .caches import model_cache
from .hooks import capture
from .inputs import one_text, pad_rows


# ---------------------------------------------------------------------------------------------- the sampler
def pick(logits: torch.Tensor, generator: torch.Generator | None = None, *, temperature: float = 0.0,
         top_k: int | None = None) -> torch.Tensor:
    """Next tokens [b] from logits [b, vocab] (float32, CPU): greedy when ``temperature == 0``, else sampled from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` largest (all when None), with ``generator``."""
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)[:, 0]


def sampler(*, seed: int = 0, temperature: float = 0.0, top_k: int | None = None) -> Callable:
    """``choose(logits) -> next tokens`` for :func:`sample_ids`: :func:`pick` with its own seeded generator."""
    gen = torch.Generator().manual_seed(int(seed))
    return lambda logits: pick(logits, gen, temperature=temperature, top_k=top_k)


# ---------------------------------------------------------------------------------------------- logits
def selected_logits(model, toks: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, hooks=(), *,
                    forward_kwargs=None) -> torch.Tensor:
    """Logits [m, vocab] at (rows[i], pos[i]) of ``toks`` [b, width], running the bridge under ``hooks`` in the
    caller's grad mode. The forward stops at the final norm's output and only the selected positions are
    unembedded (the unembedding is a fifth of a small model's FLOPs). ``forward_kwargs``: see :func:`capture`."""
    name = "ln_final.hook_out"
    stop = name in model.hook_names()
    store, logits = capture(model, toks, [name] if stop else [], stop=stop, hooks=hooks,
                            grad=torch.is_grad_enabled(), description="selected logits",
                            keep=lambda n, t: t[rows.to(t.device), pos.to(t.device)], forward_kwargs=forward_kwargs)
    if not stop:
        return logits[rows.to(logits.device), pos.to(logits.device)]
    w_u, b_u = model.unembedding()  # with a device map the final norm and the unembedding may sit apart
    out = store[name].to(w_u.device) @ w_u
    return out if b_u is None else out + b_u.to(out.device)


# ---------------------------------------------------------------------------------------------- the two paths
def kv_twin(model):
    """A plain Hugging Face model sharing ``model.hf_model``'s parameter tensors, with a key/value cache (the
    bridge's attention has none; without it n tokens cost n full forwards). Built once per model and kept only if
    its logits equal ``model.run``'s on a probe text; None for models without ``hf_model``, split over devices,
    or whose twin does not match."""
    table = model_cache(model, "generation")
    if "kv_twin" in table:
        return table["kv_twin"]
    twin = None
    hf = model.hf_model
    if hf is not None and model.tokenizer is not None and len(model.devices) == 1:
        try:
            from transformers.initialization import no_init_weights

            with no_init_weights():
                candidate = type(hf)(hf.config)
            state = model.named_params()  # the same tensors, by their transformers names
            missing, unexpected = candidate.load_state_dict(state, strict=False, assign=True)
            candidate.tie_weights()
            if not unexpected and set(missing) <= {"lm_head.weight"}:
                candidate.eval()
                probe = model.to_tokens("The quick brown fox jumps over the lazy dog")
                with torch.no_grad():
                    mine = candidate(input_ids=probe.to(model.device)).logits.float().cpu()
                    theirs = model.forward(probe).float().cpu()
                if torch.allclose(mine, theirs, atol=1e-4, rtol=1e-4):
                    twin = candidate
        except Exception:  # any incompatibility (another architecture, transformers version): use the bridge
            twin = None
    table["kv_twin"] = twin
    return twin


def fast_path(model):
    """The KV-cached twin when it may be used right now (no hook attached, one device), else None."""
    if model.attached_hook_count() != 0 or len(model.devices) != 1:
        return None
    return kv_twin(model)


def _hooked_steps(model, rows: list[list[int]], n_new: int):
    """Right-padded batch; each step runs the whole prefix through the bridge (hooks act) and reads each row's
    logits at its own end (a causal model never attends to the padding after a row's end)."""
    toks, lengths = pad_rows(model, rows)
    buf = torch.full((len(rows), toks.shape[1] + n_new), model.pad_token_id, dtype=torch.long)
    buf[:, : toks.shape[1]] = toks
    ar = torch.arange(len(rows))

    def step(nxt):
        nonlocal lengths
        if nxt is not None:
            buf[ar, lengths] = nxt
            lengths = lengths + 1
        return selected_logits(model, buf[:, : int(lengths.max())], ar, lengths - 1).float().cpu()

    return step


def _cached_steps(model, twin, rows: list[list[int]]):
    """Left-padded batch through the twin; each step feeds only the new tokens."""
    width, dev = max(len(r) for r in rows), model.device
    state = {"toks": torch.tensor([[model.pad_token_id] * (width - len(r)) + r for r in rows], device=dev),
             "mask": torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=dev),
             "cache": None}
    state["pos"] = (state["mask"].cumsum(-1) - 1).clamp_min(0)

    def step(nxt):
        if nxt is not None:
            state["toks"], state["pos"] = nxt[:, None].to(dev), state["pos"][:, -1:] + 1
            state["mask"] = torch.cat([state["mask"], torch.ones_like(state["mask"][:, :1])], 1)
        res = twin(input_ids=state["toks"], attention_mask=state["mask"], position_ids=state["pos"],
                   cache=state["cache"], use_cache=True)
        state["cache"] = res.past_key_values
        return res.logits[:, -1].float().cpu()

    return step


def sample_ids(model, rows: Sequence[Sequence[int]], n_new: int, choose: Callable, *, eos: int | None = None,
               stop_at_eos: bool = True, fast: bool | None = None) -> list[list[int]]:
    """Continue each token row by up to ``n_new`` tokens chosen by ``choose(logits [b, vocab]) -> [b]`` (e.g.
    :func:`sampler`); returns the new ids per row. Never runs past the context. With ``eos``: a row that produced
    it keeps producing it, and with ``stop_at_eos`` the loop ends once every row has.

    ``fast``: None picks the KV-cached path when :func:`fast_path` allows it, else the hooked path; False forces
    the hooked path; True requires the cached one (ValueError when hooks are attached or no twin exists)."""
    rows = [list(r) for r in rows]
    if not rows:
        return []
    n_new = max(0, min(int(n_new), model.n_ctx - max(len(r) for r in rows)))
    twin = fast_path(model) if fast is not False else None
    if fast and twin is None:
        raise ValueError("the KV-cached path is not available: hooks are attached, the model spans several "
                         "devices, or it has no Hugging Face twin")
    if n_new == 0:
        return [[] for _ in rows]
    step = _cached_steps(model, twin, rows) if twin is not None else _hooked_steps(model, rows, n_new)
    done = torch.zeros(len(rows), dtype=torch.bool)
    out = []
    with torch.no_grad():
        logits = step(None)
        for i in range(n_new):
            nxt = choose(logits)
            if eos is not None:
                nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
                done |= nxt == eos
            out.append(nxt)
            if i == n_new - 1 or (stop_at_eos and eos is not None and bool(done.all())):
                break
            logits = step(nxt)
    return torch.stack(out, 1).tolist()


# ---------------------------------------------------------------------------------------------- front ends
def sample_text(model, prompts: Sequence[str], n_new: int, *, seed: int = 0, top_k: int | None = 5,
                greedy: bool = False) -> list[str]:
    """Continue each prompt by ``n_new`` tokens (top-k sampling with a seeded generator, or greedy) and return the
    new text only. All prompts run as one batch; the same (weights, prompts, seed, hooks) give the same text."""
    if not prompts:
        return []
    rows = [model.encode(p) for p in prompts]
    choose = sampler(seed=seed, temperature=0.0 if greedy else 1.0, top_k=top_k)
    return [model.tokenizer.decode(r) for r in sample_ids(model, rows, n_new, choose)]


def sample_text_groups(model, groups: Sequence[Sequence[str]], n_new: int, *, seeds: Sequence[int],
                       top_k: int | None = 5) -> list[list[str]]:
    """:func:`sample_text` of several prompt groups in one batch: group ``g`` is drawn with its own generator
    seeded ``seeds[g]``, so each group gets the tokens ``sample_text(model, groups[g], n_new, seed=seeds[g])``
    gives it alone (the batch only changes the padding; a decode step costs about the same for 3 rows as for 30,
    as it reads every weight once)."""
    groups = [list(g) for g in groups]
    if len(seeds) != len(groups):
        raise ValueError(f"{len(groups)} prompt groups but {len(seeds)} seeds; give one seed per group")
    sizes = [len(g) for g in groups]
    prompts = [p for g in groups for p in g]
    if not prompts:
        return [[] for _ in groups]
    choosers = [sampler(seed=s, temperature=1.0, top_k=top_k) for s in seeds]
    bounds = torch.tensor([0] + sizes).cumsum(0).tolist()

    def choose(logits):
        return torch.cat([c(logits[a:b]) for c, a, b in zip(choosers, bounds, bounds[1:]) if b > a])

    ids = sample_ids(model, [model.encode(p) for p in prompts], n_new, choose)
    texts = [model.tokenizer.decode(r) for r in ids]
    return [texts[a:b] for a, b in zip(bounds, bounds[1:])]


def generate(model, text, max_new_tokens: int = 20, *, n: int | None = None, temperature: float = 0.0,
             top_k: int | None = None, seed: int = 0, stop_at_eos: bool = True):
    """What :meth:`interp.Model.generate` does (see there)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens}; allowed: >= 1")
    if temperature < 0:
        raise ValueError(f"temperature={temperature}; allowed: >= 0")
    count = 1 if n is None else n
    if count < 1:
        raise ValueError(f"n={n}; allowed: >= 1")
    row = one_text(model, text)[0].tolist()
    eos = getattr(model.tokenizer, "eos_token_id", None)
    new = sample_ids(model, [row] * count, max_new_tokens,
                     sampler(seed=seed, temperature=temperature, top_k=top_k), eos=eos, stop_at_eos=stop_at_eos)
    outs = []
    for ids in new:
        if stop_at_eos and eos is not None and eos in ids:
            ids = ids[: ids.index(eos)]
        outs.append(model.tokenizer.decode(ids) if model.tokenizer is not None else str(ids))
    return outs[0] if n is None else outs
