"""``interp attention``: one head's attention pattern and the statistics of its layer, as a text report."""

from __future__ import annotations

from ..analyses.attention import AttentionResult, attention
from .common import add_common, add_html, html_path, load_model, save_view


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("attention", help="attention pattern of one head (and stats of its layer); with "
                                                "--html and no --layer/--head, every head of the model")
    p.add_argument("text", help="text to analyse (BOS is prepended)")
    p.add_argument("--layer", type=int, default=None, help="layer index (negative counts from the end)")
    p.add_argument("--head", type=int, default=None, help="query head index")
    p.add_argument("--out", default=None, help="save the heatmap as this PNG")
    add_html(p, "the view of every head (of --layer's heads, with --layer and --head)")
    add_common(p)  # --model, --device, --json
    p.set_defaults(func=cli_attention)


def cli_attention(args, model=None) -> dict:
    """Handler of ``interp attention``; ``model`` lets tests pass a loaded model. --layer and --head may count
    from the end, so their range needs the model: they are checked right after it loads, before the forward.
    Without them, ``--html`` writes the whole model's view."""
    html = html_path(args)
    if (args.layer is None) != (args.head is None):
        raise ValueError("--layer and --head go together (one head); leave both out with --html for every head")
    if args.layer is None and html is None:
        raise ValueError("give --layer and --head (one head's pattern), or --html FILE (every head's view)")
    if args.layer is None and args.out:
        raise ValueError("--out draws one head: give --layer and --head too")
    if model is None:
        model = load_model(args)
    if args.layer is None:
        res = attention(model, args.text)
        return save_view(res, html, {**res.to_json(), "_text": res.summary()})
    layer, head = model.check_layer(args.layer), model.check_head(args.head)
    res = attention(model, args.text, layers=[layer])
    if args.out:
        res.plot(layer, head, out=args.out)
    p = res.pattern(layer, head)
    stats = res.stats()
    mine = {k: float(v) for k, v in stats.loc[(layer, head)].items() if k not in ("kv_group", "window")}
    top = [{"query": res.str_tokens[q], "key": res.str_tokens[int(p[q].argmax())], "key_pos": int(p[q].argmax()),
            "weight": float(p[q].max())} for q in range(p.shape[0])]
    return save_view(res, html, {
        **res.to_json(), "layer": layer, "head": head, "kv_group": res.kv_groups[head], "tokens": res.str_tokens,
        "pattern": [[round(float(x), 6) for x in row] for row in p], "stats": mine, "most_attended": top,
        "layer_stats": stats.reset_index().to_dict(orient="records"), "out": args.out,
        "_text": text_report(res, layer, head, stats, top, args.out)})


def text_report(res: AttentionResult, layer: int, head: int, stats, top: list[dict], out=None) -> str:
    """``stats``: ``res.stats()``; ``top``: the most attended key of each query."""
    mine = {k: float(v) for k, v in stats.loc[(layer, head)].items() if k not in ("kv_group", "window")}
    lines = [f"layer {layer} head {head} (KV group {res.kv_groups[head]} of {res.n_kv_heads}); "
             + ", ".join(f"{k} {v:.3f}" for k, v in mine.items()),
             "query -> most attended key (weight):"]
    lines += [f"  {q:3d} {t['query']!r:>16} -> {t['key_pos']:3d} {t['key']!r} ({t['weight']:.2f})"
              for q, t in enumerate(top)]
    lines.append(f"layer {layer}, all heads:")
    lines += ["  " + s for s in stats.round(3).to_string().splitlines()]
    if out:
        lines.append(f"heatmap saved to {out}")
    return "\n".join(lines)
