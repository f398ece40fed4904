"""``interp patch``: activation patching (exhaustive), attribution patching (AtP) or path patching between a clean
and a corrupted prompt, or over a built-in dataset of prompt pairs."""

from __future__ import annotations

from ..analyses.patching import (
    DIRECTIONS,
    OVER,
    POSITION_WORDS,
    activation_patching,
    attribution_patching,
    fact_pairs,
    induction_pairs,
    ioi,
    kl_to_clean,
    logit_diff,
    path_patching,
    prob,
)
from ..core.inputs import check_int
from .common import add_common, add_html, html_path, load_model, save_view, section

METHODS = ("exhaustive", "atp", "path")
DATASETS = ("ioi", "facts", "induction")
METRICS = ("logit_diff", "prob", "kl")


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("patch", help="activation / attribution / path patching between clean and corrupted")
    p.add_argument("--clean", default=None, help='clean prompt, e.g. "When Mary and John went to the store, John '
                                                 'gave a drink to"')
    p.add_argument("--corrupted", default=None, help="corrupted prompt of the same token length")
    p.add_argument("--answer", default=None, help='the clean answer, one token (e.g. " Mary")')
    p.add_argument("--wrong", default=None, help='the token the corruption points to, one token (e.g. " John")')
    p.add_argument("--dataset", default=None, choices=DATASETS, help="built-in prompt pairs instead of --clean")
    p.add_argument("--n", type=int, default=8, help="pairs drawn from --dataset (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--method", default="exhaustive", choices=METHODS)
    p.add_argument("--over", default="heads", help=f"what to patch: {', '.join(OVER)} (default heads)")
    p.add_argument("--positions", default="each", help="each, all, last, or comma-separated positions")
    p.add_argument("--direction", default=None, help="denoise (default; path: noise) or noise")
    p.add_argument("--layers", default=None, help="comma-separated layers (default: all)")
    p.add_argument("--metric", default="logit_diff", choices=METRICS)
    p.add_argument("--sender", default=None, help="path patching: LAYER.HEAD or mlp.LAYER")
    p.add_argument("--receivers", default="final",
                   help="path patching: comma-separated q:L.H, k:L.H, v:L.H, mlp:L or final (default final)")
    p.add_argument("--top", type=int, default=10, help="rows in the text report (default 10)")
    p.add_argument("--out", default=None, help="save the figure as PNG")
    add_html(p, "the grid with hover values")
    add_common(p)
    p.set_defaults(func=cli_patch)


def _ints(flag: str, text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected comma-separated integers, e.g. 0,3,5") from None


def _positions(text: str):
    return text if text in POSITION_WORDS else _ints("--positions", text)


def _sender(text: str | None):
    if text is None:
        raise ValueError("--method path needs --sender LAYER.HEAD (e.g. 0.0) or mlp.LAYER")
    parts = text.split(".")
    try:
        if parts[0] == "mlp" and len(parts) == 2:
            return ("mlp", int(parts[1]))
        if len(parts) == 2:
            return (int(parts[0]), int(parts[1]))
    except ValueError:
        pass
    raise ValueError(f"--sender {text!r}: expected LAYER.HEAD (e.g. 9.6) or mlp.LAYER")


def _receivers(text: str) -> list:
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        if item == "final":
            out.append("final")
            continue
        kind, _, rest = item.partition(":")
        try:
            if kind in ("q", "k", "v"):
                layer, head = rest.split(".")
                out.append((kind, int(layer), int(head)))
                continue
            if kind == "mlp":
                out.append(("mlp", int(rest)))
                continue
        except ValueError:
            pass
        raise ValueError(f"--receivers item {item!r}: expected q:L.H, k:L.H, v:L.H, mlp:L or final")
    if not out:
        raise ValueError("--receivers is empty; e.g. k:1.0 or final")
    return out


def check_args(args) -> dict:
    """Every flag checked before the model loads (a typo must not cost a load): -> the parsed values."""
    if (args.dataset is None) == (args.clean is None and args.corrupted is None):
        raise ValueError("give either --clean and --corrupted, or --dataset (ioi, facts, induction), not both")
    if args.dataset is None and (args.clean is None or args.corrupted is None):
        raise ValueError("--clean and --corrupted go together: give both prompts")
    if args.dataset is None and args.metric in ("logit_diff", "prob") and args.answer is None:
        raise ValueError(f"--metric {args.metric} needs --answer (and --wrong for logit_diff) with --clean")
    if args.dataset is None and args.metric == "logit_diff" and args.wrong is None:
        raise ValueError("--metric logit_diff needs --wrong: the token the corruption points to")
    check_int("--n", args.n, 1)
    check_int("--top", args.top, 1)
    if args.over not in OVER:
        raise ValueError(f"--over {args.over!r} not known; allowed: {', '.join(OVER)}")
    direction = args.direction or ("noise" if args.method == "path" else "denoise")
    if direction not in DIRECTIONS:
        raise ValueError(f"--direction {direction!r} not known; allowed: {', '.join(DIRECTIONS)}")
    parsed = {"positions": _positions(args.positions), "layers": _ints("--layers", args.layers),
              "direction": direction}
    if args.method == "path":
        parsed["sender"], parsed["receivers"] = _sender(args.sender), _receivers(args.receivers)
    return parsed


def _inputs(model, args):
    if args.dataset == "ioi":
        return ioi(model, args.n, seed=args.seed), None
    if args.dataset == "induction":
        return induction_pairs(model, args.n, seed=args.seed), None
    if args.dataset == "facts":
        from ..editing.facts import load_records
        return fact_pairs(model, load_records(), args.n, seed=args.seed), None
    return args.clean, args.corrupted


def _metric(args):
    if args.metric == "kl":
        return kl_to_clean()
    if args.metric == "prob":
        return prob(args.answer)
    return logit_diff(args.answer, args.wrong)


def cli_patch(args, model=None) -> dict:
    """``model`` lets tests pass a model they already hold instead of loading ``--model``."""
    parsed = check_args(args)
    html = html_path(args)
    if model is None:
        model = load_model(args)
    clean, corrupted = _inputs(model, args)
    metric = _metric(args)
    if args.method == "path":
        res = path_patching(model, clean, corrupted, parsed["sender"], parsed["receivers"], metric,
                            direction=parsed["direction"], separately=True)
        text = res.summary() + "\n" + res.to_frame().to_string(index=False)
    else:
        run = activation_patching if args.method == "exhaustive" else attribution_patching
        res = run(model, clean, corrupted, metric, over=args.over, positions=parsed["positions"],
                  direction=parsed["direction"], layers=parsed["layers"])
        rows = "\n".join(f"  {res.row_name} {r!s:>3}  {res.col_name} {c!s:>4}  {v:+.4f}" for r, c, v in
                         res.top(args.top))
        text = f"{res.summary()}\ntop {args.top} by |effect| (0 = corrupted, 1 = clean):\n{rows}"
    if args.out:
        res.plot(out=args.out)
        text += f"\nfigure saved to {args.out}"
    return save_view(res, html, {**res.to_json(), "out": args.out, "_text": text})


def demo(model) -> None:
    """``make demo`` section: which heads carry indirect-object identification? AtP over every head (2 forwards
    + 1 backward), then the exhaustive answer for the layers of AtP's top heads, side by side."""
    section("Patching: which heads carry 'When Mary and John went to the store, John gave a drink to' -> ' Mary'?")
    pairs = ioi(model, 8, seed=0)
    atp = attribution_patching(model, pairs, over="heads")
    print(f"  {atp.summary()}")
    top = atp.top(5)
    layers = sorted({int(row) for row, _, _ in top})
    exact = activation_patching(model, pairs, over="heads", layers=layers)
    truth = {(r, c): v for r, c, v in exact.top(len(layers) * model.n_heads)}
    print("  top heads by AtP, with the exhaustive value (0 = corrupted behaviour, 1 = clean):")
    for row, col, value in top:
        print(f"    L{row}H{col}: AtP {value:+.3f}   exhaustive {truth.get((row, col), float('nan')):+.3f}")
