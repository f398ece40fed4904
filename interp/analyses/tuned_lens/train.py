"""Training the tuned lens on a laptop CPU: ``interp.train_tuned_lens(model, tokens=..., steps=..., seed=0)``.

The reference implementation runs SGD for 250 steps of 2^18 tokens on a GPU. Here the cost that matters is the
unembedding: every KL evaluation of one layer at one position multiplies by the 49,152-column W_U, forward and
backward, so a laptop gets through a few thousand (layer, token) pairs per second. Three phases make that budget
count, each resumable:

1. Capture. One forward per batch of training documents (BOS + text, at most ``max_len`` tokens; documents
   sorted by length within windows of 64 so batches carry little padding) records every ``resid_pre`` and the
   final ``resid_post`` at every real position except BOS (the attention-sink outlier, left out as the key
   statistics leave it out) until ``tokens`` positions are counted. Each batch adds to float64 sufficient
   statistics of a least-squares fit per layer, and ``kl_tokens`` positions chosen at random (seeded) are kept
   in memory in bfloat16 for phase 3.
2. Least squares (``init="lstsq"``; skipped for ``init="identity"``). Each translator starts as the affine map
   that best predicts the final residual's direction from the layer's: with x = h/rms(h), y = h_L/rms(h_L),
   minimise Σ‖[x, 1/rms(h)] θ − y‖² + ridge·tr·‖θ − θ_identity‖² (ridge shrinks toward the logit lens). The final
   norm is scale-free, so h θ_x + θ_1 is then an affine translator of h itself. The bias-only baseline starts at
   its own least-squares bias. This closed form is what the CPU budget buys instead of most of the SGD:
   it already removes most of the logit lens's KL.
3. KL. ``steps`` Adam steps on the kept positions (``batch_size`` per step, every layer on the same batch, epochs
   reshuffled with the seed) minimise KL(final ‖ lens) through the model's own final norm and W_U, for the
   translators and the bias-only baseline alike (the baseline, d_model parameters per layer, on the first
   ``baseline_batch`` positions of each batch). Biases step in units of their layer's mean residual norm, which
   grows ~100x through SmolLM2's stack. W_U is used in bfloat16 where the hardware multiplies in it
   natively (four times as fast as float32 on a CPU with AVX512-BF16, and what a GPU does anyway) and in float32
   elsewhere (emulated bfloat16 is ~500x slower; ``meta["unembed_dtype"]`` records which); softmax sums are
   float32. The final distribution p enters only through log-sum-exp, Σ p log p and E_p[W_U column] — the
   gradient is W_U q / Σ − E_p[W_U column] — so no [batch, vocab] tensor but the logits themselves is ever
   allocated.

Resume. Every ``checkpoint_every`` capture batches / KL steps the state goes to ``<key>.capture.safetensors`` /
``<key>.partial.safetensors`` (+ JSON sidecars with SHA-256) beside the lens; an interrupted run called again with
the same settings continues there, and ends with exactly the lens an uninterrupted run gives. A
KeyboardInterrupt arriving outside the short moment a batch's sums or a step's update is committed also writes
the state it reached. Seeds fix everything: the document order, the kept positions, the batches.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable

import torch

from ...core.arch import final_norm_module
from ...core.hooks import capture
from ...core.inputs import check_int, pad_mask, pad_rows
from ...core.placement import fast_matmul_dtype
from ...core.progress import bar
from ..accumulate import read_state, remove_state, write_state
from ..lens import resid_names
from .lens import TunedLens, lens_dir, model_meta, settings_key, split_documents

INITS = ("lstsq", "identity")
DEFAULTS = {"tokens": 16384, "kl_tokens": 4096, "steps": 16, "batch_size": 256, "baseline_batch": 64, "lr": 3e-4,
            "baseline_lr": 1e-2, "init": "lstsq", "ridge": 1e-3, "max_len": 256, "seed": 0}
_WINDOW = 64  # documents sorted by length together (little padding, same batches whatever the budget)


def train_tuned_lens(model, *, tokens: int = DEFAULTS["tokens"], steps: int = DEFAULTS["steps"],
                     batch_size: int = DEFAULTS["batch_size"], baseline_batch: int = DEFAULTS["baseline_batch"],
                     lr: float = DEFAULTS["lr"], baseline_lr: float = DEFAULTS["baseline_lr"],
                     kl_tokens: int = DEFAULTS["kl_tokens"],
                     init: str = DEFAULTS["init"], ridge: float = DEFAULTS["ridge"],
                     max_len: int = DEFAULTS["max_len"], seed: int = DEFAULTS["seed"], corpus="wiki",
                     cache: bool = True, retrain: bool = False, progress: bool = True, checkpoint_every: int = 8,
                     capture_batch: int = 8, callback: Callable[[dict], None] | None = None) -> TunedLens:
    """Train (or load from the cache) a tuned lens for ``model``; see the module docstring for the method.

    tokens: training positions captured (BOS and padding excluded); kl_tokens: how many of them the KL phase
    keeps. steps x batch_size: KL updates and positions per update (baseline_batch of them for the bias-only
    baseline). lr / baseline_lr: Adam step sizes of the translators / the bias-only baseline (for A as is; for
    biases times the layer's mean residual norm). init: "lstsq" (least-squares start) or "identity" (the
    paper's start, the logit lens). corpus: "wiki" or a list of texts (one in ten held out by hash, never trained on).
    cache: read / write the lens and its checkpoints under ``cache_dir()/tuned_lens/<fingerprint>/``;
    retrain: ignore a cached lens and its checkpoints. callback: called with a dict after every capture batch and
    KL step; raising KeyboardInterrupt there stops the run as Ctrl-C would (the state is checkpointed first).
    """
    settings = check_settings(tokens=tokens, steps=steps, batch_size=batch_size, baseline_batch=baseline_batch,
                              lr=lr, baseline_lr=baseline_lr, kl_tokens=kl_tokens, init=init, ridge=ridge,
                              max_len=max_len, seed=seed)
    check_int("checkpoint_every", checkpoint_every, 1)
    check_int("capture_batch", capture_batch, 1)
    train_docs, _, corpus_id = split_documents(corpus, settings["seed"])
    settings["corpus"] = corpus_id
    if settings["max_len"] > model.n_ctx:
        raise ValueError(f"max_len={max_len} exceeds the model's context ({model.n_ctx}); allowed: 2..{model.n_ctx}")
    meta = {**model_meta(model), "settings": settings}
    path = lens_dir(model.fingerprint) / f"{settings_key(settings)}.safetensors" if cache else None
    if path is not None:
        if retrain:
            for p in (path, checkpoint_path(path, "capture"), checkpoint_path(path, "partial")):
                remove_state(p)
        else:
            done = _try_load(path, meta, model)
            if done is not None:
                return done
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    if settings["init"] == "identity" and settings["steps"] == 0:  # the logit lens itself: nothing to read
        cap = {"kl_resid": torch.zeros(0, model.n_layers + 1, model.d_model), "tokens": 0, "documents": 0,
               "seconds": 0.0}
    else:
        cap = capture_phase(model, train_docs, settings, path, progress=progress,
                            checkpoint_every=checkpoint_every, capture_batch=capture_batch, callback=callback)
    cpu_capture = time.process_time() - t_cpu
    lens = TunedLens.identity(model)
    t_solve = time.perf_counter()
    if settings["init"] == "lstsq":
        lens.weight, lens.bias, lens.baseline = solve_lstsq(cap, settings["ridge"])
    solve_seconds = time.perf_counter() - t_solve
    kl = kl_phase(model, lens, cap["kl_resid"], settings, path, progress=progress,
                  checkpoint_every=checkpoint_every, callback=callback)
    lens.history = kl["history"]
    seconds = cap["seconds"] + solve_seconds + kl["seconds"]
    lens.meta = {**meta, "tokens": cap["tokens"], "kl_tokens": int(cap["kl_resid"].shape[0]),
                 "documents": cap["documents"], "seconds": seconds, "capture_seconds": cap["seconds"],
                 "solve_seconds": solve_seconds, "kl_seconds": kl["seconds"],
                 "cpu_seconds_this_run": time.process_time() - t_cpu, "capture_cpu_seconds_this_run": cpu_capture,
                 "wall_seconds_this_run": time.perf_counter() - t_wall, "threads": torch.get_num_threads(),
                 "history_steps": kl["history_steps"], "unembed_dtype": kl["unembed_dtype"],
                 "finished_at": time.time(), "torch": torch.__version__}
    if path is not None:
        for stale in path.parent.glob(f"{path.stem}.eval_*.json"):  # evaluations of the lens this one replaces
            stale.unlink(missing_ok=True)
        lens.save(path)
        remove_state(checkpoint_path(path, "partial"))
        remove_state(checkpoint_path(path, "capture"))
    return lens


def check_settings(**s) -> dict:
    """The training settings checked (ValueError naming the value and what is allowed) -> a plain dict."""
    check_int("tokens", s["tokens"], 16)
    check_int("kl_tokens", s["kl_tokens"], 1)
    check_int("steps", s["steps"], 0)
    check_int("batch_size", s["batch_size"], 1)
    check_int("baseline_batch", s["baseline_batch"], 1)
    check_int("max_len", s["max_len"], 2)
    check_int("seed", s["seed"], 0)
    for name in ("lr", "baseline_lr", "ridge"):
        v = s[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 \
                or (v == 0 and name != "ridge"):
            raise ValueError(f"{name}={v!r}; allowed: a finite number > 0" + (" (or 0)" if name == "ridge" else ""))
    if s["init"] not in INITS:
        raise ValueError(f"init={s['init']!r}; allowed: {', '.join(map(repr, INITS))}")
    out = dict(s)
    for name in ("lr", "baseline_lr", "ridge"):
        out[name] = float(out[name])
    out["kl_tokens"] = min(int(out["kl_tokens"]), int(out["tokens"]))
    out["baseline_batch"] = min(int(out["baseline_batch"]), int(out["batch_size"]))
    return out


def checkpoint_path(path, kind: str):
    return path.with_name(path.name.replace(".safetensors", f".{kind}.safetensors"))


def _try_load(path, meta: dict, model) -> TunedLens | None:
    if not path.exists() and not path.with_suffix(".json").exists():
        return None
    try:
        lens = TunedLens.load(path)
    except (ValueError, FileNotFoundError, OSError) as e:
        warnings.warn(f"cached tuned lens {path} is unusable ({e}); retraining", stacklevel=3)
        return None
    if lens.meta.get("settings") != meta["settings"] or lens.fingerprint != model.fingerprint:
        warnings.warn(f"cached tuned lens {path} was written for other settings or another model; retraining",
                      stacklevel=3)
        return None
    return lens


# ============================================================================================== phase 1: capture
def document_batches(model, docs, max_len: int, capture_batch: int):
    """Token rows in batches: BOS + text cut to ``max_len``, sorted by length within windows of 64 documents."""
    for w in range(0, len(docs), _WINDOW):
        rows = [model.encode(d.text, prepend_bos=True)[:max_len] for d in docs[w:w + _WINDOW]]
        rows.sort(key=len)
        for b in range(0, len(rows), capture_batch):
            yield rows[b:b + capture_batch]


def rms(x: torch.Tensor) -> torch.Tensor:
    return x.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-12)


def empty_capture(L: int, d: int, lstsq: bool) -> dict:
    z = (lambda *s: torch.zeros(*s, dtype=torch.float64)) if lstsq else (lambda *s: torch.zeros(0))
    return {"xx": z(L, d + 1, d + 1), "xy": z(L, d + 1, d), "w": z(L), "hw": z(L, d), "yr": z(L, d),
            "kl_parts": [], "batches": 0, "tokens": 0, "documents": 0, "seconds": 0.0}


def batch_sums(H: torch.Tensor) -> dict:
    """Least-squares sums of one batch of positions H [n, n_layers+1, d] (float32): per layer, with
    F = [h/r, 1/r] and y = h_L/rms(h_L): FᵀF, Fᵀy; and for the bias-only fit Σ 1/r², Σ h/r², Σ y/r."""
    L = H.shape[1] - 1
    Y = H[:, L] / rms(H[:, L])
    out = {k: [] for k in ("xx", "xy", "w", "hw", "yr")}
    for l in range(L):
        X = H[:, l]
        r = rms(X)
        F = torch.cat([X / r, 1 / r], 1)
        out["xx"].append((F.T @ F).double())
        out["xy"].append((F.T @ Y).double())
        w = r.pow(-2)
        out["w"].append(w.double().sum())
        out["hw"].append((X * w).double().sum(0))
        out["yr"].append((Y / r).double().sum(0))
    return {k: torch.stack(v) for k, v in out.items()}


def capture_phase(model, docs, settings: dict, path, *, progress: bool, checkpoint_every: int, capture_batch: int,
                  callback) -> dict:
    """Phase 1 (module docstring) -> dict with the sums, ``kl_resid`` [kept, n_layers+1, d] bfloat16, counts."""
    L, d = model.n_layers, model.d_model
    lstsq = settings["init"] == "lstsq"
    ck = None if path is None else checkpoint_path(path, "capture")
    state = _resume_capture(ck, settings) if ck is not None else None
    if state is not None and state.get("complete"):
        return state
    state = state or empty_capture(L, d, lstsq)
    budget = settings["tokens"]
    gen = torch.Generator().manual_seed(settings["seed"])
    keep = torch.zeros(budget, dtype=torch.bool)
    keep[torch.randperm(budget, generator=gen)[:settings["kl_tokens"]]] = True
    names = resid_names(model)
    t0 = time.perf_counter() - state["seconds"]
    committing = False

    def save():
        state["seconds"] = time.perf_counter() - t0
        _save_capture(ck, state, settings)

    pbar = bar(total=budget, desc="tuned lens: capture", enabled=progress, initial=state["tokens"], unit="tok")
    try:
        for i, rows in enumerate(document_batches(model, docs, settings["max_len"], capture_batch)):
            if i < state["batches"]:
                continue
            if state["tokens"] >= budget:
                break
            toks, lengths = pad_rows(model, rows)
            mask = pad_mask(lengths, toks.shape[1])
            mask[:, 0] = False  # BOS
            store, _ = capture(model, toks, names, stop=True, description="tuned lens capture")
            H = torch.stack([store[n][mask.to(store[n].device)].float().cpu() for n in names], 1)
            del store
            H = H[: budget - state["tokens"]]
            t = state["tokens"]
            sel = keep[t:t + H.shape[0]]
            sums = batch_sums(H) if lstsq else None
            committing = True  # from here to the end of the commit the state is half-updated
            if sums is not None:
                for k, v in sums.items():
                    state[k] += v
            state["kl_parts"].append(H[sel].to(torch.bfloat16))
            state["tokens"] = t + H.shape[0]
            state["documents"] += len(rows)
            state["batches"] = i + 1
            committing = False
            pbar.update(H.shape[0])
            if callback is not None:
                callback({"phase": "capture", "batches": state["batches"], "tokens": state["tokens"]})
            if ck is not None and state["batches"] % checkpoint_every == 0:
                save()
    except KeyboardInterrupt:
        if ck is not None and not committing:
            save()
        raise
    finally:
        pbar.close()
    if state["tokens"] == 0:
        raise ValueError("the training documents gave no tokens past BOS; give longer texts")
    state["kl_resid"] = torch.cat(state.pop("kl_parts")) if state["kl_parts"] else torch.zeros(0, L + 1, d)
    if state["kl_resid"].shape[0] == 0 and settings["steps"]:
        raise ValueError(f"no positions kept for the KL phase (corpus gave {state['tokens']} tokens); raise tokens")
    state["complete"] = True
    if ck is not None:
        save()
    return state


def _save_capture(ck, state: dict, settings: dict) -> None:
    kl = state.get("kl_resid")
    if kl is None:
        parts = state["kl_parts"]
        kl = torch.cat(parts) if parts else torch.zeros(0, 1, 1, dtype=torch.bfloat16)
    tensors = {k: state[k] for k in ("xx", "xy", "w", "hw", "yr")}
    tensors["kl_resid"] = kl
    meta = {"settings": settings, **{k: state[k] for k in ("batches", "tokens", "documents", "seconds")},
            "complete": bool(state.get("complete"))}
    write_state(ck, {"tensors": tensors, "meta": meta})


def _read_checkpoint(ck, settings: dict, what: str) -> dict | None:
    """The saved state of ``ck`` when it exists, reads and was written with the same settings; else None (an
    unreadable one with a warning, since the run then starts ``what`` over)."""
    if not ck.exists():
        return None
    try:
        saved = read_state(ck)
    except (ValueError, FileNotFoundError, OSError) as e:
        warnings.warn(f"{what} checkpoint {ck} is unusable ({e}); starting it over", stacklevel=5)
        return None
    return saved if saved["meta"].get("settings") == settings else None


def _resume_capture(ck, settings: dict) -> dict | None:
    saved = _read_checkpoint(ck, settings, "capture")
    if saved is None:
        return None
    meta, t = saved["meta"], saved["tensors"]
    state = {k: t[k] for k in ("xx", "xy", "w", "hw", "yr")}
    state.update({k: meta[k] for k in ("batches", "tokens", "documents", "seconds")})
    if meta.get("complete"):
        state.update(kl_resid=t["kl_resid"], complete=True)
    else:
        state["kl_parts"] = [t["kl_resid"]] if t["kl_resid"].shape[0] else []
    return state


# ============================================================================================== phase 2: solve
def solve_lstsq(cap: dict, ridge: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Phase 2: (A [L, d, d], b [L, d], c [L, d]) from the captured sums (float64 solves)."""
    xx, xy = cap["xx"], cap["xy"]
    L, d1, d = xy.shape
    target = torch.cat([torch.eye(d, dtype=torch.float64), torch.zeros(1, d, dtype=torch.float64)])  # identity
    A, b = torch.zeros(L, d, d), torch.zeros(L, d)
    for l in range(L):
        lam = ridge * float(xx[l].diagonal().mean())
        theta = torch.linalg.solve(xx[l] + lam * torch.eye(d1, dtype=torch.float64), xy[l] + lam * target)
        # x ↦ x θ_x + θ_1 in translator form h + h Aᵀ + b: Aᵀ = θ_x − I
        A[l] = (theta[:d] - torch.eye(d, dtype=torch.float64)).T.float()
        b[l] = theta[d].float()
    c = ((cap["yr"] - cap["hw"]) / cap["w"][:, None]).float()  # argmin Σ ‖(h + c)/r − y‖²
    return A, b, c


# ============================================================================================== phase 3: KL
class KLStep:
    """KL(final ‖ lens) and its gradient w.r.t. the normed lens input, through W_U in ``dtype`` (default: bfloat16
    where the hardware has it natively, else float32; see :func:`fast_matmul_dtype`)."""

    def __init__(self, model, dtype: torch.dtype | None = None):
        W_U, b_U = model.unembedding()
        self.device = W_U.device
        self.dtype = fast_matmul_dtype(self.device) if dtype is None else dtype
        self.W = W_U.detach().to(self.dtype)
        self.b = None if b_U is None or not bool(b_U.detach().any()) else b_U.detach().float().to(self.device)
        norm = final_norm_module(model)
        self.norm = (lambda x: x) if norm is None else norm

    def logits(self, xn: torch.Tensor) -> torch.Tensor:
        z = (xn.to(self.dtype) @ self.W).float()
        return z if self.b is None else z + self.b

    def target(self, h_final: torch.Tensor) -> dict:
        """The final distribution p of a batch, as the loss needs it."""
        with torch.no_grad():
            logp = torch.log_softmax(self.logits(self.norm(h_final)), -1)
            p = logp.exp()
            return {"negent": (p * logp).sum(-1), "Wp": (p.to(self.dtype) @ self.W.T).float(),
                    "pb": None if self.b is None else p @ self.b}

    def loss_grad(self, xn: torch.Tensor, tgt: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-position KL (nats) and d(KL)/d(xn) for normed lens inputs ``xn`` [B, d]."""
        with torch.no_grad():
            z = self.logits(xn)
            m = z.amax(-1, keepdim=True)
            z.sub_(m).exp_()
            s = z.sum(-1, keepdim=True)
            pz = (xn * tgt["Wp"]).sum(-1) + (0 if tgt["pb"] is None else tgt["pb"])
            loss = tgt["negent"] - pz + (m + s.log()).squeeze(-1)
            grad = (z.to(self.dtype) @ self.W.T).float().div_(s).sub_(tgt["Wp"])
        return loss, grad


def stream_indices(step: int, batch: int, n: int, seed: int) -> torch.Tensor:
    """Positions of KL step ``step``: the ``batch`` after ``step * batch`` in the concatenation of one seeded
    permutation of 0..n-1 per epoch."""
    out, start = [], step * batch
    while len(out) < batch:
        epoch, off = divmod(start + len(out), n)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
        out.extend(perm[off: off + batch - len(out)].tolist())
    return torch.tensor(out)


def kl_phase(model, lens: TunedLens, kl_resid: torch.Tensor, settings: dict, path, *, progress: bool,
             checkpoint_every: int, callback) -> dict:
    """Phase 3: Adam on KL for ``lens`` (updated in place) -> {"history", "history_steps", "seconds",
    "unembed_dtype"}."""
    steps, B, Bb, L = settings["steps"], settings["batch_size"], settings["baseline_batch"], model.n_layers
    ck = None if path is None else checkpoint_path(path, "partial")
    kls = KLStep(model)
    dev = kls.device
    params = {"weight": lens.weight, "bias": lens.bias, "baseline": lens.baseline}
    params = {k: v.to(dev).clone() for k, v in params.items()}
    adam = {f"{k}.{m}": torch.zeros_like(v) for k, v in params.items() for m in ("m", "v")}
    history, start, seconds = torch.zeros(steps + 1, 2, L), 0, 0.0
    saved = _resume_kl(ck, settings) if ck is not None else None
    if saved is not None:
        params = {k: saved["tensors"][k].to(dev) for k in params}
        adam = {k: saved["tensors"][k].to(dev) for k in adam}
        history = saved["tensors"]["history"]
        start, seconds = int(saved["meta"]["step"]), float(saved["meta"]["seconds"])
    t0 = time.perf_counter() - seconds
    committing = False

    def save(step):
        write_state(ck, {"tensors": {**params, **adam, "history": history},
                         "meta": {"settings": settings, "step": step, "seconds": time.perf_counter() - t0}})

    # Residual norms differ by ~100x between layers: biases step in units of their layer's typical norm (A is
    # unitless, h Aᵀ scales with h), so one learning rate suits every layer.
    scale = rms(kl_resid[:4096, :L].float()).mean(0).to(dev)  # [L, 1]
    lrs = {"weight": settings["lr"], "bias": settings["lr"] * scale, "baseline": settings["baseline_lr"] * scale}
    pbar = bar(total=steps, desc="tuned lens: KL", enabled=progress, initial=start, unit="step")
    done = start
    try:
        # one extra pass after the last update logs the final training KL (no update)
        for step in range(start, steps + 1) if steps else range(0):
            idx = stream_indices(step, B, kl_resid.shape[0], settings["seed"])
            H = kl_resid[idx].to(dev, torch.float32)
            tgt = kls.target(H[:, L])
            sub = {k: None if v is None else v[:Bb] for k, v in tgt.items()}
            grads = {k: torch.zeros_like(v) for k, v in params.items()}
            update = step < steps
            with torch.set_grad_enabled(update):
                for l in range(L):
                    h = H[:, l]
                    A, b, c = (params[k][l].detach().requires_grad_(update) for k in ("weight", "bias", "baseline"))
                    for j, keys in enumerate((("weight", "bias"), ("baseline",))):
                        # the baseline has d_model parameters per layer, not d_model²: the first
                        # baseline_batch positions of the batch are enough for it (and a quarter of the cost)
                        n = B if j == 0 or not update else Bb
                        xn = kls.norm(h[:n] + (h[:n] @ A.T + b) if j == 0 else h[:n] + c)
                        loss, g = kls.loss_grad(xn.detach(), tgt if n == B else sub)
                        history[step, j, l] = loss.mean()
                        if update:
                            gs = torch.autograd.grad(xn, (A, b) if j == 0 else (c,), grad_outputs=g / n)
                            for key, gg in zip(keys, gs):
                                grads[key][l] = gg
            if step == steps:
                break
            committing = True
            _adam(params, adam, grads, lrs, step + 1)
            done = step + 1
            committing = False
            pbar.update(1)
            if callback is not None:
                callback({"phase": "kl", "step": done, "loss_tuned": float(history[step, 0].mean()),
                          "loss_bias_only": float(history[step, 1].mean())})
            if ck is not None and done % checkpoint_every == 0 and done < steps:
                save(done)
    except KeyboardInterrupt:
        if ck is not None and not committing and done > start:
            save(done)
        raise
    finally:
        pbar.close()
    lens.weight, lens.bias, lens.baseline = (params[k].cpu() for k in ("weight", "bias", "baseline"))
    return {"history": history if steps else torch.zeros(0, 2, L),
            "history_steps": list(range(steps + 1)) if steps else [], "seconds": time.perf_counter() - t0,
            "unembed_dtype": str(kls.dtype).removeprefix("torch.")}


def _adam(params: dict, adam: dict, grads: dict, lrs: dict, t: int, b1: float = 0.9, b2: float = 0.999,
          eps: float = 1e-8) -> None:
    """One Adam update (written out so that its state is two tensors per parameter, saved as they are); a
    learning rate may be a tensor broadcasting over the parameter (one per layer)."""
    for k, p in params.items():
        m, v, g = adam[f"{k}.m"], adam[f"{k}.v"], grads[k]
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v / (1 - b2 ** t)).sqrt_().add_(eps)
        p.sub_(m.div(denom).mul_(lrs[k] / (1 - b1 ** t)))


def _resume_kl(ck, settings: dict) -> dict | None:
    return _read_checkpoint(ck, settings, "KL")
