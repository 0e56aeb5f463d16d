"""The offline pages as a reader sees them (issue 41, item 15), in Debian's chromium: the One token view's key
labels stand apart from its cells and the view uses the window's width; one layer of a long text holds every
cell, as the note of a page of every layer promises; + on causal attention zooms toward the weights, not into
the masked triangle; the tooltip follows a wheel zoom and offers single cells only where the page has them; a
cell of several tokens has one label naming its range; the atlas brings a chosen head's details into sight."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, open_offline, write_config

from attnviz import api
from attnviz.render.html import render_html
from attnviz.render.page import PageBuilder

pytestmark = pytest.mark.slow

TEXT = "The cat sat on the mat because it was tired."
WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "ran", "around", "gardens", "and", "birds", "sang"]


def _softmax_page(tmp_path, n: int, *, heads: int = 1, causal: bool = False, budget: int | None = None, seed: int = 7):
    """A page of one synthetic layer of ``n`` tokens (random scores, softmaxed), and its weights."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(heads, n, n)) * 3
    if causal:
        scores[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights = (weights / weights.sum(-1, keepdims=True)).astype(np.float32)
    extra = {} if budget is None else {"budget": budget}
    builder = PageBuilder("synthetic", "synthetic", cells=weights.size, layers=1, **extra)
    tokens = [f"t{i}" for i in range(n)]
    builder.add_layer(0, weights, rows=tokens, cols=tokens, causal=causal)
    page = builder.finish(initial={"kind": "self", "layer": 0, "head": 0, "view": "matrix"})
    return render_html(page, tmp_path / f"synthetic{n}{'c' if causal else ''}.html"), weights, builder


def _layout(page) -> dict[str, float]:
    keys = ["left", "top", "x0", "y0", "tpp", "drawn", "factor"]
    found = page.evaluate(f"() => Object.fromEntries({keys}.map((k) => [k, +document.querySelector('#matrix').dataset[k]]))")
    box = page.locator("#matrix").bounding_box()
    return found | {"w": box["width"] - found["left"], "h": box["height"] - found["top"]}


def _cell_centre(page, i: float, j: float) -> tuple[float, float]:
    d, box = _layout(page), page.locator("#matrix").bounding_box()
    return box["x"] + d["left"] + (j + 0.5 - d["x0"]) / d["tpp"], box["y"] + d["top"] + (i + 0.5 - d["y0"]) / d["tpp"]


def _redrawn(page, before: float) -> None:
    page.wait_for_function("(b) => +document.querySelector('#matrix').dataset.drawn !== b", arg=before)


def _open_matrix(browser, path, requests, errors):
    page = open_offline(browser, path, requests, errors, ready="#matrix[data-drawn], #headview[data-drawn]")
    if page.evaluate("window.attnviz.state.view") != "matrix":
        page.click("nav.tabs button[data-view=matrix]")
        page.wait_for_selector("#matrix[data-drawn]")
    return page


def test_the_one_token_views_key_labels_stand_apart_from_its_cells(browser, tmp_path):
    path = render_html(api.page_view(api.load(), TEXT), tmp_path / "short.html")
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, path, requests, errors)
    page.click("nav.tabs button[data-view=query]")
    page.wait_for_selector("#view-query.active #queryview[data-drawn]")  # on the last token but [SEP] (issue 50 B.7)
    tokens = page.evaluate("window.attnviz.data.kinds.self.cols")
    labels = page.locator("#querykeys .tok")
    assert labels.count() == len(tokens) and labels.all_inner_texts() == tokens
    cells = page.locator("#queryview").bounding_box()
    for box in (label.bounding_box() for label in labels.all()):  # every key's text above the rows, none on them
        assert box["y"] + box["height"] <= cells["y"] + 0.5
    # Each label stands over its key's column of cells.
    d = page.evaluate("() => ({...document.querySelector('#queryview').dataset})")
    left, cell = float(d["left"]), float(d["cell"])
    for j, box in enumerate(label.bounding_box() for label in labels.all()):
        assert abs(box["x"] + box["width"] / 2 - (cells["x"] + left + (j + 0.5) * cell)) <= 1.5
    # The first rows are the first heads' (rows start at the canvas's top), and a short text's cells use the width.
    assert float(d["top"]) == 0
    room = page.locator("#querybox").bounding_box()["width"]
    assert cells["width"] >= 0.6 * room
    page.mouse.move(cells["x"] + left + 0.5 * cell, cells["y"] + 0.5 * float(d["rowh"]))
    page.wait_for_function("() => document.querySelector('#tooltip').style.display === 'block'")
    assert "layer 0, head 0" in page.inner_text("#tooltip") and f"key 0: {tokens[0]}" in page.inner_text("#tooltip")
    assert errors == [] and requests == [path.as_uri()]
    page.close()


@pytest.fixture(scope="module")
def long_config(tmp_path_factory):
    """The tiny config model taking 4,000 positions, and a text of 1,500 words for it."""
    folder = tmp_path_factory.mktemp("longcfg")
    source = Path(TINY).read_text(encoding="utf-8")
    config = write_config(folder, re.sub(r"max_positions = \d+", "max_positions = 4000", source))
    rng = np.random.default_rng(1)
    return config, " ".join(rng.choice(WORDS, 1500))


def test_one_layer_of_a_long_text_holds_every_cell_as_the_note_promises(browser, long_config, tmp_path):
    # A budget scaled to this text as 24 MB is to 3,450 tokens of the same model: one layer's every level fits (3.7
    # MB: its leaves, a linear byte and mostly 0, weigh far less than the half byte a cell once guessed), two do not.
    config, text = long_config
    source = api.load(config)
    budget = 5_000_000
    every = api.page_view(source, text, budget=budget, stats=False)
    kind = every.kinds["self"]
    assert kind["included"] < len(kind["levels"])  # every layer: the finest levels are left out
    [note] = every.left_out
    assert "a page of one layer (view --layer) holds every cell" in note
    one = api.page_view(source, text, layer=1, budget=budget, stats=False)
    kind = one.kinds["self"]
    assert kind["included"] == len(kind["levels"]) and one.left_out == []  # ... and it does
    assert sum(len(t) for head in kind["pyramids"][0] for level in head["tiles"] for t in level.values()) <= budget
    # In the browser, the matrix zooms down to single cells.
    path = render_html(one, tmp_path / "one.html")
    requests: list[str] = []
    errors: list[str] = []
    page = _open_matrix(browser, path, requests, errors)
    assert int(page.get_attribute("#matrix", "data-factor")) > 1  # the whole matrix: pooled
    before = _layout(page)["drawn"]
    page.evaluate("window.attnviz.matrix.zoomTo(700, 650, 24)")
    _redrawn(page, before)
    assert int(page.get_attribute("#matrix", "data-factor")) == 1
    assert "one cell = one query × one key" in page.inner_text("#matrixinfo")
    assert "finer cells are not in this page" not in page.inner_text("#matrixinfo")
    assert errors == [] and requests == [path.as_uri()]
    page.close()


def test_plus_on_causal_attention_zooms_toward_the_weights(browser, tmp_path):
    n = 1100
    path, _, _ = _softmax_page(tmp_path, n, causal=True)
    requests: list[str] = []
    errors: list[str] = []
    page = _open_matrix(browser, path, requests, errors)
    page.focus("#matrix")
    for _ in range(4):
        before = _layout(page)["drawn"]
        page.keyboard.press("+")
        _redrawn(page, before)
        d = _layout(page)
        key = d["x0"] + min(d["w"] * d["tpp"], n - d["x0"]) / 2  # the middle of the matrix in sight
        query = d["y0"] + min(d["h"] * d["tpp"], n - d["y0"]) / 2
        assert key <= query + 2 * d["tpp"], (key, query)  # on or below the diagonal: where the weights are
    assert errors == [] and requests == [path.as_uri()]
    page.close()


def test_the_tooltip_follows_a_wheel_zoom(browser, tmp_path):
    n = 1100
    path, weights, _ = _softmax_page(tmp_path, n)
    requests: list[str] = []
    errors: list[str] = []
    page = _open_matrix(browser, path, requests, errors)
    assert int(page.get_attribute("#matrix", "data-factor")) > 1
    mouse = tuple(round(v) for v in _cell_centre(page, 604, 300))  # whole pixels, as the events have them
    page.mouse.move(*mouse)
    page.wait_for_function("() => document.querySelector('#tooltip').style.display === 'block'")
    assert page.inner_text("#tooltip").startswith("queries ")  # a pooled cell
    assert "zoom in for single cells" in page.inner_text("#tooltip")  # which this page has
    for _ in range(8):  # the pointer stays; the wheel zooms about it
        before = _layout(page)["drawn"]
        page.mouse.wheel(0, -400)
        _redrawn(page, before)
        tip = page.inner_text("#tooltip") if page.is_visible("#tooltip") else None
        if tip is None:
            continue
        d, box = _layout(page), page.locator("#matrix").bounding_box()
        factor = int(d["factor"])
        under = (int(d["y0"] + (mouse[1] - box["y"] - d["top"]) * d["tpp"]),  # the token under the pointer now
                 int(d["x0"] + (mouse[0] - box["x"] - d["left"]) * d["tpp"]))
        if factor == 1:  # the tooltip is the single cell under the pointer
            assert tip.startswith(f"query {under[0]}: t{under[0]}\nkey {under[1]}: t{under[1]}\n"), (tip, under)
            assert float(tip.rsplit(":", 1)[1]) == pytest.approx(float(weights[0, under[0], under[1]]), abs=3e-4)
        else:  # the pooled cell of the level drawn
            first = (under[0] // factor * factor, under[1] // factor * factor)
            assert tip.startswith(f"queries {first[0]}–{first[0] + factor - 1} (t{first[0]} …) × "
                                  f"keys {first[1]}–{first[1] + factor - 1} "), (tip, under)
    assert int(page.get_attribute("#matrix", "data-factor")) == 1
    assert errors == [] and requests == [path.as_uri()]
    page.close()


@pytest.fixture(scope="module")
def pooled_page(tmp_path_factory):
    """1,100 causal tokens of two heads in a page whose budget holds only their pooled levels."""
    return _softmax_page(tmp_path_factory.mktemp("pooled4"), 1100, heads=2, causal=True, budget=200_000)


def test_a_page_without_single_cells_never_offers_them_and_labels_each_cell(browser, pooled_page):
    path, _, builder = pooled_page
    held = builder.kinds["self"]["included"]
    factor = builder.kinds["self"]["levels"][held - 1]["factor"]
    assert factor > 1
    requests: list[str] = []
    errors: list[str] = []
    page = _open_matrix(browser, path, requests, errors)
    before = _layout(page)["drawn"]
    page.evaluate("window.attnviz.matrix.zoomTo(900, 300, 40)")  # as far in as it goes
    _redrawn(page, before)
    assert int(page.get_attribute("#matrix", "data-factor")) == factor
    page.mouse.move(*_cell_centre(page, 900, 300))
    page.wait_for_function("() => document.querySelector('#tooltip').style.display === 'block'")
    tip = page.inner_text("#tooltip")
    assert "max-pooled" in tip and "zoom in for single cells" not in tip
    assert f"no finer cells than {factor}×{factor}" in tip
    # One row label per row of cells in sight, naming its tokens' range.
    d = _layout(page)
    first, last = d["y0"], min(d["y0"] + d["h"] * d["tpp"], 1100)
    cells = [c for c in range(int(first // factor), int(last // factor) + 1) if first <= (c + 0.5) * factor <= last]
    rows = page.eval_on_selector_all("#matrixrows .tok", "(s) => s.map((x) => [+x.dataset.index, x.textContent])")
    assert [i for i, _ in rows] == [c * factor for c in cells]
    for i, text in rows:
        assert text.startswith(f"{i}–{i + factor - 1} t{i} ")
    cols = page.eval_on_selector_all("#matrixcols .tok", "(s) => s.map((x) => x.textContent)")
    assert cols and all(re.match(r"\d+–\d+ ", text) for text in cols)
    assert errors == [] and requests == [path.as_uri()]
    page.close()


from test_atlas_data import TEXTS as ATLAS_TEXTS  # noqa: E402 (the atlas tests' seven texts)


@pytest.fixture(scope="module")
def atlas_page(tmp_path_factory):
    from typer.testing import CliRunner

    from attnviz.cli import app

    root = tmp_path_factory.mktemp("atlas4")
    texts = root / "texts.txt"
    texts.write_text("\n".join(ATLAS_TEXTS) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["atlas", str(texts), "--out", str(root / "atlas.html")])
    assert result.exit_code == 0, result.output
    return root / "atlas.html"


@pytest.mark.parametrize("size", [(1300, 900), (900, 900), (600, 900)])
def test_the_atlas_brings_a_chosen_heads_details_into_sight(browser, atlas_page, size):
    tab = browser.new_page(viewport={"width": size[0], "height": size[1]})
    tab.goto(atlas_page.as_uri())
    tab.wait_for_function("() => document.body.dataset.ready === '1'")
    chosen = tab.locator("#atlasrank li").nth(12)
    chosen.click()
    tab.wait_for_selector("#atlashist")
    title = tab.locator("#atlashead h2").bounding_box()
    histogram = tab.locator("#atlashist").bounding_box()
    height = tab.evaluate("window.innerHeight")
    assert title["y"] >= -1 and histogram["y"] + histogram["height"] <= height, (title, histogram)
    layer, head = chosen.get_attribute("data-layer"), chosen.get_attribute("data-head")
    assert tab.inner_text("#atlashead h2") == f"Layer {layer}, head {head}"
    tab.close()
