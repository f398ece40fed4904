"""How good a set of transcoders is, on held-out text, each number beside two baselines.

Per layer: L0 (active latents per token), FVU = E|y - ŷ|² / E|y - E y|², dead latents (never active over
``tokens`` held-out tokens), and the next-token cross-entropy when that layer's MLP write is replaced: by its
transcoder, by its mean (the ablation), by each baseline. CE-loss score = (CE_mean − CE_spliced) / (CE_mean −
CE_clean): 1 is the real MLP, 0 no better than its mean. Over the whole stack: top-1 agreement with the real model
when every layer's MLP is replaced at once, and the CE then.

Baselines, at the same sites and the same positions:
- ``neurons``: the real MLP keeping only its k largest hidden activations (by |activation|, k = the dictionary's
  L0) per token, the rest zeroed; computed exactly (the MLP's own down projection and post-norm run on it);
- ``init``: the same dictionary as training started (the trainer keeps that state: the least-squares skip and
  the data start, before any gradient step); a dictionary without it (a published one) gets a seeded random
  start with its own scales and decoder bias.

The mean that replaces an MLP's write in the ablation is its mean over every evaluated token (pass 1), not over
the CE batch. Replacement happens at counted positions only (:func:`.data.counted`): position 0 and BOS keep the real MLP, as
those positions were never trained on (the attention sink's outlier residual). CE is measured at counted
positions whose next token is not BOS. Splices rerun the blocks from the spliced layer up
(:func:`interp.core.resume.run_from`), not the whole forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...core.hooks import capture
from ...core.progress import bar
from ...core.resume import record_blocks, run_from
from ...core.results import Result, jsonable, new_figure, save_fig, wilson
from .data import batches, counted
from .dictionary import Dictionary, DictionarySet, Site
from .use import replace_write


@dataclass
class DictionaryQuality(Result):
    """Per-layer quality (``rows``: one dict per layer), the all-layers-replaced figures (``stack``) and each MLP
    write's mean over the evaluated tokens (``means``, the mean ablation's write; not in the JSON)."""

    rows: list
    stack: dict
    settings: dict = field(default_factory=dict)
    means: dict = field(default_factory=dict)   # layer -> the MLP write's mean [d_model] over the evaluated tokens

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows).set_index("layer")

    def summary(self) -> str:
        f = self.to_frame()
        split = {"heldout": "held-out"}.get(self.settings.get("split", "heldout"), self.settings.get("split"))
        return (f"{len(f)} transcoders on {self.settings.get('tokens', 0):,} {split} tokens: median FVU "
                f"{f['fvu'].median():.3f} (k-largest neurons {f['fvu_neurons'].median():.3f}, at init "
                f"{f['fvu_init'].median():.3f}); median CE-loss score {f['ce_score'].median():.3f} (neurons "
                f"{f['ce_score_neurons'].median():.3f}); dead {f['dead_frac'].max():.1%} at most; every layer "
                f"replaced: top-1 agreement {self.stack['top1_agreement']:.1%}")

    def to_json(self) -> dict:
        return {**super().to_json(), "stack": jsonable(self.stack), "settings": jsonable(self.settings)}

    @classmethod
    def from_json(cls, doc: dict) -> "DictionaryQuality":
        """The table back from :meth:`to_json`'s dict (a stored run's ``quality.json``)."""
        if doc.get("result") != cls.__name__:
            raise ValueError(f"not a {cls.__name__} document (result={doc.get('result')!r})")
        return cls([dict(r) for r in doc["rows"]], dict(doc["stack"]), dict(doc.get("settings", {})))

    def plot(self, *, out=None):
        f = self.to_frame()
        fig = new_figure(figsize=(11, 3.6))
        axes = fig.subplots(1, 2)
        ax = axes[0]
        for col, label, style in (("fvu", "transcoder", "o-"), ("fvu_neurons", "k largest neurons", "s--"),
                                  ("fvu_init", "at initialisation", ":")):
            ax.plot(f.index, f[col], style, label=label, ms=3)
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_ylabel("FVU (held out, log)")
        ax.set_title("fraction of variance unexplained")
        ax.legend(fontsize=8)
        ax = axes[1]
        for col, label, style in (("ce_score", "transcoder", "o-"), ("ce_score_neurons", "k largest neurons", "s--"),
                                  ("ce_score_init", "at initialisation", ":")):
            ax.plot(f.index, f[col], style, label=label, ms=3)
        ax.axhline(1, color="grey", lw=0.5)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xlabel("layer")
        ax.set_ylabel("CE-loss score (1 = real MLP, 0 = its mean)")
        ax.set_title("one layer's MLP replaced")
        fig.suptitle(self.summary(), fontsize=8, wrap=True)
        return save_fig(fig, out)


def _init_twin(d: Dictionary) -> Dictionary:
    twin = Dictionary(d.d_in, d.d_out, d.width, k=d.k, activation=d.activation, skip=d.skip, site=d.site,
                      model=d.model)
    twin.init_(int(d.meta.get("init_seed", 0)), float(d.in_scale), float(d.out_scale))
    with torch.no_grad():
        twin.b_dec.copy_(d.b_dec)  # the trainer's start: the first batch's mean target
    return twin.eval()


class _Sums:
    """float64 running sums for FVU: Σ|y - ŷ|², Σy, Σ|y|², n."""

    def __init__(self, d: int):
        self.err = 0.0
        self.sy = torch.zeros(d, dtype=torch.float64)
        self.syy = 0.0
        self.n = 0

    def add(self, y, yhat):
        y, yhat = y.double(), yhat.double()
        self.err += float((y - yhat).pow(2).sum())
        self.sy += y.sum(0)
        self.syy += float(y.pow(2).sum())
        self.n += y.shape[0]

    def fvu(self) -> float:
        total = self.syy - float(self.sy.pow(2).sum()) / self.n
        return self.err / total


def _ce(model, resid_final, tokens, mask, top: bool = False) -> tuple[float, int, torch.Tensor | None]:
    """Summed next-token NLL and its count over the counted targets (``mask``, BOS never a target), and when
    ``top`` the argmax at those positions. Only those positions are unembedded: a [n, vocab] matrix per call, and
    the NLL as logsumexp minus the target's logit, so no second [n, vocab] tensor is written."""
    ok = mask[:, :-1] & (tokens[:, 1:] != model.bos_token_id)                     # [b, pos - 1]
    logits = model.unembed(model.final_norm(resid_final[:, :-1][ok])).float()      # [n, vocab]
    target = tokens[:, 1:][ok]
    nll = torch.logsumexp(logits, -1) - logits.gather(-1, target[:, None])[:, 0]
    return float(nll.sum()), int(ok.sum()), (logits.argmax(-1) if top else None)


def evaluate_transcoders(model, dictionaries: DictionarySet, *, tokens: int = 200_000, ce_tokens: int = 8192,
                         rows: int = 4, ctx: int = 256, split: str = "heldout", seed: int = 0,
                         baselines: bool = True, progress: bool = True) -> DictionaryQuality:
    """The quality table (module docstring): FVU, L0, dead latents over ``tokens`` counted tokens of ``split`` (rows as
    trained: ``bos_rows``); cross-entropy figures over the first ``ce_tokens`` of them (rounded up to a whole row)."""
    dictionaries.check(model)
    layers, bos = [L for L in dictionaries.layers], bool(dictionaries.settings.get("bos_rows"))
    dicts = {L: dictionaries[L].eval() for L in layers}
    if any(d.kind != "transcoder" for d in dicts.values()):
        raise ValueError("evaluate_transcoders takes transcoders (an SAE has no quality table here yet)")
    # the "init" baseline: the dictionaries as training started (kept by the trainer), else a seeded random start
    start = dictionaries.start
    twins = {L: (start[L].eval() if start is not None and L in start.dictionaries else _init_twin(d))
             for L, d in dicts.items()} if baselines else {}
    sums = {(L, v): _Sums(model.d_model) for L in layers for v in ("tc", "neurons", "init")}
    fired = {L: torch.zeros(dicts[L].width, dtype=torch.bool) for L in layers}
    l0 = {L: 0.0 for L in layers}
    ce = {}
    agree = [0, 0]
    seen = 0
    names = [n for L in layers for n in (dicts[L].site.read, dicts[L].site.write, f"blocks.{L}.mlp.hook_post")]
    pbar = bar(total=tokens, desc="evaluate transcoders", enabled=progress, unit="tok")
    with torch.no_grad():
        # pass 1: reconstruction, L0, dead latents (forward stopped at the last layer), and each MLP write's mean
        for toks in batches(model, split, rows=rows, seed=seed, ctx=ctx, bos_rows=bos):
            if seen >= tokens:
                break
            flat = counted(toks, model.bos_token_id).reshape(-1)
            store, _ = capture(model, toks, names, stop=True, description="evaluate transcoders")
            acts = {n: t.reshape(-1, t.shape[-1])[flat].float() for n, t in store.items()}
            for L in layers:
                d = dicts[L]
                x, y = acts[d.site.read], acts[d.site.write]
                a = d.encode(x)                                    # [n, width], the encoder run once
                fired[L] |= (a > 0).any(0)
                l0[L] += float((a > 0).sum())
                sums[(L, "tc")].add(y, d.decode(a, x))
                if baselines:
                    sums[(L, "init")].add(y, twins[L](x))
                    sums[(L, "neurons")].add(y, _neuron_write(model, L, acts[f"blocks.{L}.mlp.hook_post"], d))
            n = int(flat.sum())
            seen += n
            pbar.update(n)
        pbar.close()
        # pass 2: cross-entropy with each MLP replaced, on the first ce_tokens of the same batches; the ablation
        # writes each MLP's mean over every pass-1 token
        means = {L: (sums[(L, "tc")].sy / max(sums[(L, "tc")].n, 1)).float() for L in layers}
        ce_seen = 0
        resid_names = [f"blocks.{L}.hook_resid_pre" for L in layers]
        budget = min(ce_tokens, seen)
        for toks in batches(model, split, rows=rows, seed=seed, ctx=ctx, bos_rows=bos):
            if ce_seen >= budget:
                break
            toks = toks[: -(-(budget - ce_seen) // (ctx - 1))]  # only the rows the budget needs: 4 x n_layers runs each
            mask = counted(toks, model.bos_token_id)
            store, calls = record_blocks(model, toks, names + resid_names, description="evaluate transcoders")
            _ce_batch(model, toks, mask, store, calls, dicts, twins, baselines, ce, agree, means)
            ce_seen += int(mask.sum())
    rows_out = []
    nan = float("nan")
    c = {key: ce[key][0] / ce[key][1] for key in ce}
    for L in layers:
        d = dicts[L]
        clean, mean = c.get("clean", nan), c.get((L, "mean"), nan)

        def score(v):
            return (mean - c[(L, v)]) / (mean - clean) if (L, v) in c else float("nan")

        row = {"layer": L, "width": d.width, "k": d.k, "l0": l0[L] / seen, "fvu": sums[(L, "tc")].fvu(),
               "dead_frac": 1 - float(fired[L].float().mean()), "ce_clean": clean, "ce_spliced": c.get((L, "tc"), nan),
               "ce_mean_ablated": mean, "delta_ce": c.get((L, "tc"), nan) - clean, "ce_score": score("tc")}
        if baselines:
            row.update({"fvu_neurons": sums[(L, "neurons")].fvu(), "fvu_init": sums[(L, "init")].fvu(),
                        "ce_score_neurons": score("neurons"), "ce_score_init": score("init")})
        rows_out.append(row)
    stack = _stack(agree, c)
    settings = {"tokens": seen, "ce_tokens": ce.get("clean", (0, 0))[1], "split": split, "seed": seed, "rows": rows, "ctx": ctx,
                **({"bos_rows": True} if bos else {}), "dictionaries": dictionaries.settings}
    return DictionaryQuality(rows_out, stack, settings, means)


def _neuron_write(model, L, hidden, d: Dictionary):
    """The MLP's write with only its k largest |hidden activations| per token (k = the dictionary's L0)."""
    k = d.k or d.width
    idx = hidden.abs().topk(k, dim=-1).indices
    kept = torch.zeros_like(hidden).scatter_(1, idx, hidden.gather(1, idx))
    return _mlp_write(model, L, kept)


def _mlp_write(model, L, hidden):
    from ...core.arch import post_norm_module

    mod = model.mlp_out_module(L)
    out = mod(hidden.to(model.dtype)).float()
    post = post_norm_module(model, L, "mlp")
    return post(out).float() if post is not None else out


def _replace_hooks(model, L, mask, fn):
    """Hooks that replace layer L's MLP write at counted positions by ``fn(x_counted, hidden_counted)``."""
    site = Site.transcoder(model, L)
    return replace_write(site, fn, positions=mask, hidden=f"blocks.{L}.mlp.hook_post")


def _stack(agree, c) -> dict:
    """Every layer replaced at once: top-1 agreement (agreed, positions) and the CE. That argmax is fragile (the
    last bits of training, which differ between CPUs, move a few positions), so the share has its interval."""
    nan = float("nan")
    return {"top1_agreement": agree[0] / agree[1] if agree[1] else nan, "top1_agreed": agree[0],
            "top1_ci": list(wilson(agree[0] / agree[1], agree[1])) if agree[1] else [nan, nan],
            "positions": agree[1], "ce_clean": c.get("clean", nan), "ce_all_replaced": c.get("all", nan)}


def _ce_batch(model, toks, mask, store, calls, dicts, twins, baselines, ce, agree, means):
    def add(key, resid, top=False):
        s, n, argmax = _ce(model, resid, toks, mask, top)
        old = ce.get(key, (0.0, 0))
        ce[key] = (old[0] + s, old[1] + n)
        return argmax

    final = store[f"blocks.{model.n_layers - 1}.hook_resid_post"]
    clean_top = add("clean", final, top=True)
    for L, d in dicts.items():
        pre = store[f"blocks.{L}.hook_resid_pre"]
        mean = means[L]
        variants = {"tc": lambda x, h, d=d: d(x), "mean": lambda x, h, m=mean: m.expand(x.shape[0], -1)}
        if baselines:
            variants["neurons"] = lambda x, h, L=L, d=d: _neuron_write(model, L, h, d)
            variants["init"] = lambda x, h, t=twins[L]: t(x)
        for v, fn in variants.items():
            add((L, v), run_from(model, calls, L, pre, hooks=_replace_hooks(model, L, mask, fn)))
    first = min(dicts)
    hooks = [h for L, d in dicts.items() for h in _replace_hooks(model, L, mask, lambda x, h, d=d: d(x))]
    all_top = add("all", run_from(model, calls, first, store[f"blocks.{first}.hook_resid_pre"], hooks=hooks),
                  top=True)
    agree[0] += int((all_top == clean_top).sum())      # both over the same counted targets
    agree[1] += int(all_top.numel())
