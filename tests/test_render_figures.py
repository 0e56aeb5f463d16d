"""Labelled figures drawn fast (issue 17): a reused figure gives the very file a fresh one gives; the
PNG encoder's files decode (by Pillow) to the pixels drawn; the fixed layout keeps every label off
the panels and inside the figure; the room kept for colorbar labels holds what matplotlib writes."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnviz.render import labelled_figure
from attnviz.render.grid_layout import PAD, TICK_PAD, TextSizes, grid_layout
from attnviz.render.image import DPI, FigureDrawer, render_image
from attnviz.render.labelled_figure import colorbar_sample
from attnviz.render.png import encode_png
from attnviz.result import AttentionResult
from attnviz.views.heatmap import heatmap_view

TOKENS = ["[CLS]", "the", "cat", "sat", "[SEP]", "it", "slept"]


def _layers() -> AttentionResult:
    """Three layers of four heads over a sentence pair; every layer has sinks (a title note), but in
    other heads and columns, and a different largest weight (colorbar ticks)."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 4, 7, 7, generator=g)
    boosts = {0: [(0, 0), (1, 0)], 1: [(0, 2), (1, 0), (3, 5)], 2: [(2, 3), (3, 0)]}  # layer: [(head, key)]
    for layer, pairs in boosts.items():
        for head, key in pairs:
            scores[layer, head, :, key] += 2.0 + layer
    return AttentionResult(tokens=TOKENS, attentions=scores.softmax(-1), segment_ids=[0] * 5 + [1] * 2,
                           model_name="test")


def test_a_reused_figure_writes_the_same_file_as_a_fresh_one(tmp_path, monkeypatch):
    result = _layers()
    views = [heatmap_view(result, layer=layer, head="all") for layer in range(3)]
    # What the reuse must get right: sink markers come and go per panel, the scale (colorbar) changes.
    assert views[0].marks[2] == [] and views[2].marks[2] != []
    assert len({v.scale.vmax for v in views}) == 3 and all(len(v.notes) == 1 for v in views)
    built = []
    real = labelled_figure.LabelledFigure.__init__
    monkeypatch.setattr(labelled_figure.LabelledFigure, "__init__", lambda self, key: built.append(key) or real(self, key))
    drawer = FigureDrawer()
    names = ["0.png", "0.svg", "1.png", "2.png", "1b.png"]
    for name, view in zip(names, [views[0], views[0], views[1], views[2], views[1]], strict=True):
        drawer.draw(view, tmp_path / f"reused{name}")
    assert len(built) == 1  # one figure drew them all
    for name, view in zip(names, [views[0], views[0], views[1], views[2], views[1]], strict=True):
        render_image(view, tmp_path / f"fresh{name}")
        assert (tmp_path / f"reused{name}").read_bytes() == (tmp_path / f"fresh{name}").read_bytes(), name
    assert (tmp_path / "fresh1.png").read_bytes() != (tmp_path / "fresh2.png").read_bytes()


@pytest.mark.parametrize("opaque", [True, False])
def test_png_files_decode_to_the_pixels_drawn(opaque):
    from io import BytesIO

    from PIL import Image

    rng = np.random.default_rng(1)
    rgba = rng.integers(0, 256, (37, 53, 4), dtype=np.uint8)
    rgba[:20] = rgba[:1]  # rows equal to the row above: the filter's zeros
    if opaque:
        rgba[..., 3] = 255
    data = encode_png(rgba, dpi=DPI, text={"Software": "attnviz test", "Skipped": None})
    with Image.open(BytesIO(data)) as im:
        im.load()
        assert im.mode == ("RGB" if opaque else "RGBA")
        assert np.array_equal(np.asarray(im.convert("RGBA")), rgba)
        assert im.info["dpi"] == pytest.approx((DPI, DPI), abs=0.05)  # stored as whole pixels per metre
        assert im.info["Software"] == "attnviz test" and "Skipped" not in im.info


def test_the_layout_keeps_labels_off_the_panels_and_inside_the_figure(tmp_path):
    """matplotlib's figure (SVG, PDF)."""
    view = heatmap_view(_layers(), layer=0, head="all")
    drawer = FigureDrawer()
    drawer.draw(view, tmp_path / "x.svg")
    (figure,) = drawer._figures.values()
    fig = figure.figure
    fig.canvas.draw()  # where the texts go on a raster (the SVG was drawn by another renderer)
    renderer = fig.canvas.get_renderer()
    panels = [image.get_window_extent(renderer) for image in figure.images]  # the panels share one Axes
    cax = fig.axes[-1]
    texts = [t for t in fig.texts if t is not figure.title] + [t for ax in fig.axes[:-1] for t in ax.texts]
    texts += [cax.yaxis.label, *(t for t in cax.get_yticklabels() if t.get_text())]
    assert len(texts) > 2 * len(TOKENS)  # token labels, panel titles, axis names, colorbar ticks and label
    for text in [*texts, figure.title]:
        box = text.get_window_extent(renderer)
        assert not any(box.overlaps(panel) for panel in panels), text.get_text()
        if text is not figure.title:  # a long note may run past the edges, as in any figure
            assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1, text.get_text()
    assert cax.bbox.x0 > max(panel.x1 for panel in panels)


def test_the_png_keeps_labels_off_the_panels_and_inside_the_image(tmp_path):
    """attnviz's own PNG: every text it drew lies outside every panel and inside the image, and the
    panels hold only the colormap's colours of their cells (no text, no marker drawn over them)."""
    from matplotlib import colormaps

    from attnviz.render.raster import RasterFigure

    view = heatmap_view(_layers(), layer=2, head="all")
    drawer = FigureDrawer()
    drawer.draw(view, tmp_path / "x.png")
    (figure,) = drawer._figures.values()
    assert isinstance(figure, RasterFigure)
    texts = {text for text, _ in figure.boxes}
    assert {*TOKENS, "head 0", "head 3", figure.key.value_name, figure.key.row_axis} <= texts
    height, width = figure.pixels.shape[:2]
    for text, (left, top, right, bottom) in figure.boxes:
        for p_left, p_top, p_right, p_bottom in figure.panels:
            assert right <= p_left or left >= p_right or bottom <= p_top or top >= p_bottom, text
        if not text.startswith(view.title):
            assert left >= 0 and top >= 0 and right <= width and bottom <= height, text
    assert figure.colorbar[0] > max(panel[2] for panel in figure.panels)
    palette = {tuple(c) for c in colormaps["viridis"](view.scale.normalize(view.panels), bytes=True)[..., :3].reshape(-1, 3)}
    for left, top, right, bottom in figure.panels:
        inner = figure.pixels[top + 3:bottom - 3, left + 3:right - 3].reshape(-1, 3)
        colours = {tuple(c) for c in np.unique(inner, axis=0)}
        assert colours <= palette | {(255, 255, 255)}, colours - palette


def test_grid_layout_by_hand():
    sizes = TextSizes(row_labels=0.5, col_labels=0.4, title=0.3, panel_title=0.1, axis_label=0.12,
                      colorbar_ticks=0.25, colorbar_label=0.15)
    layout = grid_layout((10.0, 8.0), 5, 3, sizes)  # 3 columns: 2 rows, the second holding two panels
    left = PAD + 0.12 + PAD + 0.5 + TICK_PAD
    bottom = PAD + 0.12 + PAD + 0.4 + TICK_PAD
    assert layout.panels[0][0] == pytest.approx(left / 10) and layout.panels[3][0] == pytest.approx(left / 10)
    assert layout.panels[3][1] == pytest.approx(bottom / 8)
    widths = {round(p[2], 9) for p in layout.panels}
    heights = {round(p[3], 9) for p in layout.panels}
    assert len(widths) == 1 and len(heights) == 1
    assert layout.panels[1][1] == layout.panels[0][1] and layout.panels[4][0] == layout.panels[1][0]
    top_of_grid = layout.panels[0][1] + layout.panels[0][3]
    assert (1 - top_of_grid) * 8 == pytest.approx(PAD + 0.3 + PAD + 0.1 + 6 / 72)  # title, then a panel title


@pytest.mark.parametrize(("vmin", "vmax"), [(0.0, 0.93), (0.0, 0.25), (0.0, 0.043), (0.0, 7e-5), (-0.37, 0.37)])
def test_colorbar_room_holds_matplotlibs_widest_tick_label(vmin, vmax):
    """matplotlib's own colorbar, on an axis tall enough for its densest ticks, writes no label longer
    than the one room is kept for."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 14), dpi=72)
    FigureCanvasAgg(fig)
    bar = fig.colorbar(ScalarMappable(Normalize(vmin, vmax), "viridis"), cax=fig.add_axes((0.3, 0.05, 0.2, 0.9)))
    fig.canvas.draw()
    labels = [t.get_text() for t in bar.ax.get_yticklabels() if t.get_text()]
    assert len(labels) >= 5
    sample = colorbar_sample(vmin, vmax)
    assert max(len(re.sub(r"\d", "0", label)) for label in labels) <= len(sample)


def test_a_long_title_and_notes_are_wrapped_to_the_figure():
    import numpy as np
    from rich.cells import cell_len

    from attnviz.render.image import TITLE_CHARS_PER_INCH, wrap_title
    from attnviz.render.view import matrix_view

    note = "pre-LN model: the residual is the un-normalised stream x_i, and no LayerNorm follows the sum " * 2
    view = matrix_view(np.eye(3)[None], list("abc"), list("abc"), title="注意力 · " * 20, panel_titles=["p"],
                       notes=[note])
    wrapped = wrap_title(view, 5.0)
    lines = [*wrapped.title.split("\n"), *wrapped.notes[0].split("\n")]
    assert len(lines) > 3 and all(cell_len(line) <= 5.0 * TITLE_CHARS_PER_INCH for line in lines)
    assert " ".join(wrapped.notes[0].split("\n")) == note.strip()  # nothing lost, only broken into lines
    short = matrix_view(np.eye(3)[None], list("abc"), list("abc"), title="short", panel_titles=["p"])
    assert wrap_title(short, 5.0) is short
