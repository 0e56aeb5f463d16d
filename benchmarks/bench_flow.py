"""Attention flow (attnviz.attribution.flow) against networkx on the authors' graph, at L=6 layers, H=12 heads and
T = 16, 24, 32 tokens. Baselines: the authors' ``compute_flows`` (edmonds_karp on the whole graph for
every pair) and networkx's fastest here, ``shortest_augmenting_path`` reusing one residual network.
networkx takes minutes at T=32, so it solves every ``--stride``-th source row of every layer, once, and
its time is scaled by the rows it skipped (the rows it solves must equal ours). Goal: a speed-up well above 1×.

Run: python benchmarks/bench_flow.py [--runs N] [--stride S] [--model]   (--model: all-MiniLM-L6-v2's
attention to a fixed text instead of random softmax attention)
"""

from __future__ import annotations

import argparse
import time

import networkx as nx
import numpy as np
import torch
from _common import report, time_call

from attnviz.attribution.flow import attention_flow, attention_flow_to, residual_attention

TEXT = ("In the beginning the river ran quietly past the old mill, and the miller's children would sit on the "
        "bank every evening, counting the boats that drifted downstream toward the city.")


def attentions(tokens: int, use_model: bool) -> torch.Tensor:
    if use_model:
        from attnviz.api import extract

        a = extract(TEXT).attentions[:, :, :tokens, :tokens]
        return a / a.sum(-1, keepdim=True)  # the first T tokens, rows renormalised
    scores = torch.randn(6, 12, tokens, tokens, generator=torch.Generator().manual_seed(tokens))
    return (3 * scores).softmax(-1)


def networkx_flow(attn: torch.Tensor, rows: range, flow_func, reuse: bool) -> np.ndarray:
    """The authors' graph (get_adjmat) and compute_flows, for the given source rows of every layer."""
    mat = np.stack([residual_attention(layer).numpy() for layer in attn])
    layers, length, _ = mat.shape
    adjacency = np.zeros(((layers + 1) * length,) * 2)
    for i in range(1, layers + 1):
        adjacency[i * length:(i + 1) * length, (i - 1) * length:i * length] = mat[i - 1]
    graph = nx.from_numpy_array(adjacency, create_using=nx.DiGraph, edge_attr="capacity")
    residual = nx.algorithms.flow.build_residual_network(graph, "capacity") if reuse else None
    flows = np.zeros((layers, len(rows), length))
    for layer in range(layers):
        for r, i in enumerate(rows):
            for j in range(length):
                u = (layer + 1) * length + i
                if reuse:
                    flows[layer, r, j] = flow_func(graph, u, j, residual=residual).graph["flow_value"]
                else:
                    flows[layer, r, j] = nx.maximum_flow_value(graph, u, j, flow_func=flow_func)
            flows[layer, r] /= flows[layer, r].sum()
    return flows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--stride", type=int, default=4)
    parser.add_argument("--tokens", type=int, nargs="+", default=[16, 24, 32])
    parser.add_argument("--model", action="store_true")
    args = parser.parse_args()
    for tokens in args.tokens:
        attn = attentions(tokens, args.model)
        ours = attention_flow(attn).numpy()
        t_ours = time_call(lambda a=attn: attention_flow(a), args.runs)
        t_last = time_call(lambda a=attn: attention_flow_to(a, -1), args.runs)
        rows = range(0, tokens, args.stride)
        scale = tokens / len(rows)
        for name, func, reuse in (("networkx edmonds_karp (the authors')", nx.algorithms.flow.edmonds_karp, False),
                                  ("networkx shortest_augmenting_path, reused", nx.algorithms.flow.shortest_augmenting_path, True)):
            start = time.perf_counter()
            theirs = networkx_flow(attn, rows, func, reuse)
            elapsed = (time.perf_counter() - start) * scale
            assert np.allclose(theirs, ours[:, rows.start::rows.step], rtol=0, atol=1e-9), "flows differ from networkx"
            report(f"attention flow, every layer, L=6 H=12 T={tokens} ({'model' if args.model else 'random'} attention)",
                   "attnviz attention_flow", t_ours, name + f" (x{scale:.0f})", [elapsed], goal="well above 1x",
                   higher_is_better=True)
        print(f"   attnviz attention_flow_to(last layer) median {np.median(t_last):.3f} s")


if __name__ == "__main__":
    main()
