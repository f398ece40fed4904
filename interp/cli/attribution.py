"""``interp dla``: direct logit attribution of one next-token logit (or difference), its text report, and its
demo section."""

from __future__ import annotations

from pathlib import Path

from ..analyses.attribution import DLAResult, direct_logit_attribution
from .common import add_common, add_html, html_path, load_model, save_view, section
from .lens import PROMPT


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("dla", help="direct logit attribution of a next-token logit (or difference)")
    p.add_argument("text", help="text to analyse (BOS is prepended)")
    p.add_argument("--token", required=True,
                   help="the token whose logit is attributed, e.g. ' Paris' (a multi-token string is scored by its "
                        "first token, which the output names)")
    p.add_argument("--baseline", default=None, help="attribute logit(token) - logit(baseline) instead")
    p.add_argument("--pos", type=int, default=-1, help="position whose next-token logit is attributed")
    p.add_argument("--top", type=int, default=10, help="components to list (default 10)")
    p.add_argument("--out", default=None, help="save the bar plot as this PNG (and heads as <stem>_heads.png)")
    add_html(p, "the per-head heatmap and per-layer bars")
    add_common(p)
    p.set_defaults(func=cli_dla)


def cli_dla(args, model=None) -> dict:
    """Handler of ``interp dla``; ``model`` lets tests and notebooks pass a model they already hold."""
    # A bad flag must not cost a model load first.
    if isinstance(args.top, bool) or not isinstance(args.top, int) or args.top < 1:
        raise ValueError(f"--top {args.top}: allowed >= 1")
    html = html_path(args)
    if model is None:
        model = load_model(args)
    res = direct_logit_attribution(model, args.text, args.token, args.baseline, pos=args.pos)
    data = {"text": args.text, **res.to_json()}
    data["top"] = [{"component": lab, "contribution": v} for lab, v in res.top(args.top)]
    if args.out:
        out = Path(args.out)
        heads = out.with_name(f"{out.stem}_heads{out.suffix or '.png'}")
        res.plot(out=out)
        res.plot_heads(out=heads)
        data["figures"] = [str(out), str(heads)]
    data["_text"] = text_report(res, args.top)
    return save_view(res, html, data)


def text_report(res: DLAResult, n: int) -> str:
    e = res.embedding_share()
    lines = [res.summary(), f"top {n} components (direct contribution):"]
    lines += [f"  {lab:>10} {v:+8.3f}" for lab, v in res.top(n)]
    lines.append(f"  {'remainder':>10} {res.remainder:+8.3f}  (final-norm bias / unembedding bias)")
    lines.append(f"embedding direct path: {e['contribution']:+.3f} = {e['fraction_of_value']:.1%} of the value, "
                 f"{e['abs_share']:.1%} of |attribution|, rank {e['rank_by_abs']} of {e['n_components']} "
                 "layer-level components")
    return "\n".join(lines)


def demo(model) -> None:
    section("Direct logit attribution: which components write ' Paris' into the logits?")
    res = direct_logit_attribution(model, PROMPT, " Paris")
    e = res.embedding_share()
    print(f"direct logit attribution of {res.what} = {res.model_value:.2f} after {PROMPT!r} "
          f"(parts + remainder = {res.total():.2f}):")
    print("  top heads/MLPs: " + ", ".join(f"{lab} {v:+.2f}" for lab, v in res.top(6)))
    print("  top layers:     " + ", ".join(f"{lab} {v:+.2f}" for lab, v in res.top(6, level="layer")))
    print(f"  input embedding's direct path: {e['contribution']:+.2f} ({e['fraction_of_value']:.1%} of the logit, "
          f"{e['abs_share']:.1%} of all |direct attribution|)")
