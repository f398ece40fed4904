"""Activation patching: restore one component's activation from one run into another and measure the metric.

``interp.activation_patching(model, clean, corrupted, metric, over="resid_pre")`` runs the clean and corrupted
prompts once each, then one patched forward per (component, position) — many patches share one forward by
stacking copies of the batch, each copy patched at a different place. Results are normalised on the mean
metric over pairs, ``(patched - corrupted) / (clean - corrupted)``, so 0 is the corrupted behaviour and 1 the
clean one, in both directions: denoising (clean activation into the corrupted run) and noising (corrupted into
the clean run, where an important component reads near 0).

Every prompt is scored at its own last real token, so a batch may mix lengths (right padding cannot reach a
real token through causal attention); only ``positions="each"`` (a grid over positions) needs all pairs to have
the same length, since a column must mean the same token in every pair.
"""

from __future__ import annotations

import textwrap

from collections import defaultdict
from dataclasses import dataclass, field

import torch

from ...core.hooks import capture
from ...core.inputs import check_int, check_pos, layer_list
from ...core.progress import bar
from ...core.results import Result, jsonable, new_figure, save_fig
from ...core.resume import BlockCalls, record_blocks, run_from
from .metrics import PairBatch, Pairs, bind_metric, make_pairs, position_labels

LAST = "last"
# over= -> (hook under blocks.{layer}, layout): "resid" [b, pos, d]; "head" [b, pos, head, d];
# "pattern" [b, head, query pos, key pos].
OVER = {
    "resid_pre": ("hook_resid_pre", "resid"), "resid_mid": ("hook_resid_mid", "resid"),
    "resid_post": ("hook_resid_post", "resid"), "attn_out": ("hook_attn_out", "resid"),
    "mlp_out": ("hook_mlp_out", "resid"), "heads": ("attn.hook_z", "head"), "head_q": ("attn.hook_q", "head"),
    "head_k": ("attn.hook_k", "head"), "head_v": ("attn.hook_v", "head"), "pattern": ("attn.hook_pattern", "pattern"),
}
HEAD_KINDS = ("heads", "head_q", "head_k", "head_v", "pattern")
DIRECTIONS = ("denoise", "noise")
POSITION_WORDS = ("each", "all", "last")


@dataclass(frozen=True)
class Patch:
    """One place to patch: a hook, the positions (None = all, LAST = each row's last real token, an int or a list
    of ints) and the head (None = every head; an index into the hook's head dimension)."""

    name: str
    pos: object = None
    head: int | None = None


def layout_of(name: str, ndim: int) -> str:
    if name.endswith(("hook_pattern", "hook_attn_scores")):
        return "pattern"
    return "head" if ndim == 4 else "resid"


def patch_mask(shape, name: str, pos, head, last: torch.Tensor) -> torch.Tensor:
    """bool mask broadcastable to an activation of one copy of the batch (``shape`` = [B, ...]) selecting ``pos``
    and ``head``."""
    layout = layout_of(name, len(shape))
    n_pos = shape[2] if layout == "pattern" else shape[1]
    pm = torch.zeros(shape[0], n_pos, dtype=torch.bool)
    if pos is None:
        pm[:] = True
    elif isinstance(pos, str):  # LAST
        pm[torch.arange(shape[0]), last] = True
    else:
        pm[:, pos] = True
    if layout == "resid":
        return pm.reshape(shape[0], n_pos, *([1] * (len(shape) - 2)))
    n_heads = shape[1] if layout == "pattern" else shape[2]
    hm = torch.ones(n_heads, dtype=torch.bool) if head is None else torch.arange(n_heads) == head
    if layout == "head":
        return pm[:, :, None, None] & hm[None, None, :, None]
    return hm[None, :, None, None] & pm[:, None, :, None]


def patch_hooks(groups: dict[str, list[tuple[int, Patch]]], source: dict, rows: int, last: torch.Tensor) -> list:
    """One hook per hook name: copy ``j`` of the stacked batch (rows j*B..(j+1)*B) gets ``source[name]`` at its
    patch's mask. Masks are built at the first call (the shapes are known then) and reused."""
    hooks, cache = [], {}
    for name, entries in groups.items():
        def fn(t, hook, name=name, entries=entries, masks=None):
            masks = cache.setdefault(name, {}) if masks is None else masks
            out = t.clone()
            src = source[name].to(t.device, t.dtype)
            for j, p in entries:
                key = (p.pos if not isinstance(p.pos, list) else tuple(p.pos), p.head)
                if key not in masks:
                    masks[key] = patch_mask(src.shape, name, p.pos, p.head, last).to(t.device)
                block = slice(j * rows, (j + 1) * rows)
                out[block] = torch.where(masks[key], src, out[block])
            return out
        hooks.append((name, fn))
    return hooks


def final_name(model) -> str:
    return f"blocks.{model.n_layers - 1}.hook_resid_post"


def last_logits(model, tokens: torch.Tensor, last: torch.Tensor, hooks=(), names=()) -> tuple[torch.Tensor, dict]:
    """Logits at each row's ``last`` position [rows, d_vocab] (float32, CPU), plus the named activations (on the
    model's device) — the forward stops at the final residual and unembeds only the scored position."""
    fin = final_name(model)
    store, _ = capture(model, tokens.to(model.device), list(names) + [fin], hooks=hooks, stop=True,
                       description="activation patching")
    resid = store[fin][torch.arange(tokens.shape[0]), last.to(store[fin].device)]
    return model.unembed(model.final_norm(resid)), store


def copies_per_forward(n_patches: int, rows: int, rows_per_forward: int) -> int:
    """How many copies of a batch of ``rows`` rows one forward stacks."""
    return max(1, min(n_patches, rows_per_forward // rows))


def patch_layer(name: str) -> int | None:
    """The block a hook lives in (None outside the blocks: the embedding)."""
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "blocks" and len(parts) > 2 and parts[1].isdigit() else None


def run_patches(model, base: torch.Tensor, last: torch.Tensor, source: dict, patches: list[Patch], metric,
                batch: PairBatch, *, copies: int, resume: Baseline | None = None,
                progress: bool = False) -> torch.Tensor:
    """Metric per pair for each patch -> [n_patches, B], ``copies`` patches per forward. Every forward has the
    same shape (the last is padded with unpatched copies), as have the baseline runs (:func:`baselines`): a
    row's floats then do not depend on which forward it ran in, so an unchanged activation scores exactly the
    baseline. With ``resume`` (the baseline's recorded block calls and residuals) a forward starts at the lowest
    layer it patches instead of at the embedding: the layers below are the base run's, unchanged."""
    B = base.shape[0]
    out = []
    starts = range(0, len(patches), copies)
    rows = torch.arange(B * copies)
    for s in (bar(starts, desc="patching") if progress else starts):
        chunk = patches[s:s + copies]
        groups = defaultdict(list)
        for j, p in enumerate(chunk):
            groups[p.name].append((j, p))
        hooks = patch_hooks(groups, source, B, last)
        layers = [patch_layer(p.name) for p in chunk]
        if resume is not None and None not in layers:
            start = min(layers)
            final = run_from(model, resume.calls, start, resume.resid[start].repeat(copies, 1, 1), hooks)
            final = final[rows.to(final.device), last.repeat(copies).to(final.device)]
            logits = model.unembed(model.final_norm(final))
        else:
            logits, _ = last_logits(model, base.repeat(copies, 1), last.repeat(copies), hooks)
        out += [metric(logits[j * B:(j + 1) * B], batch).detach().float().cpu() for j in range(len(chunk))]
    return torch.stack(out)


@dataclass
class Baseline:
    """The unpatched runs: last-token logits and named activations of each, and (for resuming) the block calls of
    a forward shaped like the patched ones with the base run's residual entering each layer [B, pos, d_model]."""

    clean_logits: torch.Tensor
    clean_store: dict
    corrupted_logits: torch.Tensor
    corrupted_store: dict
    calls: BlockCalls | None = None
    resid: dict = field(default_factory=dict)


def baselines(model, clean: torch.Tensor, corrupted: torch.Tensor, last: torch.Tensor, names, copies: int, *,
              base: str = "corrupted", resume_layers=()) -> Baseline:
    """The clean and the corrupted run in forwards shaped like the patched ones (``copies`` stacked batches:
    clean, corrupted, then more copies of the ``base`` run), keeping ``names``; with ``resume_layers``, also
    what :func:`run_patches` needs to start a forward at those layers."""
    B = clean.shape[0]
    layers = sorted(set(resume_layers))
    resid_names = [f"blocks.{layer}.hook_resid_pre" for layer in layers]
    fin = final_name(model)

    def logits_of(store):  # every row, as the patched forwards unembed them: same shapes, same floats
        n_rows = store[fin].shape[0]
        resid = store[fin][torch.arange(n_rows), last.repeat(n_rows // B).to(store[fin].device)]
        return model.unembed(model.final_norm(resid))

    def run(toks):
        if resid_names:
            return record_blocks(model, toks.to(model.device), [*names, *resid_names],
                                 description="activation patching")
        store, _ = capture(model, toks.to(model.device), [*names, fin], stop=True, description="activation patching")
        return store, None

    if copies == 1:
        (sa, ca), (sb, cb) = run(clean), run(corrupted)
        out = Baseline(logits_of(sa), sa, logits_of(sb), sb)
        calls, rstore, rows = (cb, sb, slice(None)) if base == "corrupted" else (ca, sa, slice(None))
    else:
        fill = corrupted if base == "corrupted" else clean
        store, calls = run(torch.cat([clean, corrupted] + [fill] * (copies - 2)))
        both = logits_of(store)
        out = Baseline(both[:B], {n: store[n][:B] for n in names}, both[B:2 * B],
                       {n: store[n][B:2 * B] for n in names})
        rstore, rows = store, (slice(B, 2 * B) if base == "corrupted" else slice(0, B))
    if resid_names:
        out.calls = calls
        out.resid = {layer: rstore[f"blocks.{layer}.hook_resid_pre"][rows] for layer in layers}
    return out


def normalise(raw_mean: torch.Tensor, clean: float, corrupted: float) -> tuple[torch.Tensor, str]:
    """(patched - corrupted) / (clean - corrupted); NaN with a note when clean and corrupted score the same."""
    gap = clean - corrupted
    if abs(gap) <= 1e-7 * max(1.0, abs(clean), abs(corrupted)):
        return torch.full_like(raw_mean, float("nan")), (
            f"clean and corrupted runs give the same metric ({clean:.6g}): the normalised grid is undefined (NaN); "
            "read .raw, or choose pairs the metric tells apart")
    return (raw_mean - corrupted) / gap, ""


# ---------------------------------------------------------------------------------------------- the analysis
def activation_patching(model, clean, corrupted=None, metric=None, *, over="resid_pre", positions="each",
                        direction: str = "denoise", layers=None, batch_size: int = 64, resume: bool = True,
                        progress: bool = False) -> PatchingResult:
    """Patch each component (``over``) at each position from one run into the other -> :class:`PatchingResult`.

    ``clean``/``corrupted``: strings, lists of strings (pairs), token tensors, or a PromptPairs as ``clean``.
    ``metric``: ``logit_diff(...)``, ``prob(...)``, ``kl_to_clean()`` or ``(logits [n, vocab], batch) -> [n]``;
    None = logit_diff on the PromptPairs' answers. ``over``: one of :data:`OVER` or a list of hook names.
    ``positions``: "each" (a column per position), "all", "last" (each prompt's last real token) or a list of
    ints (a column each). For head kinds the grid is [layer x head] and ``positions`` says where the head is
    patched ("each" = "all"; a list = those positions together). ``head_k``/``head_v`` on grouped-query models
    patch a KV group (``result.kv_readers`` lists the query heads reading each). ``batch_size``: rows per
    forward (patches are stacked copies of the batch). ``resume``: start each patched forward at the lowest layer
    it patches, reusing the unpatched layers below (:mod:`interp.core.resume`); False runs every forward from the
    embedding (same numbers up to float rounding)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} not known; allowed: 'denoise' (clean into corrupted), 'noise'")
    check_int("batch_size", batch_size, 1)
    names = check_over(model, over)
    pairs = make_pairs(model, clean, corrupted)
    fn, metric_name = bind_metric(model, metric, len(pairs))
    layer_ids = layer_ids_of(model, layers) if names is None else None
    kind = over if names is None else "hooks"
    hook_names = names or [f"blocks.{layer}.{OVER[over][0]}" for layer in layer_ids]

    base = pairs.corrupted if direction == "denoise" else pairs.clean
    last = pairs.lengths - 1
    cols, col_name, col_labels, kv = columns(model, pairs, kind, positions)
    patches = [Patch(n, *c) for n in hook_names for c in cols]
    copies = copies_per_forward(len(patches), len(pairs), batch_size)
    layers_patched = {patch_layer(n) for n in hook_names}
    resume = resume and None not in layers_patched
    ref = baselines(model, pairs.clean, pairs.corrupted, last, hook_names, copies,
                    base="corrupted" if direction == "denoise" else "clean",
                    resume_layers=layers_patched if resume else ())
    clean_logits, corr_logits = ref.clean_logits, ref.corrupted_logits
    source = ref.clean_store if direction == "denoise" else ref.corrupted_store
    batch = PairBatch(pairs.answer_ids, pairs.wrong_ids, clean_logits, pairs.clean, pairs.lengths)
    clean_v, corr_v = fn(clean_logits, batch).float().cpu(), fn(corr_logits, batch).float().cpu()

    raw = run_patches(model, base, last, source, patches, fn, batch, copies=copies,
                      resume=ref if resume else None, progress=progress)
    raw = raw.reshape(len(hook_names), len(cols), len(pairs))
    values, note = normalise(raw.mean(-1), float(clean_v.mean()), float(corr_v.mean()))
    rows = layer_ids if names is None else hook_names
    return PatchingResult(values, raw, clean_v, corr_v, rows, [c[1] if kind in HEAD_KINDS else c[0] for c in cols],
                          "layer" if names is None else "hook", col_name, col_labels, kind, direction, metric_name,
                          describe_positions(positions), kv, note)


def check_over(model, over):
    if isinstance(over, str):
        if over not in OVER:
            raise ValueError(f"over={over!r} not known; allowed: {', '.join(OVER)}, or a list of hook names")
        if over == "mlp_out" and model.attn_only:
            raise ValueError("over='mlp_out': this model is attention-only (no MLPs)")
        return None
    names = list(over) if isinstance(over, (list, tuple)) else None
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"over={over!r} not known; allowed: {', '.join(OVER)}, or a list of hook names")
    model.hooks([(n, _noop) for n in names])  # checks every name (close matches named); attaches nothing
    return names


def _noop(t, hook):
    return None


def layer_ids_of(model, layers) -> list[int]:
    return layer_list(model, layers)


def _positions(pairs: Pairs, positions) -> list:
    """Columns for residual-like kinds: ints, None (all) or LAST."""
    if isinstance(positions, str):
        if positions not in POSITION_WORDS:
            raise ValueError(f"positions={positions!r} not known; allowed: 'each', 'all', 'last' or a list of ints")
        if positions == "all":
            return [None]
        if positions == "last":
            return [LAST]
        if not pairs.same_length:
            raise ValueError(f"positions='each' needs prompts of one length (a column is one token of every pair); "
                             f"these have lengths {sorted(set(pairs.lengths.tolist()))}: use 'last' or 'all'")
        return list(range(int(pairs.lengths[0])))
    items = [positions] if isinstance(positions, int) else list(positions)
    if not items:
        raise ValueError("positions is an empty list; give ints, or 'each', 'all', 'last'")
    n = int(pairs.lengths.min())
    return [check_pos(p, n) for p in items]


def columns(model, pairs, kind, positions):
    """-> ([(pos, head)], column name, column labels, kv_readers)."""
    if kind not in HEAD_KINDS:
        cols = _positions(pairs, positions)
        labels = position_labels(model, pairs) if all(isinstance(c, int) for c in cols) else None
        col_labels = [labels[c] if labels and c < len(labels) else ("all" if c is None else str(c)) for c in cols]
        return [(c, None) for c in cols], "position", col_labels, None
    if positions == "each" or positions == "all" or positions is None:
        pos = None
    elif positions == "last":
        pos = LAST
    else:
        pos = _positions(pairs, positions)
    n = model.n_kv_heads if kind in ("head_k", "head_v") else model.n_heads
    kv = None
    if kind in ("head_k", "head_v") and n != model.n_heads:
        per = model.n_heads // n
        kv = {g: list(range(g * per, (g + 1) * per)) for g in range(n)}
        return [(pos, g) for g in range(n)], "kv_group", [f"G{g}" for g in range(n)], kv
    return [(pos, h) for h in range(n)], "head", [f"H{h}" for h in range(n)], None


def describe_positions(positions) -> str:
    return positions if isinstance(positions, str) else ",".join(str(p) for p in (
        [positions] if isinstance(positions, int) else positions))


# ---------------------------------------------------------------------------------------------- result
@dataclass(repr=False)
class PatchingResult(Result):
    """``values`` [rows, cols]: normalised (0 = corrupted, 1 = clean); ``raw`` [rows, cols, n_pairs]: the metric
    of every patched run; ``clean``/``corrupted`` [n_pairs]: the unpatched metric. Rows are layers (or hook
    names), columns positions, heads or KV groups (``col_name``). ``signed=False`` (an unsigned estimate, e.g.
    GradDrop): ``values`` are magnitudes of the normalised change from the base run (0 = no effect) and ``raw`` the
    per-pair magnitudes in metric units."""

    values: torch.Tensor
    raw: torch.Tensor
    clean: torch.Tensor
    corrupted: torch.Tensor
    rows: list
    cols: list
    row_name: str
    col_name: str
    col_labels: list
    over: str
    direction: str
    metric: str
    positions: str
    kv_readers: dict | None = None
    note: str = ""
    method: str = "exhaustive"
    extra: dict = field(default_factory=dict)
    signed: bool = True

    def to_frame(self):
        import pandas as pd

        recs = []
        for i, r in enumerate(self.rows):
            for j, c in enumerate(self.cols):
                recs.append({self.row_name: r, self.col_name: c, "label": self.col_labels[j],
                             "value": float(self.values[i, j]), "raw": float(self.raw[i, j].mean())})
        return pd.DataFrame(recs)

    def top(self, n: int = 10) -> list[tuple]:
        """The ``n`` largest effects by absolute value -> ``[(row, col, value)]`` (NaN never ranks)."""
        n = check_int("n", n, 1)
        flat = self.values.flatten()
        order = torch.argsort(torch.nan_to_num(flat.abs(), nan=-1.0), descending=True)
        out = []
        for k in order[:n].tolist():
            if torch.isnan(flat[k]):
                break
            i, j = divmod(k, len(self.cols))
            out.append((self.rows[i], self.cols[j], float(flat[k])))
        return out

    def summary(self) -> str:
        gap = f"clean {float(self.clean.mean()):.4g} vs corrupted {float(self.corrupted.mean()):.4g}"
        head = (f"{self.method} {self.direction} patching over {self.over} ({self.metric}, {len(self.clean)} pairs, "
                f"{gap})")
        if self.note:
            return f"{head}: {self.note}"
        best = self.top(1)
        return head + (f"; largest {best[0][2]:+.3f} at {self.row_name} {best[0][0]}, {self.col_name} "
                       f"{best[0][1]}" if best else "")

    def to_json(self) -> dict:
        return {"result": type(self).__name__, "summary": self.summary(), "method": self.method,
                "over": self.over, "direction": self.direction, "metric": self.metric, "positions": self.positions,
                "rows": jsonable(self.rows), "row_name": self.row_name, "cols": jsonable(self.cols),
                "col_name": self.col_name, "col_labels": self.col_labels, "values": jsonable(self.values),
                "raw_mean": jsonable(self.raw.mean(-1)), "clean": jsonable(self.clean),
                "corrupted": jsonable(self.corrupted), "kv_readers": jsonable(self.kv_readers), "note": self.note,
                "signed": self.signed, "top": jsonable(self.top(10))}

    def compare(self, truth: PatchingResult, k: int = 10) -> Comparison:
        """How well this grid (e.g. an AtP estimate) ranks like ``truth`` (e.g. exhaustive patching of the same
        components) -> :class:`Comparison` (Spearman, Pearson, top-k recall by absolute effect, scatter plot).
        When either grid is unsigned (``signed=False``), both are compared as magnitudes: a signed grid becomes
        ``|values - base|`` (base 0 for denoising, 1 for noising: the value of an unchanged run)."""
        if tuple(self.values.shape) != tuple(truth.values.shape) or self.rows != truth.rows or \
                self.cols != truth.cols:
            raise ValueError(f"cannot compare grids of different components: {tuple(self.values.shape)} "
                             f"({self.over}) vs {tuple(truth.values.shape)} ({truth.over})")
        return Comparison.of(self, truth, k)

    def view(self):
        """Interactive heatmap of ``plot()`` with hover values (normalised and raw)."""
        from .view import patching_view

        return patching_view(self)

    def plot(self, *, out=None, title: str | None = None):
        """Heatmap of ``values``, diverging colours centred at 0, column labels (tokens, heads)."""
        fig = new_figure(figsize=(max(4.0, 0.45 * len(self.cols) + 2), max(3.0, 0.25 * len(self.rows) + 1.5)))
        ax = fig.add_subplot(1, 1, 1)
        vals = self.values.numpy()
        finite = vals[~torch.isnan(self.values).numpy()]
        lim = float(abs(finite).max()) if finite.size else 1.0
        im = ax.imshow(vals, cmap="RdBu_r", vmin=-max(lim, 1e-9), vmax=max(lim, 1e-9), aspect="auto")
        ax.set_xticks(range(len(self.cols)))
        ax.set_xticklabels([repr(c) if self.col_name == "position" else c for c in self.col_labels], rotation=90,
                           fontsize=7)
        ax.set_yticks(range(len(self.rows)))
        ax.set_yticklabels([str(r) for r in self.rows], fontsize=7)
        ax.set_xlabel(self.col_name)
        ax.set_ylabel(self.row_name)
        ax.set_title(title or f"{self.method} {self.direction} patching: {self.over} ({self.metric})", fontsize=9)
        from .view import value_label

        fig.colorbar(im, ax=ax, label=value_label(self))
        return save_fig(fig, out)


def _ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks 0..n-1 with ties given their average rank (as Spearman's rho needs)."""
    order = torch.argsort(x, stable=True)
    ranks = torch.empty_like(x)
    ranks[order] = torch.arange(len(x), dtype=x.dtype)
    for v in torch.unique(x):
        tie = x == v
        if int(tie.sum()) > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def _magnitude(res: PatchingResult, v: torch.Tensor) -> torch.Tensor:
    """A grid's values as effect magnitudes: unsigned grids as they are; signed ones ``|v - base|`` (base 0 for
    denoising, 1 for noising)."""
    return v if not res.signed else (v - (0.0 if res.direction == "denoise" else 1.0)).abs()


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    denom = float(a.norm() * b.norm())
    return float((a * b).sum()) / denom if denom > 0 else float("nan")


def spearman(a, b) -> float:
    """Spearman's rho: Pearson's r of the ranks, ties given their average rank."""
    return pearson(_ranks(torch.as_tensor(a, dtype=torch.float64)), _ranks(torch.as_tensor(b, dtype=torch.float64)))


@dataclass(repr=False)
class Comparison(Result):
    """An estimate against the truth over the same components: Spearman and Pearson correlation of the
    normalised values, and top-k recall (the share of the truth's k largest |effects| among the estimate's)."""

    estimate: torch.Tensor
    truth: torch.Tensor
    labels: list
    spearman: float
    pearson: float
    topk_recall: float
    k: int
    names: tuple = ("estimate", "exhaustive")

    @classmethod
    def of(cls, est: PatchingResult, truth: PatchingResult, k: int) -> Comparison:
        e, t = est.values.flatten().double(), truth.values.flatten().double()
        names = (est.method, truth.method)
        if not (est.signed and truth.signed):  # an unsigned estimate ranks against the truth's magnitudes
            e, t = _magnitude(est, e), _magnitude(truth, t)
            names = tuple(n if r.signed is False else f"|{n}|" for n, r in zip(names, (est, truth)))
        labels = [(r, c) for r in est.rows for c in est.cols]
        ok = ~(torch.isnan(e) | torch.isnan(t))
        e, t, labels = e[ok], t[ok], [lab for lab, good in zip(labels, ok.tolist()) if good]
        k = min(check_int("k", k, 1), len(labels))
        if k == 0:
            raise ValueError("no finite values to compare (both grids are NaN: clean and corrupted score the same?)")
        top_t = set(torch.argsort(t.abs(), descending=True)[:k].tolist())
        top_e = set(torch.argsort(e.abs(), descending=True)[:k].tolist())
        return cls(e.float(), t.float(), labels, spearman(e, t), pearson(e, t),
                   len(top_t & top_e) / k, k, names)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"component": [str(x) for x in self.labels], self.names[0]: self.estimate.tolist(),
                             self.names[1]: self.truth.tolist()})

    def summary(self) -> str:
        return (f"{self.names[0]} vs {self.names[1]} over {len(self.labels)} components: Spearman "
                f"{self.spearman:.3f}, Pearson {self.pearson:.3f}, top-{self.k} recall {self.topk_recall:.2f}")

    def to_json(self) -> dict:
        return {"result": "Comparison", "summary": self.summary(), "spearman": jsonable(self.spearman),
                "pearson": jsonable(self.pearson), "topk_recall": self.topk_recall, "k": self.k,
                "rows": jsonable(self.to_frame().to_dict(orient="records"))}

    def plot(self, *, out=None):
        """Scatter of estimate against truth, with the diagonal."""
        fig = new_figure(figsize=(4.5, 4.5))
        ax = fig.add_subplot(1, 1, 1)
        ax.scatter(self.truth.numpy(), self.estimate.numpy(), s=10, alpha=0.7)
        lo = float(min(self.truth.min(), self.estimate.min()))
        hi = float(max(self.truth.max(), self.estimate.max()))
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--")
        ax.set_xlabel(f"{self.names[1]} (normalised)")
        ax.set_ylabel(f"{self.names[0]} (normalised)")
        ax.set_title("\n".join(textwrap.wrap(self.summary(), 62)), fontsize=7)
        return save_fig(fig, out)
