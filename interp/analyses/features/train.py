"""Training sparse dictionaries on a CPU: ``interp.train_transcoders(model, layers=None)`` and
``interp.train_sae(model, hook)``, one trainer for both.

One model forward per batch feeds every dictionary being trained: the forward captures each site's input and
target at the counted positions (:mod:`.data`) and stops after the last one, so nothing above the last trained
layer runs and nothing is written to disk. Each dictionary then takes one Adam step on its FVU,

    loss = E|y - ŷ|² / E|y - E y|²  +  aux_coef · AuxK,

where AuxK (Gao et al. 2024) asks the latents that have not fired for ``dead_tokens`` tokens to explain the
residual error with their ``aux_k`` largest pre-activations, which pulls dead latents back into use; with
``resample_every`` set, dead latents are also restarted from badly reconstructed tokens (:mod:`.resample`). Decoder rows
stay unit norm (the gradient's component along each row is removed before the step, the rows renormalised after).
The learning rate warms up over the first 5% of steps and decays linearly to zero over the last 20%.

Inputs and targets are divided by a per-site scalar measured on the first batch (so E|z|² = d); the scalars are
part of the dictionary and applied in its forward, so a dictionary reads and writes raw activations.

Cache and resume. Finished dictionaries go to ``cache_dir()/features/<model fingerprint>/<settings key>/``; every
``checkpoint_every`` steps (default: every 200 rows) the whole state (parameters, Adam moments, fire counters, step)
goes to ``checkpoint.safetensors`` there. A run with the same settings continues from it and ends with the weights an
uninterrupted run gives (the batches are a pure function of the seed; tests check bit equality). Ctrl-C (or a
``callback`` raising KeyboardInterrupt) writes the checkpoint before the interrupt goes on; an interrupt inside a
step writes nothing (the state is half-updated there) and the last periodic checkpoint stands.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from ...core import paths as _paths
from ...core.hooks import capture
from ...core.progress import bar, emit
from ...core.texts import SOURCES
from ..accumulate import World, all_reduce_sum, read_state, remove_state, write_state
from .data import batches, counted
from .dictionary import Dictionary, DictionarySet, Site, model_info
from .cost import estimate_seconds
from .resample import resample_dead


INITS = ("data", "random")
ADAMS = ("foreach", "fused")
AUX_ACTS = {"relu": torch.relu, "softplus": torch.nn.functional.softplus}


@dataclass(frozen=True)
class TrainSettings:
    """What a training run is; every field enters the cache key. ``tokens``: counted training positions (a prefix
    of the shuffled train split; at most one epoch). ``rows`` x ``ctx``: one batch. ``lr``: Adam's step
    (None: 2e-4 · sqrt(16384 / width), sparsify's scaling, which barely moves the latents within this budget). ``fit_batches``: the first batches only feed a ridge
    least-squares fit of the target on the input, which starts the skip matrix and decoder bias (the dictionary then
    learns what a linear map misses); they count toward ``tokens`` and are not trained on again (at most a quarter
    of the run's batches are used so). 0: zero skip, the first batch's mean as decoder bias. ``init``: "data" starts
    each latent from one token of those batches (decoder row: that token's target minus the linear fit, unit norm;
    encoder column: its centred input, unit norm), "random": unit-norm random decoder rows, encoder = their
    transpose. ``resample_every``: restart dead latents every so many training tokens, within the first
    ``resample_until`` share of them (0, the default: never; off, neither field enters the cache key). ``aux_act``:
    what the AuxK term applies to the dead latents' pre-activations: "relu" (Gao et al. 2024; a latent whose
    pre-activation is below zero on every token gets no gradient from it) or "softplus" (a small pull at every
    pre-activation, as ghost grads' exp; studies/features_gemma_dead); "relu" does not enter the cache key."""

    width: int = 2304  # width, k and lr: chosen on dev text, studies/features_sweep
    k: int = 16
    skip: bool = True
    tokens: int = 2_000_000
    rows: int = 4  # rows 1: lower dev FVU, up to 41% of a layer's latents dead (studies/features_sweep)
    ctx: int = 256
    lr: float | None = 2e-3
    aux_k: int | None = None  # None: d_in // 2
    aux_coef: float = 1 / 32
    dead_tokens: int = 100_000
    fit_batches: int = 16
    init: str = "data"
    seed: int = 0
    sources: tuple = SOURCES
    bos_rows: bool = False  # every row starts with BOS (data.py); no gain on dev (studies/features_layer11)
    adam: str = "foreach"  # torch's Adam kernel: "foreach" or "fused" (one pass over the moments; differs in last bits)
    resample_every: int = 0  # tokens between restarts of dead latents (resample.py); 0: never
    resample_until: float = 0.5  # no restarts after this share of the training tokens
    aux_act: str = "relu"

    def check(self, d_model: int) -> "TrainSettings":
        if self.init not in INITS:
            raise ValueError(f"init={self.init!r}; allowed: {', '.join(INITS)}")
        if not isinstance(self.fit_batches, int) or isinstance(self.fit_batches, bool) or self.fit_batches < 0:
            raise ValueError(f"fit_batches={self.fit_batches!r}; allowed: an integer >= 0")
        for name in ("width", "k", "tokens", "rows", "ctx", "dead_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}={v!r}; allowed: a positive integer")
        if not isinstance(self.bos_rows, bool):
            raise ValueError(f"bos_rows={self.bos_rows!r}; allowed: True or False")
        if not isinstance(self.resample_every, int) or isinstance(self.resample_every, bool) \
                or self.resample_every < 0:
            raise ValueError(f"resample_every={self.resample_every!r}; allowed: an integer >= 0 (0: never)")
        if not isinstance(self.resample_until, (int, float)) or not 0 < self.resample_until <= 1:
            raise ValueError(f"resample_until={self.resample_until!r}; allowed: a number in (0, 1]")
        if self.adam not in ADAMS:
            raise ValueError(f"adam={self.adam!r}; allowed: {', '.join(ADAMS)}")
        if self.aux_act not in AUX_ACTS:
            raise ValueError(f"aux_act={self.aux_act!r}; allowed: {', '.join(AUX_ACTS)}")
        if self.k >= self.width:
            raise ValueError(f"k={self.k} with width={self.width}; allowed: 1 <= k < width")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and 0 < self.lr < 1):
            raise ValueError(f"lr={self.lr!r}; allowed: a number in (0, 1), or None")
        return self

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else 2e-4 * math.sqrt(16384 / self.width)

    def key(self, sites: dict) -> str:
        settings = asdict(self)
        if not self.bos_rows:  # the fields came later: runs at their first values keep their cache keys
            del settings["bos_rows"]
        if self.adam == "foreach":
            del settings["adam"]
        if not self.resample_every:
            del settings["resample_every"], settings["resample_until"]
        if self.aux_act == "relu":
            del settings["aux_act"]
        blob = json.dumps({"settings": settings, "sites": {str(k): asdict(s) for k, s in sites.items()}},
                          sort_keys=True, default=str).encode()
        kind = next(iter(sites.values())).kind
        return f"{kind}_w{self.width}_k{self.k}_{self.tokens}tok_seed{self.seed}_" \
               f"{hashlib.sha256(blob).hexdigest()[:10]}"


def features_dir(model) -> Path:
    return _paths.cache_dir() / "features" / model.fingerprint


def transcoder_sites(model, layers=None) -> dict:
    """``{layer: Site}`` for ``layers`` (None: every layer), checked."""
    if layers is None:
        layers = list(range(model.n_layers))
    elif isinstance(layers, int) and not isinstance(layers, bool):
        layers = [layers]
    out = {}
    for L in layers:
        if isinstance(L, bool) or not isinstance(L, int):
            raise ValueError(f"layer {L!r}; allowed: integers 0..{model.n_layers - 1}")
        out[model.check_layer(L)] = None
    if not out:
        raise ValueError("layers=[]; allowed: None (every layer) or a non-empty list of layer indices")
    return {L: Site.transcoder(model, L) for L in sorted(out)}


def cached_transcoders(model, layers=None, *, settings: TrainSettings | None = None, **overrides):
    """The transcoders :func:`train_transcoders` would return from its cache for these arguments, or None
    (nothing is trained)."""
    sites = transcoder_sites(model, layers)
    folder = features_dir(model) / _settings(settings, overrides).check(model.d_model).key(sites)
    if not (folder / "settings.json").exists():
        return None
    return DictionarySet.load(folder).check(model)


def train_transcoders(model, layers=None, *, settings: TrainSettings | None = None, cache: bool = True,
                      retrain: bool = False, progress: bool = True, checkpoint_every: int | None = None,
                      callback=None, world: World | None = None, **overrides) -> DictionarySet:
    """Skip-transcoders for ``layers`` (default: every layer), one per layer, trained together (or loaded from the
    cache). ``settings`` / keyword overrides: :class:`TrainSettings` fields. ``world``: this process's rank among
    torch.distributed ranks (``interp.analyses.dist.init()``; each rank runs ``rows / ranks`` rows of every batch,
    gradients all-reduced; rank 0 writes the cache). See the module docstring."""
    sites = transcoder_sites(model, layers)
    return _train(model, sites, _settings(settings, overrides), cache, retrain, progress, checkpoint_every, callback,
                  world)


def train_sae(model, hook: str, *, settings: TrainSettings | None = None, cache: bool = True,
              retrain: bool = False, progress: bool = True, checkpoint_every: int | None = None, callback=None,
              **overrides) -> Dictionary:
    """A residual-stream (or any hook's) TopK SAE at ``hook``, with the same trainer; no skip by default."""
    overrides.setdefault("skip", False)
    sites = {hook: Site.sae(model, hook)}
    out = _train(model, sites, _settings(settings, overrides), cache, retrain, progress, checkpoint_every, callback)
    return out[hook]


def _settings(settings, overrides) -> TrainSettings:
    base = settings or TrainSettings()
    unknown = set(overrides) - set(TrainSettings.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown training settings {sorted(unknown)}; allowed: "
                        f"{', '.join(TrainSettings.__dataclass_fields__)}")
    if "sources" in overrides:
        overrides["sources"] = tuple(overrides["sources"])
    return replace(base, **overrides)


# ============================================================================================== the run
def _train(model, sites: dict, settings: TrainSettings, cache, retrain, progress, checkpoint_every, callback,
           world=None):
    settings = settings.check(model.d_model)
    world = world or World()
    writer = world.rank == 0
    progress = progress and writer
    key = settings.key(sites)
    folder = features_dir(model) / key
    if cache and not retrain and (folder / "settings.json").exists():
        try:
            return DictionarySet.load(folder).check(model)
        except (ValueError, FileNotFoundError) as e:
            emit(f"cached dictionaries in {folder} unreadable ({e}); training again", progress)
    if retrain and folder.exists() and writer:
        shutil.rmtree(folder)
    emit(f"training {len(sites)} {next(iter(sites.values())).kind}(s) of width {settings.width}, k={settings.k} on "
         f"{settings.tokens:,} tokens: about {estimate_seconds(model, sites, settings) / 60:.0f} min on this "
         f"machine (cache: {folder if cache else 'off'})", progress)
    run = _Run(model, sites, settings, world)
    # a checkpoint of every layer is ~1 GB: by default one per 200 rows (51k tokens at ctx 256), whatever the batch
    every = checkpoint_every if checkpoint_every is not None else max(1, 200 // settings.rows)
    ckpt = folder / "checkpoint.safetensors"
    if cache and not retrain and ckpt.exists():
        run.load_checkpoint(read_state(ckpt))
        emit(f"resuming at step {run.step} ({run.seen:,} tokens) from {ckpt}", progress)
    pbar = bar(total=settings.tokens, desc="train dictionaries", enabled=progress, initial=run.seen, unit="tok")
    t0, seen0 = time.perf_counter(), run.seen
    try:
        for tokens in batches(model, "train", rows=settings.rows, seed=settings.seed, ctx=settings.ctx,
                              sources=settings.sources, start_batch=run.batch, bos_rows=settings.bos_rows):
            if run.seen >= settings.tokens:
                break
            run.mid_step = True  # an interrupt inside the step leaves a half-made state: the last checkpoint stands
            info = run.step_on(tokens)
            run.mid_step = False
            pbar.update(info["tokens"])
            rate = (run.seen - seen0) / max(time.perf_counter() - t0, 1e-9)
            pbar.set_postfix(tok_s=f"{rate:.0f}", fvu=f"{info['fvu']:.3f}", refresh=False)
            if callback is not None:
                callback({**info, "step": run.step, "seen": run.seen})
            if cache and writer and every and not run.fitting and run.batch % every == 0:
                write_state(ckpt, run.checkpoint())
    except KeyboardInterrupt:
        if cache and writer and not run.fitting and not run.mid_step:
            write_state(ckpt, run.checkpoint())
            emit(f"interrupted at step {run.step}; the state is in {ckpt} (the same call resumes there)", progress)
        elif cache and writer and ckpt.exists():
            emit(f"interrupted inside step {run.step + 1}; the checkpoint in {ckpt} stands (the same call resumes "
                 "there)", progress)
        raise
    finally:
        pbar.close()
    if run.seen < settings.tokens:
        raise ValueError(f"the train split ran out at {run.seen:,} counted tokens; tokens={settings.tokens:,} "
                         "asks for more (allowed: at most one epoch of the split)")
    out = run.result(key)
    if cache and writer:
        out.save(folder)
        remove_state(ckpt)
    return out


class _Run:
    """The state of one training run: dictionaries, their Adam moments, fire counters, step."""

    def __init__(self, model, sites: dict, settings: TrainSettings, world: World | None = None):
        self.model, self.sites, self.s, self.world = model, sites, settings, world or World()
        if settings.rows % self.world.size:
            raise ValueError(f"rows={settings.rows} per batch cannot be split over {self.world.size} ranks; "
                             "allowed: a multiple of the number of ranks")
        self.dicts = {k: Dictionary(model.d_model, model.d_model, settings.width, k=settings.k, activation="topk",
                                    skip=settings.skip, site=site, model=model_info(model))
                      for k, site in sites.items()}
        self.params = [p for d in self.dicts.values() for p in d.parameters() if p.requires_grad]
        fused = settings.adam == "fused"
        self.opt = torch.optim.Adam(self.params, lr=settings.learning_rate, betas=(0.9, 0.999),
                                    foreach=not fused, fused=fused)
        self.idle = {k: torch.zeros(settings.width, dtype=torch.long) for k in sites}  # tokens since last fired
        self.step, self.batch, self.seen, self.started = 0, 0, 0, False
        self.mid_step = False
        self.fit: dict = {}  # site -> [A = Σ x1ᵀx1, B = Σ x1ᵀy] while the first batches are being fitted
        self.sample: dict = {}  # site -> sampled [z, y] rows for the data start
        self.start: dict = {}  # site -> state dict as the first Adam step found it
        self.fit_seen = 0  # tokens used by the least-squares start
        self.kept: dict = {}  # site -> (z, err) of this step, for a resampling after it
        self.resampled: dict = {}  # str(site) -> latents restarted so far
        self.names = list(dict.fromkeys(n for s in sites.values() for n in (s.read, s.write)))

    # ------------------------------------------------------------------------------------------ one step
    def step_on(self, tokens: torch.Tensor) -> dict:
        """One Adam step on the global batch ``tokens`` [rows, ctx]; on several ranks each runs its contiguous share
        of the rows, and every sum the loss needs (counts, target moments, error norms, fired latents, gradients)
        is all-reduced, so the step is the one-process step up to summation order."""
        w = self.world
        share = tokens.shape[0] // w.size
        full = counted(tokens, self.model.bos_token_id)             # [rows, ctx] of the global batch
        tokens = tokens[w.rank * share:(w.rank + 1) * share]
        mask = full[w.rank * share:(w.rank + 1) * share]
        flat = mask.reshape(-1)

        def keep(name, t):
            return t.detach().reshape(-1, t.shape[-1])[flat.to(t.device)].float().cpu()

        with torch.no_grad():
            store, _ = capture(self.model, tokens.to(self.model.device), self.names, keep=keep, stop=True,
                               description="train dictionaries")
        if not self.started:
            self._start(store)
        if self.fitting:
            return self._fit_batch(store, full, share)
        if not self.start:  # the state training starts from: the "at initialisation" baseline of the quality table
            self.fit_seen = self.seen
            self.start = {k: {n: t.detach().clone() for n, t in d.state_dict().items()} for k, d in self.dicts.items()}
        # per site: [n, Σ|y|², Σy (d_out)] of the normalised targets, summed over ranks in one collective
        moments = {k: self._moments(store[self.sites[k].write] / d.out_scale) for k, d in self.dicts.items()}
        flat_m = all_reduce_sum(torch.cat(list(moments.values())), w)
        sizes = [m.numel() for m in moments.values()]
        moments = dict(zip(moments, flat_m.split(sizes)))
        n = int(next(iter(moments.values()))[0])
        # the schedule follows the share of the training tokens seen (the number of steps depends on how many BOS
        # tokens the rows happen to hold)
        lr = self.s.learning_rate * _schedule((self.seen - self.fit_seen) / max(1, self.s.tokens - self.fit_seen))
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        fvus = []
        due = self._resample_due(n)
        for key, d in self.dicts.items():
            site = self.sites[key]
            fvus.append(self._loss(key, d, store[site.read], store[site.write], moments[key], keep=due))
        if w.distributed:
            for p in self.params:
                if p.grad is not None:
                    p.grad.copy_(all_reduce_sum(p.grad, w))
        for d in self.dicts.values():
            _project_out_radial(d)
        self.opt.step()
        with torch.no_grad():
            for d in self.dicts.values():
                d.W_dec.div_(d.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12))
        restarted = self._resample(full, share, n) if due else {}
        self.step += 1
        self.batch += 1
        self.seen += n
        return {"tokens": n, "fvu": sum(fvus) / len(fvus), "fvu_per_site": dict(zip(self.dicts, fvus)), "lr": lr,
                "resampled": restarted}

    def _resample_due(self, n: int) -> bool:
        """Whether this step (of ``n`` counted tokens) crosses a multiple of ``resample_every`` training tokens
        within the first ``resample_until`` share of them."""
        every = self.s.resample_every
        if not every:
            return False
        before, after = self.seen - self.fit_seen, self.seen + n - self.fit_seen
        return after // every > before // every and after <= self.s.resample_until * (self.s.tokens - self.fit_seen)

    def _resample(self, full: torch.Tensor, share: int, n: int) -> dict:
        """Restart each dictionary's dead latents from this batch (:mod:`.resample`); ``{site: count}``."""
        offset = int(full[: self.world.rank * share].sum())
        out = {}
        for i, (key, d) in enumerate(self.dicts.items()):
            z, err = self.kept.pop(key)
            dead = self.idle[key] > self.s.dead_tokens
            if not dead.any():
                continue
            g = torch.Generator().manual_seed(self.s.seed * 104_729 + self.step * 101 + i)
            idx = resample_dead(d, dead, z, err, opt=self.opt, world=self.world, offset=offset, n_global=n,
                                generator=g)
            self.idle[key][idx] = 0
            self.resampled[str(key)] = self.resampled.get(str(key), 0) + int(idx.numel())
            out[key] = int(idx.numel())
        return out

    @property
    def fit_n(self) -> int:
        return min(self.s.fit_batches, self.s.tokens // (self.s.rows * (self.s.ctx - 1)) // 4)

    @property
    def fitting(self) -> bool:
        return self.batch < self.fit_n

    def _fit_batch(self, store: dict, full: torch.Tensor, share: int) -> dict:
        """Fold one batch into the least-squares sums (and, for ``init="data"``, keep a seeded sample of its tokens);
        after the last fit batch, solve, start the skip and decoder bias, the data start, and centre the encoder
        (b_enc = -E[z] W_enc)."""
        n = 0
        picks = self._sample_positions(full, share)
        for key, d in self.dicts.items():
            site = self.sites[key]
            z = (store[site.read] / d.in_scale).double()
            x1 = torch.cat([z, torch.ones(z.shape[0], 1, dtype=torch.float64)], 1)   # [n, d_in + 1]
            yn = (store[site.write] / d.out_scale).double()
            a, b = self.fit.setdefault(key, [0.0, 0.0])
            self.fit[key] = [a + x1.T @ x1, b + x1.T @ yn]
            n = z.shape[0]
            if picks is not None:
                local, slot, m = picks
                rows = torch.zeros(m, d.d_in + d.d_out, dtype=torch.float64)
                rows[slot] = torch.cat([z[local], yn[local]], 1)
                self.sample.setdefault(key, []).append(all_reduce_sum(rows, self.world))
        self.batch += 1
        n = int(all_reduce_sum(torch.tensor([n]), self.world)[0])
        self.seen += n
        if not self.fitting:
            for key, d in self.dicts.items():
                a, b = (all_reduce_sum(t, self.world) for t in self.fit.pop(key))
                count = float(a[-1, -1])
                with torch.no_grad():
                    if d.W_skip is not None:
                        ridge = 1e-3 * float(a.diagonal()[:-1].mean())
                        reg = torch.eye(a.shape[0], dtype=torch.float64) * ridge
                        reg[-1, -1] = 0.0
                        sol = torch.linalg.solve(a + reg, b)                  # [d_in + 1, d_out]
                        d.W_skip.copy_(sol[:-1].float())
                        d.b_dec.copy_(sol[-1].float())
                    else:
                        d.b_dec.copy_((b[-1] / count).float())
                    if key in self.sample:
                        self._data_start(d, torch.cat(self.sample.pop(key)), a[-1, :-1] / count)
                    if d.kind == "transcoder":
                        d.b_enc.copy_(-((a[-1, :-1] / count).float() @ d.W_enc))
        return {"tokens": n, "fvu": float("nan"), "fvu_per_site": {}, "lr": 0.0, "fitting": True}

    def _sample_positions(self, full: torch.Tensor, share: int):
        """For the data start: ``(local indices, slots, m)`` of this batch's seeded sample of counted positions of
        the global batch that fall in this rank's rows (the same sample on any number of ranks), or None."""
        if self.s.init != "data":
            return None
        m = -(-self.s.width // self.fit_n)
        flat = full.reshape(-1)
        where = flat.nonzero().flatten()                            # global counted positions, in order
        g = torch.Generator().manual_seed(self.s.seed * 7919 + self.batch)
        chosen = where[torch.randperm(where.numel(), generator=g)[:m]]
        lo, hi = self.world.rank * share * full.shape[1], (self.world.rank + 1) * share * full.shape[1]
        mine = (chosen >= lo) & (chosen < hi)
        local_counted = flat[lo:hi].cumsum(0) - 1                   # position in this rank's counted order
        return local_counted[chosen[mine] - lo], mine.nonzero().flatten(), chosen.numel()

    @staticmethod
    @torch.no_grad()
    def _data_start(d: Dictionary, sample: torch.Tensor, z_mean: torch.Tensor) -> None:
        z, y = sample[: d.width, : d.d_in], sample[: d.width, d.d_in:]
        resid = y - d.b_dec.double() - (z @ d.W_skip.double() if d.W_skip is not None else 0.0)
        dec = resid / resid.norm(dim=1, keepdim=True).clamp_min(1e-12)
        enc = z - z_mean
        enc = enc / enc.norm(dim=1, keepdim=True).clamp_min(1e-12)
        d.W_dec[: z.shape[0]] = dec.float()
        d.W_enc[:, : z.shape[0]] = enc.T.float()

    @staticmethod
    def _moments(yn: torch.Tensor) -> torch.Tensor:
        y = yn.double()
        return torch.cat([torch.tensor([y.shape[0], float(y.pow(2).sum())], dtype=torch.float64), y.sum(0)])

    def _loss(self, key, d: Dictionary, x: torch.Tensor, y: torch.Tensor, moments: torch.Tensor,
              keep: bool = False) -> float:
        """Backward of this rank's share of the global loss; returns the global FVU. ``keep``: hold the inputs and
        errors for a resampling after the step."""
        n, syy, sy = float(moments[0]), float(moments[1]), moments[2:]
        total = syy - float(sy.pow(2).sum()) / n                # Σ|y - ȳ|² over the global batch
        z = x / d.in_scale
        yn = y / d.out_scale
        pre = d.pre(z)                                          # [n, width]
        vals, idx = d.sparse(pre)                               # [n, k]
        recon = d.decode_sparse(vals, idx, z)                   # [n, d_out]
        err = yn - recon
        if keep:
            self.kept[key] = (z.detach(), err.detach())
        sq = err.pow(2).sum()
        loss = sq / total
        with torch.no_grad():
            fired = torch.zeros(d.width, dtype=torch.float64)
            fired[idx[vals > 0]] = 1.0
            both = all_reduce_sum(torch.cat([fired, sq.detach().double().reshape(1)]), self.world)
            fired, sq_all = both[:-1] > 0, float(both[-1])
            self.idle[key] += int(n)
            self.idle[key][fired] = 0
        dead = self.idle[key] > self.s.dead_tokens
        if dead.any():
            k_aux = min(self.s.aux_k or d.d_in // 2, int(dead.sum()))
            va, ia = pre.masked_fill(~dead, float("-inf")).topk(k_aux, dim=-1, sorted=False)
            va = AUX_ACTS[self.s.aux_act](va)
            e = err.detach()
            aux = (e - torch.nn.functional.embedding_bag(ia, d.W_dec, per_sample_weights=va, mode="sum")
                   ).pow(2).sum() / max(sq_all, 1e-12)
            loss = loss + self.s.aux_coef * aux
        loss.backward()
        return sq_all / total

    def _start(self, store: dict) -> None:
        sums = []
        for key in self.dicts:
            site = self.sites[key]
            x, y = store[site.read].double(), store[site.write].double()
            sums.append(torch.cat([torch.tensor([x.shape[0], float(x.pow(2).sum()), float(y.pow(2).sum())],
                                                dtype=torch.float64), y.sum(0)]))
        sums = all_reduce_sum(torch.stack(sums), self.world)
        for i, (key, d) in enumerate(self.dicts.items()):
            n, sxx, syy, sy = float(sums[i, 0]), float(sums[i, 1]), float(sums[i, 2]), sums[i, 3:]
            s_in, s_out = (sxx / n / d.d_in) ** 0.5, (syy / n / d.d_out) ** 0.5
            d.init_(self.s.seed * 1000 + i, s_in, s_out)
            with torch.no_grad():
                d.b_dec.copy_((sy / n / s_out).float())
        self.started = True

    # ------------------------------------------------------------------------------------------ state
    def checkpoint(self) -> dict:
        tensors = {}
        for key, d in self.dicts.items():
            for name, t in d.state_dict().items():
                tensors[f"dict.{key}.{name}"] = t
            tensors[f"idle.{key}"] = self.idle[key]
            for name, t in self.start.get(key, {}).items():
                tensors[f"start.{key}.{name}"] = t
        for i, p in enumerate(self.params):
            st = self.opt.state.get(p, {})
            for name in ("exp_avg", "exp_avg_sq", "step"):
                if name in st:
                    tensors[f"adam.{i}.{name}"] = st[name].reshape(-1) if name == "step" else st[name]
        meta = {"step": self.step, "batch": self.batch, "seen": self.seen, "fit_seen": self.fit_seen,
                "started": self.started, "settings": asdict(self.s), "resampled": self.resampled,
                "model": model_info(self.model), "keys": [str(k) for k in self.dicts]}
        return {"tensors": tensors, "meta": meta}

    def load_checkpoint(self, state: dict) -> None:
        meta, t = state["meta"], state["tensors"]
        if meta.get("model", {}).get("model_fingerprint") != self.model.fingerprint:
            raise ValueError("the checkpoint was written for another model; delete it or train with retrain=True")
        for key, d in self.dicts.items():
            d.load_state_dict({name: t[f"dict.{key}.{name}"] for name in d.state_dict()})
            self.idle[key] = t[f"idle.{key}"].clone()
            if f"start.{key}.W_enc" in t:
                self.start[key] = {name: t[f"start.{key}.{name}"].clone() for name in d.state_dict()}
        for i, p in enumerate(self.params):
            if f"adam.{i}.exp_avg" in t:
                self.opt.state[p] = {"step": t[f"adam.{i}.step"].reshape(()).clone(),
                                     "exp_avg": t[f"adam.{i}.exp_avg"].clone(),
                                     "exp_avg_sq": t[f"adam.{i}.exp_avg_sq"].clone()}
        self.step, self.batch, self.seen, self.fit_seen = meta["step"], meta["batch"], meta["seen"], meta["fit_seen"]
        self.started = meta["started"]
        self.resampled = dict(meta.get("resampled", {}))

    def result(self, key: str) -> DictionarySet:
        settings = {**asdict(self.s), "key": key, "steps": self.step, "tokens_seen": self.seen,
                    "learning_rate": self.s.learning_rate, "model": model_info(self.model)}
        if self.s.resample_every:
            settings["resampled"] = dict(self.resampled)
        start = {}
        for i, (key, d) in enumerate(self.dicts.items()):
            d.meta = {"trained": settings, "init_seed": self.s.seed * 1000 + i}
            d.eval()
            if key in self.start:
                twin = Dictionary(d.d_in, d.d_out, d.width, k=d.k, activation=d.activation, skip=d.skip,
                                  site=d.site, model=d.model, meta={"start_of": settings["key"]})
                twin.load_state_dict(self.start[key])
                start[key] = twin.eval()
        return DictionarySet(dict(self.dicts), settings, DictionarySet(start, settings) if start else None)


def _schedule(p: float) -> float:
    """Learning-rate factor at the share ``p`` of the training tokens seen: linear warm-up over the first 5%,
    constant, linear decay to 0 over the last 20%."""
    if p < 0.05:
        return max(p, 0.002) / 0.05
    return min(1.0, max(0.0, (1.0 - p) / 0.2))


@torch.no_grad()
def _project_out_radial(d: Dictionary) -> None:
    """Remove the part of W_dec's gradient along each (unit) row: the step then turns rows, it does not grow them."""
    g = d.W_dec.grad
    if g is not None:
        g -= (g * d.W_dec).sum(1, keepdim=True) * d.W_dec
