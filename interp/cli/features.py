"""``interp features train | show LAYER ID | encode TEXT``: sparse transcoders — train them (cached, resumable),
look at one feature's card, or see which features a text activates.

``show`` and ``encode`` read the transcoders trained with the default settings (or ``--dictionaries FOLDER`` in
any layout interp reads: its own, sparsify, SAELens, Gemma Scope 2). With none cached they stop before any work
and say how long ``interp features train`` would take on this machine.
"""

from __future__ import annotations

import torch

from ..analyses.features import TrainSettings, train_transcoders
from ..analyses.features.card import feature_card
from ..analyses.features.formats import LAYOUTS, load_dictionaries
from ..analyses.features.quality import evaluate_transcoders
from ..analyses.features.cost import estimate_seconds
from ..analyses.features.train import cached_transcoders, transcoder_sites
from ..analyses.features.use import encode
from ..core.inputs import check_int
from .common import add_common, add_html, html_path, load_model, save_view

_D = TrainSettings()


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("features", help="sparse transcoders: train, show a feature's card, encode a text")
    sub = p.add_subparsers(dest="features_command", required=True)

    t = sub.add_parser("train", help="train (or load the cached) transcoders, then the held-out quality table")
    t.add_argument("--layers", default=None, help="comma-separated layers (default: every layer)")
    t.add_argument("--width", type=int, default=_D.width, help=f"latents per layer (default {_D.width})")
    t.add_argument("--k", type=int, default=_D.k, help=f"active latents per token (default {_D.k})")
    t.add_argument("--tokens", type=int, default=_D.tokens, help=f"training tokens (default {_D.tokens:,})")
    t.add_argument("--lr", type=float, default=_D.lr, help="Adam step (default: the trainer's)")
    t.add_argument("--seed", type=int, default=_D.seed)
    t.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    t.add_argument("--retrain", action="store_true", help="ignore cached transcoders with the same settings")
    t.add_argument("--eval-tokens", type=int, default=0,
                   help="held-out tokens for the quality table (default 0: skip; the stored study used 200000)")
    t.add_argument("--ce-tokens", type=int, default=8192, help="of which used for cross-entropy (default 8192)")
    add_common(t)
    add_html(t, "the quality table")
    t.set_defaults(func=cli_train)

    s = sub.add_parser("show", help="one feature's card: top contexts, density, histogram, promoted tokens")
    s.add_argument("layer", type=int)
    s.add_argument("feature", type=int)
    s.add_argument("--tokens", type=int, default=100_000, help="held-out tokens scanned (default 100000)")
    s.add_argument("--top", type=int, default=20, help="contexts kept (default 20)")
    add_dictionary_options(s)
    add_common(s)
    add_html(s, "the feature card")
    s.set_defaults(func=cli_show)

    e = sub.add_parser("encode", help="the active features of every layer at every token of TEXT")
    e.add_argument("text")
    e.add_argument("--top", type=int, default=5, help="features listed per token and layer (default 5)")
    e.add_argument("--layers", default=None, help="comma-separated layers to show (default: every trained layer)")
    add_dictionary_options(e)
    add_common(e)
    add_html(e, "the active-features view")
    e.set_defaults(func=cli_encode)


def add_dictionary_options(p) -> None:
    """--dictionaries FOLDER and --layout (shared with ``interp graph``)."""
    p.add_argument("--dictionaries", default=None, metavar="FOLDER",
                   help="read dictionaries from this folder instead of the cache (layouts: " + ", ".join(LAYOUTS) + ")")
    p.add_argument("--layout", choices=LAYOUTS, default=None, help="the folder's layout (default: told by its files)")


def _layers(spec):
    if spec is None:
        return None
    try:
        return [int(x) for x in str(spec).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--layers {spec!r}; allowed: comma-separated integers such as 0,5,12") from None


def dictionaries_for(args, model):
    """The transcoders of --dictionaries FOLDER, else the cached defaults; with neither, a clear error that says
    how long training them would take (before any work)."""
    if args.dictionaries:
        return load_dictionaries(args.dictionaries, model, args.layout)
    found = cached_transcoders(model)
    if found is None:
        hours = estimate_seconds(model, transcoder_sites(model), _D) / 3600
        raise FileNotFoundError(
            f"no transcoders cached for {model.source} at the default settings (width {_D.width}, k {_D.k}, "
            f"{_D.tokens:,} tokens). Train them first with `interp features train` (about {hours:.1f} h on this "
            "machine; resumable: an interrupted run continues where it stopped), or pass --dictionaries FOLDER")
    return found


def cli_train(args, model=None) -> dict:
    for name in ("width", "k", "tokens", "seed"):
        check_int(f"--{name}", getattr(args, name), 0 if name == "seed" else 1)
    check_int("--eval-tokens", args.eval_tokens, 0)
    check_int("--threads", args.threads, 1, allow_none=True)
    layers = _layers(args.layers)
    path = html_path(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    if model is None:
        model = load_model(args)
    ds = train_transcoders(model, layers, width=args.width, k=args.k, tokens=args.tokens, lr=args.lr,
                           seed=args.seed, retrain=args.retrain, progress=True)
    data = {"settings": ds.settings, "layers": ds.layers,
            "_text": f"{len(ds)} transcoders (width {args.width}, k {args.k}) for layers {ds.layers}"}
    if args.eval_tokens:
        q = evaluate_transcoders(model, ds, tokens=args.eval_tokens, ce_tokens=args.ce_tokens, progress=True)
        data.update(q.to_json())
        data["_text"] += "\n" + q.summary() + "\n" + q.to_frame().round(4).to_string()
        save_view(q, path, data)
    return data


def cli_show(args, model=None) -> dict:
    check_int("layer", args.layer, 0)
    check_int("feature", args.feature, 0)
    check_int("--tokens", args.tokens, 1)
    check_int("--top", args.top, 1)
    path = html_path(args)
    if model is None:
        model = load_model(args)
    ds = dictionaries_for(args, model)
    card = feature_card(model, ds, args.layer, args.feature, n_tokens=args.tokens, k=args.top, progress=True)
    data = card.to_json()
    f = card.to_frame()
    lines = [card.summary()] + [f"{r.activation:8.3f}  {r.context}" for r in f.itertuples()]
    lines.append("suppresses " + ", ".join(repr(t) for t, _ in card.vocab["suppressed"][:8]))
    data["_text"] = "\n".join(lines)
    return save_view(card, path, data)


def cli_encode(args, model=None) -> dict:
    check_int("--top", args.top, 1)
    path = html_path(args)
    if model is None:
        model = load_model(args)
    ds = dictionaries_for(args, model)
    wanted = _layers(args.layers)
    if wanted is not None:
        from ..analyses.features import DictionarySet

        ds = DictionarySet({L: ds[L] for L in wanted}, ds.settings)
    fa = encode(model, ds, args.text, top=args.top)
    data = fa.to_json()
    lines = [fa.summary()]
    for p, tok in enumerate(fa.tokens):
        per = "  ".join(f"L{k}:" + ",".join(f"{f}({v:.1f})" for f, v in fa.active(k, p)[: args.top])
                        for k in fa.acts)
        lines.append(f"{p:>3} {tok!r:<14} {per}")
    data["_text"] = "\n".join(lines)
    return save_view(fa, path, data)
