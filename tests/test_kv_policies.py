"""KV-cache policies (attnviz.analysis.kv_policies, issue 44) against dense references written here (plain
loops or full-matrix torch) and inputs whose answer is known."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnviz.analysis import kv_policies as kv
from attnviz.analysis.kv_policies import DenseRows, PolicyInputs, QKRows
from attnviz.analysis.policies import POLICIES


def dense_softmax(q: torch.Tensor, k: torch.Tensor, offset: int | None = None) -> torch.Tensor:
    """Reference: the full ``[H, N, M]`` causal softmax, each query head reading its GQA KV head."""
    h, n, d = q.shape
    hkv, m, _ = k.shape
    offset = m - n if offset is None else offset
    out = torch.empty(h, n, m, dtype=torch.float64)
    for head in range(h):
        logits = q[head].double() @ k[head // (h // hkv)].double().T / math.sqrt(d)
        for i in range(n):
            logits[i, offset + i + 1 :] = float("-inf")
        out[head] = torch.softmax(logits, -1)
    return out


def layer(seed: int, h: int = 4, hkv: int = 2, t: int = 40, f: int = 6, d: int = 8):
    """A random layer: prefix queries, future queries, keys and values over prefix + future."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(h, t + f, d, generator=g, dtype=torch.float64) * 2
    k = torch.randn(hkv, t + f, d, generator=g, dtype=torch.float64) * 2
    v = torch.randn(hkv, t + f, d, generator=g, dtype=torch.float64)
    return q[:, :t], q[:, t:], k, v


def test_resolve_budget() -> None:
    assert kv.resolve_budget(10, 100) == 10
    assert kv.resolve_budget(500, 100) == 100
    assert kv.resolve_budget(0.25, 100) == 25
    assert kv.resolve_budget(1.0, 7) == 7
    assert kv.resolve_budget(0.001, 7) == 1
    assert kv.resolve_budget(0.29, 100) == 29  # floor, guarded against 28.999…
    assert kv.resolve_budget(64.0, 100) == 64
    for bad in (0, -1, 0.0, 1.5, float("nan"), True, "3"):
        with pytest.raises(ValueError):
            kv.resolve_budget(bad, 100)  # type: ignore[arg-type]
    assert kv.parse_budget("256") == 256 and kv.parse_budget("0.25") == 0.25 and kv.parse_budget("25%") == 0.25


def test_blocked_rows_equal_dense(monkeypatch: pytest.MonkeyPatch) -> None:
    q, qf, k, _ = layer(0)
    t = q.shape[1]
    dense = dense_softmax(q, k[:, :t])
    qk = QKRows(q, k[:, :t])
    assert torch.allclose(qk.block(0, t), dense, atol=1e-12)
    future_dense = dense_softmax(qf, k)
    inputs_dense = PolicyInputs(DenseRows(dense), 2, future=DenseRows(future_dense), window=8)
    inputs_qk = PolicyInputs(qk, 2, future=QKRows(qf, k), window=8)
    monkeypatch.setattr(kv, "BLOCK_FLOATS", 4 * t * 3)  # 3 rows a block: many blocks, a ragged last one
    for policy in POLICIES:
        assert torch.allclose(POLICIES[policy].scores(inputs_qk), POLICIES[policy].scores(inputs_dense), atol=1e-12)
    assert len(list(kv.row_blocks(qk))) == math.ceil(t / 3)


def test_streaming_keeps_exactly_sinks_and_window() -> None:
    scores = kv.streaming_scores(50, 2, n_sink=4)
    for budget in (4, 5, 12, 50):
        keep = kv.keep_top(scores, budget)
        expected = set(range(4)) | set(range(50 - (budget - 4), 50))
        for head in range(2):
            assert set(keep[head].nonzero().flatten().tolist()) == expected
    assert kv.keep_top(scores, 2)[0].nonzero().flatten().tolist() == [0, 1]


def test_h2o_normalises_by_the_queries_that_saw_each_key() -> None:
    # Every row attends only to itself: each key receives 1 from one row, so H2O's score is 1 / (T − j)
    # and it keeps the last keys; summed without the normalisation all keys would tie.
    t = 20
    eye = torch.eye(t, dtype=torch.float64).expand(2, t, t).clone()
    scores = kv.h2o_scores(DenseRows(eye), 1)
    assert torch.allclose(scores[0], 1 / torch.arange(t, 0, -1, dtype=torch.float64))
    assert kv.keep_top(scores, 5)[0].nonzero().flatten().tolist() == list(range(15, 20))
    # Random layer against a plain loop.
    q, _, k, _ = layer(1, t=30)
    a = dense_softmax(q, k[:, :30])
    ref = torch.zeros(2, 30, dtype=torch.float64)
    for head in range(4):
        for j in range(30):
            ref[head // 2, j] += sum(a[head, i, j] for i in range(30)) / (30 - j) / 2
    assert torch.allclose(kv.h2o_scores(DenseRows(a), 2), ref, atol=1e-12)


def test_snapkv_pooling_and_window() -> None:
    q, _, k, _ = layer(2, t=40)
    a = dense_softmax(q, k[:, :40])
    w, n = 8, 32
    scores = kv.snapkv_scores(DenseRows(a), 2, window=w, kernel=5)
    mean = a[:, -w:, :n].mean(1)
    # avg_pool1d(kernel 5, padding 2, stride 1) with zeros padded and counted, as a loop …
    loop = torch.zeros(4, n, dtype=torch.float64)
    for j in range(n):
        for s in range(j - 2, j + 3):
            if 0 <= s < n:
                loop[:, j] += mean[:, s] / 5
    # … and as torch computes it.
    pooled = torch.nn.functional.avg_pool1d(mean[:, None], 5, stride=1, padding=2)[:, 0]
    assert torch.allclose(pooled, loop, atol=1e-15)
    assert torch.allclose(scores[:, :n], (loop[0::2] + loop[1::2]) / 2, atol=1e-15)
    assert (scores[:, n:].min(1).values > scores[:, :n].max(1).values).all()  # the window always kept
    keep = kv.keep_top(scores, w + 3)
    assert keep[:, n:].all() and keep.sum(1).tolist() == [w + 3] * 2
    assert kv.keep_top(scores, 3)[:, -3:].all()  # a budget under the window keeps its most recent keys


def test_snapkv_question_window_and_tova() -> None:
    q, qf, k, _ = layer(3, t=30, f=5)
    a, af = dense_softmax(q, k[:, :30]), dense_softmax(qf, k)
    scores = kv.snapkv_scores(DenseRows(a), 2, observation=DenseRows(af), kernel=1)
    assert torch.allclose(scores, (af[:, :, :30].mean(1)[0::2] + af[:, :, :30].mean(1)[1::2]) / 2, atol=1e-15)
    last = a[:, -1, :29]
    # TOVA as its paper's code and kvpress define it (the default): the last query averaged over every head.
    layerwide = kv.tova_scores(DenseRows(a), 2)
    assert torch.allclose(layerwide[0, :29], last.mean(0)) and torch.equal(layerwide[0], layerwide[1])
    assert (layerwide[:, 29] > layerwide[:, :29].max(1).values).all()
    assert kv.PolicyInputs(rows=DenseRows(a), n_kv_heads=2).tova_across == "layer"
    tova = kv.tova_scores(DenseRows(a), 2, across="group")  # attnviz's per-group variant, asked for by name
    assert torch.allclose(tova[:, :29], (last[0::2] + last[1::2]) / 2)
    assert (tova[:, 29] > tova[:, :29].max(1).values).all()
    assert not torch.equal(tova[0], tova[1])


def test_gqa_one_choice_per_kv_head() -> None:
    # Heads 0 and 1 (KV head 0) want different keys; the group keeps one set, the group mean's top.
    t = 12
    a = torch.zeros(4, t, t, dtype=torch.float64)
    a[:, :, 0] = 1.0
    a[0, -8:, 0], a[0, -8:, 3], a[0, -8:, 5] = 0.0, 0.6, 0.4  # head 0 prefers key 3 …
    a[1, -8:, 0], a[1, -8:, 5] = 0.0, 1.0  # … head 1 wants key 5 only: the group mean prefers key 5
    a[2:, -8:, 0], a[2:, -8:, 7] = 0.0, 1.0  # KV head 1's heads at key 7
    scores = kv.snapkv_scores(DenseRows(a), 2, window=4, kernel=1)
    keep = kv.keep_top(scores, 5)
    assert keep.shape == (2, t)
    assert keep[0, [5, 8, 9, 10, 11]].all() and keep[0].sum() == 5  # the group's mean prefers key 5
    assert keep[1, [7, 8, 9, 10, 11]].all()
    future = DenseRows(torch.softmax(torch.randn(4, 3, t + 3, dtype=torch.float64), -1), causal=False)
    columns = kv._kept_columns(keep, future)
    assert torch.equal(columns[0], columns[1]) and torch.equal(columns[2], columns[3])
    assert not torch.equal(columns[0], columns[2])


def test_recall_and_output_error_against_dense_softmax() -> None:
    _, qf, k, v = layer(4, t=30, f=5)
    af = dense_softmax(qf, k)
    keep = torch.rand(2, 30, generator=torch.Generator().manual_seed(0)) < 0.4
    rec = kv.recall(QKRows(qf, k), keep)
    err = kv.output_error(QKRows(qf, k), v, keep)
    for head in range(4):
        g = head // 2
        mask = torch.cat([keep[g], torch.ones(5, dtype=torch.bool)])
        assert math.isclose(rec[head].item(), af[head][:, mask].sum(1).mean().item(), abs_tol=1e-12)
        logits = qf[head] @ k[g].T / math.sqrt(8)
        for i in range(5):
            logits[i, 31 + i :] = float("-inf")
        o = torch.softmax(logits, -1) @ v[g]
        o_kept = torch.softmax(logits.masked_fill(~mask, float("-inf")), -1) @ v[g]
        assert math.isclose(err[head].item(), ((o - o_kept).norm() / o.norm()).item(), rel_tol=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_every_key_kept_loses_nothing(seed: int) -> None:
    q, qf, k, v = layer(seed, t=30, f=4)
    inputs = PolicyInputs(QKRows(q, k[:, :30]), 2, future=QKRows(qf, k), window=8)
    for policy in POLICIES:
        keep = kv.keep_top(POLICIES[policy].scores(inputs), 1.0)
        assert keep.all()
        assert torch.allclose(kv.recall(inputs.future, keep), torch.ones(4, dtype=torch.float64), atol=1e-12)
        assert kv.output_error(inputs.future, v, keep).abs().max() < 1e-12


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), budget=st.integers(1, 29), hkv=st.sampled_from([1, 2, 4]))
def test_oracle_recall_never_below_any_policy(seed: int, budget: int, hkv: int) -> None:
    q, qf, k, _ = layer(seed, h=4, hkv=hkv, t=30, f=4)
    inputs = PolicyInputs(QKRows(q, k[:, :30]), hkv, future=QKRows(qf, k), window=6)
    recalls = {p: kv.group_mean(kv.recall(inputs.future, kv.keep_top(POLICIES[p].scores(inputs), budget)), hkv)
               for p in POLICIES}
    for policy, value in recalls.items():
        assert (recalls["oracle"] >= value - 1e-12).all(), policy


def test_pyramid_budgets() -> None:
    assert kv.pyramid_budgets(2000, 4, 8192) == [3900, 2633, 1367, 100]  # low = budget / beta
    assert kv.pyramid_budgets(256, 4, 1000) == [448, 320, 192, 64]  # low raised to the window
    assert kv.pyramid_budgets(800, 4, 1000) == [1000, 867, 733, 600]  # high capped at the keys
    assert kv.pyramid_budgets(30, 3, 100) == [30, 30, 30]  # a budget under the window: uniform
    assert kv.pyramid_budgets(50, 1, 100) == [50]
    for budget, layers, keys in ((2000, 4, 8192), (300, 32, 4096), (1000, 7, 1500)):
        values = kv.pyramid_budgets(budget, layers, keys)
        assert abs(sum(values) / layers - budget) <= 0.5 and values == sorted(values, reverse=True)
        assert all(1 <= b <= keys for b in values)


def _kvpress_layer_budget(budget: int, layer: int, n_layers: int, q_len: int, window: int = 64, beta: int = 20) -> int:
    """kvpress 0.5.x ``PyramidKVPress.get_layer_budget``, written out from its definition (the reference)."""
    capacity = window + budget
    low = (capacity - window) / beta
    high = (capacity - window) * 2 - low
    if high >= q_len - window:
        high = q_len - window
        low = (capacity - window) * 2 - high
    if not q_len >= high >= low >= window:
        return budget
    return round(high - layer * (high - low) / (n_layers - 1))


@pytest.mark.parametrize(("budget", "layers", "keys", "same"), [
    (2000, 4, 8192, True),  # budget / beta ≥ window, no cap: kvpress's pyramid is attnviz's
    (1500, 8, 32768, True),
    (256, 4, 1000, False),  # budget / beta < window, no cap: kvpress falls back to uniform, attnviz raises the low end
    (800, 4, 1000, False),  # the cap applies and budget ≥ half the prompt: both build a pyramid, capped differently
])
def test_pyramid_budgets_against_kvpress(budget, layers, keys, same) -> None:
    theirs = [_kvpress_layer_budget(budget, layer, layers, keys) for layer in range(layers)]
    ours = kv.pyramid_budgets(budget, layers, keys)
    assert (ours == theirs) is same, (ours, theirs)
    if budget == 800:  # the docstring's case: kvpress does not fall back when its cap applies
        assert len(set(theirs)) == layers and theirs[0] == keys - 64


def test_planted_needle_kept_by_question_window_lost_by_streaming() -> None:
    # Prefix tokens attend to themselves; the question's queries carry the needle key's feature (key 150):
    # SnapKV with the question as its window keeps the needle, StreamingLLM at a small budget drops it.
    t, f, d, needle = 400, 8, 32, 150
    g = torch.Generator().manual_seed(5)
    r = torch.nn.functional.normalize(torch.randn(t + f, d, generator=g, dtype=torch.float64), dim=-1)
    q = torch.cat([12 * r, torch.zeros(t + f, 1, dtype=torch.float64)], 1)
    q[t:, -1] = 20.0
    k = torch.cat([r, torch.zeros(t + f, 1, dtype=torch.float64)], 1)
    k[needle, -1] = 1.0
    q, k = q.expand(2, t + f, d + 1).clone(), k[None]
    inputs = PolicyInputs(QKRows(q[:, :t], k[:, :t], scale=1.0), 1, future=QKRows(q[:, t:], k, scale=1.0),
                          question_window=True)
    snap = kv.keep_top(POLICIES["snapkv"].scores(inputs), 16)
    stream = kv.keep_top(POLICIES["streaming"].scores(inputs), 16)
    assert snap[0, needle] and not stream[0, needle]
    assert (kv.recall(inputs.future, snap) > 0.99).all() and (kv.recall(inputs.future, stream) < 0.05).all()
    v = torch.randn(1, t + f, d, generator=g, dtype=torch.float64)
    assert (kv.output_error(inputs.future, v, snap) < 0.01).all()
    assert (kv.output_error(inputs.future, v, stream) > 0.5).all()
