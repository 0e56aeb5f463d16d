"""Tiles on request (issue 29): ``attnviz serve``'s ``/api/tile`` at every level, computed from a layer's queries and
keys (or whole weights) and max-pooled, against the weights pooled by hand; the leaves equal ``extract`` to 1e-6."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_pyramid import pooled_by_hand

from attnviz import api
from attnviz.attention.rows import AttentionRows, RowMask
from attnviz.render.page import PageBuilder
from attnviz.render.pyramid import TILE, Geometry
from attnviz.views.live_tiles import LiveTiles


class Whole:
    """A layer handed over whole (what a short text's reader gives)."""

    made_from = None

    def __init__(self, attentions: torch.Tensor) -> None:
        self.attentions = attentions


class Rows:
    """A layer made on demand from its queries and keys (what a long text's reader gives)."""

    def __init__(self, rows: AttentionRows, n: int) -> None:
        self.made_from = (rows, 0, n)


def _page(weights: np.ndarray, budget: int) -> object:
    n = weights.shape[-1]
    builder = PageBuilder("t", "m", cells=weights.size, budget=budget)
    builder.add_layer(7, weights, rows=["w"] * n, cols=["w"] * n, causal=True)
    return builder.finish()


@pytest.mark.parametrize("made", ["whole", "rows"])
def test_every_level_is_the_weights_pooled_by_hand(made):
    torch.manual_seed(0)
    n, heads = 700, 2  # three levels: 4, 2 and 1 tokens a cell
    q, k = torch.randn(1, heads, n, 8) * 2, torch.randn(1, heads, n, 8)
    rows = AttentionRows(q, k, RowMask.of(None, n, start=0))
    weights = rows.dense(0)
    page = _page(weights.numpy(), budget=1)  # the page (and so the server) keeps level 0 alone
    layer = Whole(weights) if made == "whole" else Rows(rows, n)
    live = LiveTiles(page, [layer])
    geometry = Geometry(n, n)
    assert geometry.levels == 3 and len(page.held["self"][0][1]) == 1
    for level in range(3):
        f = geometry.factor(level)
        expected = pooled_by_hand(weights[1].numpy(), f)
        for y in range(-(-expected.shape[0] // TILE)):
            for x in range(-(-expected.shape[1] // TILE)):
                values, exact = live.tile(7, 1, level, x, y)
                want = expected[y * TILE : (y + 1) * TILE, x * TILE : (x + 1) * TILE]
                assert exact == (level > 0) and values.shape == want.shape
                np.testing.assert_allclose(values, want, rtol=1e-5 if exact else 2.0**-11, atol=1e-7)


def test_a_tile_outside_the_page_is_refused_in_words():
    weights = torch.softmax(torch.randn(1, 300, 300), -1)
    live = LiveTiles(_page(weights.numpy(), budget=10**9), [Whole(weights)])
    for asked, message in (((3, 0, 0, 0, 0), "layer=3.*is not on this page; it shows layers 7"),
                           ((7, 1, 0, 0, 0), "head=1.*heads 0 to 0"), ((7, 0, 2, 0, 0), "level=2.*levels 0 to 1"),
                           ((7, 0, 1, 2, 0), "outside level 1, which has 2 × 2 tiles")):
        with pytest.raises(Exception, match=message):
            live.tile(*asked)


@pytest.fixture(scope="module")
def served():
    from starlette.testclient import TestClient

    from attnviz.serve import create_app

    source = api.load()
    return source, TestClient(create_app(source), base_url="http://127.0.0.1:8000")


def test_the_server_sends_tiles_and_the_leaves_equal_extract(served):
    source, client = served
    text = " ".join(["the river bends near the old mill"] * 40)  # 322 tokens: two levels
    page = client.post("/api/page", json={"text": text}).json()
    tiles = page["tiles"]
    assert tiles["endpoint"] == "/api/tile" and tiles["kind"] == "self"
    result = source.extract(text)
    n = len(result.tokens)
    for x, y in ((0, 0), (1, 0), (0, 1), (1, 1)):
        reply = client.get("/api/tile", params={"page": tiles["page"], "layer": 4, "head": 7, "level": 1, "x": x, "y": y})
        assert reply.status_code == 200 and reply.headers["X-Tile-Exact"] == "1"
        rows, cols = int(reply.headers["X-Tile-Rows"]), int(reply.headers["X-Tile-Cols"])
        values = np.frombuffer(reply.content, dtype="<f4").reshape(rows, cols)
        want = result.attentions[4, 7, y * TILE : min(n, (y + 1) * TILE), x * TILE : min(n, (x + 1) * TILE)].numpy()
        np.testing.assert_allclose(values, want, atol=1e-6)
    coarse = client.get("/api/tile", params={"page": tiles["page"], "layer": 4, "head": 7, "level": 0, "x": 0, "y": 0})
    assert coarse.headers["X-Tile-Exact"] == "0"  # kept when the page was built: a byte on a log scale, 5.6 % apart
    pooled = np.frombuffer(coarse.content, dtype="<f4").reshape(-1, -(-n // 2))
    np.testing.assert_allclose(pooled, pooled_by_hand(result.attentions[4, 7].numpy(), 2), rtol=0.029, atol=1e-6)


@pytest.mark.parametrize(("params", "status", "message"), [
    ({"page": "nope", "layer": 0, "head": 0, "level": 0, "x": 0, "y": 0}, 404, "load the page again"),
    ({"layer": "a", "head": 0, "level": 0, "x": 0, "y": 0}, 422, "layer must be a whole number"),
    ({"layer": 9, "head": 0, "level": 0, "x": 0, "y": 0}, 422, "layer=9 is not on this page"),
    ({"layer": 0, "head": 0, "level": 0, "x": 5, "y": 0}, 422, "outside level 0"),
    ({"layer": 0, "head": 0, "level": 0, "x": 0, "y": 0, "z": 1}, 422, "unknown parameter 'z'"),
])
def test_bad_tile_requests_are_answered_in_words(served, params, status, message):
    _, client = served
    page = client.post("/api/page", json={"text": "The cat sat on the mat."}).json()["tiles"]["page"]
    reply = client.get("/api/tile", params={"page": page, **params})
    assert reply.status_code == status and message in reply.json()["error"], reply.text


def test_a_server_keeps_a_long_texts_layers_as_queries_and_keys(tmp_path):
    """A server (``layers_out``) keeps each layer of a text over 512 tokens as its queries and keys, never its
    whole weights (32 layers of 4,096 tokens would be 16 GiB); a shorter text's whole weights are extract's own."""
    from test_page_long import _model

    _model(tmp_path)
    source = api.load(str(tmp_path))
    kept: dict[int, list] = {}
    for n in (100, 600):
        text = " ".join(f"w{i % 50}" for i in range(n))
        layers: list = []
        page = api.page_view(source, text, hold=10**9, layers_out=layers)
        kept[n] = layers
        live = LiveTiles(page, layers)
        result = source.extract(text)
        x, y = (1, 2) if n == 600 else (0, 0)
        values, exact = live.tile(1, 3, Geometry(n, n).leaf, x, y)
        want = result.attentions[1, 3, y * TILE : (y + 1) * TILE, x * TILE : (x + 1) * TILE].numpy()
        assert exact and values.shape == want.shape
        np.testing.assert_allclose(values, want, atol=1e-6 if n == 100 else 1e-5)
    assert all(layer.made_from is None for layer in kept[100]) and all(layer.made_from is not None for layer in kept[600])
    # Building the page kept every row's normaliser: a pooled tile over rows no tile asked for computes its own
    # columns only, and equals the whole rows' max-pooled weights.
    rows, item, n = kept[600][1].made_from
    values, known = rows.memo[(item, n)]
    assert bool(known.all()) and values.shape == (rows.n_heads, n)
    result = source.extract(" ".join(f"w{i % 50}" for i in range(600)))
    torch.testing.assert_close(values[3, 300:310], torch.logsumexp(
        rows.scores(item, 300, 310, 0, n, heads=slice(3, 4))[0], dim=-1), rtol=0, atol=1e-5)
    live = LiveTiles(api.page_view(source, " ".join(f"w{i % 50}" for i in range(600)), hold=0, layers_out=(fresh := [])),
                     fresh)
    level = Geometry(600, 600).leaf - 1
    pooled = live._computed(live.numbers.index(1), 3, level, 1, 0)  # computed, not decoded from the page
    assert not live._normalisers  # the kept normalisers were used, none computed
    want = torch.nn.functional.max_pool2d(result.attentions[1, 3][None], 2, ceil_mode=True)[0][:TILE, TILE:].numpy()
    np.testing.assert_allclose(pooled, want, atol=1e-5)
