"""The page's matrix at any length (issue 29), in Debian's chromium: zoom with the wheel down to one cell,
whose tokens are text on the page and whose value equals the model's weight; find a token by its
text and go to it; a long matrix the page holds only pooled says so, opens on the matrix, and zooms,
moves and changes its colour scale."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from conftest import open_offline

import attnviz
from attnviz import api
from attnviz.render.html import render_html
from attnviz.render.page import PageBuilder

pytestmark = pytest.mark.slow

WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "ran", "around", "gardens", "and", "birds", "sang"]


@pytest.fixture(scope="module")
def zoomable(tmp_path_factory):
    """A 300-token text on the default model, one layer's page (half floats), and its result."""
    random.seed(5)
    text = " ".join(random.choice(WORDS) for _ in range(290)) + " zebra " + " ".join(random.choice(WORDS) for _ in range(7))
    minilm = api.load()
    result = attnviz.extract(text, layers=[2])
    path = render_html(api.page_view(minilm, text, layer=2, stats=False), tmp_path_factory.mktemp("zoom") / "z.html")
    return path, result


def _layout(page) -> dict[str, float]:
    return page.evaluate("() => Object.fromEntries(['left', 'top', 'x0', 'y0', 'tpp', 'drawn'].map("
                         "(k) => [k, +document.querySelector('#matrix').dataset[k]]))")


def _cell_centre(page, i: int, j: int) -> tuple[float, float]:
    d, box = _layout(page), page.locator("#matrix").bounding_box()
    return box["x"] + d["left"] + (j + 0.5 - d["x0"]) / d["tpp"], box["y"] + d["top"] + (i + 0.5 - d["y0"]) / d["tpp"]


def _redrawn(page, before: float) -> None:
    page.wait_for_function("(b) => +document.querySelector('#matrix').dataset.drawn !== b", arg=before)


def _wheel_to(page, i: int, j: int, *, px: float = 24, turns: int = 8) -> None:
    """The wheel over query i's cell at key j, a turn at a time, until a token is ``px`` wide (or ``turns``
    are done): a zoom keeps the cell under the pointer."""
    for _ in range(turns):
        page.mouse.move(*_cell_centre(page, i, j))
        before = _layout(page)["drawn"]
        page.mouse.wheel(0, -400)
        _redrawn(page, before)
        if 1 / _layout(page)["tpp"] >= px:
            break


def test_the_wheel_zooms_to_a_cell_whose_tokens_are_text_and_whose_value_is_the_weight(browser, zoomable):
    path, result = zoomable
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, path, requests, errors)
    page.click("nav.tabs button[data-view=matrix]")
    page.wait_for_selector("#matrix[data-drawn]")
    start = _layout(page)
    assert 1 / start["tpp"] < 10  # the whole matrix: tokens a few pixels wide, their text not shown yet
    assert page.locator("#matrixrows .tok").count() < 20
    i, j = 200, 150
    _wheel_to(page, i, j)  # until a token is 24 px wide
    assert 1 / _layout(page)["tpp"] >= 24
    # The tokens of that row and column are text on the page (the browser's find reads them).
    assert page.inner_text(f"#matrixrows .tok[data-index='{i}']") == result.tokens[i]
    assert page.inner_text(f"#matrixcols .tok[data-index='{j}']") == result.tokens[j]
    page.mouse.move(*_cell_centre(page, i, j))
    page.wait_for_function("() => document.querySelector('#tooltip').style.display === 'block'")
    tip = page.inner_text("#tooltip")
    assert f"query {i}: {result.tokens[i]}" in tip and f"key {j}: {result.tokens[j]}" in tip
    # half floats (to 2.5e-4 below 1), shown to 4 decimals
    assert float(tip.rsplit(":", 1)[1]) == pytest.approx(float(result.attentions[0, 0, i, j]), abs=3e-4)
    assert "one cell = one query × one key" in page.inner_text("#matrixinfo")
    # Clicking a token's text picks it: its row is the query every view follows.
    page.click(f"#matrixrows .tok[data-index='{i + 1}']")
    page.wait_for_selector(f"#matrixrows .tok.picked[data-index='{i + 1}']")
    assert page.evaluate("window.attnviz.state.query") == i + 1
    # Keys: 0 shows the whole matrix again.
    page.focus("#matrix")
    before = _layout(page)["drawn"]
    page.keyboard.press("0")
    _redrawn(page, before)
    assert _layout(page)["tpp"] == pytest.approx(start["tpp"])
    assert errors == [] and requests == [path.as_uri()]


def test_a_token_found_by_its_text_opens_where_it_is(browser, zoomable):
    path, result = zoomable
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, path, requests, errors)
    where = result.tokens.index("zebra")
    page.fill("#findtext", "ZEB")  # any case, any part of a token
    assert page.inner_text("#findcount") == f"1 of {len(result.tokens)} tokens"
    page.press("#findtext", "Enter")  # in the head view: its row kept, scrolled into sight, its text on the page
    assert page.evaluate("[window.attnviz.head.pinned.row, window.attnviz.state.query]") == [where, where]
    scrolled = page.evaluate("document.querySelector('#headscroll').scrollTop")
    assert scrolled <= 8 + where * 18 <= scrolled + page.evaluate("document.querySelector('#headscroll').clientHeight")
    assert page.inner_text(f"#headrows .htok.marked[data-i='{where}']") == "zebra"
    assert page.locator("#headrows .htok").count() < 120  # only the tokens in sight (and a few more) are drawn
    page.click("nav.tabs button[data-view=matrix]")
    page.press("#findtext", "Enter")  # in the matrix: zoomed to its row, the row picked
    page.wait_for_selector(f"#matrixrows .tok.picked[data-index='{where}']")
    assert page.inner_text(f"#matrixrows .tok.picked[data-index='{where}']") == "zebra"
    assert page.evaluate("window.attnviz.state.query") == where
    assert f"position {where}" in page.inner_text("#findcount")
    d = _layout(page)
    assert d["y0"] <= where <= d["y0"] + 600 * d["tpp"]  # its row is in sight
    page.fill("#findtext", "no such token")
    assert page.inner_text("#findcount").startswith("0 of")
    assert errors == [] and requests == [path.as_uri()]


@pytest.fixture(scope="module")
def pooled_page(tmp_path_factory):
    """A 1,100-token causal layer of two heads in a page whose budget holds only its pooled levels."""
    rng = np.random.default_rng(7)
    n = 1100
    scores = rng.normal(size=(2, n, n)) * 3
    scores[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights = (weights / weights.sum(-1, keepdims=True)).astype(np.float32)
    builder = PageBuilder("long", "synthetic", cells=weights.size, layers=1, budget=200_000)
    tokens = [f"t{i}" for i in range(n)]
    builder.add_layer(0, weights, rows=tokens, cols=tokens, causal=True)
    page = builder.finish(initial={"kind": "self", "layer": 0, "head": 0, "view": "head"})
    return render_html(page, tmp_path_factory.mktemp("pooled") / "p.html"), weights, builder


def test_a_matrix_held_pooled_says_so_and_still_zooms(browser, pooled_page):
    path, weights, builder = pooled_page
    held = builder.kinds["self"]["included"]
    factor = builder.kinds["self"]["levels"][held - 1]["factor"]
    assert factor > 1  # the budget left the single cells out
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, path, requests, errors)  # the head view, from each query's strongest keys
    assert page.evaluate("window.attnviz.state.view") == "head"  # (issue 50 B.7: not the matrix)
    page.click("nav.tabs button[data-view=matrix]")
    page.wait_for_selector("#matrix[data-drawn]")
    assert f"down to {factor}×{factor} tokens" in page.inner_text("#notes")
    assert page.input_value("#scale") == "log"  # a long context opens on the log scale
    # At the whole matrix, a cell covers several tokens: the tooltip says it shows their strongest weight.
    page.mouse.move(*_cell_centre(page, 604, 300))
    page.wait_for_function("() => document.querySelector('#tooltip').style.display === 'block'")
    tip = page.inner_text("#tooltip")
    assert "max-pooled" in tip
    pooled = int(page.get_attribute("#matrix", "data-factor"))
    match = re.search(r"queries (\d+)–(\d+) .* keys (\d+)–(\d+)", tip)
    rows, cols = (int(match[1]), int(match[2])), (int(match[3]), int(match[4]))
    assert rows[0] <= 604 <= rows[1] and cols[0] <= 300 <= cols[1] and rows[1] - rows[0] + 1 == pooled
    strongest = weights[0, rows[0] : rows[1] + 1, cols[0] : cols[1] + 1].max()
    assert float(tip.split("strongest attention weight: ")[1].split(" ")[0]) == pytest.approx(strongest, rel=2e-3)
    # Zoomed in past what the page holds (the wheel below the diagonal, then a key): the finest level it
    # has, and a note saying so.
    _wheel_to(page, 900, 300, px=40, turns=5)  # (40 px a token is as far as it goes)
    tpp = _layout(page)["tpp"]
    page.focus("#matrix")
    before = _layout(page)["drawn"]
    page.keyboard.press("+")
    _redrawn(page, before)
    assert _layout(page)["tpp"] == pytest.approx(max(tpp / 2, 1 / 40))
    assert int(page.get_attribute("#matrix", "data-factor")) == factor
    assert "finer cells are not in this page" in page.inner_text("#matrixinfo")
    # Another colour scale draws other colours; the legend names it.
    before = page.evaluate("document.querySelector('#matrix').toDataURL()")
    page.select_option("#scale", "rank")
    page.wait_for_function("(b) => document.querySelector('#matrix').toDataURL() !== b", arg=before)
    assert "rank" in page.inner_text("#legendtext")
    # The minimap shows the whole matrix; a click there moves the view.
    assert page.is_visible("#minimap")
    y0 = _layout(page)["y0"]
    box = page.locator("#minimap").bounding_box()
    before = _layout(page)["drawn"]
    page.mouse.click(box["x"] + box["width"] * 0.1, box["y"] + box["height"] * 0.1)  # near the first tokens
    _redrawn(page, before)
    assert y0 > 800 and _layout(page)["y0"] < 200
    # The head view draws each query's strongest keys the page holds, whose weights and order are the matrix's.
    page.click("nav.tabs button[data-view=head]")
    page.wait_for_selector("#headview[data-drawn]")
    assert "4 strongest keys" in page.inner_text("#headtop")
    page.fill("#findtext", "t604")
    page.press("#findtext", "Enter")
    page.wait_for_selector("#headtop .chip-token")
    listed = page.eval_on_selector_all("#headtop .chip-token", "(b) => b.map((x) => [+x.dataset.i, +x.querySelector('b').textContent])")
    strongest = np.argsort(-weights[0, 604])[:4]
    assert [key for key, _ in listed] == strongest.tolist()
    assert [w for _, w in listed] == pytest.approx(weights[0, 604, strongest].tolist(), rel=1e-3)  # half floats
    # The One token view draws the same keys (the others empty), and says why.
    page.click("#headquery")
    page.wait_for_selector("#view-query.active #queryview[data-drawn='604']")
    assert "4 strongest keys" in page.inner_text("#querynote")
    assert errors == [] and requests == [path.as_uri()]


def test_the_served_page_zooms_into_exact_cells_from_the_server(browser):
    import signal

    from test_serve import _start

    proc, url = _start()  # the default model
    try:
        random.seed(9)
        text = " ".join(random.choice(WORDS) for _ in range(300))
        asked: list[str] = []
        errors: list[str] = []
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("request", lambda r: asked.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url + "/")
        page.wait_for_selector("#headview[data-drawn]")
        page.fill("#live-text", text)
        page.wait_for_function("() => window.attnviz.data.kinds.self.rows.length > 300", timeout=60_000)
        page.click("nav.tabs button[data-view=matrix]")
        page.wait_for_selector("#matrix[data-drawn]")
        page.select_option("#layer", "3")
        i, j = 250, 20
        _wheel_to(page, i, j)
        page.mouse.move(*_cell_centre(page, i, j))
        page.wait_for_function("() => document.querySelector('#tooltip').style.display === 'block'")
        tip = page.inner_text("#tooltip")
        result = attnviz.extract(text)
        assert f"query {i}: {result.tokens[i]}" in tip and f"key {j}: {result.tokens[j]}" in tip
        # This page stores single cells as a byte; the server sends them exactly (3 digits shown).
        assert any("/api/tile?" in u for u in asked)
        assert float(tip.rsplit(":", 1)[1]) == pytest.approx(float(result.attentions[3, 0, i, j]), rel=6e-3)
        page.close()
        assert errors == []
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
