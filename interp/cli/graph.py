"""``interp graph TEXT [--target " Paris"] [--html graph.html] [--circuit-tracer FILE]``: the attribution graph of
one prompt, from the cached transcoders (or ``--dictionaries FOLDER``); layers without a transcoder enter the graph
as error nodes."""

from __future__ import annotations

import json
from pathlib import Path

from ..analyses.graphs import attribution_graph
from ..core.inputs import check_int
from .common import add_common, add_html, html_path, load_model, save_view
from .features import add_dictionary_options, dictionaries_for


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("graph", help="the attribution graph of a prompt (circuit tracing through transcoders)")
    p.add_argument("text")
    p.add_argument("--target", action="append", default=None,
                   help="a logit node's token (repeat for several; default: the top tokens to p = 0.95, at most 10)")
    p.add_argument("--against", default=None, metavar="TOKEN",
                   help="a second answer: list the features the graph predicts most raise --target over it "
                        "(needs exactly one --target; both become logit nodes)")
    p.add_argument("--max-logits", type=int, default=10)
    p.add_argument("--node-threshold", type=float, default=0.8, help="cumulative influence kept (default 0.8)")
    p.add_argument("--edge-threshold", type=float, default=0.98, help="cumulative edge score kept (default 0.98)")
    p.add_argument("--batch", type=int, default=64, help="targets per backward pass (default 64)")
    p.add_argument("--max-feature-nodes", type=int, default=None,
                   help="feature rows computed, in influence order (default: every active feature)")
    p.add_argument("--top", type=int, default=15, help="kept features listed, by influence (default 15)")
    p.add_argument("--circuit-tracer", default=None, metavar="FILE",
                   help="also write the pruned graph in circuit-tracer's graph-file layout (JSON)")
    add_dictionary_options(p)
    add_common(p)
    add_html(p, "the graph")
    p.set_defaults(func=cli_graph)


def cli_graph(args, model=None) -> dict:
    check_int("--max-logits", args.max_logits, 1)
    check_int("--batch", args.batch, 1)
    check_int("--top", args.top, 1)
    check_int("--max-feature-nodes", args.max_feature_nodes, 1, allow_none=True)
    path = html_path(args)
    ct = Path(args.circuit_tracer) if args.circuit_tracer else None
    if ct is not None and not ct.parent.is_dir():
        raise FileNotFoundError(f"--circuit-tracer {args.circuit_tracer}: folder {str(ct.parent)!r} does not exist")
    targets = args.target
    if args.against is not None:
        if not targets or len(targets) != 1:
            raise ValueError(f"--against {args.against!r} needs exactly one --target (got {targets or 'none'})")
        if args.against == targets[0]:
            raise ValueError(f"--against {args.against!r} is the --target itself; allowed: another token")
        targets = [*targets, args.against]
    if model is None:
        model = load_model(args)
    ds = dictionaries_for(args, model)
    g = attribution_graph(model, ds, args.text, targets=targets, max_logits=args.max_logits,
                          node_threshold=args.node_threshold, edge_threshold=args.edge_threshold, batch=args.batch,
                          max_feature_nodes=args.max_feature_nodes)
    data = g.to_json()
    kept = g.nodes[g.nodes["kept"] & (g.nodes["kind"] == "feature")].sort_values("influence", ascending=False)
    lines = [g.summary()] + [f"  L{int(r.layer):>2} pos {int(r.pos):>2} {r.token!r:<14} feature {int(r.feature):>6}  "
                             f"activation {r.activation:8.3f}  influence {r.influence:.4f}"
                             for r in kept.head(args.top).itertuples()]
    if args.against is not None:
        f = g.supporting(0, against=1, k=args.top)
        data["contrast"] = [{"layer": int(r.layer), "pos": int(r.pos), "token": r.token, "feature": int(r.feature),
                             "activation": float(r.activation), "predicted": float(r.predicted)}
                            for r in f.itertuples()]
        lines.append(f"features that raise {args.target[0]!r} over {args.against!r} most (predicted change of the "
                     "difference when ablated):")
        lines += [f"  L{r['layer']:>2} pos {r['pos']:>2} {r['token']!r:<14} feature {r['feature']:>6}  "
                  f"predicted {r['predicted']:+.4f}" for r in data["contrast"]]
    data["_text"] = "\n".join(lines)
    if ct is not None:
        ct.write_text(json.dumps(g.to_circuit_tracer(ct.stem)))
        data["circuit_tracer"] = str(ct)
    return save_view(g, path, data)
