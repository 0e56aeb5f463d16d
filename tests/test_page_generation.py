"""The page of a generated text (issue 14): a step slider over the generated tokens. The page's data
says where the prompt ends; in a real browser (conftest's chromium) the slider is keyboard-driven,
chooses the One token view's query, veils what comes after the step in the head view, the matrix
and the One token view, and the numbers shown at a step are that token's row of the result.

The results are built by hand (a lower-triangular softmax, as :func:`attnviz.generate` returns),
so no language model runs here; tests/test_generate.py checks the rows against transformers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from conftest import ROOT, open_offline

from attnviz.api import page_of_result
from attnviz.render.html import render_html
from attnviz.result import AttentionResult

TOKENS = ["The", "cat", "sat", "on", "the", "mat", "because", "it"]
PROMPT = 3  # "The cat sat" | "on the mat because it" generated
LAYERS, HEADS = 2, 3
CAUSAL = str(ROOT / "sample_configs" / "causal.toml")


def _softmax_rows(n: int, seed: int, *, causal: bool = True) -> torch.Tensor:
    scores = torch.randn(LAYERS, HEADS, n, n, generator=torch.Generator().manual_seed(seed)) * 2
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1)


def _generated(**metadata) -> AttentionResult:
    return AttentionResult(tokens=TOKENS, attentions=_softmax_rows(len(TOKENS), 0), causal=True, model_name="tiny-lm",
                           metadata={"generation": True, "prompt_length": PROMPT, **metadata})


def _seq2seq() -> AttentionResult:
    """An encoder-decoder's generation, laid out as attnviz/generation/seq2seq.py lays it out."""
    source, target = ["Der", "Hund", "bellt", "</s>"], ["<s>", "The", "dog", "barks", "</s>"]
    cross = torch.randn(LAYERS, HEADS, len(target), len(source), generator=torch.Generator().manual_seed(2)).softmax(-1)
    return AttentionResult(tokens=source, attentions=_softmax_rows(len(source), 1, causal=False), model_name="tiny-t5",
                           decoder_attentions=_softmax_rows(len(target), 3), cross_attentions=cross,
                           target_tokens=target, target_special=[True, False, False, False, True],
                           metadata={"generation": True, "encoder_decoder": True, "target_start": 1})


def _data(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    blob = re.search(r'<script type="application/json" id="attnviz-data">(.*?)</script>', text, re.S).group(1)
    return json.loads(blob.replace("<\\/", "</"))


def test_the_page_data_says_where_the_prompt_ends(tmp_path):
    page = page_of_result(_generated(), view="query")
    assert page.generation == {"promptLength": 3, "generated": 5, "kinds": ["self"], "keyKinds": ["self"]}
    assert page.initial["query"] == 3  # opened on the first generated token
    saved = AttentionResult.load(_generated().save(tmp_path / "g.npz"))  # what `generate --out g.npz` keeps
    data = _data(render_html(page_of_result(saved), tmp_path / "g.html"))
    assert data["generation"] == page.generation and data["initial"]["query"] == 3
    # Not a generation, or positions that no longer hold: no slider, and the page as before.
    plain = page_of_result(AttentionResult(tokens=TOKENS, attentions=_softmax_rows(len(TOKENS), 0), causal=True))
    assert plain.generation is None and "query" not in plain.initial and plain.data()["generation"] is None
    for metadata in ({"words": True}, {"special_removed": True}, {"prompt_length": 0}, {"prompt_length": 9},
                     {"prompt_length": "3"}, {"prompt_length": True}, {"generation": False}):
        assert page_of_result(_generated(**metadata)).generation is None, metadata
    everything = page_of_result(_generated(prompt_length=len(TOKENS)))  # nothing generated (stopped at once)
    assert everything.generation["generated"] == 0 and everything.initial["query"] == len(TOKENS) - 1
    # An encoder-decoder: the steps are the decoder's target tokens, as its rows (and keys) and cross-attention rows.
    seq2seq = page_of_result(_seq2seq(), kind="decoder")
    assert seq2seq.generation == {"promptLength": 1, "generated": 4, "kinds": ["decoder", "cross"],
                                  "keyKinds": ["decoder"]}
    assert seq2seq.initial["query"] == 1 and "query" not in page_of_result(_seq2seq()).initial  # encoder first


def test_generate_writes_the_page_with_its_steps(run_cli, tmp_path):
    """``attnviz generate --out x.html`` (here on the offline causal config model) writes the step data."""
    r = run_cli("generate", "the cat sat", "--model", CAUSAL, "-n", "3", "--no-stop-at-eos", "--out",
                str(tmp_path / "g.html"))
    assert r.exit_code == 0, r.stderr
    data = _data(tmp_path / "g.html")
    prompt = len(data["kinds"]["self"]["rows"]) - 3
    assert data["generation"] == {"promptLength": prompt, "generated": 3, "kinds": ["self"], "keyKinds": ["self"]}
    assert data["initial"]["query"] == prompt  # opened on the first generated token


# --- in the browser -------------------------------------------------------------------------------

PIXELS = """([selector, x0, y0, x1, y1]) => {
  // A box of a canvas in CSS pixels: its most opaque pixel, its least channel (of opaque pixels), and
  // how many pixels are the generated tokens' orange.
  const c = document.querySelector(selector), s = c.width / parseFloat(c.style.width);
  const d = c.getContext('2d').getImageData(Math.round(x0 * s), Math.round(y0 * s),
                                            Math.round((x1 - x0) * s), Math.round((y1 - y0) * s)).data;
  let alpha = 0, least = 255, orange = 0;
  for (let i = 0; i < d.length; i += 4) {
    alpha = Math.max(alpha, d[i + 3]);
    if (d[i + 3] > 128) least = Math.min(least, d[i], d[i + 1], d[i + 2]);
    if (d[i + 3] > 128 && d[i] > 150 && d[i] - d[i + 2] > 100) orange++;
  }
  return {alpha, least, orange};
}"""
CELLS = """([selector, rows, cols]) => {
  // The least RGB channel at the centre of each cell of a drawn matrix (white-veiled cells: above 190;
  // viridis: below 150), for the canvases that record their layout (data-left, -top, -cell, -rowh).
  const c = document.querySelector(selector), s = c.width / parseFloat(c.style.width), d = c.dataset;
  const ctx = c.getContext('2d'), height = +(d.rowh || d.cell), out = [];
  for (let i = 0; i < rows; i++) {
    out.push([]);
    for (let j = 0; j < cols; j++) {
      const x = (+d.left + (j + 0.5) * +d.cell) * s, y = (+d.top + (i + 0.5) * height) * s;
      const p = ctx.getImageData(Math.round(x), Math.round(y), 1, 1).data;
      out[i].push(Math.min(p[0], p[1], p[2]));
    }
  }
  return out;
}"""
TOOLTIPS = """([rows, keys]) => {
  // The One token view's tooltip with the mouse over each cell (mousemove events at the cells' centres).
  const c = document.querySelector('#queryview'), r = c.getBoundingClientRect(), d = c.dataset, out = [];
  for (let i = 0; i < rows; i++) {
    out.push([]);
    for (let j = 0; j < keys; j++) {
      c.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + +d.left + (j + 0.5) * +d.cell,
                                                   clientY: r.top + +d.top + (i + 0.5) * +d.rowh}));
      out[i].push(document.querySelector('#tooltip').textContent);
    }
  }
  return out;
}"""
ROW = 18  # the head view's row height; rows start 8 pixels down (its canvas records x0, x1, scroll)
LABEL = """(i) => {
  // A query token of the head view (text): its opacity (0-255), and whether it is drawn in the generated tokens' orange.
  const t = document.querySelector(`#headrows .htok[data-i='${i}']`), style = getComputedStyle(t);
  const [r, , b] = style.color.match(/\\d+/g).map(Number), alpha = Math.round(255 * +style.opacity);
  return {alpha, orange: alpha > 128 && r > 150 && r - b > 100 ? 1 : 0};
}"""


def _box(page, selector: str, x0: float, y0: float, x1: float, y1: float) -> dict:
    return page.evaluate(PIXELS, [selector, x0, y0, x1, y1])


def _query_label(page, i: int) -> dict:
    return page.evaluate(LABEL, i)


def _lines_below(page, position: int) -> dict:
    """The head view's lines between the token columns, below the row of ``position``."""
    x0, x1, scroll = (float(page.get_attribute("#headview", f"data-{k}")) for k in ("x0", "x1", "scroll"))
    return _box(page, "#headview", x0 + 10, 8 + position * ROW + ROW / 2 + 3 - scroll, x1 - 10,
                8 + len(TOKENS) * ROW - scroll)


def _veiled(page, selector: str, rows: int, cols: int) -> list[list[bool]]:
    """Which cells of a drawn matrix are veiled white (after the step) rather than in colour."""
    least = page.evaluate(CELLS, [selector, rows, cols])
    assert all(v > 190 or v < 150 for row in least for v in row), least
    return [[v > 190 for v in row] for row in least]


def _label(step: int, position: int, what: str = "generated token") -> str:
    return f"step {step} of 5 · {what} '{TOKENS[position]}' (position {position})"


def _wait_redrawn(page, selector: str, before: str) -> None:
    page.wait_for_function("([s, b]) => document.querySelector(s).toDataURL() !== b", arg=[selector, before])


def test_the_step_slider_walks_through_the_generation(browser, tmp_path):
    result = _generated()
    path = render_html(page_of_result(result, title="generated from 'The cat sat'"), tmp_path / "g.html")
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, path, requests, errors)
    slider = page.locator("#step")
    # A range over the prompt's last token (step 0) and the 5 generated ones, on the first generated token.
    assert [slider.get_attribute(a) for a in ("type", "min", "max")] == ["range", "2", "7"] and slider.input_value() == "3"
    assert page.inner_text("#step-label") == _label(1, 3) == slider.get_attribute("aria-valuetext")
    assert page.evaluate("[window.attnviz.state.step, window.attnviz.state.query]") == [3, 3]
    # Head view at step 1: no line below the step's row, later tokens faint, generated tokens orange.
    assert _lines_below(page, 3)["alpha"] == 0 and _query_label(page, 7)["alpha"] < 80 and _query_label(page, 2)["alpha"] > 200
    assert _query_label(page, 1)["orange"] == 0 and _query_label(page, 4)["orange"] == 0  # 4: faint
    # The keyboard moves it: two steps on, 'mat' is the query; the head view is redrawn to match.
    before = page.evaluate("document.querySelector('#headview').toDataURL()")
    slider.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert page.inner_text("#step-label") == _label(3, 5) == slider.get_attribute("aria-valuetext")
    assert page.evaluate("[window.attnviz.state.step, window.attnviz.state.query]") == [5, 5]
    _wait_redrawn(page, "#headview", before)
    assert _lines_below(page, 3)["alpha"] > 0  # the rows of steps 2 and 3 are drawn now
    assert _lines_below(page, 5)["alpha"] == 0 and _query_label(page, 6)["alpha"] < 80 and _query_label(page, 4)["orange"] > 0
    # The matrix: every cell after the step (as query or key) veiled white, the rest in full colour.
    page.click("nav.tabs button[data-view=matrix]")
    page.wait_for_selector("#matrix[data-drawn]")
    # (causal attention's masked cells, after each query, are light grey too: never computed)
    assert _veiled(page, "#matrix", 8, 8) == [[i > 5 or j > 5 or j > i for j in range(8)] for i in range(8)]
    before = page.evaluate("document.querySelector('#matrix').toDataURL()")
    page.fill("#step", "7")  # the last step: the whole sequence
    assert page.inner_text("#step-label") == _label(5, 7)
    _wait_redrawn(page, "#matrix", before)
    assert _veiled(page, "#matrix", 8, 8) == [[j > i for j in range(8)] for i in range(8)]
    # Home is step 0, the prompt's last token (its row chose the first generated token).
    slider.focus()
    page.keyboard.press("Home")
    assert page.inner_text("#step-label") == _label(0, 2, "the prompt's last token")
    page.keyboard.press("End")
    page.keyboard.press("ArrowLeft")
    # The One token view shows the step's token: its row in every layer and head, the result's numbers.
    page.click("nav.tabs button[data-view=query]")
    page.wait_for_selector("#view-query.active #queryview[data-drawn='6']")
    assert page.input_value("#querytoken") == "6" and "(generated)" in page.inner_text("#querytoken option[value='6']")
    tips = page.evaluate(TOOLTIPS, [LAYERS * HEADS, 7])  # the tooltip over every (layer, head) row and key 0..6
    for layer in range(LAYERS):
        for head in range(HEADS):
            for j in range(7):
                tip = tips[layer * HEADS + head][j]
                assert f"layer {layer}, head {head}" in tip and "query 6: because" in tip and f"key {j}: {TOKENS[j]}" in tip
                # half floats (to 2.5e-4 below 1), shown to 4 decimals
                assert float(tip.rsplit(":", 1)[1]) == pytest.approx(float(result.attentions[layer, head, 6, j]), abs=3e-4)
    assert _veiled(page, "#queryview", LAYERS * HEADS, 8) == [[False] * 7 + [True]] * 6  # 'it' comes after the step
    # A query chosen in the One token view (or clicked in the head view) moves the slider too.
    page.select_option("#querytoken", "4")
    assert page.input_value("#step") == "4" and page.inner_text("#step-label") == _label(2, 4)
    page.select_option("#querytoken", "0")  # a prompt token before the steps: the slider stays
    assert page.input_value("#step") == "4" and page.evaluate("window.attnviz.state.query") == 0
    # Play runs the steps to the end and pauses there.
    page.fill("#step", "6")
    page.click("#step-play")
    page.wait_for_function("() => document.querySelector('#step').value === '7'")
    page.wait_for_function("() => document.querySelector('#step-play').textContent.includes('play')")
    assert page.evaluate("window.attnviz.state.query") == 7
    assert errors == [] and requests == [path.as_uri()]
    page.close()


def test_only_a_generation_has_a_slider_and_an_encoder_decoder_steps_its_target(browser, tmp_path):
    plain = AttentionResult(tokens=TOKENS, attentions=_softmax_rows(len(TOKENS), 0), causal=True, model_name="tiny-lm")
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, render_html(page_of_result(plain), tmp_path / "p.html"), requests, errors)
    last = page.evaluate("(() => { const k = window.attnviz.data.kinds.self; let i = k.rows.length - 1; "
                         "while (i > 0 && k.rowSpecial[i]) i--; return i; })()")
    assert page.locator("#step, #steps").count() == 0 and page.evaluate("window.attnviz.state.query") == last > 0
    assert all(_query_label(page, i)["alpha"] > 200 and _query_label(page, i)["orange"] == 0 for i in range(8))
    page.close()
    # T5-like: the slider steps the decoder's target; hidden on the encoder's attention.
    result = _seq2seq()
    path = render_html(page_of_result(result, kind="decoder", view="matrix"), tmp_path / "t5.html")
    page = browser.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_selector("#matrix[data-drawn]")
    assert page.is_visible("#steps") and page.inner_text("#step-label") == "step 1 of 4 · generated token 'The' (position 1)"
    assert _veiled(page, "#matrix", 5, 5) == [[i > 1 or j > 1 or j > i for j in range(5)] for i in range(5)]
    before = page.evaluate("document.querySelector('#matrix').toDataURL()")
    page.select_option("#kind", "cross")  # target queries over the source: later rows veiled, every source key shown
    _wait_redrawn(page, "#matrix", before)
    assert page.is_visible("#steps")
    assert _veiled(page, "#matrix", 5, 4) == [[i > 1] * 4 for i in range(5)]
    page.select_option("#kind", "self")  # the encoder: no steps
    assert not page.is_visible("#steps")
    assert errors == []
    page.close()
