"""Issue 50, item 7: long texts in `attnviz view` and `attnviz heatmap`.

The page opens on the head view wherever it can draw it (and says why where it cannot); `--show qk` over
64 tokens says it is dropped; One token opens on a row with something to show; a long heatmap PNG offers the
page's log scale and labels its pooled rows without the visible-space glyph; `--rows/--cols` is drawn cell by
cell (the terminal pages its columns) within bounds, refused past them.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, open_offline

WORDS = (ROOT / "examples" / "report.txt").read_text(encoding="utf-8").split()


def _config(tmp_path: Path, *, causal: bool, layers: int = 2, heads: int = 4) -> str:
    path = tmp_path / f"long_{'causal' if causal else 'bidir'}.toml"
    path.write_text(f"""[model]
type = "transformer"
name = "long-{'causal' if causal else 'bidir'}"
n_layers = {layers}
n_heads = {heads}
d_model = 32
d_ff = 64
vocab_size = 4096
max_positions = 4096
seed = 0
causal = {'true' if causal else 'false'}
init_scale = 2.0
""", encoding="utf-8")
    return str(path)


def _text(tokens: int) -> str:
    """About ``tokens`` words of the example report (a config model's tokens are its words and marks)."""
    words = (WORDS * (tokens // len(WORDS) + 1))[:tokens]
    return " ".join(words)


# --- fast: the picture, the colour scale, the warnings and the region's bounds ---------------------------------

def test_a_log_colour_scale_spans_four_decades_below_the_top():
    from attnviz.render.colors import ColorScale

    scale = ColorScale.for_values(np.array([0.0, 0.5])).logarithmic()
    assert scale.log and scale.vmax == 0.5
    shown = scale.normalize(np.array([0.5, 0.05, 0.005, 0.5e-4, 1e-9, 0.0]))
    assert shown == pytest.approx([1.0, 0.75, 0.5, 0.0, 0.0, 0.0])
    linear = ColorScale.for_values(np.array([0.0, 0.5]))
    assert linear.normalize(np.array([0.005]))[0] == pytest.approx(0.01)  # what a linear scale makes of it: dark


def test_pooled_picture_rows_are_labelled_by_range_and_token_without_the_space_glyph(monkeypatch, tmp_path):
    import attnviz.render.raster as raster
    from attnviz.render.image import render_image
    from attnviz.render.view import FIGURE_CELLS, matrix_view

    drawn: list[tuple[str, ...]] = []

    class Recorder:  # the PNG figure, recording the labels it is given
        def __init__(self, key):
            drawn.append(key.row_labels)

        def show(self, view):
            pass

        def save(self, path):
            Path(path).write_bytes(b"")

    monkeypatch.setattr(raster, "RasterFigure", Recorder)
    n = FIGURE_CELLS * 2 + 10
    tokens = ["[CLS]", " the", *(f"w{i}" for i in range(n - 2))]
    view = matrix_view(np.full((1, n, n), 1 / n), tokens, tokens, title="t", panel_titles=["head 0"])
    render_image(view, tmp_path / "x.png")
    labels = drawn[0]
    assert labels[0] == "0-2 [CLS]" and labels[1].startswith("3-5 ")
    assert not any("␣" in label.split(" ", 1)[0] for label in labels)  # the separator is a space
    assert all(label.count(" ") == 1 for label in labels)


def test_show_qk_over_64_tokens_says_it_is_dropped(run_cli, tmp_path):
    from conftest import TINY

    page = tmp_path / "p.html"
    r = run_cli("view", _text(80), "--model", TINY, "--show", "qk", "--page", str(page))
    assert r.exit_code == 0, r.stderr
    warning = [line for line in r.stderr.splitlines() if "--show qk" in line]
    assert len(warning) == 1 and "at most 64 tokens" in warning[0] and "head view" in warning[0], r.stderr
    assert '"view":"head"' in page.read_text(encoding="utf-8")  # the page says what it opens on
    r = run_cli("view", _text(20), "--model", TINY, "--show", "qk", "--page", str(page))
    assert r.exit_code == 0 and "warning" not in r.stderr, r.stderr
    r = run_cli("view", "The cat sat on the mat.", "--model", TINY, "--show", "qk", "--hide-special", "--page", str(page))
    assert r.exit_code == 0 and "drop --hide-special" in r.stderr, r.stderr


def test_a_long_heatmap_png_offers_the_log_scale(run_cli, tmp_path):
    from PIL import Image

    model = _config(tmp_path, causal=False)
    text = _text(560)  # past the 512 tokens where the note and the page's log scale begin
    shares = {}
    for scale in ("linear", "log"):
        out = tmp_path / f"{scale}.png"
        given = ["--colour-scale", "log"] if scale == "log" else []  # linear: the default, and its note
        r = run_cli("heatmap", text, "--model", model, "--layer", "0", *given, "--out", str(out))
        assert r.exit_code == 0, r.stderr
        assert ("--colour-scale log" in r.stderr) == (scale == "linear"), r.stderr  # said where it helps
        # Whole numbers (int16: a sum of three differences is at most 765), not float64: 3,108 × 2,988 pixels
        pixels = np.asarray(Image.open(io.BytesIO(out.read_bytes())).convert("RGB"), dtype=np.int16)
        dark = np.abs(pixels - np.array([68, 1, 84], dtype=np.int16)).sum(-1) < 60  # viridis' bottom colour
        coloured = pixels.max(-1) - pixels.min(-1) > 40  # the cells and the colorbar, not the white, the text or lines
        shares[scale] = dark[coloured].mean()
    assert shares["linear"] > 0.9 and shares["log"] < shares["linear"] - 0.1, shares  # measured: 0.985, 0.797
    r = run_cli("heatmap", text, "--model", model, "--colour-scale", "log", "--out", str(tmp_path / "x.svg"))
    assert r.exit_code == 2 and "write a .png" in r.stderr and "Traceback" not in r.stderr


def test_a_region_is_drawn_cell_by_cell_in_the_terminal_and_refused_past_its_bounds(run_cli, tmp_path):
    model = _config(tmp_path, causal=True)
    text = _text(1200)
    r = run_cli("heatmap", text, "--model", model, "--layer", "0", "--rows", "200:203", "--cols", "0:150",
                "--width", "100")
    assert r.exit_code == 0, r.stderr
    assert "downsampled" not in r.stdout and "cell by cell" in r.stdout
    assert "page 1/" in r.stdout and "keys 0–" in r.stdout and "–149" in r.stdout  # every key, in pages of columns
    assert sum(line.lstrip().startswith(("200 ", "201 ", "202 ")) for line in r.stdout.splitlines()) >= 9  # 3 rows × 3 pages
    # Every layer: each panel in turn, cell by cell.
    r = run_cli("heatmap", text, "--model", model, "--rows", "200:202", "--cols", "100:160", "--width", "100")
    assert r.exit_code == 0 and "downsampled" not in r.stdout and "keys 100–" in r.stdout, r.stdout[-800:]
    # --fit downsample still pools when asked.
    r = run_cli("heatmap", text, "--model", model, "--layer", "0", "--rows", "200:203", "--cols", "0:150",
                "--width", "100", "--fit", "downsample")
    assert r.exit_code == 0 and "downsampled" in r.stdout
    # Past the bounds: one line.
    r = run_cli("heatmap", text, "--model", model, "--layer", "0", "--rows", "0:1100", "--cols", "0:10")
    assert r.exit_code == 2 and "at most 1,024 queries" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    wide = _config(tmp_path / "wide", causal=True, layers=4, heads=8) if (tmp_path / "wide").mkdir() is None else ""
    r = run_cli("heatmap", text, "--model", wide, "--head", "all", "--rows", "0:1000", "--cols", "0:1000")
    assert r.exit_code == 2 and "--layer N" in r.stderr and "Traceback" not in r.stderr


# --- the page, in the browser ------------------------------------------------------------------------------

def _page(tmp_path: Path, model: str, text: str, name: str, **kw) -> Path:
    from attnviz import api
    from attnviz.render.html import render_html

    return render_html(api.page_view(api.load(model), text, **kw), tmp_path / name)


@pytest.mark.slow
def test_a_long_page_opens_on_the_head_view_or_says_why_not(browser, tmp_path, monkeypatch):
    import attnviz.render.page as page_module

    model = _config(tmp_path, causal=True)
    text = _text(700)
    path = _page(tmp_path, model, text, "long.html", budget=150_000)  # finer levels left out; lines held
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, path, requests, errors)
    kind = page.evaluate("window.attnviz.data.kinds.self")
    assert kind["included"] < len(kind["levels"]) and kind["lines"] > 0
    assert page.evaluate("window.attnviz.state.view") == "head"
    assert int(page.get_attribute("#headview", "data-lines")) > 0
    assert not page.is_visible("#opened")
    page.close()
    # A page that holds neither single cells nor lines opens on the matrix and says why, visibly.
    monkeypatch.setattr(page_module, "LINES_BUDGET", 10)
    path = _page(tmp_path, model, text, "nolines.html", budget=150_000)
    page = open_offline(browser, path, requests, errors, ready="#matrix[data-drawn]")
    assert page.evaluate("window.attnviz.state.view") == "matrix"
    assert page.is_visible("#opened")
    said, n = page.inner_text("#opened"), page.evaluate("window.attnviz.data.kinds.self.rows.length")
    assert "Opened on the Matrix tab, not the Head view" in said and f"{n:,} tokens" in said, said
    page.click("nav.tabs button[data-view=model]")
    assert not page.is_visible("#opened")
    assert errors == []
    page.close()


@pytest.mark.slow
@pytest.mark.parametrize("causal", [True, False])
def test_one_token_opens_on_a_row_with_something_to_show(browser, tmp_path, causal):
    model = str(ROOT / "sample_configs" / "causal.toml") if causal else None
    text = "The cat sat on the mat because it was tired."
    from attnviz import api
    from attnviz.render.html import render_html

    source = api.load(model) if model else api.load()
    path = render_html(api.page_view(source, text), tmp_path / "ten.html")
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, path, requests, errors)
    rows = page.evaluate("window.attnviz.data.kinds.self.rows")
    special = page.evaluate("window.attnviz.data.kinds.self.rowSpecial")
    last = max(i for i in range(len(rows)) if not special[i])
    assert last >= len(rows) - 2 and rows[last] == "."
    page.click("nav.tabs button[data-view=query]")
    page.wait_for_selector(f"#queryview[data-drawn='{last}']")
    assert page.evaluate("window.attnviz.state.query") == last
    # The row drawn holds weights on more than one key in every head (the first row of a causal model: one).
    keys = page.evaluate("""async () => {
        const k = window.attnviz.data.kinds.self, q = window.attnviz.state.query, n = k.cols.length, seen = [];
        for (let li = 0; li < k.layers.length; li++) for (let h = 0; h < k.heads; h++) {
            let count = 0;
            for (let j = 0; j < n; j++) if (await window.attnviz.weight("self", li, h, q, j) > 0) count++;
            seen.push(count);
        }
        return seen; }""")
    assert min(keys) > 1, keys
    assert errors == []
    page.close()
