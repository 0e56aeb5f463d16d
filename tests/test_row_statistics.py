"""Head statistics reduced one block of query rows at a time (attnviz.analysis.row_statistics) against the dense
path that reads the whole layer: the metrics functions (tests/dense_statistics.py) and metrics.sink_importance."""

from __future__ import annotations

import random

import pytest
import torch
from dense_statistics import dense_statistics

from attnviz.analysis import heads, metrics
from attnviz.analysis.row_statistics import LayerRowStatistics, blocks_of, layer_row_statistics
from attnviz.analysis.statistics import BUILT_IN, STATISTICS
from attnviz.result import AttentionResult

# Repeated phrases (duplicate and induction hits, one copy right after the other), punctuation, [SEP], specials.
WORDS = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ",", "the", "cat", "sat", "on", "the", "log", ".",
         "[SEP]", "a", "dog", "ran", "ran", "!", "a", "dog", "ran", ";", "the", "cat", "sat", "。", "[SEP]", "the", "mat",
         ",", "a", "log", ".", "[SEP]"]
N, HEADS = len(WORDS), 4


def _result(causal: bool, ids: bool) -> AttentionResult:
    """A result with these tokens (its attentions unused): with the tokenizer's ids, or none (−1)."""
    special = [w in ("[CLS]", "[SEP]") for w in WORDS]
    vocabulary = {w: 1000 + i for i, w in enumerate(dict.fromkeys(WORDS))}
    token_ids = [vocabulary[w] for w in WORDS] if ids else []
    return AttentionResult(tokens=WORDS, attentions=torch.zeros(1, 1, N, N), token_ids=token_ids,
                           special=special, causal=causal)


def _attention(causal: bool, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """[HEADS, N, N] softmax rows: head 0 an induction head, head 1 a previous-token head, the rest random;
    row 0 fully masked (all zeros), a causal upper triangle exactly zero."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(HEADS, N, N, generator=g, dtype=torch.float64) * 2
    ids = heads.token_ids(_result(causal, ids=False))
    scores[0] += 6 * metrics.induction_pattern(ids)
    scores[1] += 6 * metrics.previous_token_pattern(N)
    if causal:
        scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    attn = scores.softmax(-1)
    attn[:, 0] = 0
    return attn.to(dtype)


def _feed(attn: torch.Tensor, result: AttentionResult, rows: int, *, causal_trim: bool, order: int | None = None,
          starts: list[int] | None = None) -> LayerRowStatistics:
    stats = LayerRowStatistics(n=N, n_heads=HEADS, token_ids=heads.token_ids(result), tokens=result.tokens,
                               sep=heads.sep_keys(result), causal=result.causal)
    blocks = list(blocks_of(attn, rows, causal_trim=causal_trim))
    if order is not None:
        random.Random(order).shuffle(blocks)
    for number, (start, block) in enumerate(blocks):
        stats.add(start if starts is None else starts[number], block)
    return stats


def _assert_same(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(expected)
    for name, value in got.items():
        assert value.dtype == torch.float64 and value.shape == (HEADS,), name
        torch.testing.assert_close(value, expected[name][0], rtol=1e-6, atol=1e-9, msg=name)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [1, 7, 256])
def test_blocks_in_any_order_give_the_dense_statistics(causal, dtype, rows):
    result = _result(causal, ids=rows != 7)
    attn = _attention(causal, dtype, seed=rows)
    stats = _feed(attn, result, rows, causal_trim=causal, order=rows)
    assert stats.rows_seen == N
    expected = dense_statistics(result, attn[None])
    _assert_same(stats.statistics(), expected)
    # float32 blocks agree with the float64 computation of the same weights too
    _assert_same(stats.statistics(), dense_statistics(result, attn[None].double()))
    torch.testing.assert_close(stats.sink_importance(), metrics.sink_importance(attn[None], causal=causal)[0],
                               rtol=1e-6, atol=1e-9)
    # the text exercises every statistic: none is 0 for every head (but ``next`` of a causal layer)
    assert all(bool(v[0].abs().max() > 0) for k, v in expected.items() if not (causal and k == "next"))
    assert float(expected["induction"][0, 0]) > 0.25 and float(expected["prev_score"][0, 1]) > 0.5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_blocks_are_widened(dtype):
    result = _result(True, ids=True)
    attn = _attention(True, dtype)
    stats = layer_row_statistics(attn, token_ids=heads.token_ids(result), tokens=WORDS,
                                 sep=heads.sep_keys(result), causal=True, rows=5)
    _assert_same(stats.statistics(), dense_statistics(result, attn[None]))


def test_causal_blocks_are_trimmed_only_where_the_right_is_zero():
    causal, dense = _attention(True, torch.float32), _attention(False, torch.float32)
    assert [b.shape[-1] for _, b in blocks_of(causal, 8, causal_trim=True)] == [min(s + 8, N) for s in range(0, N, 8)]
    assert {b.shape[-1] for _, b in blocks_of(dense, 8, causal_trim=True)} == {N}
    assert {b.shape[-1] for _, b in blocks_of(causal, 8)} == {N}


def test_a_row_of_zeros_may_come_as_a_block_of_no_columns():
    result = _result(False, ids=True)
    attn = _attention(False, torch.float32)
    stats = LayerRowStatistics(n=N, n_heads=HEADS, token_ids=heads.token_ids(result), tokens=WORDS,
                               sep=heads.sep_keys(result), causal=False)
    for start in range(1, N, 9):
        stats.add(start, attn[:, start : start + 9])
    stats.add(0, torch.zeros(HEADS, 1, 0))
    _assert_same(stats.statistics(), dense_statistics(result, attn[None]))


def test_rows_fed_at_the_wrong_starts_change_the_numbers():
    """A negative control: blocks that cover every row once, but each under its neighbour's start."""
    result = _result(False, ids=True)
    attn = _attention(False, torch.float64)
    expected = dense_statistics(result, attn[None])
    starts = [s for s, _ in blocks_of(attn, 8)]  # 0, 8, …, 40 (the last block has N − 40 rows)
    shifted = _feed(attn, result, 8, causal_trim=False, starts=[*starts[1:-1], starts[0], starts[-1]])
    got = shifted.statistics()
    wrong = [name for name in got if not torch.allclose(got[name], expected[name][0], rtol=1e-6, atol=1e-9)]
    assert {"self", "prev_score", "next", "distance", "duplicate", "induction"} <= set(wrong)


def test_missing_duplicate_and_misshapen_blocks_are_refused():
    result = _result(True, ids=True)
    attn = _attention(True, torch.float32)
    stats = LayerRowStatistics(n=N, n_heads=HEADS, token_ids=heads.token_ids(result), tokens=WORDS,
                               sep=heads.sep_keys(result), causal=True)
    stats.add(0, attn[:, :10, :10])
    with pytest.raises(ValueError, match=r"rows 5–9 were added twice"):
        stats.add(5, attn[:, 5:12])
    with pytest.raises(ValueError, match=f"rows 10–{N - 1} of {N} were never added"):
        stats.statistics()
    with pytest.raises(ValueError, match="never added"):
        stats.sink_importance()
    wide, few_heads, four_d = torch.cat([attn[:, 10:12]] * 2, -1), attn[:2, 10:12], attn[None, :, 10:12]
    for block, message in ((wide, f"width ≤ {N}"), (few_heads, f"{HEADS} heads"), (four_d, "width], got")):
        with pytest.raises(ValueError, match=message):
            stats.add(10, block)
    with pytest.raises(ValueError, match="outside"):
        stats.add(N - 1, attn[:, N - 2 :])
    with pytest.raises(ValueError, match="float"):
        stats.add(10, attn[:, 10:12].to(torch.int64))
    assert stats.rows_seen == 10
    stats.add(10, attn[:, 10:])
    _assert_same(stats.statistics(), dense_statistics(result, attn[None]))


def test_left_out_zeros_count_in_a_row_maximum():
    """Signed weights (not attention, but the definition holds): a row of negatives left of its
    left-out zeros has maximum 0, as the whole row has."""
    result = _result(True, ids=True)
    signed = -_attention(True, torch.float64)
    stats = layer_row_statistics(signed, token_ids=heads.token_ids(result), tokens=WORDS,
                                 sep=heads.sep_keys(result), causal=True, rows=4)
    torch.testing.assert_close(stats.statistics()["max"], metrics.max_weight(signed[None])[0])


def test_every_built_in_statistic_has_its_dense_reference():
    assert set(BUILT_IN) == set(STATISTICS) == set(dense_statistics(_result(True, ids=True), _attention(True, torch.float64)[None]))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rows", [5, 64])
def test_long_runs_of_one_id_are_summed_as_slices_and_give_the_dense_patterns(causal, rows, monkeypatch):
    """A picture's patch tokens share one id: runs of LONG_RUN or more equal ids take the slice path. Two runs of
    one id (a row after the first run reads it whole), a lone copy between and after them, a shorter run that is
    gathered, and blocks that start and stop inside the runs all give the dense duplicate and induction scores."""
    import attnviz.analysis.row_statistics as row_statistics

    monkeypatch.setattr(row_statistics, "LONG_RUN", 6)
    row_statistics._text_facts.cache_clear()
    words = (["[CLS]", "look", "<image>"] + ["<image>"] * 12 + ["at", "<image>", "the", "cat"] + ["<image>"] * 9
             + ["cat", "cat", "cat", "<image>", "."] + ["cat"] * 5 + ["<image>", "[SEP]"])
    n = len(words)
    vocabulary = {w: 1000 + i for i, w in enumerate(dict.fromkeys(words))}
    result = AttentionResult(tokens=words, attentions=torch.zeros(1, 1, n, n), token_ids=[vocabulary[w] for w in words],
                             special=[w in ("[CLS]", "[SEP]") for w in words], causal=causal)
    ids = heads.token_ids(result)
    assert row_statistics._long_runs(torch.tensor(ids), 6) == ((2, 15), (19, 28))
    g = torch.Generator().manual_seed(rows)
    scores = torch.randn(HEADS, n, n, generator=g, dtype=torch.float64) * 2
    scores[0] += 6 * metrics.induction_pattern(ids)
    scores[1] += 6 * metrics.duplicate_token_pattern(ids)
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    attn = scores.softmax(-1).float()
    stats = LayerRowStatistics(n=n, n_heads=HEADS, token_ids=ids, tokens=words, sep=heads.sep_keys(result),
                               causal=causal)
    for start, block in blocks_of(attn, rows, causal_trim=causal):
        stats.add(start, block)
    got, expected = stats.statistics(), dense_statistics(result, attn[None].double())
    for name in ("duplicate", "induction"):
        torch.testing.assert_close(got[name], expected[name][0], rtol=1e-5, atol=1e-7, msg=name)
    assert float(got["duplicate"][1]) > 0.5 and float(got["induction"][0]) > 0.5  # the planted heads are seen
    row_statistics._text_facts.cache_clear()
