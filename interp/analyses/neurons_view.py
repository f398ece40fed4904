"""Interactive views of FFN neurons (:mod:`interp.analyses.neurons`): a scan's top-k contexts with every token
coloured by the neuron's activation there, beside the neuron's vocabulary projection; and one text's
activations."""

from __future__ import annotations

from pathlib import Path

import torch

from ..core.views import View, rounded

SCRIPT = Path(__file__).with_name("neurons_view.js")  # draws the view kinds "neurons", "activations"


def scan_view(scan, neurons: list[int], *, doc_ids, probe=None, before: int = 10, after: int = 3,
              vocab_k: int = 8) -> View:
    """``doc_ids(doc) -> token ids`` (BOS first) of a scanned document; ``probe``: a ``Neurons`` of the scan's
    model and layer (None: only each context's top token has a value, and no vocabulary projection)."""
    st = scan.state
    index = {int(v): i for i, v in enumerate(st.neurons.tolist())}
    missing = [n for n in neurons if n not in index]
    if missing:
        raise ValueError(f"neurons {missing} were not scanned; this scan holds {len(index)} neurons")
    found = {n: [(int(st.doc[index[n], r]), int(st.pos[index[n], r]), float(st.values[index[n], r]))
                 for r in range(st.k) if int(st.doc[index[n], r]) >= 0] for n in neurons}
    ends: dict[int, int] = {}
    for ctx in found.values():
        for d, p, _ in ctx:
            ends[d] = max(ends.get(d, 0), min(len(doc_ids(d)), p + after + 1))
    acts = {}
    if probe is not None:  # one forward per document, stopped at the layer: every token's activation
        for d, end in ends.items():
            acts[d] = probe.activations(torch.tensor([doc_ids(d)[:end]]), neurons).acts  # [pos, len(neurons)]
    dec = scan.tokenizer.decode
    out, note = [], ""
    for j, n in enumerate(neurons):
        contexts = []
        for d, p, v in found[n]:
            ids = doc_ids(d)
            lo, hi = max(1, p - before), min(len(ids), p + after + 1)
            vals = acts[d][lo:hi, j] if d in acts else [v if q == p else float("nan") for q in range(lo, hi)]
            doc = scan.docs[d]
            contexts.append({"doc": d, "pos": p, "value": v, "positions": list(range(lo, hi)),
                             "title": (None if isinstance(doc, str) else getattr(doc, "title", None)) or f"doc {d}",
                             "tokens": [dec([t]) for t in ids[lo:hi]], "acts": rounded(vals, 4)})
        item = {"neuron": n, "max": found[n][0][2] if found[n] else None, "contexts": contexts}
        if probe is not None:
            vp = probe.vocab(n, k=vocab_k)
            item["promoted"] = [[t, rounded([x], 4)[0]] for t, _, x in vp.promoted]
            item["suppressed"] = [[t, rounded([x], 4)[0]] for t, _, x in vp.suppressed]
            note = vp.note
        out.append(item)
    data = {"title": f"layer {st.layer} neurons: top-{st.k} contexts", "summary": scan.summary(), "layer": st.layer,
            "neurons": out, "vocab_note": note,
            "note": "" if probe is not None else "no model attached to this scan: only each context's top token "
                                                 "has a value, and the vocabulary projection is left out"}
    return View("neurons", data["title"], data, script=SCRIPT)


def activations_view(res, neurons=None) -> View:
    shown = res.top(5) if neurons is None else ([neurons] if isinstance(neurons, int) else list(neurons))
    data = {"title": f"layer {res.layer} neuron activations", "summary": res.summary(), "layer": res.layer,
            "tokens": list(res.str_tokens), "neurons": shown, "acts": [rounded(res.of(n), 4) for n in shown]}
    return View("activations", data["title"], data, script=SCRIPT)
