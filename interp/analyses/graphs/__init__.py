"""Attribution graphs (circuit tracing): the direct-effect graph of one prompt in its local replacement model.

replacement (``LocalReplacement``: attention patterns and norm scales frozen, each MLP its transcoder plus a
constant error; taps that read gradients at every source) · graph (``attribution_graph`` → ``AttributionGraph``:
nodes, the adjacency computed by batched backward passes) · prune (influence, pruning, replacement and
completeness scores, as circuit-tracer defines them).
"""

from .graph import AttributionGraph, GraphSettings, attribution_graph
from .replacement import LocalReplacement

__all__ = ["AttributionGraph", "GraphSettings", "LocalReplacement", "attribution_graph"]
