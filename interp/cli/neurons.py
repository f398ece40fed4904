"""``interp neurons``: the top-activating contexts of one layer's FFN neurons, and the ``make demo`` section."""

from __future__ import annotations

from ..analyses.neurons import DEFAULT_DOCS, neurons
from ..core.inputs import check_int
from .common import add_common, add_html, html_path, load_model, save_view, section


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("neurons", help="top-activating contexts of one layer's FFN neurons")
    p.add_argument("--layer", type=int, required=True, help="layer index")
    p.add_argument("--top", type=int, default=10, help="how many neurons to show (by peak activation)")
    p.add_argument("--docs", type=int, default=DEFAULT_DOCS, help="documents of the Wikipedia corpus to scan")
    p.add_argument("--k", type=int, default=5, help="contexts kept per neuron")
    p.add_argument("--neuron", type=int, action="append", default=None,
                   help="show this neuron (repeatable) instead of the top ones")
    add_html(p, "the contexts coloured by activation, beside each neuron's vocabulary projection")
    add_common(p)  # --model, --device, --json
    p.set_defaults(func=cli_neurons)


def cli_neurons(args, model=None) -> dict:
    """Handler of ``interp neurons``; ``model`` lets tests pass a loaded model."""
    # the flags are checked before the model loads: a typo should not cost a model load
    check_int("--top", args.top, 1)
    check_int("--docs", args.docs, 1)
    check_int("--k", args.k, 1)
    for n in args.neuron or ():
        check_int("--neuron", n, 0)
    html = html_path(args)
    if model is None:
        model = load_model(args)
    view = neurons(model, args.layer)
    chosen = None if args.neuron is None else view.check(args.neuron)
    res = view.scan(n_docs=args.docs, k=args.k, progress=True)
    ids = chosen if chosen is not None else res.top_neurons(args.top)["neuron"].tolist()
    frame = res.to_frame(ids)
    out, lines = [], [res.summary()]
    for n in ids:
        rows = frame[frame.neuron == n]
        v = view.vocab(n, k=5)
        item = {"neuron": n, "max_activation": float(rows.activation.max()) if len(rows) else None,
                "contexts": rows[["activation", "title", "token", "context"]].to_dict(orient="records"),
                "promotes": [t for t, _, _ in v.promoted], "suppresses": [t for t, _, _ in v.suppressed]}
        out.append(item)
        lines.append(f"N{n}: max {item['max_activation']:.2f}; promotes {item['promotes']}")
        lines += [f"    {c['activation']:7.2f}  {c['context']!r}  ({c['title']})" for c in item["contexts"]]
    return save_view(res, html, {**res.to_json(ids), "_text": "\n".join(lines), "neurons": out}, neurons=ids)


DEMO_LAYER = 4  # early enough to scan in seconds on a CPU; its top neurons read digits and century ordinals


def demo(model) -> None:
    """``make demo`` section: the top neurons of one layer over 100 Wikipedia documents (first 48 tokens each)."""
    section("FFN neurons (interp.neurons)")
    layer = min(DEMO_LAYER, model.n_layers - 1)
    view = neurons(model, layer)
    res = view.scan(n_docs=100, k=3, max_len=48, progress=False)
    print(f"== FFN neurons: {res.summary()}")
    for row in res.top_neurons(5).itertuples():
        contexts = res.to_frame(row.neuron).context.tolist()
        print(f"  L{layer}N{row.neuron:<5d} max {row.max_activation:5.2f}  " + "  |  ".join(repr(c) for c in contexts))
