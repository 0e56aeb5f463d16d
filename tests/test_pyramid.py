"""The tile pyramid of a head's matrix (attnviz.render.pyramid) against pooling written out cell by cell."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.render.page import LINES, LINES_BUDGET, PageBuilder, head_values
from attnviz.render.pyramid import (
    TILE,
    Geometry,
    LayerPyramid,
    decode_lines,
    decode_tile,
    encode_lines,
    encode_tile,
    log8_codes,
    log8_values,
    tiles_of,
)
from attnviz.views.page_parts import page_sinks


def pooled_by_hand(matrix: np.ndarray, factor: int, centre: float = 0.0) -> np.ndarray:
    """Each pooled cell: the value of its factor × factor cells furthest from centre (loops, no reshapes)."""
    rows, cols = matrix.shape
    if factor == 1:  # each cell pools only itself (what the loops below give, without 10^5 Python steps a level)
        return matrix.astype(np.float64)
    out = np.empty((-(-rows // factor), -(-cols // factor)))
    for r in range(out.shape[0]):
        for c in range(out.shape[1]):
            cells = matrix[r * factor : (r + 1) * factor, c * factor : (c + 1) * factor].ravel()
            out[r, c] = cells[np.argmax(np.abs(cells - centre))]
    return out


@pytest.mark.parametrize(("n", "levels"), [(1, 1), (256, 1), (257, 2), (512, 2), (513, 3), (8192, 6), (131072, 10)])
def test_levels_halve_down_to_one_cell_per_token(n, levels):
    geometry = Geometry(n, n)
    assert geometry.levels == levels
    assert geometry.factor(geometry.leaf) == 1
    assert max(geometry.shape(0)) <= TILE  # the whole matrix in one tile
    assert geometry.shape(geometry.leaf) == (n, n)


def causal_weights(rng: np.random.Generator, heads: int, n: int) -> np.ndarray:
    scores = rng.normal(size=(heads, n, n)) * 2
    scores[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)).astype(np.float32)


def test_blocks_of_any_size_pool_as_the_whole_matrix_by_hand():
    rng = np.random.default_rng(0)
    n, heads = 600, 2  # three levels: 4, 2 and 1 tokens a cell
    weights = causal_weights(rng, heads, n)
    pyramid = LayerPyramid(heads, n, n, finest=2)
    first = 0
    for size in (37, 1, 100, 462):  # blocks that start inside pooled rows; causal: only the columns seen
        pyramid.add(first, weights[:, first : first + size, : first + size])
        first += size
    levels = pyramid.levels()
    assert [level.shape[1:] for level in levels] == [(150, 150), (300, 300), (600, 600)]
    for level, factor in zip(levels, (4, 2, 1), strict=True):
        for h in range(heads):
            np.testing.assert_array_equal(level[h], pooled_by_hand(weights[h], factor))
    np.testing.assert_allclose(pyramid.row_max, weights.max(-1))
    np.testing.assert_allclose(pyramid.col_sum, weights.astype(np.float64).sum(1), rtol=1e-9)


def test_blocks_of_whole_pooled_rows_pool_without_padding_as_by_hand():
    rng = np.random.default_rng(4)
    weights = causal_weights(rng, 2, 600)
    pyramid = LayerPyramid(2, 600, 600, finest=0)  # 4 tokens a cell: blocks of 64 rows, 600 keys, no padding
    for first in range(0, 600, 64):
        pyramid.add(first, weights[:, first : first + 64, : min(600, first + 64)])
    for h in range(2):
        np.testing.assert_array_equal(pyramid.levels()[0][h], pooled_by_hand(weights[h], 4))


def test_signed_values_keep_the_one_furthest_from_their_zero():
    rng = np.random.default_rng(3)
    values = rng.random((1, 300, 300)).astype(np.float32)  # centre 0.5: below it, negative
    pyramid = LayerPyramid(1, 300, 300, finest=1, centre=0.5)
    pyramid.add(0, values)
    np.testing.assert_array_equal(pyramid.levels()[0][0], pooled_by_hand(values[0], 2, 0.5))
    assert pooled_by_hand(np.array([[0.4, 0.5], [0.0, 0.6]]), 2, 0.5)[0, 0] == 0.0  # the reference itself


def test_a_block_out_of_order_is_refused():
    pyramid = LayerPyramid(1, 10, 10, finest=0)
    with pytest.raises(ValueError, match="does not continue"):
        pyramid.add(3, np.zeros((1, 2, 10)))


def test_half_floats_keep_three_significant_digits_and_zero():
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.random(500) ** 8, [0.0, 1.0]]).reshape(2, 251)
    back = decode_tile(encode_tile(values, "f16"), "f16", values.shape)
    np.testing.assert_allclose(back, values, rtol=2.0**-11, atol=6e-8)
    assert back[1, -2] == 0.0 and back[1, -1] == 1.0


def test_log8_codes_are_within_half_a_step_on_a_log_scale():
    values = np.logspace(-6, 0, 1000)
    back = log8_values()[log8_codes(values)]
    step = 10 ** (6 / 254)  # 5.6 % apart
    assert np.all(back / values <= step**0.5 + 1e-9) and np.all(values / back <= step**0.5 + 1e-9)
    assert log8_codes(np.array([0.0, 1e-9]))[0] == 0 and log8_values()[0] == 0.0
    tile = np.array([[0.0, 0.25], [1e-3, 1.0]])
    np.testing.assert_allclose(decode_tile(encode_tile(tile, "log8"), "log8", (2, 2)), tile, rtol=0.03)


def test_lin8_is_within_half_a_step_of_255():
    values = np.linspace(0, 1, 1001).reshape(7, 143)
    back = decode_tile(encode_tile(values, "lin8"), "lin8", values.shape)
    assert np.abs(back - values).max() <= 0.5 / 255 + 1e-12


def test_a_large_page_stores_leaves_linearly_and_pooled_levels_on_a_log_scale():
    builder = PageBuilder("t", "m", cells=10**8)
    geometry = Geometry(600, 600)
    assert [builder.encoding_of(level, geometry) for level in range(3)] == ["log8", "log8", "lin8"]
    assert PageBuilder("t", "m", cells=10).encoding_of(2, geometry) == "f16"


def test_tiles_of_only_centre_are_left_out():
    grid = np.zeros((300, 520))
    grid[299, 519] = 0.5  # the last tile only
    tiles = tiles_of(grid, "f16")
    assert list(tiles) == ["2,1"]
    assert decode_tile(tiles["2,1"], "f16", (44, 8))[-1, -1] == 0.5


def test_a_short_page_holds_every_cell_and_a_long_one_what_its_budget_allows():
    rng = np.random.default_rng(2)
    short = causal_weights(rng, 2, 300)
    builder = PageBuilder("t", "m", cells=short.size, layers=1, budget=1)  # even over budget: ≤ 512 tokens
    builder.add_layer(0, short, rows=["a"] * 300, cols=["a"] * 300, causal=True)
    kind = builder.kinds["self"]
    assert kind["included"] == 2 and builder.notes() == []
    np.testing.assert_allclose(head_values(kind, 0, 1), short[1], rtol=2.0**-11, atol=6e-8)
    np.testing.assert_allclose(head_values(kind, 0, 1, level=0), pooled_by_hand(short[1], 2), rtol=2.0**-11, atol=6e-8)
    assert kind["pyramids"][0][1]["vmax"] == pytest.approx(float(short[1].max()))

    long = causal_weights(rng, 1, 1100)  # levels of 8, 4, 2 and 1 tokens a cell
    builder = PageBuilder("t", "m", cells=long.size, layers=2, budget=150_000)
    for layer in range(2):
        builder.add_layer(layer, long, rows=["b"] * 1100, cols=["b"] * 1100, causal=True)
    kind = builder.kinds["self"]
    held = kind["included"]
    assert 1 <= held < 4
    sizes = sum(len(t) for layer in kind["pyramids"] for head in layer for level in head["tiles"] for t in level.values())
    assert sizes <= 150_000
    assert all(len(head["tiles"]) == held for layer in kind["pyramids"] for head in layer)
    factor = kind["levels"][held - 1]["factor"]
    assert f"down to {factor}×{factor} tokens" in builder.notes()[0]
    with pytest.raises(ValueError, match="holds levels"):
        head_values(kind, 0, 0)


def test_sinks_are_the_keys_every_row_leans_on():
    n = 40
    weights = np.full((1, n, n), 0.2 / (n - 1), dtype=np.float32)
    weights[0, :, 0] = 0.8  # every query puts 0.8 on the first key
    weights[0, 5, 7] = 0.5
    builder = PageBuilder("t", "m", cells=weights.size, sinks=page_sinks)  # the statistics' marker (views/page_parts.py)
    builder.add_layer(0, weights, rows=["x"] * n, cols=["x"] * n)
    head = builder.kinds["self"]["pyramids"][0][0]
    assert head["sinks"] == [0]
    assert head["vmax"] == pytest.approx(0.8) and head["vmaxNoSinks"] == pytest.approx(0.5)


def _causal_weights(heads: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(heads, n, n)) * 3
    scores[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)).astype(np.float32)


def test_a_long_page_holds_each_querys_strongest_keys_as_numpy_sorts_them():
    """Built from causal blocks of rows (each hands over only the keys its rows see), the lines of a long
    input are each query's strongest keys in order, their weights to half floats."""
    heads, n = 2, 700
    weights = _causal_weights(heads, n, 3)
    builder = PageBuilder("t", "m", cells=weights.size, layers=1)
    tokens = [f"t{i}" for i in range(n)]
    pyramid = builder.start_layer(heads, rows=tokens, cols=tokens, causal=True)
    for first in range(0, n, 96):
        stop = min(n, first + 96)
        pyramid.add(first, weights[:, first:stop, :stop])
    builder.end_layer(pyramid, 0)
    entry = builder.kinds["self"]
    assert entry["lines"] == LINES
    for h in range(heads):
        keys, values = decode_lines(entry["pyramids"][0][h]["lines"], (n, LINES))
        expected = np.argsort(-weights[h], axis=-1, kind="stable")[:, :LINES]
        assert np.array_equal(keys[LINES - 1 :], expected[LINES - 1 :])
        for i in range(LINES - 1):  # query i sees i + 1 keys: those, then weights of zero
            assert np.array_equal(keys[i, : i + 1], expected[i, : i + 1]) and np.all(values[i, i + 1 :] == 0)
        assert np.allclose(values, np.take_along_axis(weights[h], keys.astype(np.int64), -1), rtol=1e-3, atol=1e-7)


def test_lines_are_left_out_where_every_cell_is_held_or_the_budget_has_no_room():
    short = PageBuilder("t", "m", cells=1)
    assert short.start_layer(1, rows=["a"] * 100, cols=["a"] * 100).lines == 0  # the head view reads the cells
    wide = PageBuilder("t", "m", cells=1, layers=40)
    assert wide.start_layer(32, rows=["a"] * 70_000, cols=["a"] * 600).lines == 0  # 40 × 32 heads × 70k queries
    some = PageBuilder("t", "m", cells=1, layers=4)
    assert some.start_layer(8, rows=["a"] * 40_000, cols=["a"] * 600).lines == LINES_BUDGET // (6 * 32 * 40_000)
    assert PageBuilder("t", "m", cells=1).start_layer(1, rows=["a"] * 600, cols=["a"] * 600, centre=0.5).lines == 0


@pytest.mark.parametrize("cols", [3, 70_000])
def test_lines_round_trip_keys_of_any_size(cols):
    rng = np.random.default_rng(1)
    keys = rng.integers(0, cols, size=(50, 3)).astype(np.uint32)
    weights = rng.random((50, 3)).astype(np.float32)
    got_keys, got_weights = decode_lines(encode_lines(keys, weights), (50, 3))
    assert np.array_equal(got_keys, keys) and np.allclose(got_weights, weights, rtol=1e-3)
