"""The interactive page (issue 13): its data equals the model's attention to the quantisation step,
and in a real browser (Debian's chromium, driven by Playwright) it draws every view, with no
request to any network. Without chromium the browser tests skip here, and fail under CI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import open_offline

import attnviz
from attnviz import api
from attnviz.render.html import page_html, render_html
from attnviz.render.page import PageBuilder, head_values

TEXT = "The cat sat on the mat because it was tired."


@pytest.fixture(scope="module")
def minilm():
    return api.load()


def test_short_pages_store_half_floats_and_long_ones_a_byte_on_a_log_scale():
    assert PageBuilder("t", "m", cells=10).encoding == "f16" and PageBuilder("t", "m", cells=10**8).encoding == "log8"


def test_the_page_holds_every_head_of_every_layer(minilm):
    page = api.page_view(minilm, TEXT)
    result = attnviz.extract(TEXT)
    kind = page.kinds["self"]
    assert kind["rows"] == result.tokens and kind["layers"] == list(range(6)) and kind["heads"] == 12
    assert kind["encoding"] == "f16" and kind["included"] == len(kind["levels"]) == 1
    for layer in (0, 5):
        for head in (0, 7):
            got = head_values(kind, layer, head)
            np.testing.assert_allclose(got, result.attentions[layer, head].numpy(), rtol=2.0**-11, atol=1e-7)
    rows = {(r[0], r[1]): r for r in page.stats["rows"]}
    table = api.heads_of(minilm, [TEXT]).rows()
    entropy = page.stats["columns"].index("entropy")
    assert all(rows[(t["layer"], t["head"])][entropy] == pytest.approx(t["entropy"], abs=1e-6) for t in table)
    text = page_html(page)
    assert "http://" not in text.split('id="attnviz-data"')[0] and "https://" not in text
    assert "default-src 'none'" in text


def test_view_command_and_html_everywhere(run_cli, tmp_path):
    r = run_cli("view", TEXT, "--page", str(tmp_path / "p.html"), "--layer", "2", "--head", "3")
    assert r.exit_code == 0, r.stderr
    data = _data(tmp_path / "p.html")
    assert data["kinds"]["self"]["layers"] == [2] and data["initial"]["head"] == 3
    r = run_cli("view", TEXT, "--page", str(tmp_path / "p.png"))
    assert r.exit_code == 2 and "must end in .html" in r.stderr
    r = run_cli("view", TEXT, "--page", str(tmp_path / "q.html"), "--head", "12")
    assert r.exit_code == 2 and "--head 12 is out of range" in r.stderr
    r = run_cli("heatmap", TEXT, "--layer", "1", "--head", "4", "--out", str(tmp_path / "h.html"))
    assert r.exit_code == 0 and _data(tmp_path / "h.html")["initial"]["view"] == "matrix", r.stderr
    r = run_cli("heatmap", TEXT, "--out", str(tmp_path / "v.html"), "--vmax", "0.5")
    assert r.exit_code == 2 and "--vmax are for pictures" in r.stderr
    r = run_cli("compare-heads", TEXT, "--layer", "2", "--out", str(tmp_path / "c.html"))
    assert r.exit_code == 0, r.stdout
    compared = _data(tmp_path / "c.html")
    assert compared["initial"]["view"] == "extras" and compared["kinds"]["self"]["layers"] == [2]
    distances = compared["extras"][0]
    from attnviz.analysis import metrics

    exact = metrics.head_distance(attnviz.extract(TEXT).attentions[2:3]).numpy()
    index = {name: int(name.split("H")[1]) for name in distances["rows"]}
    for i, a in enumerate(distances["rows"]):
        for j, b in enumerate(distances["cols"]):
            assert distances["values"][i][j] == pytest.approx(exact[index[a], index[b]], rel=1e-3, abs=1e-6)
    texts = tmp_path / "t.txt"
    texts.write_text("The cat sat.\nA dog ran.\n")
    r = run_cli("export", str(texts), "--out", str(tmp_path / "e"), "--formats", "html,json", "--layer", "0,3", "-q")
    assert r.exit_code == 0, r.stderr
    entry = json.loads((tmp_path / "e" / "manifest.jsonl").read_text().splitlines()[1])
    assert "000001-a-dog-ran.html" in entry["files"]
    exported = _data(tmp_path / "e" / "000001-a-dog-ran.html")
    assert exported["kinds"]["self"]["layers"] == [0, 3] and exported["stats"]["rows"]


def _data(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    blob = re.search(r'<script type="application/json" id="attnviz-data">(.*?)</script>', text, re.S).group(1)
    return json.loads(blob.replace("<\\/", "</"))


# --- in a real browser (the session's one chromium: conftest's browser fixture) --------------------


def _image(png: bytes):
    import io

    from matplotlib import image

    return image.imread(io.BytesIO(png), format="png")


def _drawn(page, selector: str) -> bool:
    return page.evaluate(f"""() => {{ const c = document.querySelector('{selector}');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        for (let i = 3; i < d.length; i += 4) if (d[i] > 0) return true; return false; }}""")


def _frames(page) -> None:
    """Wait until the page has drawn the frame after now: what an event asked of requestAnimationFrame is done."""
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


def _click_still(page, selector: str) -> None:
    """Click ``selector`` once the pointer rests on it and the page has redrawn for it. The head view rebuilds its
    tokens and the buttons above it on each frame after the pointer moves; a frame between the press and the
    release (a loaded machine) would put them on two different elements, and no click would happen."""
    page.hover(selector)
    _frames(page)
    page.click(selector)


def test_every_view_draws_offline(browser, minilm, tmp_path):
    result = attnviz.extract(TEXT)
    path = render_html(api.page_view(minilm, TEXT), tmp_path / "p.html")
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, path, requests, errors)
    # Decoded in the browser, equal to the model's weights within half a quantisation step.
    for layer, head, i, j in ((0, 0, 1, 2), (3, 7, 5, 0), (5, 11, 12, 12)):
        got = page.evaluate(f"window.attnviz.weight('self', {layer}, {head}, {i}, {j})")
        assert got == pytest.approx(float(result.attentions[layer, head, i, j]), abs=3e-4)
    # The tokens are on the page, and a screenshot is not blank.
    assert page.evaluate("window.attnviz.data.kinds.self.rows") == result.tokens
    shot = _image(page.screenshot())
    assert (shot[..., :3] < 0.9).mean() > 0.01  # more than a white page with a title
    assert page.locator("#steps").count() == 0  # no step slider: this text was not generated
    # Head view: lines drawn, the tokens text; hovering a query token keeps only its row, which changes what is drawn.
    assert _drawn(page, "#headview")
    assert page.locator("#headrows .htok").all_inner_texts() == result.tokens
    assert page.locator("#headcols .htok").all_inner_texts() == result.tokens
    before = page.evaluate("document.querySelector('#headview').toDataURL()")
    page.hover("#headrows .htok[data-i='3']")
    page.wait_for_function("() => window.attnviz.state.hoverRow === 3")
    page.wait_for_function("(b) => document.querySelector('#headview').toDataURL() !== b", arg=before)
    assert int(page.get_attribute("#headview", "data-lines")) == len(result.tokens)  # its row: a line per key
    page.hover("#headcols .htok[data-i='2']")
    page.wait_for_function("() => window.attnviz.state.hoverCol === 2 && window.attnviz.state.hoverRow === -1")
    # Switching the layer redraws the head view from that layer's weights.
    box = page.locator("#headview").bounding_box()
    page.mouse.move(box["x"] + 700, box["y"] + 700)
    page.wait_for_function("() => window.attnviz.state.hoverCol === -1 && window.attnviz.state.hoverRow === -1")
    _frames(page)  # redrawn without the hovered token, before the picture to compare with is taken
    shown = page.evaluate("document.querySelector('#headview').toDataURL()")
    page.select_option("#layer", "4")
    page.wait_for_function("(b) => document.querySelector('#headview').toDataURL() !== b", arg=shown)
    assert page.evaluate("window.attnviz.state.layer") == 4
    # Model view: every layer x head drawn; a click opens that head large.
    page.click("nav.tabs button[data-view=model]")
    page.wait_for_function("() => document.querySelectorAll('#modelgrid canvas[data-drawn]').length === 72")
    # Every canvas says what it shows to a screen reader.
    assert page.evaluate("[...document.querySelectorAll('canvas')].filter((c) => !c.getAttribute('aria-label')).length") == 0
    page.click("#modelgrid canvas[data-layer='4'][data-head='9']")
    page.wait_for_selector("#view-matrix.active #matrix[data-drawn]")
    _frames(page)  # laid out as drawn, before its geometry is read
    assert page.evaluate("[window.attnviz.state.layer, window.attnviz.state.head]") == [4, 9]
    assert _drawn(page, "#matrix")
    # The tooltip names query, key and weight.
    left, top, tpp = (float(page.get_attribute("#matrix", a)) for a in ("data-left", "data-top", "data-tpp"))
    cell = 1 / tpp  # the whole matrix in sight: pixels a token
    box = page.locator("#matrix").bounding_box()
    page.mouse.move(box["x"] + left + 2 * cell + cell / 2, box["y"] + top + 1 * cell + cell / 2)
    page.wait_for_function("() => document.querySelector('#tooltip').style.display === 'block'")
    tip = page.inner_text("#tooltip")
    expected = float(result.attentions[4, 9, 1, 2])
    assert f"query 1: {result.tokens[1]}" in tip and f"key 2: {result.tokens[2]}" in tip
    assert float(tip.rsplit(":", 1)[1]) == pytest.approx(expected, abs=2e-4)
    # The heads table sorts by a column and opens a head.
    page.click("nav.tabs button[data-view=table]")
    page.click("table.heads th:has-text('prev_score')")
    first = page.locator("table.heads tbody tr").first.locator("td")
    layer, head = int(first.nth(0).inner_text()), int(first.nth(1).inner_text())
    table = api.heads_of(minilm, [TEXT]).rows()
    best = max(table, key=lambda r: r["prev_score"])
    assert (layer, head) == (best["layer"], best["head"])
    page.locator("table.heads tbody tr").first.click()
    page.wait_for_selector("#view-matrix.active")
    assert page.evaluate("[window.attnviz.state.layer, window.attnviz.state.head]") == [layer, head]
    # Clicking a query token in the head view keeps its lines and lists its strongest keys, in the order of
    # the weights; from there, what it attends to in every layer and head.
    page.click("nav.tabs button[data-view=head]")
    page.wait_for_selector("#headview[data-drawn]")
    _click_still(page, "#headrows .htok[data-i='6']")
    page.wait_for_function("() => window.attnviz.state.query === 6")  # kept (hovering alone lists its keys too)
    page.wait_for_selector("#headtop .chip-token")
    layer, heads = page.evaluate("[window.attnviz.state.layer, [...window.attnviz.state.enabled]]")
    assert len(heads) == 1
    head = heads[0]
    listed = [int(i) for i in page.eval_on_selector_all("#headtop .chip-token", "(b) => b.map((x) => x.dataset.i)")]
    strongest = result.attentions[layer, head, 6].argsort(descending=True)[: len(listed)].tolist()
    assert listed == strongest and page.evaluate("window.attnviz.state.query") == 6
    _click_still(page, "#headquery")
    page.wait_for_selector("#view-query.active #queryview[data-drawn='6']")
    assert _drawn(page, "#queryview")
    assert errors == [] and requests == [path.as_uri()]


def test_cross_attention_has_its_own_axes(browser, tiny_hf, tmp_path):
    source = api.load(tiny_hf["bart"])
    result = source.extract("Der Hund jagt die Katze.", target="The dog chased the cat.")
    path = render_html(api.page_view(source, "Der Hund jagt die Katze.", target="The dog chased the cat.",
                                     kind="cross", view="matrix"), tmp_path / "x.html")
    errors: list[str] = []
    page = browser.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_selector("#matrix[data-drawn]")
    kind = page.evaluate("window.attnviz.data.kinds.cross")
    assert kind["rows"] == result.target_tokens and kind["cols"] == result.tokens
    got = page.evaluate("window.attnviz.weight('cross', 1, 0, 2, 3)")
    assert got == pytest.approx(float(result.cross_attentions[1, 0, 2, 3]), abs=3e-4)
    assert set(page.evaluate("Object.keys(window.attnviz.data.kinds)")) == {"self", "decoder", "cross"}
    assert errors == []


def test_the_notebook_frame_draws_the_page(browser, tmp_path):
    result = attnviz.extract("The cat sat.")
    outer = tmp_path / "notebook.html"
    outer.write_text(f"<!DOCTYPE html><html><body>{result._repr_html_()}</body></html>", encoding="utf-8")
    page = browser.new_page()
    page.goto(outer.as_uri())
    frame = page.frame_locator("iframe")
    frame.locator("#headview[data-drawn]").wait_for()
    assert frame.locator("#title").inner_text().startswith("all-MiniLM-L6-v2")


def test_query_and_key_vectors_are_the_models(tiny_hf):
    """details=True gives each head's q and k: equal to transformers' own projections (BERT, layer 0),
    and q·k/√d equal to the scores."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = tiny_hf["bert"]
    result = attnviz.extract("the cat sat on the mat", model=folder, details=True, engine="native")
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    ids = AutoTokenizer.from_pretrained(folder)("the cat sat on the mat", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        hidden = model.embeddings(input_ids=ids)
        attention = model.encoder.layer[0].attention.self
        heads, d = model.config.num_attention_heads, model.config.hidden_size // model.config.num_attention_heads
        q = attention.query(hidden)[0].view(-1, heads, d).transpose(0, 1)
        k = attention.key(hidden)[0].view(-1, heads, d).transpose(0, 1)
    assert torch.allclose(result.queries[0], q, atol=1e-5) and torch.allclose(result.keys[0], k, atol=1e-5)
    scaled = result.queries @ result.keys.transpose(-1, -2) / d**0.5
    assert torch.allclose(scaled, result.scores, atol=1e-5)


def test_the_query_key_view_shows_the_products(browser, minilm, tmp_path):
    result = attnviz.extract("The cat sat on the mat.", details=True)
    path = render_html(api.page_view(minilm, "The cat sat on the mat.", view="qk"), tmp_path / "qk.html")
    page = browser.new_page()
    page.goto(path.as_uri())
    page.evaluate("window.attnviz.select(2, 5)")
    page.select_option("#query", "3")
    page.wait_for_selector("#qkbox .qkrow[data-key='4'] .scaled")
    for j in (0, 4):
        row = page.locator(f"#qkbox .qkrow[data-key='{j}']")
        scaled = float(row.locator(".scaled").inner_text())
        weight = float(row.locator(".weight").inner_text())
        assert scaled == pytest.approx(float(result.scores[2, 5, 3, j]), abs=2e-3 + 2e-3 * abs(scaled))
        assert weight == pytest.approx(float(result.attentions[2, 5, 3, j]), abs=1e-3)


def test_the_query_key_view_fits_the_window_and_colours_by_sign(browser, minilm, tmp_path):
    """The query · key view as a picture (bertviz's neuron view): at 1280 px no horizontal scroll bar, q's
    cells blue where q_c < 0 and red where q_c > 0, each row's score and scaled score q·k_j/√d as text, and
    a cell's tooltip naming q_c, k_c and their product."""
    text = "The cat sat on the mat."
    result = attnviz.extract(text, details=True)
    path = render_html(api.page_view(minilm, text, view="qk"), tmp_path / "qk.html")
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.evaluate("window.attnviz.select(2, 5)")
    page.select_option("#query", "3")
    page.wait_for_selector("#qkbox .qkrow[data-key='8'] .scaled")
    for box in ("#qkbox", "#qkbox .qkscroll"):
        width, room = page.evaluate(f"(() => {{ const b = document.querySelector('{box}'); return [b.scrollWidth, b.clientWidth]; }})()")
        assert width <= room + 1, (box, width, room)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    q = result.queries[2, 5, 3]
    d = q.shape[0]
    cell = int(page.get_attribute("#qkbox canvas.qvec", "data-cell"))
    assert cell >= 2 and page.evaluate("document.querySelector('#qkbox canvas.qvec').getAttribute('aria-label')")

    def colour(c: int) -> list[int]:  # the q row's cell of component c, in the first block (k's)
        return page.evaluate(f"""(() => {{ const canvas = document.querySelector('#qkbox canvas.qvec');
            const s = canvas.width / canvas.clientWidth, x = +canvas.dataset.x.split(',')[0] + ({c} + 0.5) * {cell};
            return [...canvas.getContext('2d').getImageData(Math.floor(x * s), Math.floor(canvas.height / 2), 1, 1).data]; }})()""")

    r, _, b, _ = colour(int(q.argmin()))
    assert b > r + 60, ("the most negative component is not blue", r, b)
    r, _, b, _ = colour(int(q.argmax()))
    assert r > b + 60, ("the most positive component is not red", r, b)
    # Every key has its row: the score and the scaled score as text.
    keys = page.locator("#qkbox .qkrow")
    assert keys.count() == len(result.tokens)
    row = page.locator("#qkbox .qkrow[data-key='2']")
    dot = float((result.queries[2, 5, 3] * result.keys[2, 5, 2]).sum())
    assert float(row.locator(".dot").inner_text()) == pytest.approx(dot, abs=2e-3 + 2e-3 * abs(dot))
    assert float(row.locator(".scaled").inner_text()) == pytest.approx(dot / d**0.5, abs=2e-3 + 2e-3 * abs(dot))
    # The tooltip of key 2's cell of component c names the component, q_c, k_c and their product.
    c = 5
    box = row.locator("canvas").bounding_box()
    page.mouse.move(box["x"] + (c + 0.5) * cell, box["y"] + box["height"] / 2)
    page.wait_for_function("() => document.querySelector('#tooltip').style.display === 'block'")
    tip = page.inner_text("#tooltip")
    k = float(result.keys[2, 5, 2, c])
    assert f"component {c}" in tip and f"key 2 “{result.tokens[2]}”" in tip
    got = {line.split(" = ")[0]: float(line.split(" = ")[1]) for line in tip.splitlines()[1:]}
    assert got[f"q_{c}"] == pytest.approx(float(q[c]), abs=1e-3) and got[f"k_{c}"] == pytest.approx(k, abs=1e-3)
    assert got[f"q_{c} · k_{c}"] == pytest.approx(float(q[c]) * k, abs=1e-3)
    # → moves the query.
    page.mouse.click(5, 5)
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.querySelector('#query').value === '4'")
    assert errors == []
