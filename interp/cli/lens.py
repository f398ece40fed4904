"""``interp lens``: the logit lens (or, with ``--tuned``, the tuned lens) of one text, its text report, and its demo
section."""

from __future__ import annotations

from pathlib import Path

from ..analyses.lens import LogitLensResult, logit_lens
from ..analyses.tuned_lens import tensor_path, tuned_lens
from ..core.inputs import check_int
from .common import add_common, add_html, html_path, load_model, save_view, section

PROMPT = "The Eiffel Tower is located in the city of"


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("lens", help="logit lens (--tuned: tuned lens): each layer's next-token guess")
    p.add_argument("text", help="text to analyse (BOS is prepended)")
    p.add_argument("--target", action="append", default=None,
                   help="target continuation, e.g. ' Paris' (repeatable; a multi-token target is scored by its "
                        "first token, which the output names)")
    p.add_argument("--k", type=int, default=5, help="top-k tokens per cell (default 5)")
    p.add_argument("--pos", type=int, action="append", default=None,
                   help="position(s) to analyse (repeatable; default: all)")
    p.add_argument("--out", default=None, help="save the heatmap as this PNG (and targets as <stem>_targets.png)")
    p.add_argument("--tuned", action="store_true",
                   help="read the layers through the tuned lens cached for this model (see `interp train-lens`)")
    p.add_argument("--lens", default=None, metavar="FILE",
                   help="with --tuned: this saved tuned lens (.safetensors) instead of the newest cached one")
    add_html(p, "the lens table and target curves")
    add_common(p)
    p.set_defaults(func=cli_lens)


def cli_lens(args, model=None) -> dict:
    """Handler of ``interp lens``; ``model`` lets tests and notebooks pass a model they already hold."""
    # A bad flag must not cost a model load first; the upper bound of --k is the vocabulary size, so logit_lens
    # checks that once the model is there.
    check_int("--k", args.k, 1)
    tuned = getattr(args, "tuned", False)
    if getattr(args, "lens", None):
        if not tuned:
            raise ValueError(f"--lens {args.lens}: a lens file is read only with --tuned")
        if not tensor_path(args.lens).exists():
            raise FileNotFoundError(f"--lens {args.lens}: no such tuned lens file")
    html = html_path(args)
    if model is None:
        model = load_model(args)
    if tuned:
        res = tuned_lens(model, args.text, targets=args.target, k=args.k, positions=args.pos, lens=args.lens)
    else:
        res = logit_lens(model, args.text, targets=args.target, k=args.k, positions=args.pos)
    data = {"text": args.text, **res.to_json()}
    if args.out:
        res.plot(out=args.out)
        data["figures"] = [str(args.out)]
        if res.targets:
            out = Path(args.out)
            tpath = out.with_name(f"{out.stem}_targets{out.suffix or '.png'}")
            res.plot_targets(out=tpath)
            data["figures"].append(str(tpath))
    data["_text"] = text_report(res)
    return save_view(res, html, data)


def text_report(res: LogitLensResult) -> str:
    pos = res.positions[-1]
    lines = [res.summary(), f"position {pos} ({res.str_tokens[pos]!r}): top-{res.top_ids.shape[-1]} by residual"]
    for r, label in enumerate(res.labels):
        tops = "  ".join(f"{t!r} {p:.2f}" for t, p in res.top(r, pos)[:3])
        tg = "".join(f"   {tok!r}: p={float(res.target_probs[r, -1, j]):.3g} rank={int(res.target_ranks[r, -1, j])}"
                     for j, tok in enumerate(res.scored_tokens))
        lines.append(f"  {label:>7}  {tops}{tg}")
    split = [res.target_name(j) for j in range(len(res.targets)) if res.targets[j] != res.scored_tokens[j]]
    if split:
        lines.append("multi-token targets: " + "; ".join(split))
    return "\n".join(lines)


def demo(model) -> None:
    section("Logit lens: when does the model settle on ' Paris'?")
    res = logit_lens(model, PROMPT, targets=[" Paris"], positions=[-1])
    curve = res.target_curve(" Paris")
    first, stable = res.first_top1(" Paris"), res.first_top1(" Paris", stable=True)
    print(f"logit lens of {PROMPT!r} at the last token ({res.str_tokens[-1]!r}), {model.n_layers} layers:")
    for r in sorted(set(range(0, model.n_layers + 1, max(1, model.n_layers // 10))) | {model.n_layers}):
        t, p = res.top(r)[0]
        print(f"  after {r:2d} blocks: top-1 {t!r:<12} p={p:.2f}   ' Paris' p={float(curve['prob'][r]):.3g} "
              f"rank {int(curve['rank'][r])}")
    if first is None:
        print("  ' Paris' never becomes top-1")
    else:
        where = f"blocks.{first}.hook_resid_pre" if first < model.n_layers else "the final residual"
        print(f"  ' Paris' first becomes top-1 after {first} of {model.n_layers} blocks ({where})"
              + ("" if stable == first else f", stays top-1 from {stable} on" if stable is not None
                 else ", but is not top-1 at the end")
              + f"; final p={float(curve['prob'][-1]):.2f}")
