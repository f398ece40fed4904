"""``interp attention``: one head's attention pattern and the statistics of its layer, as a text report."""

from __future__ import annotations

from ..analyses.attention import AttentionResult, attention
from .common import add_common, load_model


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("attention", help="attention pattern of one head (and stats of its layer)")
    p.add_argument("text", help="text to analyse (BOS is prepended)")
    p.add_argument("--layer", type=int, required=True, help="layer index (negative counts from the end)")
    p.add_argument("--head", type=int, required=True, help="query head index")
    p.add_argument("--out", default=None, help="save the heatmap as this PNG")
    add_common(p)  # --model, --device, --json
    p.set_defaults(func=cli_attention)


def cli_attention(args, model=None) -> dict:
    """Handler of ``interp attention``; ``model`` lets tests pass a loaded model. --layer and --head may count
    from the end, so their range needs the model: they are checked right after it loads, before the forward."""
    if model is None:
        model = load_model(args)
    layer, head = model.check_layer(args.layer), model.check_head(args.head)
    res = attention(model, args.text, layers=[layer])
    if args.out:
        res.plot(layer, head, out=args.out)
    p = res.pattern(layer, head)
    stats = res.stats()
    mine = {k: float(v) for k, v in stats.loc[(layer, head)].items() if k != "kv_group"}
    top = [{"query": res.str_tokens[q], "key": res.str_tokens[int(p[q].argmax())], "key_pos": int(p[q].argmax()),
            "weight": float(p[q].max())} for q in range(p.shape[0])]
    return {**res.to_json(), "layer": layer, "head": head, "kv_group": res.kv_groups[head],
            "tokens": res.str_tokens, "pattern": [[round(float(x), 6) for x in row] for row in p],
            "stats": mine, "most_attended": top,
            "layer_stats": stats.reset_index().to_dict(orient="records"), "out": args.out,
            "_text": text_report(res, layer, head, stats, top, args.out)}


def text_report(res: AttentionResult, layer: int, head: int, stats, top: list[dict], out=None) -> str:
    """``stats``: ``res.stats()``; ``top``: the most attended key of each query."""
    mine = {k: float(v) for k, v in stats.loc[(layer, head)].items() if k != "kv_group"}
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
