"""Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", ACL), computed exactly.

The graph has a node per (layer, token): layer 0 holds the input tokens, layer l + 1 the tokens
after attention layer l. The edge from token i after layer l down to token j before it has the
capacity Â_l[i, j], rollout's matrix (:func:`attnviz.attribution.rollout.rollout`): the layer's heads fused,
plus the identity for the residual connection, each row renormalised to sum to 1. The flow from
output token i after layer l to input token j is the maximum flow between those two nodes, and
each row is then normalised to sum to 1, as the authors' ``compute_flows`` does
(samiraabnar/attention_flow, ``attention_graph_util.py``: networkx ``maximum_flow_value`` with
``edmonds_karp`` for every pair, then ``flow_values[u] /= flow_values[u].sum()``).

Where we depart from their code, the values do not change:

- Only what a pair's flow can use is built: the layers from the source's down to the inputs, and
  of the inputs only the sink (the other input nodes have no way on). Each graph is built once
  per layer and reused for all T² (source, sink) pairs; arcs of capacity 0 are left out, as
  networkx's ``from_numpy_array`` leaves them out of the authors' graph.
- The flow through one layer is Â_0 itself (one edge per path); through two layers the paths
  are disjoint, so the flow is Σ_m min(Â_1[i, m], Â_0[m, j]). Deeper, each pair's maximum flow
  is solved by the shortest-augmenting-path algorithm with distance labels and the gap rule
  (Ahuja & Orlin 1991) in float64, without rounding capacities to integers: the values equal
  networkx's to rounding (about 1e-15), 15 to 35 times faster than networkx's own
  ``shortest_augmenting_path`` on a reused residual network and 100 to 300 times faster than the
  authors' ``edmonds_karp``, at 16 to 32 tokens (benchmarks/bench_flow.py).
- Their result is an n×n matrix over every node; ours is ``[layers, q, k]`` like rollout's.

There are T² maximum-flow problems per layer shown, each on a graph of T·(layers + 1) nodes, so the
time grows about as T^3.5·√layers here: :func:`flow_cost` estimates it beforehand and
:func:`check_flow_cost` refuses past :data:`FLOW_SECONDS_LIMIT`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..analysis.weights import HeadFusion
from ..errors import UsageError
from .rollout import fuse_heads

FLOW_SECONDS_LIMIT = 60.0
"""Estimated seconds past which :func:`check_flow_cost` refuses unless forced."""

FLOW_SECONDS_SCALE = 2.8e-6
"""Seconds of one maximum-flow problem over T tokens through l + 1 layers (l ≥ 2): about
``FLOW_SECONDS_SCALE · T^1.5 · (l − 1)^0.5``. Fitted to CPU times of :func:`attention_flow_to` on
all-MiniLM-L6-v2's attention to an 85-token text cut to 16, 32, 48, 64 and 85 tokens, 6 and 12 layers
(one core of the development machine, CPython 3.11; benchmarks/bench_flow.py), and rounded up by a
tenth. Random softmax attention runs two to three times faster than a model's, with its sink tokens."""


@dataclass(frozen=True)
class FlowCost:
    """What attention flow over ``n_tokens`` tokens and ``n_layers`` layers costs."""

    n_tokens: int
    n_layers: int
    problems: int  # maximum-flow problems solved (one per output token and input token, per layer shown)
    nodes: int  # nodes of the paper's graph: (layers + 1) · tokens
    edges: int  # edges of the paper's graph: layers · tokens²
    seconds: float  # the estimated time here (FLOW_SECONDS_SCALE)

    @property
    def too_slow(self) -> bool:
        return self.seconds > FLOW_SECONDS_LIMIT


def flow_cost(n_tokens: int, n_layers: int, *, every_layer: bool = False) -> FlowCost:
    """The cost of the flow to the last of ``n_layers`` layers (:func:`attention_flow_to`), or with
    ``every_layer`` to each of them (:func:`attention_flow`)."""
    if n_tokens < 0 or n_layers < 0:
        raise ValueError(f"a flow needs non-negative sizes, got {n_tokens} tokens and {n_layers} layers")
    shown = range(n_layers) if every_layer else range(n_layers - 1, n_layers) if n_layers else range(0)
    seconds = 0.0
    for layer in shown:
        if layer >= 2:  # shallower flows have a closed form
            seconds += n_tokens**2 * FLOW_SECONDS_SCALE * n_tokens**1.5 * (layer - 1) ** 0.5
    return FlowCost(n_tokens, n_layers, problems=len(shown) * n_tokens**2, nodes=(n_layers + 1) * n_tokens,
                    edges=n_layers * n_tokens**2, seconds=seconds)


def check_flow_cost(n_tokens: int, n_layers: int, *, force: bool, every_layer: bool = False) -> FlowCost:
    """:func:`flow_cost`, refused with a :class:`UsageError` past :data:`FLOW_SECONDS_LIMIT` unless ``force``."""
    cost = flow_cost(n_tokens, n_layers, every_layer=every_layer)
    if cost.too_slow and not force:
        raise UsageError(
            f"attention flow over {n_tokens} tokens and {n_layers} layers solves {cost.problems:,} max-flow "
            f"problems, about {cost.seconds:,.0f} s here (more than {FLOW_SECONDS_LIMIT:.0f} s); shorten the "
            "text, choose fewer layers with [[layer]], or pass [[force=True]]")
    return cost


def residual_attention(layer: Tensor, head_fusion: HeadFusion = "mean") -> Tensor:
    """Rollout's Â for one layer's ``[heads, q, k]``: the heads fused, plus I, rows renormalised; ``[q, k]`` float64."""

    fused = fuse_heads(layer, head_fusion)
    if fused.shape[-1] != fused.shape[-2]:
        raise ValueError(f"attention flow needs square self-attention, got {tuple(fused.shape)}")
    hat = fused + torch.eye(fused.shape[-1], dtype=torch.float64)
    hat = hat / hat.sum(-1, keepdim=True)  # as rollout_steps computes it
    if not bool(torch.isfinite(hat).all()) or bool((hat < 0).any()):
        raise ValueError("attention flow needs finite, non-negative attention weights")
    return hat


def attention_flow_to(attn: Tensor | Sequence[Tensor], layer: int, *, head_fusion: HeadFusion = "mean") -> Tensor:
    """Attention flow from each token after ``layer`` to each input token, ``[q, k]`` float64.

    ``attn`` is ``[layers, heads, q, k]`` or a sequence of per-layer ``[heads, q, k]``; only layers
    0..``layer`` are read (negative ``layer`` counts from the end). Row i is the maximum flow from
    token i after ``layer`` to every input token, normalised to sum to 1 (see the module's notes).
    """
    layers = _layers(attn)
    index = layer + len(layers) if layer < 0 else layer
    if not 0 <= index < len(layers):
        raise ValueError(f"layer {layer} is out of range for {len(layers)} layers")
    hats = [residual_attention(layers[k], head_fusion).numpy() for k in range(index + 1)]
    return torch.from_numpy(_normalised(_max_flows(hats)))


def attention_flow(attn: Tensor | Sequence[Tensor], *, head_fusion: HeadFusion = "mean") -> Tensor:
    """Attention flow to every layer, ``[layers, q, k]`` float64 (Abnar & Zuidema 2020, their ``compute_flows``).

    Entry l, row i: the flow from token i after layer l to each input token, normalised to sum to 1.
    Entry l costs T² maximum-flow problems on l + 1 layers; :func:`attention_flow_to` computes one.
    """
    layers = _layers(attn)
    hats = [residual_attention(layer, head_fusion).numpy() for layer in layers]
    if not hats:
        size = attn.shape[-1] if isinstance(attn, Tensor) else 0
        return torch.zeros(0, size, size, dtype=torch.float64)
    return torch.from_numpy(np.stack([_normalised(_max_flows(hats[: k + 1])) for k in range(len(hats))]))


def _layers(attn: Tensor | Sequence[Tensor]) -> list[Tensor]:
    if isinstance(attn, Tensor):
        if attn.dim() != 4:
            raise ValueError(f"attentions must be [layers, heads, q, k], got shape {tuple(attn.shape)}")
        layers = list(attn)
    else:
        layers = list(attn)
        for layer in layers:
            if not isinstance(layer, Tensor) or layer.dim() != 3:
                raise ValueError("each layer's attention must be a [heads, q, k] tensor")
    sizes = {tuple(layer.shape[-2:]) for layer in layers}
    if len(sizes) > 1:
        raise ValueError(f"every layer must see the same tokens, got {sorted(sizes)}")
    return layers


def _normalised(flows: np.ndarray) -> np.ndarray:
    """Each row divided by its sum; a row of zeros stays zeros."""
    sums = flows.sum(-1, keepdims=True)
    return np.divide(flows, sums, out=np.zeros_like(flows), where=sums > 0)


def _max_flows(hats: list[np.ndarray]) -> np.ndarray:
    """``[T, T]`` unnormalised: the maximum flow from each token after the last of ``hats`` (Â_0..Â_l) to each input."""
    if len(hats) == 1 or hats[0].shape[0] == 0:
        return hats[0].copy()
    if len(hats) == 2:  # paths s → (1, m) → t share no edge
        return np.stack([np.minimum(row[:, None], hats[0]).sum(0) for row in hats[1]])
    graph = _LayeredGraph(hats)
    return np.array([graph.flows_from(i) for i in range(graph.tokens)], dtype=np.float64)


class _LayeredGraph:
    """The graph of a flow through Â_0..Â_l (l ≥ 2), kept as residual capacities of paired arcs.

    Nodes: the tokens of layers 1..l (layer k, token a is ``(k - 1)·T + a``), a source ``s`` standing
    for the output token after layer l (arcs to layer l carry Â_l[i, :]) and a sink ``t`` for input
    token j (arcs from layer 1 carry Â_0[:, j]). Arc ``e`` and its reverse ``e ^ 1`` sit side by side.
    """

    def __init__(self, hats: list[np.ndarray]) -> None:
        depth, tokens = len(hats) - 1, hats[0].shape[0]
        self.tokens, self.depth = tokens, depth
        self.n = n = depth * tokens + 2
        self.s, self.t = s, t = n - 2, n - 1
        self.head: list[int] = []
        self.capacity: list[float] = []
        self.arcs: list[list[int]] = [[] for _ in range(n)]
        self.source_arcs = [self._add(s, (depth - 1) * tokens + m, 0.0) for m in range(tokens)]
        for k in range(depth, 1, -1):  # from layer k down to layer k - 1: Â_{k-1}
            upper, lower = (k - 1) * tokens, (k - 2) * tokens
            for a, row in enumerate(hats[k - 1]):
                for c in np.argsort(-row, kind="stable").tolist():  # the widest arcs are tried first
                    if row[c] > 0.0:
                        self._add(upper + a, lower + c, float(row[c]))
        self.sink_arcs = [self._add(m, t, 0.0) for m in range(tokens)]
        for arcs in self.arcs:
            arcs.sort(key=lambda e: e & 1)  # arcs down (even) before arcs back up (odd)
        self.source_rows = hats[depth].tolist()
        self.sink_columns = hats[0].T.tolist()
        # Before any flow, a node's distance to the sink is its layer if a path of positive arcs leads down to it.
        labels = np.full((tokens, n), n, dtype=np.int64)
        reach = hats[0] > 0  # [m, j]: layer-1 node m reaches sink j
        for k in range(1, depth + 1):
            if k > 1:
                reach = (hats[k - 1] > 0).astype(np.float64) @ reach.astype(np.float64) > 0
            labels[:, (k - 1) * tokens : k * tokens] = np.where(reach.T, k, n)
        labels[:, t], labels[:, s] = 0, depth + 1
        self.labels = labels.tolist()
        self.counts = [np.bincount(row, minlength=n + 1).tolist() for row in labels]

    def _add(self, u: int, v: int, capacity: float) -> int:
        e = len(self.head)
        self.head += [v, u]
        self.capacity += [capacity, 0.0]
        self.arcs[u].append(e)
        self.arcs[v].append(e + 1)
        return e

    def flows_from(self, i: int) -> list[float]:
        """The maximum flow from output token ``i`` to each input token."""
        base = self.capacity[:]
        for e, c in zip(self.source_arcs, self.source_rows[i], strict=True):
            base[e] = c
        self.arcs[self.s] = sorted(self.source_arcs, key=lambda e: -base[e])
        return [self._max_flow(base, j) for j in range(self.tokens)]

    def _max_flow(self, base: list[float], j: int) -> float:
        """Shortest augmenting paths (Ahuja & Orlin 1991): advance along admissible arcs (d(u) = d(v) + 1)
        to the sink and augment, else relabel; stop when d(s) ≥ n or a label empties (the gap rule)."""
        n, s, t, head, adjacency = self.n, self.s, self.t, self.head, self.arcs
        res = base[:]
        for e, c in zip(self.sink_arcs, self.sink_columns[j], strict=True):
            res[e] = c
        d, count = self.labels[j][:], self.counts[j][:]
        current, pred = [0] * n, [0] * n
        flow = 0.0
        u = s
        while d[s] < n:
            arcs, want, p = adjacency[u], d[u] - 1, current[u]
            size = len(arcs)
            while p < size and not (res[arcs[p]] > 0.0 and d[head[arcs[p]]] == want):
                p += 1
            if p < size:  # advance
                current[u] = p
                e = arcs[p]
                u = head[e]
                pred[u] = e
                if u == t:  # augment by the path's bottleneck, then resume below its first saturated arc
                    bottleneck, v = res[e], head[e ^ 1]
                    while v != s:
                        e = pred[v]
                        if res[e] < bottleneck:
                            bottleneck = res[e]
                        v = head[e ^ 1]
                    v, u = t, s
                    while v != s:
                        e = pred[v]
                        res[e] -= bottleneck  # exactly 0 where it was the bottleneck
                        res[e ^ 1] += bottleneck
                        v = head[e ^ 1]
                        if res[e] == 0.0:
                            u = v
                    flow += bottleneck
                continue
            count[want + 1] -= 1
            if count[want + 1] == 0:  # nothing above this label reaches the sink any more
                break
            lowest, p = n, 0  # relabel, and resume at the arc that set the new label
            for q, e in enumerate(arcs):
                if res[e] > 0.0:
                    label = d[head[e]]
                    if label < lowest:
                        lowest, p = label, q
            d[u] = min(lowest + 1, n)
            count[d[u]] += 1
            current[u] = p
            if u != s:
                u = head[pred[u] ^ 1]
        return flow
