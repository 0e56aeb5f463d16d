"""Image files: valid, of the expected size, not blank; CJK labels drawn or reported."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
from conftest import TINY

import attnviz
from attnviz.errors import RenderError
from attnviz.render import fonts
from attnviz.render.image import DPI, MissingGlyphsWarning, figure_size, render_image
from attnviz.result import AttentionResult
from attnviz.views.heatmap import heatmap_view


def read_png(path):
    from PIL import Image

    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def test_png_is_valid_sized_and_not_blank(tmp_path):
    view = heatmap_view(attnviz.extract("The cat sat on the mat", model=TINY))
    path = render_image(view, tmp_path / "cat.png")
    pixels = read_png(path)
    w, h = figure_size(view)
    assert pixels.shape == (round(h * DPI), round(w * DPI), 3)
    assert pixels.std() > 20  # not a flat image
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) > 50  # a colormap and text, not a couple of fills
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_heatmap_pixels_follow_the_weights(tmp_path):
    """A one-hot diagonal: the brightest viridis yellow sits where the weights are 1."""
    r = AttentionResult(tokens=list("abcd"), attentions=torch.eye(4)[None, None])
    pixels = read_png(render_image(heatmap_view(r), tmp_path / "eye.png")).astype(int)
    yellow = (np.abs(pixels - [253, 231, 37]).sum(-1) < 30)
    ys, xs = np.nonzero(yellow[:, : pixels.shape[1] * 3 // 4])  # left of the colorbar
    assert len(ys) > 100
    # the yellow cells run from top left to bottom right
    assert np.corrcoef(ys, xs)[0, 1] > 0.9


@pytest.mark.parametrize(("suffix", "magic"), [(".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_vector_formats(tmp_path, suffix, magic):
    view = heatmap_view(attnviz.extract("a b c", model=TINY), head="all")
    path = render_image(view, tmp_path / f"x{suffix}")
    assert path.read_bytes()[:5].startswith(magic) and path.stat().st_size > 1000


def test_grid_and_values(tmp_path):
    view = heatmap_view(attnviz.extract("The cat sat", model=TINY), head="all")
    pixels = read_png(render_image(view, tmp_path / "grid.png", values=True))
    assert pixels.std() > 20


@pytest.mark.parametrize(
    ("name", "expected"),
    [("x.jpg", "unknown extension '.jpg'"), ("x", r"unknown extension '\(none\)'"),
     ("missing/x.png", "does not exist"), ("dir.png", "is a folder")],
)
def test_bad_output_paths(tmp_path, name, expected):
    (tmp_path / "dir.png").mkdir()
    view = heatmap_view(attnviz.extract("a b", model=TINY))
    with pytest.raises(RenderError, match=expected):
        render_image(view, tmp_path / name)


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_failed_write_leaves_nothing(tmp_path, monkeypatch, suffix):
    """The disk fills up while the file is written (PNG: attnviz's encoder; SVG: matplotlib)."""
    from matplotlib.figure import Figure

    from attnviz.render import raster

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    monkeypatch.setattr(raster, "write_bytes", full_disk)
    view = heatmap_view(attnviz.extract("a b", model=TINY))
    with pytest.raises(RenderError, match="No space left on device"):
        render_image(view, tmp_path / f"x{suffix}")
    assert list(tmp_path.iterdir()) == []


def _cjk_font_required():
    families, missing = fonts.font_chain(["注意力机制"])
    if missing:
        if os.environ.get("CI"):
            pytest.fail("no CJK font installed; .ci/run installs fonts-wqy-microhei")
        pytest.skip("no CJK font installed here (.ci/run installs one)")
    return families


def test_cjk_labels_get_a_font_that_has_them(tmp_path):
    families = _cjk_font_required()
    assert families[0] == fonts.DEFAULT_FAMILY and len(families) >= 2
    r = AttentionResult(tokens=list("注意力机制"), attentions=torch.rand(1, 1, 5, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "Glyph missing" would fail here
        render_image(heatmap_view(r), tmp_path / "cjk.png")
        from matplotlib import rc_context
        from matplotlib.figure import Figure

        with rc_context({"font.family": families}):
            fig = Figure()
            fig.text(0.5, 0.5, "注意力机制")
            fig.savefig(tmp_path / "direct.png")


def test_missing_glyphs_are_named(tmp_path, monkeypatch):
    monkeypatch.setattr(fonts, "_installed", lambda: [(fonts.DEFAULT_FAMILY, _dejavu())])
    r = AttentionResult(tokens=["猫", "cat", "坐"], attentions=torch.rand(1, 1, 3, 3))
    with pytest.warns(MissingGlyphsWarning, match=r"no installed font has 猫 坐 \(U\+732B, U\+5750\)"):
        render_image(heatmap_view(r), tmp_path / "x.png")
    assert (tmp_path / "x.png").exists()


def _dejavu() -> str:
    from matplotlib import font_manager

    return font_manager.findfont(fonts.DEFAULT_FAMILY)


def test_clean_label_drops_invisible_code_points():
    assert fonts.clean_label("👍🏽") == "👍"
    assert fonts.clean_label("❤️") == "❤"
    assert fonts.clean_label("a\tb\x00\x1b") == "a⇥b␀␛"


def test_missing_glyph_warning_reaches_the_cli(tmp_path, monkeypatch, run_cli):
    monkeypatch.setattr(fonts, "_installed", lambda: [(fonts.DEFAULT_FAMILY, _dejavu())])
    out = tmp_path / "x.png"
    result = run_cli("heatmap", "猫 sat", "--model", TINY, "--out", str(out))
    assert result.exit_code == 0 and out.exists()
    assert "attnviz: warning: no installed font has 猫" in result.stderr


def test_a_font_installed_after_matplotlib_listed_the_fonts_is_found(monkeypatch, tmp_path):
    """matplotlib keeps its font list until its version changes; a CJK font installed later is found
    by listing the fonts again (once), and the cache is rewritten."""
    import matplotlib
    from matplotlib import font_manager

    _cjk_font_required()
    monkeypatch.setattr(matplotlib, "get_cachedir", lambda: str(tmp_path))
    manager = font_manager.fontManager
    saved = dict(vars(manager))  # the rescan updates the manager in place: put it back as it was after
    stale = [e for e in manager.ttflist if ord("注") not in fonts._charmap(e.fname)]
    monkeypatch.setattr(manager, "ttflist", stale)  # as if every CJK font came after the cache
    fonts._rescan_fonts.cache_clear()
    try:
        again, missing = fonts.font_chain(["注意力机制"])
    finally:
        # Left rescanned, the manager lists the fonts in another order, and a later test's CJK label in
        # this process picked another font than a fresh process does (a PNG byte comparison failed).
        fonts._rescan_fonts.cache_clear()
        vars(manager).clear()
        vars(manager).update(saved)
        manager._findfont_cached.cache_clear()
    assert not missing and len(again) >= 2
    assert any(tmp_path.glob("fontlist-*.json"))
