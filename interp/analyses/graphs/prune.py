"""Influence, pruning and the graph scores, as circuit-tracer defines them (Ameisen et al. 2025).

Node order (as in :mod:`.graph`): features, error nodes, embeddings, logits. The adjacency is normalised by the
absolute values of each row (a node's inputs sum to 1); a node's influence is the logit-probability-weighted sum
over every path from it to the logits of the products of normalised edge weights — ``w @ (Â + Â² + …)``, finite
because the graph is acyclic (each power moves strictly forward in layer and position order, so the series ends).
Pruning keeps the nodes carrying ``node_threshold`` of the cumulative influence (embeddings and logits always),
then the edges carrying ``edge_threshold`` of the edge scores (normalised weight × the target's influence), then
drops, until nothing changes, features and errors left with no outgoing edge and features with no incoming one.
"""

from __future__ import annotations

import numpy as np
import torch


def normalise(A: torch.Tensor) -> torch.Tensor:
    """|A| with each row scaled to sum to 1 (rows of zeros stay zero)."""
    a = A.abs()
    return a / a.sum(1, keepdim=True).clamp(min=1e-10)


def influence(An: torch.Tensor, weights: torch.Tensor, max_steps: int | None = None) -> torch.Tensor:
    """``weights @ (An + An² + …)`` for an acyclic (nilpotent) normalised adjacency ``An``."""
    return influence_through_rows(An, torch.arange(An.shape[0]), weights, max_steps)


def influence_through_rows(rows: torch.Tensor, row_nodes: torch.Tensor, weights: torch.Tensor,
                           max_steps: int | None = None) -> torch.Tensor:
    """[n] the influence of every node when only some rows of the normalised adjacency are known: ``rows`` [R, n]
    (row ``r`` holds node ``row_nodes[r]``'s normalised inputs), ``weights`` [R] the rows' own weights (logit
    probabilities). The same as :func:`influence` on the [n, n] matrix with every other row zero, at R/n of the
    cost per step (a graph computed in influence order has few rows)."""
    step = weights @ rows                                                  # [n]
    total = step.clone()
    for _ in range(max_steps or rows.shape[0]):
        at_rows = step[row_nodes]                                          # [R] the step's mass where rows are known
        if not bool(at_rows.any()):
            return total
        step = at_rows @ rows
        total += step
    if bool(step[row_nodes].any()):
        raise ValueError("the adjacency has a cycle: influence did not converge (a graph's edges must point forward)")
    return total


def threshold_value(scores: torch.Tensor, fraction: float) -> float:
    """The smallest score kept when keeping the largest scores that carry ``fraction`` of their sum."""
    s = scores.flatten()
    s = s[s > 0].sort(descending=True).values           # zeros never move the cumulative sum; sorting them costs memory
    total = s.sum()
    if total <= 0:
        return float("inf")
    cum = s.cumsum(0) / total
    i = min(int(torch.searchsorted(cum, torch.tensor(fraction, dtype=cum.dtype))), len(s) - 1)
    return float(s[i])


def _weights(n: int, kinds, logit_probs: torch.Tensor) -> torch.Tensor:
    w = torch.zeros(n)
    w[torch.tensor(kinds == "logit")] = logit_probs.float()
    return w


def prune(A: torch.Tensor, kinds, logit_probs: torch.Tensor, node_threshold: float = 0.8,
          edge_threshold: float = 0.98):
    """``(node_mask, edge_mask, node_influence)`` (see the module docstring)."""
    for name, v in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if not 0 < v <= 1:
            raise ValueError(f"{name}={v}; allowed: 0 < {name} <= 1")
    kinds = np.asarray(kinds)
    n = A.shape[0]
    w = _weights(n, kinds, logit_probs)
    node_inf = influence(normalise(A), w)
    always = torch.tensor((kinds == "embedding") | (kinds == "logit"))
    feature = torch.tensor(kinds == "feature")
    inner = torch.tensor((kinds == "feature") | (kinds == "error"))
    node_mask = (node_inf >= threshold_value(node_inf, node_threshold)) | always
    pruned = A.clone()
    pruned[~node_mask] = 0
    pruned[:, ~node_mask] = 0
    pn = normalise(pruned)
    edge_scores = pn * (influence(pn, w) + w)[:, None]
    edge_mask = edge_scores >= threshold_value(edge_scores, edge_threshold)
    edge_mask &= pruned != 0
    while True:
        old = node_mask.clone()
        keep_edges = edge_mask & node_mask[:, None] & node_mask[None, :]
        node_mask &= ~inner | keep_edges.any(0)            # features and errors must feed something kept
        node_mask &= ~feature | keep_edges.any(1)          # features must be fed by something kept
        if torch.equal(node_mask, old):
            break
    edge_mask &= node_mask[:, None] & node_mask[None, :]
    return node_mask, edge_mask, node_inf


def graph_scores(A: torch.Tensor, kinds, logit_probs: torch.Tensor) -> dict:
    """``{"replacement": …, "completeness": …}``: the share of the embeddings' and errors' influence on the logits
    that comes from the embeddings (through features), and the influence-weighted share of every node's
    normalised input that is not an error node."""
    kinds = np.asarray(kinds)
    w = _weights(A.shape[0], kinds, logit_probs)
    An = normalise(A)
    inf = influence(An, w)
    err = torch.tensor(kinds == "error")
    tok = torch.tensor(kinds == "embedding")
    t, e = float(inf[tok].sum()), float(inf[err].sum())
    replacement = t / (t + e) if t + e > 0 else float("nan")
    non_error = 1 - An[:, err].sum(1)
    out = inf + w
    completeness = float((non_error * out).sum() / out.sum())
    return {"replacement": replacement, "completeness": completeness}
