"""``interp trace``: causal tracing of one fact (ROME Figure 1), and its demo section."""

from __future__ import annotations

from ..analyses.trace import (
    CORRUPTIONS,
    TraceResult,
    causal_trace,
    check_corruption,
    check_kinds,
    check_noise,
)
from ..core.inputs import check_int
from .common import add_common, add_html, html_path, load_model, save_view, section


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("trace", help="causal tracing: which hidden states carry a fact (ROME Figure 1)")
    p.add_argument("text", help='prompt, e.g. "The Eiffel Tower is located in the city of"')
    p.add_argument("--subject", required=True, help="subject as it appears in the prompt")
    p.add_argument("--target", default=None,
                   help="answer to score (default: the model's top-1 next token); a multi-token answer is scored "
                        "by its first token, which the output names")
    p.add_argument("--out", default=None, help="save the heatmaps as PNG")
    p.add_argument("--corruption", default="noise", help="how the subject is corrupted: noise (Gaussian noise on "
                   "its embeddings, default) or replace (swapped for another subject of the same token length)")
    p.add_argument("--replacement", default=None, help='with --corruption replace: the subject swapped in, e.g. '
                   '"The Colosseum" (default: picked from a built-in list, seeded by --seed)')
    p.add_argument("--samples", type=int, default=None, help="noise samples (default 10; replace: 1)")
    p.add_argument("--window", type=int, default=10, help="layers restored around each MLP/attn layer (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise", type=float, default=None, help="noise std (default 3x the subject embedding std)")
    p.add_argument("--kinds", default="resid,mlp,attn", help="comma-separated subset of resid,mlp,attn")
    add_html(p, "the heatmaps with hover values")
    add_common(p)
    p.set_defaults(func=cli_trace)


def cli_trace(args, model=None) -> dict:
    """``model`` lets tests and notebooks pass a model they already hold instead of loading ``--model``."""
    # A full trace takes minutes: a typo in a flag must not cost a model load first.
    if args.corruption not in CORRUPTIONS:
        raise ValueError(f"--corruption={args.corruption!r} not known; allowed: {', '.join(CORRUPTIONS)}")
    check_int("--samples", args.samples, 1, allow_none=True)
    check_int("--window", args.window, 1)
    check_noise(args.noise)
    check_corruption(args.corruption, noise=args.noise, samples=args.samples, replacement=args.replacement)
    kinds = tuple(check_kinds([k.strip() for k in args.kinds.split(",") if k.strip()]))
    html = html_path(args)
    if model is None:
        model = load_model(args)
    tr = causal_trace(model, args.text, args.subject, args.target, corruption=args.corruption,
                      replacement=args.replacement, noise=args.noise, samples=args.samples, window=args.window,
                      seed=args.seed, kinds=kinds, progress=True)
    if args.out:
        tr.plot(out=args.out)
    return save_view(tr, html, {**tr.to_json(), "out": args.out,
                                "_text": text_report(tr) + (f"\nheatmaps saved to {args.out}" if args.out else "")})


def text_report(tr: TraceResult) -> str:
    scored = repr(tr.target)
    if isinstance(tr.target_given, str) and tr.target_given != tr.target:
        scored += f" (first token of {tr.target_given!r})"
    lines = [(f"{tr.text!r} -> {scored}: p clean {tr.clean_prob:.3f}, corrupted {tr.corrupted_prob:.3f} "
              f"(subject {tr.subject!r} = tokens {tr.subject_range[0]}..{tr.subject_range[1] - 1}, "
              f"{tr.corruption_label}, {tr.seconds:.1f} s)")]
    for k in tr.effects:
        a, ls = tr.peak(k), tr.peak(k, "last_subject")
        lines.append(f"  {k:5s}: peak layer {a['layer']} at {a['token_str']!r} (+{a['effect']:.3f}); "
                     f"at last subject token {ls['token_str']!r}: layer {ls['layer']} (+{ls['effect']:.3f})")
    return "\n".join(lines)


def demo(model) -> None:
    """Causal trace of the Eiffel Tower fact: 3 noise samples, the subject's tokens and the last token, every
    third layer (the full trace of all tokens and layers takes minutes on 2 CPU cores: see ``interp trace``)."""
    section("Causal tracing (ROME): which hidden states carry 'The Eiffel Tower ... city of' -> ' Paris'?")
    tr = causal_trace(model, "The Eiffel Tower is located in the city of", "The Eiffel Tower", samples=3,
                      positions=["subject", "last"], layers=range(0, model.n_layers, 3))
    print(text_report(tr))
    step = tr.meta["layers"][1] - tr.meta["layers"][0] if len(tr.meta["layers"]) > 1 else 1
    print(f"  indirect effect per restored token (columns: layers 0.. in steps of {step}; ' ' < .02 <= '.' < .05 "
          "<= ':' < .1 <= '+' < .2 <= '#'):")
    for kind in tr.effects:
        for pos in tr.meta["positions"]:
            row = tr.effects[kind][tr.meta["layers"], pos].tolist()
            cells = "".join(" .:+#"[sum(v >= c for c in (0.02, 0.05, 0.1, 0.2))] for v in row)
            print(f"    {kind:5s} {tr.tokens[pos]!r:>10} |{cells}|")
    print(f"  ({tr.corruption_label}, {tr.seconds:.1f} s; `interp trace ... --out trace.png` draws the full heatmaps)")
