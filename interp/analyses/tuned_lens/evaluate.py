"""How good is a tuned lens: held-out KL and perplexity per layer, and prediction depth on fact records.

``evaluate_lens(model, lens)``: on positions of held-out documents (never trained on: the hash split of
:func:`~interp.analyses.tuned_lens.split_documents`), for each residual row and each of three lenses — the logit
lens, the tuned lens, the bias-only baseline — the mean KL(final ‖ lens) in bits and the lens's perplexity on the
actual next token. Positions: up to ``per_doc`` per document, drawn with the seed among those that have a next
token (BOS excluded, as in training). Everything in float32 through the model's own final norm and W_U; the final
distribution is computed from the final residual the same way (so row n_layers has KL 0 and the model's own
perplexity). The result is cached beside the lens file, keyed by the lens file's SHA-256 and the settings.

``prediction_depth(model, records, lens)``: for each prompt (a fact record's rewrite prompt with its subject, or
a plain text), the first lens row from which the model's final top-1 token stays top-1 to the end (Belrose et al.
§4), for the logit and the tuned lens.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field

import torch

from ...core.hooks import capture
from ...core.inputs import check_int, decode, pad_mask, pad_rows
from ...core.progress import bar
from ...core.results import Result, jsonable, new_figure, save_fig
from ..lens import layer_labels, resid_names
from .lens import as_lens, split_documents, tensor_path

KINDS = {"logit": "logit lens", "tuned": "tuned lens", "bias": "bias-only"}
_CHUNK_ROWS = 256


# ============================================================================================== held-out KL
@dataclass(repr=False, eq=False)
class LensEvaluation(Result):
    """Per residual row (0..n_layers): ``kl_bits[kind]`` and ``perplexity[kind]`` for kind in logit/tuned/bias."""

    kl_bits: dict[str, torch.Tensor]  # kind -> float64 [n_layers+1]
    perplexity: dict[str, torch.Tensor]  # kind -> float64 [n_layers+1]
    n_layers: int
    tokens: int
    documents: int
    meta: dict = field(default_factory=dict)

    def ratio(self) -> torch.Tensor:
        """Tuned-lens KL / logit-lens KL per row (the final row, 0/0, is NaN)."""
        return self.kl_bits["tuned"] / self.kl_bits["logit"]

    def ratio_max(self, upto: int | None = None) -> tuple[float, int]:
        """(largest tuned/logit KL ratio over rows 0..upto, the row where it is); ``upto`` defaults to the last
        row below the final one."""
        upto = self.n_layers - 1 if upto is None else check_int("upto", upto, 0, self.n_layers - 1)
        r = self.ratio()[: upto + 1]
        i = int(torch.argmax(r))
        return float(r[i]), i

    def to_frame(self):
        import pandas as pd

        rows = []
        for r, label in enumerate(layer_labels(self.n_layers)):
            rec = {"layer": r, "label": label}
            rec.update({f"kl_{k}_bits": float(self.kl_bits[k][r]) for k in KINDS})
            rec["kl_ratio_tuned_logit"] = float(self.ratio()[r]) if r < self.n_layers else float("nan")
            rec.update({f"ppl_{k}": float(self.perplexity[k][r]) for k in KINDS})
            rows.append(rec)
        return pd.DataFrame(rows).set_index("layer")

    def summary(self) -> str:
        upto = min(24, self.n_layers - 1)
        worst, at = self.ratio_max(upto)
        mean = {k: float(self.kl_bits[k][: self.n_layers].mean()) for k in KINDS}
        return (f"held-out KL to the final distribution over {self.tokens} positions of {self.documents} documents "
                f"({self.meta.get('model', '')}): mean over layers logit {mean['logit']:.2f} bits, tuned "
                f"{mean['tuned']:.2f}, bias-only {mean['bias']:.2f}; tuned/logit at most {worst:.3f} (layer {at}) "
                f"over layers 0..{upto}")

    def to_json(self) -> dict:
        worst, at = self.ratio_max(min(24, self.n_layers - 1))
        return {"result": type(self).__name__, "summary": self.summary(), "tokens": self.tokens,
                "documents": self.documents, "kl_ratio_max_upto_24": worst, "kl_ratio_argmax_upto_24": at,
                "meta": jsonable(self.meta), "rows": jsonable(self.to_frame().reset_index().to_dict("records"))}

    def plot(self, *, out=None):
        """KL to the final distribution (bits, log scale) and perplexity per layer, three lenses."""
        fig = new_figure(figsize=(11, 4))
        ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        x = list(range(self.n_layers))
        styles = {"logit": ("tab:gray", "o"), "tuned": ("tab:blue", "s"), "bias": ("tab:orange", "^")}
        for k, name in KINDS.items():
            color, marker = styles[k]
            ax1.plot(x, self.kl_bits[k][: self.n_layers].numpy(), color=color, marker=marker, ms=3, label=name)
            ax2.plot(x, self.perplexity[k][: self.n_layers].numpy(), color=color, marker=marker, ms=3, label=name)
        ax2.axhline(float(self.perplexity["logit"][-1]), color="black", ls="--", lw=1, label="model (final)")
        top = 1e12  # the logit lens's perplexity at the embedding can reach 1e40+: it would flatten the rest
        if max(float(v[: self.n_layers].max()) for v in self.perplexity.values()) > top:
            low = min(float(v.min()) for v in self.perplexity.values())
            ax2.set_ylim(low / 2, top)
            ax2.text(0.02, 0.98, f"clipped at {top:.0e}", transform=ax2.transAxes, va="top", fontsize=7)
        for ax in (ax1, ax2):
            ax.set_yscale("log")
            ax.set_xlabel("residual entering block l (0 = embedding)")
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3, which="both")
        ax1.set_ylabel("KL(final ‖ lens), bits")
        ax2.set_ylabel("perplexity of the next token")
        ax1.set_title(f"held-out KL, {self.tokens} positions ({self.meta.get('model', '')})", fontsize=10)
        ax2.set_title("held-out perplexity", fontsize=10)
        return save_fig(fig, out)


def heldout_positions(model, docs, *, tokens: int, per_doc: int, max_len: int, seed: int):
    """``[(token ids, [positions])]`` over held-out documents until ``tokens`` positions: up to ``per_doc`` per
    document, drawn with ``seed`` among the positions 1..len-2 (past BOS, with a next token)."""
    gen = torch.Generator().manual_seed(seed)
    out, n = [], 0
    for d in docs:
        ids = model.encode(d.text, prepend_bos=True)[:max_len]
        if len(ids) < 3:
            continue
        cand = torch.arange(1, len(ids) - 1)
        pick = cand[torch.randperm(len(cand), generator=gen)[: min(per_doc, tokens - n)]].sort().values.tolist()
        out.append((ids, pick))
        n += len(pick)
        if n >= tokens:
            break
    return out


def evaluate_lens(model, lens=None, *, tokens: int = 512, per_doc: int = 16, seed: int = 0, max_len: int = 256,
                  corpus="wiki", batch_size: int = 8, cache: bool = True, progress: bool = True) -> LensEvaluation:
    """Held-out KL (bits) and perplexity per layer of the logit lens, ``lens`` (a TunedLens, a path, or None for
    the newest cached one) and its bias-only baseline; see the module docstring."""
    lens = as_lens(model, lens)
    check_int("tokens", tokens, 1)
    check_int("per_doc", per_doc, 1)
    check_int("seed", seed, 0)
    check_int("max_len", max_len, 3, model.n_ctx)
    check_int("batch_size", batch_size, 1)
    _, held, corpus_id = split_documents(corpus)
    settings = {"tokens": tokens, "per_doc": per_doc, "seed": seed, "max_len": max_len, "corpus": corpus_id}
    side = _eval_cache_path(lens, settings) if cache else None
    if side is not None and side.exists():
        try:
            return _from_json(json.loads(side.read_text()))
        except (ValueError, KeyError, TypeError):
            pass  # an unreadable cache entry is recomputed (it is a small derived file)
    items = heldout_positions(model, held, tokens=tokens, per_doc=per_doc, max_len=max_len, seed=seed)
    L = model.n_layers
    sums = {k: torch.zeros(2, L + 1, dtype=torch.float64) for k in KINDS}  # [KL nats, CE nats] per row
    count = 0
    names = resid_names(model)
    W_U, b_U = model.unembedding()
    pbar = bar(total=sum(len(p) for _, p in items), desc="tuned lens: evaluate", enabled=progress, unit="tok")
    try:
        for s in range(0, len(items), batch_size):
            chunk = items[s:s + batch_size]
            toks, lengths = pad_rows(model, [ids for ids, _ in chunk])
            sel = torch.zeros_like(pad_mask(lengths, toks.shape[1]))
            nxt = []
            for i, (ids, pick) in enumerate(chunk):
                sel[i, pick] = True
                nxt += [ids[p + 1] for p in pick]
            store, _ = capture(model, toks, names, stop=True, description="tuned lens evaluation")
            H = torch.stack([store[n][sel.to(store[n].device)].to(W_U.device) for n in names])  # [L+1, n, d]
            del store
            nxt = torch.tensor(nxt, device=W_U.device)
            for a in range(0, H.shape[1], _CHUNK_ROWS):
                _score(model, lens, H[:, a:a + _CHUNK_ROWS], nxt[a:a + _CHUNK_ROWS], W_U, b_U, sums)
            count += H.shape[1]
            pbar.update(H.shape[1])
    finally:
        pbar.close()
    res = LensEvaluation(
        kl_bits={k: v[0] / count / math.log(2) for k, v in sums.items()},
        perplexity={k: (v[1] / count).exp() for k, v in sums.items()}, n_layers=L, tokens=count,
        documents=len(items), meta={"model": model.source, "model_fingerprint": model.fingerprint,
                                    "lens": str(lens.path) if lens.path else None, "lens_summary": lens.summary(),
                                    "settings": settings})
    if side is not None:
        side.write_text(json.dumps(_to_json(res)))
    return res


def _score(model, lens, H, nxt, W_U, b_U, sums) -> None:
    """Add the KL and next-token cross-entropy (nats) of rows H [L+1, n, d] under the three lenses to ``sums``."""
    L = H.shape[0] - 1

    def logits(normed):
        z = normed.to(W_U.dtype) @ W_U
        return (z if b_U is None else z + b_U).float()

    with torch.no_grad():
        lp = torch.log_softmax(logits(model.final_norm(H[L]).to(W_U.device)), -1)
        p = lp.exp()
        negent = (p * lp).sum(-1)
        ce_final = -lp.gather(1, nxt[:, None])[:, 0]
        for k in KINDS:
            sums[k][1, L] += ce_final.double().sum()
        for k in KINDS:
            for layer in range(L):
                z = logits(model.final_norm(lens.translate(H[layer], layer, which=k)).to(W_U.device))
                lse = torch.logsumexp(z, -1)
                kl = negent - (p * z).sum(-1) + lse
                ce = lse - z.gather(1, nxt[:, None])[:, 0]
                sums[k][0, layer] += kl.double().sum()
                sums[k][1, layer] += ce.double().sum()


def _eval_cache_path(lens, settings: dict):
    if lens.path is None:
        return None
    side = tensor_path(lens.path).with_suffix(".json")
    try:
        digest = json.loads(side.read_text())["sha256"]
    except (OSError, ValueError, KeyError):
        return None
    key = hashlib.sha256(json.dumps({"lens": digest, **settings}, sort_keys=True).encode()).hexdigest()[:12]
    return side.with_name(side.name.replace(".json", f".eval_{key}.json"))


def _to_json(res: LensEvaluation) -> dict:
    return {"kl_bits": {k: v.tolist() for k, v in res.kl_bits.items()},
            "perplexity": {k: v.tolist() for k, v in res.perplexity.items()}, "n_layers": res.n_layers,
            "tokens": res.tokens, "documents": res.documents, "meta": res.meta}


def _from_json(d: dict) -> LensEvaluation:
    def t(xs):
        return torch.tensor(xs, dtype=torch.float64)

    return LensEvaluation(kl_bits={k: t(d["kl_bits"][k]) for k in KINDS},
                          perplexity={k: t(d["perplexity"][k]) for k in KINDS}, n_layers=int(d["n_layers"]),
                          tokens=int(d["tokens"]), documents=int(d["documents"]), meta=dict(d["meta"]))


# ============================================================================================== prediction depth
@dataclass(repr=False, eq=False)
class PredictionDepth(Result):
    """Per prompt: the model's final top-1 and, per lens, the first row from which it stays top-1."""

    texts: list[str]
    final_ids: list[int]
    top1: dict[str, torch.Tensor]  # "logit" / "tuned" -> long [n_prompts, n_layers+1]: each row's top-1 id
    n_layers: int
    targets: list[str | None] = field(default_factory=list)  # the record's expected answer, when it has one
    decode: object = field(default=str, repr=False)
    meta: dict = field(default_factory=dict)

    def depth(self, kind: str = "tuned") -> torch.Tensor:
        """long [n_prompts]: first row r such that rows r..n_layers all have the final top-1 on top."""
        if kind not in self.top1:
            raise ValueError(f"kind={kind!r}; allowed: {', '.join(map(repr, self.top1))}")
        same = self.top1[kind] == torch.tensor(self.final_ids)[:, None]
        # rows from the end that all agree: reverse cumulative AND
        stays = same.flip(1).long().cumprod(1).flip(1).bool()
        return (self.n_layers + 1 - stays.sum(1)).long()

    def to_frame(self):
        import pandas as pd

        dl, dt = self.depth("logit"), self.depth("tuned")
        rows = [{"prompt": t, "final_top1": self.decode(f), "target": self.targets[i] if self.targets else None,
                 "depth_logit": int(dl[i]), "depth_tuned": int(dt[i])}
                for i, (t, f) in enumerate(zip(self.texts, self.final_ids))]
        return pd.DataFrame(rows)

    def summary(self) -> str:
        dl, dt = self.depth("logit").double(), self.depth("tuned").double()
        return (f"prediction depth (first row from which the final top-1 stays top-1, of {self.n_layers}) over "
                f"{len(self.texts)} prompts: logit lens mean {dl.mean():.1f} (median {dl.median():.0f}), tuned "
                f"lens mean {dt.mean():.1f} (median {dt.median():.0f}); tuned earlier on "
                f"{int((dt < dl).sum())}, later on {int((dt > dl).sum())}")

    def to_json(self) -> dict:
        return {"result": type(self).__name__, "summary": self.summary(), "n_layers": self.n_layers,
                "mean_depth": {k: float(self.depth(k).double().mean()) for k in self.top1},
                "rows": jsonable(self.to_frame().to_dict("records"))}

    def plot(self, *, out=None):
        """How many prompts have each prediction depth, per lens."""
        fig = new_figure(figsize=(8, 3.6))
        ax = fig.add_subplot(1, 1, 1)
        bins = torch.arange(self.n_layers + 2)
        width = 0.4
        for j, (k, color) in enumerate((("logit", "tab:gray"), ("tuned", "tab:blue"))):
            counts = torch.bincount(self.depth(k), minlength=self.n_layers + 1)
            ax.bar((bins[:-1] + (j - 0.5) * width).numpy(), counts.numpy(), width=width, color=color,
                   label=f"{KINDS[k]} (mean {self.depth(k).double().mean():.1f})")
        ax.set_xlabel("prediction depth: first row from which the final top-1 stays top-1")
        ax.set_ylabel("prompts")
        ax.legend(fontsize=8)
        ax.set_title(f"prediction depth on {len(self.texts)} prompts ({self.meta.get('model', '')})", fontsize=10)
        return save_fig(fig, out)


def record_text(rec) -> tuple[str, str | None]:
    """(prompt text, expected answer or None) of a fact record (``.text`` / ``prompt`` + ``subject``) or a
    string."""
    if isinstance(rec, str):
        return rec, None
    get = (lambda k: rec.get(k)) if isinstance(rec, dict) else (lambda k: getattr(rec, k, None))
    text = get("text")
    if not isinstance(text, str):
        prompt, subject = get("prompt"), get("subject")
        if not isinstance(prompt, str) or not isinstance(subject, str):
            raise TypeError(f"record {str(rec)[:80]!r}: give a string, or a record with 'prompt' and 'subject' "
                             "(or 'text')")
        text = prompt.replace("{}", subject)
    return text, get("target_true")


def prediction_depth(model, records, lens=None, *, batch_size: int = 16, progress: bool = True
                     ) -> PredictionDepth:
    """Prediction depth of each prompt in ``records`` (fact records or strings) under the logit lens and
    ``lens`` (a TunedLens, a path, or None for the newest cached one), read at each prompt's last token."""
    lens = as_lens(model, lens)
    check_int("batch_size", batch_size, 1)
    pairs = [record_text(r) for r in records]
    if not pairs:
        raise ValueError("no records given; pass at least one fact record or text")
    L = model.n_layers
    names = resid_names(model)
    W_U, b_U = model.unembedding()
    top1 = {k: torch.zeros(len(pairs), L + 1, dtype=torch.long) for k in ("logit", "tuned")}
    with bar(total=len(pairs), desc="prediction depth", enabled=progress, unit="prompt") as pbar:
        for s in range(0, len(pairs), batch_size):
            rows = [model.encode(t, prepend_bos=True) for t, _ in pairs[s:s + batch_size]]
            toks, lengths = pad_rows(model, rows)
            last = lengths - 1

            def keep(name, t, last=last):
                return t.detach()[torch.arange(len(last), device=t.device), last.to(t.device)].to(W_U.device)

            store, _ = capture(model, toks, names, keep=keep, stop=True, description="prediction depth")
            H = torch.stack([store[n] for n in names])  # [L+1, b, d]
            b = len(rows)
            # both lenses' rows in one stack, unembedded in large chunks: a matmul of a few rows would read all
            # of W_U for each (lens, layer)
            X = torch.cat([torch.cat([lens.translate(H[:L], which=k), H[L:]]) for k in top1]).reshape(-1, H.shape[-1])
            normed = model.final_norm(X)
            ids = []
            with torch.no_grad():
                for a in range(0, normed.shape[0], _CHUNK_ROWS * 4):
                    z = normed[a:a + _CHUNK_ROWS * 4].to(W_U.device, W_U.dtype) @ W_U
                    ids.append((z if b_U is None else z + b_U).argmax(-1).cpu())
            ids = torch.cat(ids).reshape(len(top1), L + 1, b)
            for j, dest in enumerate(top1.values()):
                dest[s:s + b] = ids[j].T
            pbar.update(b)
    return PredictionDepth(texts=[t for t, _ in pairs], final_ids=top1["logit"][:, L].tolist(), top1=top1,
                           n_layers=L, targets=[a for _, a in pairs], decode=lambda i: decode(model, int(i)),
                           meta={"model": model.source, "lens": str(lens.path) if lens.path else None})
