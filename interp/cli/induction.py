"""``interp induction``: find induction heads, check them by ablation, score in-context learning; and the demo
section."""

from __future__ import annotations

import time

from ..analyses.induction import ablation_check, icl_score, induction_heads
from ..core.inputs import check_int
from .common import add_common, add_html, html_path, load_model, save_view, section


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("induction", help="find induction heads ([BOS]+R+R scan) and check them by ablation")
    add_common(p, source=True)
    p.add_argument("--top", type=int, default=10, help="heads to list, best induction score first")
    p.add_argument("--seq-len", type=int, default=50, help="length of the random sequence R")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--k", type=int, default=5, help="heads to ablate (top-k vs k random)")
    p.add_argument("--n-random", type=int, default=5, help="random head sets (seeds) for the baseline")
    p.add_argument("--mode", choices=["mean", "zero"], default="mean", help="ablation of the head output z")
    p.add_argument("--icl-docs", type=int, default=100, help="Wikipedia summaries for the ICL score")
    p.add_argument("--no-icl", action="store_true", help="skip the ICL score")
    add_html(p, "every head's scores as heatmaps")
    p.set_defaults(func=cli_induction)


def cli_induction(args) -> dict:
    # Bounds that need the model (seq_len vs its context, k vs its head count) are checked by the analysis.
    for flag, value, lo in (("--top", args.top, 1), ("--seq-len", args.seq_len, 2), ("--batch", args.batch, 1),
                            ("--k", args.k, 1), ("--n-random", args.n_random, 1), ("--icl-docs", args.icl_docs, 1)):
        check_int(flag, value, lo)
    html = html_path(args)
    model = load_model(args)
    t0 = time.perf_counter()
    scan = induction_heads(model, seq_len=args.seq_len, batch=args.batch, seed=args.seed)
    check = ablation_check(model, k=args.k, n_random=args.n_random, mode=args.mode, seq_len=scan.seq_len,
                           batch=args.batch, seed=args.seed, scan=scan)
    scan_json = scan.to_json()
    out = {**scan_json, "heads": scan_json["heads"][:args.top], "ablation": check.to_json()}
    text = [scan.summary(), scan.top(args.top).to_string(float_format=lambda x: f"{x:.3f}"), check.summary()]
    if model.tokenizer is not None and not args.no_icl:
        icl = icl_score(model, n_docs=args.icl_docs)
        out["icl"] = icl.to_json()
        text.append(f"ICL score {icl.score:+.3f} nats (token {icl.late} minus token {icl.early}, {icl.n_docs} "
                    "Wikipedia summaries)")
    out["seconds"] = time.perf_counter() - t0
    out["_text"] = "\n".join(text)
    return save_view(scan, html, out)


def demo(model) -> None:
    """Main-demo section: top induction heads of the embedded model and the ablation check."""
    section("Induction heads: [BOS] + R + R scan, then ablate the top-5 vs 5 random heads")
    scan = induction_heads(model, seq_len=50, batch=8, seed=0)
    print(scan.summary())
    print(scan.top(8).to_string(float_format=lambda x: f"{x:.3f}"))
    check = ablation_check(model, k=5, n_random=3, seq_len=50, batch=8, seed=0, scan=scan)
    print(check.summary())
