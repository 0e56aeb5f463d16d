"""Sparse prefill patterns and the DuoAttention split (attnviz.analysis.sparse_patterns, issue 44) against
full ``[H, T, T]`` masks built here and heads whose answer is known."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnviz.analysis import kv_policies as kv
from attnviz.analysis import sparse_patterns as sp
from attnviz.analysis.kv_policies import QKRows


def random_rows(seed: int, h: int = 4, hkv: int = 2, t: int = 300, d: int = 8) -> QKRows:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(h, t, d, generator=g, dtype=torch.float64) * 2
    k = torch.randn(hkv, t, d, generator=g, dtype=torch.float64) * 2
    return QKRows(q, k)


def planted(t: int, column: int, h: int = 2, d: int = 64, gamma: float = 16.0) -> QKRows:
    """Each head attends to its own token (random unit vectors, γ-scaled queries) and to key ``column``
    (a feature every query carries), about half each."""
    g = torch.Generator().manual_seed(7)
    r = torch.nn.functional.normalize(torch.randn(t, d, generator=g, dtype=torch.float64), dim=-1)
    q = torch.cat([gamma * r, torch.full((t, 1), gamma, dtype=torch.float64)], 1)
    k = torch.cat([r, torch.zeros(t, 1, dtype=torch.float64)], 1)
    k[column, -1] = 1.0
    return QKRows(q.expand(h, t, d + 1).clone(), k[None], scale=1.0)


def dense_recall(a: torch.Tensor, mask: torch.Tensor, first: int) -> torch.Tensor:
    """Reference: mean over rows i ≥ first of Σ_j A_ij M_ij, with the causal restriction j ≤ i."""
    t = a.shape[1]
    mask = mask & torch.ones(t, t, dtype=torch.bool).tril()
    return (a * mask)[:, first:].sum(-1).mean(-1)


def test_estimates_against_loops() -> None:
    rows = random_rows(0, t=100)
    a = rows.block(0, 100)
    columns, offsets = sp.estimate_vertical_slash(rows, 10, 12, last_q=16, forced=4)
    for head in range(4):
        vertical = [float(a[head, 84:, j].sum()) + (1e9 if j < 4 else 0) for j in range(100)]
        slash = [sum(float(a[head, i, i - o]) for i in range(84, 100) if i >= o) + (1e9 if o < 4 else 0)
                 for o in range(100)]
        assert set(columns[head].tolist()) == set(sorted(range(100), key=lambda j: -vertical[j])[:10])
        assert set(offsets[head].nonzero().flatten().tolist()) == set(sorted(range(100), key=lambda o: -slash[o])[:12])
    blocks = sp.estimate_blocks(rows, 2, block=16)
    q, k = rows.q, rows.k
    assert q is not None and k is not None
    for head in range(4):
        for qb in range(7):
            pooled_q = q[head, qb * 16 : qb * 16 + 16].mean(0)
            scores = [float(pooled_q @ k[head // 2, kb * 16 : kb * 16 + 16].mean(0)) for kb in range(qb + 1)]
            best = sorted(range(qb + 1), key=lambda kb: -scores[kb])[:2]
            assert blocks[head, qb].nonzero().flatten().tolist() == sorted(best)


def test_recalls_equal_dense_masks(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = random_rows(1)
    t = rows.n_keys
    a = rows.block(0, t)
    monkeypatch.setattr(kv, "BLOCK_FLOATS", 4 * t * 7)  # 7 rows a block
    search = sp.search_patterns(rows, 48, sinks=8, last_q=16, block=16, forced=4, duo_sink=8, duo_recent=40)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    assert search.first_query == 48 and (search.sinks, search.local, search.top_blocks) == (8, 40, 3)
    a_mask = (j < 8) | (i - j < 40)
    assert torch.allclose(search.recall["a_shape"], dense_recall(a, a_mask, 48), atol=1e-12)
    duo_mask = (j < 8) | (i - j < 40)
    assert torch.allclose(search.streaming_mass, dense_recall(a, duo_mask, 48), atol=1e-12)
    for name, v, s, value in search.candidates[1:-1]:
        assert name == "vertical_slash" and v + s == 48
        columns, offsets = sp.estimate_vertical_slash(rows, v, s, last_q=16, forced=4)
        mask = torch.zeros(4, t, t, dtype=torch.bool)
        for head in range(4):
            mask[head][:, columns[head]] = True
            mask[head] |= offsets[head][(i - j).clamp(min=0)]
        assert torch.allclose(value, dense_recall(a, mask, 48), atol=1e-12)
        assert int(mask[0].tril().sum(1).max()) <= 48  # no row keeps more than the budget
    blocks = sp.estimate_blocks(rows, 3, block=16)
    mask = blocks[:, i // 16, j // 16]
    assert torch.allclose(search.recall["block_sparse"], dense_recall(a, mask, 48), atol=1e-12)
    best = torch.stack([c[3] for c in search.candidates[1:-1]]).max(0).values
    assert torch.equal(search.recall["vertical_slash"], best)
    # From an earlier row, sinks and band overlap (rows i < sinks + local) and columns and diagonals too.
    early = sp.search_patterns(rows, 48, sinks=8, last_q=16, block=16, forced=4, first_query=5)
    assert torch.allclose(early.recall["a_shape"], dense_recall(a, a_mask, 5), atol=1e-12)
    for _, v, s, value in early.candidates[1:-1]:
        columns, offsets = sp.estimate_vertical_slash(rows, v, s, last_q=16, forced=4)
        mask = torch.stack([offsets[head][(i - j).clamp(min=0)] for head in range(4)])
        mask.scatter_(2, columns[:, None, :].expand(4, t, v), True)
        assert torch.allclose(value, dense_recall(a, mask, 5), atol=1e-12)


def test_every_key_kept_recalls_everything() -> None:
    rows = random_rows(2, t=128)
    search = sp.search_patterns(rows, 1.0, block=16, duo_sink=4, duo_recent=8)
    for pattern in search.recall:
        assert torch.allclose(search.recall[pattern], torch.ones(4, dtype=torch.float64), atol=1e-12), pattern
    assert search.winner == ["a_shape"] * 4  # every pattern ties: the simplest wins


def test_local_head_is_streaming_and_a_shape_wins() -> None:
    rows = planted(800, column=0)  # the column is the first token: an attention sink
    search = sp.search_patterns(rows, 64)
    assert search.winner == ["a_shape", "a_shape"]
    assert (search.recall["a_shape"] > 0.999).all()
    assert (search.recall["block_sparse"] < search.recall["a_shape"] - 0.01).all()  # one 64-block per row
    assert (search.streaming_mass > 0.999).all()
    assert not sp.full_attention_heads(search.streaming_mass, 1).any()


def test_fixed_column_head_vertical_slash_wins_and_is_retrieval() -> None:
    rows = planted(800, column=300)
    search = sp.search_patterns(rows, 64)
    assert search.winner == ["vertical_slash", "vertical_slash"]
    assert (search.recall["vertical_slash"] > 0.99).all()
    assert (search.recall["a_shape"] < 0.8).all() and (search.recall["block_sparse"] < 0.8).all()
    assert int(search.vertical[0]) > sp.FORCED  # the split that reaches past the forced first columns
    assert (search.streaming_mass < 0.9).all()
    assert sp.full_attention_heads(search.streaming_mass, 1).tolist() == [True]


def test_span_head_block_sparse_wins() -> None:
    # Every query (one shared direction) attends to keys 128 … 191, a whole 64-block, and nowhere else much.
    t, d = 640, 16
    g = torch.Generator().manual_seed(3)
    u = torch.zeros(d, dtype=torch.float64)
    u[0] = 1
    k = torch.randn(t, d, generator=g, dtype=torch.float64) * 0.05
    k[128:192] += u
    q = (12 * u).expand(2, t, d).clone()
    search = sp.search_patterns(QKRows(q, k[None], scale=1.0), 64)  # 30 columns forced: VS misses part of it
    assert search.winner == ["block_sparse", "block_sparse"]


def test_gqa_duo_split_is_per_kv_head() -> None:
    # KV head 1's group averages 0.92 but its second query head keeps only 0.85: it needs the full cache.
    mass = torch.tensor([0.95, 0.97, 0.99, 0.85, 0.2, 0.3])
    assert sp.full_attention_heads(mass, 3).tolist() == [False, True, True]
    assert sp.full_attention_heads(mass, 3, threshold=0.4).tolist() == [False, False, True]
    assert sp.full_attention_heads(mass, 6).tolist() == [False, False, False, True, True, True]


def test_exports(tmp_path) -> None:
    local, column = sp.search_patterns(planted(800, 0), 64), sp.search_patterns(planted(800, 300), 64)
    config = json.loads(json.dumps(sp.minference_config([local, column])))
    assert list(config[0]) == ["0", "1"]
    name, n_init, n_local, score = config[0]["0"]
    assert (name, n_init, n_local) == ("stream_llm", 32, 32) and 0.999 < score <= 1.0 + 1e-9
    name, v, s, score = config[1]["1"]
    assert name == "vertical_and_slash" and v + s == 64 and score > 0.99
    # MInference's loader: {int(ii): jj for ii, jj in json.load(...)[layer_idx].items()}
    assert {int(ii): jj for ii, jj in config[1].items()}[0][0] == "vertical_and_slash"
    text = sp.duo_attention_tsv([torch.tensor([False, True]), torch.tensor([True, True]), torch.tensor([0, 0])])
    assert text.splitlines()[0] == "0.000000000000000000e+00\t1.000000000000000000e+00"
    path = tmp_path / "full_attention_heads.tsv"
    path.write_text(text)
    np.savetxt(tmp_path / "numpy.tsv", np.array([[0, 1], [1, 1], [0, 0]], dtype=float), delimiter="\t")
    assert (tmp_path / "numpy.tsv").read_text() == text  # byte for byte as DuoAttention writes it
    assert np.loadtxt(path, dtype=float, delimiter="\t").tolist() == [[0, 1], [1, 1], [0, 0]]


def test_diagonal_sums_against_loops() -> None:
    a = random_rows(4, t=90).block(0, 90)
    for first, stop in ((0, 1), (0, 7), (3, 20), (40, 47), (60, 90)):
        block, positions = a[:, first:stop], torch.arange(first, stop)
        for width in (None, 5, 30, 90):
            got = sp._diagonal_sums(block, positions, width)
            want = [[sum(float(block[h, i, int(p) - o]) for i, p in enumerate(positions) if p >= o)
                     for o in range(width or 90)] for h in range(4)]
            assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), atol=1e-12), (first, stop, width)
            narrow = block[..., :stop]  # a causal block that stops at its last row's key
            assert torch.allclose(sp._diagonal_sums(narrow, positions, width or 90), got, atol=1e-12)


def test_narrow_blocks_give_the_padded_sums() -> None:
    rows = random_rows(5, t=200)
    orders = sp._vertical_slash_orders(rows, last_q=16, forced=4)
    splits = [(0, 40), (4, 36), (10, 30), (20, 20), (40, 0)]

    def summed(narrow: bool, size: int) -> sp._Sums:
        sums = sp._Sums(4, 200, 37, (8, 32), orders, splits, 16, 13)
        for start in range(0, 200, size):
            stop = min(200, start + size)
            block = rows.block(start, stop)
            sums.add(block[..., :stop] if narrow else block, torch.arange(start, stop))
        return sums

    for size in (7, 16, 50):
        padded, narrow = summed(False, size), summed(True, size)
        assert padded.rows == narrow.rows == 163
        for name in ("column", "diagonal", "a_overlap", "vs_overlap", "blocks"):
            assert torch.allclose(getattr(narrow, name), getattr(padded, name), atol=1e-12), (size, name)
    a = rows.block(0, 200)  # the block sums against the dense matrix pooled by hand
    i, j = torch.arange(37, 200)[:, None] // 16, torch.arange(200)[None, :] // 16
    pooled = a.new_zeros(4, 13, 13).index_put_((torch.arange(4)[:, None, None], i.expand(4, 163, 200),
                                                 j.expand(4, 163, 200)), a[:, 37:], accumulate=True)
    assert torch.allclose(padded.blocks, pooled, atol=1e-12)
