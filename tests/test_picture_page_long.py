"""A long picture prompt's page and terminal result, built a layer at a time (issue 59, item 5): the page the model's
layers stream into equals the page of the whole result, number for number, with the layers read in blocks of a few
rows; no layer outlives the next one's computation and none is built whole; the terminal's result keeps one row per
row of the collapsed matrix and draws the picture view as the whole result does. The model is picture_models.py's
tiny LLaVA (38 tokens beside two pictures), its blocks made small so each layer comes in several."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from test_images import paligemma  # noqa: F401  (fixtures: a prefix, and a picture block inside a causal model)
from test_images_families import gemma3_pan  # noqa: F401

from attnviz.render.page_schema import check_page_data

TEXT = "what is in the picture ?"
BLOCK = 5  # query rows a block: 38 tokens in 8 blocks


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> list[Path]:
    """A wide picture and a tall one (random pixels)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("pictures")
    paths = []
    for n, (width, height) in enumerate([(64, 48), (40, 56)]):
        paths.append(root / f"p{n}.png")
        Image.fromarray((np.random.RandomState(n).rand(height, width, 3) * 255).astype(np.uint8)).save(paths[-1])
    return paths


@pytest.fixture(scope="module")
def model(llava):
    from attnviz.images.vlm import load_vlm

    return load_vlm(str(llava))


@pytest.fixture
def small_blocks(monkeypatch):
    """Every reader of a layer's rows takes :data:`BLOCK` rows at a time (the page's tiles and statistics, the
    engine's blocks): a 38-token layer comes in 8 blocks, as a 10,000-token one comes in dozens."""
    import attnviz.attention.rows as rows

    monkeypatch.setattr(rows, "rows_per_block", lambda *args, **kwargs: BLOCK)


def _json(page) -> dict:
    """The page's data as its file holds it (JSON, round-tripped)."""
    data = page.data()
    check_page_data(data)
    return json.loads(json.dumps(data))


@pytest.mark.parametrize("options", [{}, {"layer": 1, "view": "matrix", "head": 2}, {"expand": True, "stats": False}])
def test_the_streamed_page_is_the_whole_results_page(model, pictures, small_blocks, options):
    """Layer by layer, in blocks of 5 rows, the page holds every number the page of the whole result holds: the
    every-token matrix's tiles and strongest keys, the head statistics, the collapsed matrix, the picture view's tiles,
    the tokens, title and notes; with one layer, another view and head, expanded, without statistics."""
    from attnviz.views.picture_page import encode_pictures, picture_page
    from attnviz.views.picture_stream import streamed_picture_page

    encoded = encode_pictures(pictures)
    streamed = _json(streamed_picture_page(model, TEXT, pictures, encoded, **options))
    whole = _json(picture_page(model.read(TEXT, pictures), encoded, text=TEXT, **options))
    assert streamed == whole
    assert streamed["pictures"]["queries"] == list(range(32, 38)) and len(streamed["kinds"]["pictures"]["rows"]) == 8
    assert streamed["pictures"]["expand"] is bool(options.get("expand"))
    assert (streamed["stats"] is None) is (options.get("stats") is False)


@pytest.mark.parametrize("family", ["paligemma", "gemma3_pan"])
def test_a_model_whose_pictures_see_each_other_streams_the_same_page(family, pictures, small_blocks, request):
    """PaliGemma's image and prompt attend to each other (a prefix), Gemma 3's picture tokens to each other (its
    sliding windows too): the stream says each layer is not causal, as the whole result's weights do, and the page is
    the whole result's."""
    from attnviz.images.vlm import load_vlm
    from attnviz.views.picture_page import encode_pictures, picture_page
    from attnviz.views.picture_stream import streamed_picture_page

    loaded = load_vlm(str(request.getfixturevalue(family)))
    text = "<start_of_image> " + TEXT if family == "gemma3_pan" else TEXT
    whole = loaded.read(text, pictures[:1])
    assert whole.causal is False
    encoded = encode_pictures(pictures[:1])
    streamed = _json(streamed_picture_page(loaded, text, pictures[:1], encoded))
    assert streamed == _json(picture_page(whole, encoded, text=text))
    assert streamed["kinds"]["self"]["causal"] is False


def test_no_layer_is_kept_or_built_whole(model, pictures, small_blocks, monkeypatch):
    """As the page is built, each layer is gone (garbage) by the time the next is computed, its weights were never
    made whole (only blocks of 5 rows were computed, each once per reader at most), and the model's whole-result path
    is not taken."""
    import attnviz.images.forward as forward
    from attnviz.attention.rows import AttentionRows
    from attnviz.views.picture_page import encode_pictures
    from attnviz.views.picture_stream import streamed_picture_page

    def refused(*args, **kwargs):
        raise AssertionError("the whole result was computed")

    monkeypatch.setattr(forward, "run_layers", refused)
    monkeypatch.setattr(AttentionRows, "dense", refused)
    blocks: list[tuple[int, int]] = []
    original = AttentionRows.block

    def block(self, item, first, stop, n=None, heads=None):
        blocks.append((first, stop))
        return original(self, item, first, stop, n, heads)

    monkeypatch.setattr(AttentionRows, "block", block)
    earlier: list[weakref.ref] = []
    alive: list[int] = []
    stream_layers = forward.stream_layers

    def watched(network, inputs, name, each):
        def take(number, layer, causal):
            gc.collect()
            alive.append(sum(ref() is not None for ref in earlier))  # the layers before this one, still held
            earlier.append(weakref.ref(layer))
            each(number, layer, causal)
            assert layer.lazy  # its weights never built whole

        return stream_layers(network, inputs, name, take)

    monkeypatch.setattr(forward, "stream_layers", watched)
    page = streamed_picture_page(model, TEXT, pictures, encode_pictures(pictures))
    assert alive == [0, 0] and len(earlier) == 2
    assert blocks and max(stop - first for first, stop in blocks) == BLOCK
    # each layer's 8 blocks read once for the page (its tiles, statistics and picture parts together)
    assert sorted(blocks) == sorted([(f, min(38, f + BLOCK)) for f in range(0, 38, BLOCK)] * 2)
    assert page.pictures is not None and len(page.pictures["mean"]) == 2


def test_the_stream_says_what_the_whole_result_does(model, pictures):
    """The header of a stream is the result's (tokens, ids, pictures, metadata) without its weights; once run it is
    causal as the result is; and the layers it hands on are the result's, row for row (fused and eager)."""
    from attnviz.images.vlm import load_vlm

    for loaded in (model, load_vlm(str(model.found.place.ref), engine="hf")):
        whole = loaded.read(TEXT, pictures)
        stream = loaded.stream(TEXT, pictures)
        header = stream.header
        assert header.attentions.shape == (0, 0, 38, 38) and (stream.layers, stream.heads) == (2, 4)
        assert header.tokens == whole.tokens and header.token_ids == whole.token_ids
        assert header.metadata == whole.metadata and header.pictures == whole.pictures
        got: list[tuple[int, torch.Tensor, bool]] = []
        stream.run(lambda number, layer, causal, got=got: got.append((number, layer.rows(0, 38), causal)))
        assert [number for number, _, _ in got] == [0, 1] and all(causal for _, _, causal in got)
        assert header.causal is whole.causal is True
        for number, weights, _ in got:
            torch.testing.assert_close(weights, whole.attentions[number], atol=1e-6, rtol=0)


def test_a_layer_or_head_out_of_range_is_refused_before_the_model_runs(model, pictures, monkeypatch):
    from attnviz.errors import UsageError
    from attnviz.images import forward
    from attnviz.views.picture_page import encode_pictures
    from attnviz.views.picture_stream import streamed_picture_page

    monkeypatch.setattr(forward, "stream_layers", lambda *a, **k: pytest.fail("the model ran"))
    for option, message in (({"layer": 2}, "layer=2 is out of range; llava has layers 0 to 1"),
                            ({"head": 4}, "head=4 is out of range; llava has heads 0 to 3")):
        with pytest.raises(UsageError, match=message):
            streamed_picture_page(model, TEXT, pictures, encode_pictures(pictures), **option)


def test_the_terminal_keeps_a_row_per_collapsed_row_and_draws_as_the_whole_result(model, pictures, small_blocks):
    """tui --image (StreamedPictures): the collapsed result equals the whole result's, number for number; the full
    result keeps each collapsed row's first token's row (and the last token's), not every row; the picture view draws
    the same lines for the text's tokens and for each picture's row."""
    from attnviz.tui.explorer import Explorer
    from attnviz.views.picture_page import collapsed_result
    from attnviz.views.picture_stream import StreamedPictures

    streamed = Explorer(StreamedPictures(model), pictures=tuple(pictures))
    streamed.compute(TEXT)
    whole = Explorer(model, pictures=tuple(pictures))
    whole.compute(TEXT)
    full = streamed.full
    assert full.metadata["rows"] == [0, 16, *range(32, 38)] and full.attentions.shape == (2, 4, 8, 38)
    assert torch.equal(full.attentions, whole.full.attentions[:, :, full.metadata["rows"]])
    assert torch.equal(streamed.result.attentions, whole.result.attentions)
    assert streamed.result.tokens == whole.result.tokens and streamed.result.causal is whole.result.causal
    assert streamed.result.metadata == whole.result.metadata and streamed.result.token_ids == whole.result.token_ids
    assert collapsed_result(full) is streamed.result
    for explorer in (streamed, whole):
        explorer.view, explorer.layer, explorer.head = "picture", 1, 3
    for token in (None, 0, 1, 7):  # the last, picture 1's row, picture 2's, the last word
        drawn = []
        for explorer in (streamed, whole):
            explorer.token = token
            explorer.cache.clear()
            drawn.append(explorer.draw(100, False))
        texts = [[str(item) for item in group.renderables] for group in drawn]
        assert texts[0] == texts[1], token
