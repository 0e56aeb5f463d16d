"""Attention flow (Abnar & Zuidema 2020) against networkx's maximum flow on the authors' graph, built
here from the definition, and against flows worked out by hand."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch

from attnviz.attribution import flow
from attnviz.attribution.flow import attention_flow
from attnviz.attribution.rollout import rollout
from attnviz.errors import UsageError


def random_attention(layers: int, heads: int, tokens: int, seed: int, *, causal: bool = False) -> torch.Tensor:
    scores = torch.randn(layers, heads, tokens, tokens, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    if causal:  # lower-triangular attention: the upper triangle's capacities are 0
        scores = scores.masked_fill(torch.ones(tokens, tokens).triu(1).bool(), float("-inf"))
    return (3 * scores).softmax(-1)


def residual_matrices(attn: torch.Tensor, fusion: str) -> np.ndarray:
    """Â per layer, in numpy: the heads fused, plus I, each row divided by its sum."""
    a = attn.numpy()
    fused = {"mean": a.mean(1), "max": a.max(1), "min": a.min(1)}[fusion]
    hat = fused + np.eye(a.shape[-1])
    return hat / hat.sum(-1, keepdims=True)


def authors_flow(attn: torch.Tensor, fusion: str = "mean") -> np.ndarray:
    """Their ``get_adjmat`` and ``compute_flows``: one networkx graph over every (layer, token) node,
    edmonds_karp from each token after layer l to each input token, each row divided by its sum."""
    mat = residual_matrices(attn, fusion)
    layers, length, _ = mat.shape
    adjacency = np.zeros(((layers + 1) * length, (layers + 1) * length))
    for i in range(1, layers + 1):
        for k_from in range(length):
            for k_to in range(length):
                adjacency[i * length + k_from, (i - 1) * length + k_to] = mat[i - 1, k_from, k_to]
    graph = nx.from_numpy_array(adjacency, create_using=nx.DiGraph, edge_attr="capacity")
    flows = np.zeros((layers, length, length))
    for layer in range(layers):
        for i in range(length):
            for j in range(length):
                flows[layer, i, j] = nx.maximum_flow_value(graph, (layer + 1) * length + i, j,
                                                           flow_func=nx.algorithms.flow.edmonds_karp)
            flows[layer, i] /= flows[layer, i].sum()
    return flows


@pytest.mark.parametrize(("layers", "tokens", "seed", "causal"),
                         [(4, 4, 0, False), (4, 5, 1, True), (4, 6, 2, False), (4, 6, 3, True), (5, 7, 4, False)])
def test_equals_networkx_on_the_authors_graph(layers, tokens, seed, causal):
    attn = random_attention(layers, 2, tokens, seed, causal=causal)
    ours = flow.attention_flow(attn)
    assert ours.dtype == torch.float64 and ours.shape == (layers, tokens, tokens)
    np.testing.assert_allclose(ours.numpy(), authors_flow(attn), rtol=0, atol=1e-9)
    assert not np.allclose(ours[-1].numpy(), rollout(attn)[-1].numpy(), atol=1e-3)  # flow is not rollout


@pytest.mark.parametrize("fusion", ["max", "min"])
def test_head_fusion_equals_networkx(fusion):
    attn = random_attention(4, 3, 5, seed=7, causal=fusion == "min")
    np.testing.assert_allclose(flow.attention_flow(attn, head_fusion=fusion).numpy(), authors_flow(attn, fusion),
                               rtol=0, atol=1e-9)


def test_one_layer_is_the_residual_attention_itself():
    """Each path from a token after layer 0 to an input is one edge, so the flow is Â_0, whose rows sum to 1."""
    h0 = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]
    h1 = [[1 / 3] * 3] * 3
    attn = torch.tensor([[h0, h1]], dtype=torch.float64)
    mean = [[(a + b) / 2 for a, b in zip(r0, r1, strict=True)] for r0, r1 in zip(h0, h1, strict=True)]
    expected = [[0.5 * m + 0.5 * (i == j) for j, m in enumerate(row)] for i, row in enumerate(mean)]
    np.testing.assert_allclose(flow.attention_flow(attn)[0].numpy(), expected, rtol=0, atol=1e-15)


def test_two_layers_by_hand_and_where_flow_differs_from_rollout():
    """Â_0 = [[1, 0], [.5, .5]], Â_1 = [[.5, .5], [0, 1]]. Paths through one middle token share no edge:
    flow(i, j) = Σ_m min(Â_1[i, m], Â_0[m, j]). Row 0: (min(.5, 1) + min(.5, .5), 0 + min(.5, .5)) = (1, .5),
    normalised (2/3, 1/3), where rollout Â_1·Â_0 gives (3/4, 1/4). Row 1: (.5, .5) → (1/2, 1/2)."""
    attn = torch.tensor([[[[1.0, 0.0], [1.0, 0.0]]], [[[0.0, 1.0], [0.0, 1.0]]]], dtype=torch.float64)
    np.testing.assert_allclose(flow.attention_flow_to(attn, 1).numpy(), [[2 / 3, 1 / 3], [0.5, 0.5]], atol=1e-15)
    np.testing.assert_allclose(rollout(attn)[1].numpy(), [[0.75, 0.25], [0.5, 0.5]], atol=1e-15)


def test_one_layer_at_a_time_and_the_forms_of_input():
    attn = random_attention(4, 2, 5, seed=5)
    every = flow.attention_flow(attn).numpy()
    for layer in range(4):
        np.testing.assert_allclose(flow.attention_flow_to(attn, layer).numpy(), every[layer], rtol=0, atol=1e-15)
    np.testing.assert_allclose(flow.attention_flow_to(attn, -1).numpy(), every[-1], rtol=0, atol=1e-15)
    np.testing.assert_allclose(flow.attention_flow(list(attn)).numpy(), every, rtol=0, atol=1e-15)  # per-layer [H, T, T]
    widened = flow.attention_flow(attn.float())
    assert widened.dtype == torch.float64
    np.testing.assert_allclose(widened.numpy(), every, rtol=0, atol=1e-5)  # float32 in, float64 out
    assert attention_flow is flow.attention_flow  # re-exported beside rollout


def test_shapes_and_values_it_refuses():
    attn = random_attention(2, 2, 3, seed=0)
    for bad in (attn[0], torch.rand(2, 2, 3, 4), [attn[0], torch.rand(2, 4, 4)], [torch.rand(3, 3)],
                -attn, attn.masked_fill(torch.zeros_like(attn).bool().index_fill_(-1, torch.tensor([0]), True), float("nan"))):
        with pytest.raises(ValueError):
            flow.attention_flow(bad)
    for layer in (2, -3):
        with pytest.raises(ValueError, match="out of range"):
            flow.attention_flow_to(attn, layer)
    with pytest.raises(ValueError, match="mean, max or min"):
        flow.attention_flow(attn, head_fusion="median")  # type: ignore[arg-type]


def test_empty_inputs_and_rows_of_zeros():
    assert flow.attention_flow(torch.zeros(0, 2, 3, 3)).shape == (0, 3, 3)
    assert flow.attention_flow(torch.zeros(3, 1, 0, 0)).shape == (3, 0, 0)
    # The +I makes every row's flow positive; the normaliser still leaves a zero row zero, not NaN.
    np.testing.assert_array_equal(flow._normalised(np.array([[0.0, 0.0], [1.0, 3.0]])), [[0.0, 0.0], [0.25, 0.75]])


def test_flow_cost_counts_the_problems_and_the_graph():
    cost = flow.flow_cost(10, 4)
    assert (cost.problems, cost.nodes, cost.edges) == (100, 50, 400)  # the authors' graph: (L+1)·T nodes, L·T² edges
    assert flow.flow_cost(10, 4, every_layer=True).problems == 400
    assert flow.flow_cost(10, 2).seconds == 0.0  # two layers have a closed form
    assert 0 < flow.flow_cost(10, 4).seconds < flow.flow_cost(20, 4).seconds < flow.flow_cost(20, 8).seconds
    assert flow.flow_cost(20, 8).seconds < flow.flow_cost(20, 8, every_layer=True).seconds
    with pytest.raises(ValueError):
        flow.flow_cost(-1, 3)


def test_check_flow_cost_refuses_past_the_limit_unless_forced():
    assert flow.check_flow_cost(16, 6, force=False).seconds < flow.FLOW_SECONDS_LIMIT
    with pytest.raises(UsageError) as refused:
        flow.check_flow_cost(1000, 12, force=False)
    message = str(refused.value)
    assert "1000 tokens and 12 layers" in message and "1,000,000 max-flow problems" in message
    assert "force=True" in message and "--" not in message
    assert "--force" in refused.value.for_cli() and "--layer" in refused.value.for_cli()
    forced = flow.check_flow_cost(1000, 12, force=True)
    assert forced.too_slow and forced.seconds > flow.FLOW_SECONDS_LIMIT
