"""Every statistic on hand-built attention, against answers worked out by hand in the test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnviz.analysis import metrics
from attnviz.analysis.compare import cluster_order, extreme_pairs
from attnviz.attribution.rollout import rollout

# Three tokens, two heads. Head 0: each row spelled out; head 1: uniform.
H0 = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]
H1 = [[1 / 3] * 3] * 3
A = torch.tensor([[H0, H1]], dtype=torch.float64)  # [1 layer, 2 heads, 3, 3]


def smoothed_entropy(row, eps=0.0001):
    n = len(row)
    p = [(1 - eps) * a + eps / n for a in row]
    return -sum(x * math.log(x) for x in p)


def test_entropy_and_normalised_entropy():
    expected = sum(smoothed_entropy(r) for r in H0) / 3
    assert metrics.entropy(A)[0, 0].item() == pytest.approx(expected, rel=1e-12)
    assert metrics.entropy(A)[0, 1].item() == pytest.approx(math.log(3), rel=1e-12)  # uniform: ln n
    assert metrics.entropy_normalized(A)[0, 1].item() == pytest.approx(1.0)
    assert metrics.entropy_normalized(A)[0, 0].item() == pytest.approx(expected / math.log(3))


def test_normalised_entropy_of_a_causal_head():
    """A decoder head spreading evenly over what it can see scores 1 when normalised per row."""
    n = 6
    uniform_causal = torch.tril(torch.ones(n, n, dtype=torch.float64))
    uniform_causal = (uniform_causal / uniform_causal.sum(-1, keepdim=True))[None, None]
    expected = sum(smoothed_entropy(r) / math.log(i + 1) for i, r in enumerate(uniform_causal[0, 0].tolist()) if i > 0) / (n - 1)
    assert metrics.entropy_normalized(uniform_causal, causal=True)[0, 0].item() == pytest.approx(expected)
    assert expected == pytest.approx(1.0, abs=0.01)
    assert metrics.entropy_normalized(uniform_causal)[0, 0].item() < 0.8  # divided by ln n instead


def test_clark_position_scores():
    assert metrics.self_score(A)[0, 0].item() == pytest.approx((1.0 + 0.5 + 0.5) / 3)
    # Clark's code sums the off-diagonal and divides by the n = 3 rows (row 0 has no previous token).
    assert metrics.previous_token_mean(A)[0, 0].item() == pytest.approx((0.5 + 0.3) / 3)
    assert metrics.next_token_score(A)[0, 0].item() == pytest.approx((0.0 + 0.0) / 3)
    assert metrics.next_token_score(A)[0, 1].item() == pytest.approx((1 / 3 + 1 / 3) / 3)
    assert metrics.first_token_score(A)[0, 0].item() == pytest.approx((1.0 + 0.5 + 0.2) / 3)


def test_max_weight_and_mean_distance():
    assert metrics.max_weight(A)[0, 0].item() == pytest.approx((1.0 + 0.5 + 0.5) / 3)
    # rows: 0 → 0; 1 → 0.5·1; 2 → 0.2·2 + 0.3·1
    assert metrics.mean_distance(A)[0, 0].item() == pytest.approx((0 + 0.5 + 0.7) / 3)
    # uniform over 3: rows have distances (0,1,2), (1,0,1), (2,1,0) → means 1, 2/3, 1
    assert metrics.mean_distance(A)[0, 1].item() == pytest.approx((1 + 2 / 3 + 1) / 3)


def test_attention_to_token_kinds():
    tokens = ["[CLS]", ",", "[SEP]"]
    assert metrics.cls_attention(A, tokens)[0, 0].item() == pytest.approx((1.0 + 0.5 + 0.2) / 3)
    assert metrics.sep_attention(A, tokens)[0, 0].item() == pytest.approx((0 + 0 + 0.5) / 3)
    assert metrics.punctuation_attention(A, tokens)[0, 0].item() == pytest.approx((0 + 0.5 + 0.3) / 3)
    assert metrics.is_punctuation("。") and metrics.is_punctuation("##.") and not metrics.is_punctuation("[CLS]")


def test_transformerlens_previous_token_score():
    # sum(A⊙P)/sum(A): P marks (1,0) and (2,1); sum(A) = 3 rows of 1.
    assert metrics.previous_token_score(A)[0, 0].item() == pytest.approx((0.5 + 0.3) / 3)
    # exclude_bos zeroes column 0 everywhere: numerator 0.3, denominator 3 − (1 + 0.5 + 0.2)
    assert metrics.previous_token_score(A, exclude_bos=True)[0, 0].item() == pytest.approx(0.3 / 1.3)
    # exclude_current_token zeroes the diagonal: denominator 3 − (1 + 0.5 + 0.5)
    assert metrics.previous_token_score(A, exclude_current_token=True)[0, 0].item() == pytest.approx(0.8 / 1.0)
    # Without exclusions Clark's mean and TransformerLens's share coincide (rows sum to n); with them they differ.
    assert metrics.previous_token_mean(A)[0, 0].item() == pytest.approx(metrics.previous_token_score(A)[0, 0].item())
    assert metrics.previous_token_mean(A)[0, 0].item() != pytest.approx(
        metrics.previous_token_score(A, exclude_bos=True)[0, 0].item()
    )


def test_duplicate_and_induction_scores():
    ids = [7, 8, 7, 8]  # A B A B
    dup = metrics.duplicate_token_pattern(ids)
    assert dup.tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]]
    ind = metrics.induction_pattern(ids)
    # position 2 (A) should look at 1 (the B after the first A); position 3 (B) at 2
    assert ind.tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
    perfect = torch.zeros(1, 1, 4, 4, dtype=torch.float64)
    perfect[0, 0, 0, 0] = perfect[0, 0, 1, 0] = 1.0  # first two rows: nothing to copy, look at BOS
    perfect[0, 0, 2, 1] = perfect[0, 0, 3, 2] = 1.0
    assert metrics.induction_score(perfect, ids)[0, 0].item() == pytest.approx(2 / 4)
    assert metrics.induction_score(perfect, ids, exclude_bos=True)[0, 0].item() == pytest.approx(1.0)
    assert metrics.duplicate_token_score(perfect, ids)[0, 0].item() == pytest.approx(0.0)


def test_head_distance_by_hand():
    a = torch.tensor([[[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]]]], dtype=torch.float64)

    def js(p, q):
        m = [(x + y) / 2 for x, y in zip(p, q, strict=True)]
        kl = lambda u, v: sum(x * math.log(x / y) for x, y in zip(u, v, strict=True))  # noqa: E731
        return 0.5 * kl(p, m) + 0.5 * kl(q, m)

    def smooth(row):
        return [0.999 * x + 0.001 / 2 for x in row]

    expected = js(smooth([1, 0]), smooth([0, 1])) + js(smooth([0.5, 0.5]), smooth([0.5, 0.5]))
    d = metrics.head_distance(a)
    assert d.shape == (2, 2)
    assert d[0, 1].item() == pytest.approx(expected) and d[1, 0].item() == pytest.approx(expected)
    assert d[0, 0].item() == pytest.approx(0.0, abs=1e-15)
    # Several texts: the sums add up (texts may differ in length).
    b = torch.softmax(torch.randn(1, 2, 3, 3, dtype=torch.float64), -1)
    torch.testing.assert_close(metrics.head_distance([a, b]), metrics.head_distance(a) + metrics.head_distance(b))
    torch.testing.assert_close(metrics.paired_head_distance(a[:, :1], a[:, 1:])[0, 0], d[0, 1])


def test_rollout_by_hand():
    # Two layers, one head each, two tokens.
    l0 = [[1.0, 0.0], [0.5, 0.5]]
    l1 = [[0.0, 1.0], [1.0, 0.0]]
    attn = torch.tensor([[l0], [l1]], dtype=torch.float64)
    # Â0 = (A0 + I) row-normalised = [[1, 0], [0.25, 0.75]]; Â1 = [[0.5, 0.5], [0.5, 0.5]]
    r = rollout(attn)
    assert r.shape == (2, 2, 2)
    assert r[0].tolist() == [[1.0, 0.0], [0.25, 0.75]]
    # R1 = Â1 · R0 = [[0.5·1 + 0.5·0.25, 0.5·0 + 0.5·0.75]] for both rows
    assert r[1].tolist() == [[0.625, 0.375], [0.625, 0.375]]


def test_rollout_head_fusion():
    attn = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]]], dtype=torch.float64)
    # mean of heads = 0.5 everywhere; +I → [[1.5, .5], [.5, 1.5]] / 2
    assert rollout(attn, head_fusion="mean")[0].tolist() == [[0.75, 0.25], [0.25, 0.75]]
    # max of heads = 1 everywhere; +I → [[2, 1], [1, 2]] / 3
    torch.testing.assert_close(rollout(attn, head_fusion="max")[0],
                               torch.tensor([[2 / 3, 1 / 3], [1 / 3, 2 / 3]], dtype=torch.float64))
    # min of heads = 0 everywhere; +I → identity
    assert rollout(attn, head_fusion="min")[0].tolist() == [[1.0, 0.0], [0.0, 1.0]]
    with pytest.raises(ValueError, match="mean, max or min"):
        rollout(attn, head_fusion="median")  # type: ignore[arg-type]


def test_norm_attention_by_hand():
    attn = torch.tensor([[[[0.25, 0.75], [1.0, 0.0]]]], dtype=torch.float64)
    norms = torch.tensor([[[2.0, 4.0]]])  # ‖f(x_0)‖ = 2, ‖f(x_1)‖ = 4
    assert metrics.norm_attention(attn, norms)[0, 0].tolist() == [[0.5, 3.0], [2.0, 0.0]]


def test_cluster_order_groups_close_points():
    points = np.array([0.0, 10.0, 1.0, 11.0, 0.5])
    dist = np.abs(points[:, None] - points[None, :])
    order = cluster_order(dist)
    assert sorted(order) == [0, 1, 2, 3, 4]
    groups = [set(order[:3]), set(order[3:])]
    assert {0, 2, 4} in groups and {1, 3} in groups  # each cluster is contiguous in the order


def test_extreme_pairs():
    dist = np.array([[0, 1, 5], [1, 0, 3], [5, 3, 0]], dtype=float)
    pairs = extreme_pairs(dist, ["a", "b", "c"], k=1)
    assert pairs.most_similar == [("a", "b", 1.0)] and pairs.most_different == [("a", "c", 5.0)]


def test_every_statistic_has_layer_head_shape():
    attn = torch.softmax(torch.randn(3, 4, 5, 5), -1)
    tokens, ids = ["[CLS]", "a", ",", "b", "[SEP]"], [1, 2, 3, 2, 4]
    for value in (
        metrics.entropy(attn), metrics.entropy_normalized(attn), metrics.self_score(attn),
        metrics.previous_token_mean(attn), metrics.next_token_score(attn), metrics.max_weight(attn),
        metrics.mean_distance(attn), metrics.first_token_score(attn), metrics.cls_attention(attn, tokens),
        metrics.previous_token_score(attn), metrics.duplicate_token_score(attn, ids), metrics.induction_score(attn, ids),
    ):
        assert value.shape == (3, 4)


def test_clark_cls_attention_is_the_first_token_score_when_a_text_starts_with_cls():
    """Why `heads` has one column for both: with [CLS] (or BOS) first they are the same number."""
    assert torch.equal(metrics.cls_attention(A, ["[CLS]", "a", "b"]), metrics.first_token_score(A))
