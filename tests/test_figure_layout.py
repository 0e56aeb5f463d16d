"""Figures laid out to their content (issue 41 item 17): the compare-heads image of one layer is not one
row of thumbnails over a blank area, and the ``--head all`` grid's size and margins follow its panels."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from PIL import Image

from attnviz.render import compare_image
from attnviz.render.compare_image import plan_grid, render_comparison
from attnviz.render.figure_style import DPI


def blank_share(path, block: int = DPI // 4) -> float:
    """The share of the image's ``block``-pixel squares (a quarter inch) that hold nothing but white."""
    with Image.open(path) as im:
        px = np.asarray(im.convert("L"))
    h, w = (px.shape[0] // block) * block, (px.shape[1] // block) * block
    blocks = px[:h, :w].reshape(h // block, block, w // block, block).min(axis=(1, 3))
    return float((blocks >= 250).mean())


def _comparison(tmp_path, monkeypatch, n_layers: int, n_heads: int, tokens: int = 9):
    """render_comparison of random heads and their head-distance matrix: the PNG and the figure drawn."""
    rng = np.random.default_rng(0)
    heads = rng.dirichlet(np.ones(tokens), size=(n_layers, n_heads, tokens)).astype(np.float32)
    names = [f"L{layer}H{h}" for layer in range(n_layers) for h in range(n_heads)]
    matrix = rng.random((len(names), len(names)))
    figures = []
    real = compare_image.save_figure
    monkeypatch.setattr(compare_image, "save_figure", lambda fig, path: figures.append(fig) or real(fig, path))
    out = tmp_path / f"heads_{n_layers}x{n_heads}.png"
    render_comparison(heads, ["[CLS]", *[f"w{i}" for i in range(tokens - 2)], "[SEP]"], list(range(n_layers)),
                      matrix, names, names, title="model · every head", path=out,
                      matrix_title="Jensen–Shannon divergence between heads, summed over query rows")
    (fig,) = figures
    return out, fig


def test_one_layer_of_heads_fills_the_figure_beside_the_matrix(tmp_path, monkeypatch):
    """`compare-heads --layer 0 --out x.png` drew MiniLM's 12 heads as one row of thumbnails over a
    blank area (3250×900 pixels, 56 % of its quarter-inch squares white); now rows of thumbnails fill
    the height beside the matrix."""
    out, fig = _comparison(tmp_path, monkeypatch, 1, 12)
    with Image.open(out) as im:
        width, height = im.size
    assert 1.2 <= width / height <= 3.0, (width, height)
    assert blank_share(out) < 0.2
    grid = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    panels = [image.get_window_extent(renderer) for image in grid.images]
    assert len(panels) == 12
    rows = {round(p.y0) for p in panels}
    assert 2 <= len(rows) <= 4 and len(panels) % len(rows) == 0  # a grid, every row full
    spanned = max(p.y1 for p in panels) - min(p.y0 for p in panels)
    assert spanned >= 0.6 * fig.bbox.height  # the thumbnails take the figure's height
    for text in grid.texts:  # no label on a panel, none outside the figure
        box = text.get_window_extent(renderer)
        assert not any(box.overlaps(p) for p in panels), text.get_text()
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1, text.get_text()


@pytest.mark.parametrize(("n_layers", "n_heads"), [(6, 12), (2, 4), (1, 7)])
def test_the_compare_heads_figure_follows_its_heads(tmp_path, monkeypatch, n_layers, n_heads):
    out, fig = _comparison(tmp_path, monkeypatch, n_layers, n_heads)
    with Image.open(out) as im:
        width, height = im.size
    assert 1.0 <= width / height <= 3.2, (width, height)
    assert blank_share(out) < 0.2
    renderer = fig.canvas.get_renderer()
    panels = [image.get_window_extent(renderer) for image in fig.axes[0].images]
    assert len(panels) == n_layers * n_heads
    assert max(p.x1 for p in panels) < fig.axes[1].get_window_extent(renderer).x0  # the matrix to the right


def test_plan_grid_by_hand():
    sizes = dict(label=0.2, title=0.2, panel_title=0.1, matrix_width=6.0, matrix_height=5.5)
    one = plan_grid(1, 12, **sizes)
    assert one.columns in (3, 4) and one.rows_per_layer * one.columns == 12 and one.blank < 0.05
    six = plan_grid(6, 12, **{**sizes, "matrix_width": 11.6, "matrix_height": 11.1})
    assert six.columns == 12 and six.rows_per_layer == 1  # one row per layer where the height allows it
    assert six.height > one.height and six.width > one.width  # the figure grows with its heads
    assert all(0.9 <= plan.panel <= 1.5 for plan in (one, six))
    huge = plan_grid(32, 32, label=0.2, title=0.2, panel_title=0.1, matrix_width=126.0, matrix_height=126.0)
    assert huge.width <= 60 and huge.height <= 60


def test_compare_heads_of_one_layer_through_the_cli(run_cli, tmp_path):
    out = tmp_path / "x.png"
    r = run_cli("compare-heads", "The cat sat on the mat.", "--layer", "0", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    with Image.open(out) as im:
        width, height = im.size
    assert 1.2 <= width / height <= 3.0, (width, height)
    assert blank_share(out) < 0.2


def _every_head(n_layers: int = 6, n_heads: int = 12, n_tokens: int = 16):
    import torch

    from attnviz.result import AttentionResult

    scores = torch.randn(n_layers, n_heads, n_tokens, n_tokens, generator=torch.Generator().manual_seed(0))
    tokens = ["[CLS]", *[f"word{i}" for i in range(n_tokens - 2)], "[SEP]"]
    return AttentionResult(tokens=tokens, attentions=scores.softmax(-1), model_name="test")


@pytest.mark.parametrize(("n_layers", "n_tokens"), [(6, 16), (1, 16), (6, 6), (2, 40)])
def test_the_head_all_grid_is_its_panels_with_one_margin(tmp_path, n_layers, n_tokens):
    """`heatmap --head all` of MiniLM was 30 × 23 inches (each panel with 1.2 in of margin of its own, cells
    half again as tall as wide); now square cells of a label's height, and the labels' room once."""
    from attnviz.render.image import FigureDrawer, figure_size
    from attnviz.views.heatmap import head_across_layers_view

    view = head_across_layers_view(_every_head(n_layers, 12, n_tokens), head="all")
    _, q, k = view.panels.shape
    width, height = figure_size(view)
    drawer = FigureDrawer()
    drawer.draw(view, tmp_path / "grid.png")
    (figure,) = drawer._figures.values()
    rows = len({top for _, top, _, _ in figure.panels})
    cols = len({left for left, _, _, _ in figure.panels})
    for left, top, right, bottom in figure.panels:
        cell_w, cell_h = (right - left) / k, (bottom - top) / q
        assert cell_h == pytest.approx(cell_w, rel=0.15)  # square cells
        assert 0.09 * DPI <= cell_w <= 0.2 * DPI or right - left >= 0.85 * DPI  # a 6-point label's room (or few tokens)
    panel_w = (figure.panels[0][2] - figure.panels[0][0]) / DPI
    panel_h = (figure.panels[0][3] - figure.panels[0][1]) / DPI
    # Around the panels: a gap and a panel title each, the labels, titles and colorbar once (it was 1.2 in a panel).
    assert width - cols * panel_w < 0.15 * cols + 2.0
    assert height - rows * panel_h < 0.4 * rows + 1.4
    assert blank_share(tmp_path / "grid.png") < 0.15
    if (n_layers, n_tokens) == (6, 16):
        assert width * height < 0.5 * 30 * 23.36  # MiniLM's every head: less than half the old figure


# -- thread pools sized to the machine (item 17c) ----------------------------------------------------------


def _machine(monkeypatch, cores: int, load: float, cpu_count: int = 64):
    from attnviz import threads

    monkeypatch.setattr(threads.os, "cpu_count", lambda: cpu_count)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (load, load, load), raising=False)
    monkeypatch.setattr(threads, "_quota", lambda: None)
    return threads


def test_thread_pools_follow_attnviz_threads_then_omp_num_threads(monkeypatch):
    threads = _machine(monkeypatch, cores=2, load=0.0)
    env = {"ATTNVIZ_THREADS": "3", "OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "8"}
    assert threads.configure(env) == 3
    assert all(env[name] == "3" for name in threads.POOLS)  # attnviz's own variable wins over every pool's
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["KMP_BLOCKTIME"] == "0"  # two cores: threads sleep
    env = {"OMP_NUM_THREADS": "2,1", "OMP_WAIT_POLICY": "ACTIVE"}
    assert threads.configure(env) == 2
    assert env == {"OMP_NUM_THREADS": "2,1", "OMP_WAIT_POLICY": "ACTIVE", "KMP_BLOCKTIME": "0"}  # the user's choice
    env = {"ATTNVIZ_THREADS": "none", "OMP_NUM_THREADS": "0"}  # neither is a count: the cores this process may use
    assert threads.configure(env) == 2
    assert all(env[name] == "2" for name in threads.POOLS if name != "OMP_NUM_THREADS")


def test_thread_pools_are_capped_to_the_cores_this_process_may_use(monkeypatch):
    threads = _machine(monkeypatch, cores=8, load=0.5)
    env: dict[str, str] = {}
    assert threads.configure(env) == 8  # 8 of the machine's 64: each pool gets 8
    assert all(env[name] == "8" for name in threads.POOLS)
    assert "OMP_WAIT_POLICY" not in env  # 8 quiet cores: OpenMP's threads spin as they like
    threads = _machine(monkeypatch, cores=8, load=5.0)
    env = {}
    threads.configure(env)
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"  # 8 cores, more than half of them busy: sleep between regions
    monkeypatch.setattr(threads, "_quota", lambda: 1)  # a cgroup's CPU quota of one CPU
    assert threads.available_cores() == 1
    env = {}
    assert threads.configure(env) == 1 and "OMP_WAIT_POLICY" not in env  # one thread: no pool to wait in
    threads = _machine(monkeypatch, cores=64, load=1.0)
    env = {}
    threads.configure(env)  # the whole machine: the libraries' own defaults (torch: the physical cores) stay
    assert env == {}


def test_cgroup_quota_is_read(tmp_path):
    from attnviz.threads import _quota

    assert _quota(str(tmp_path)) is None
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert _quota(str(tmp_path)) is None
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert _quota(str(tmp_path)) == 2


def test_the_console_script_sizes_the_pools_before_torch_starts(tmp_path):
    """The entry point sets the pools' variables before any command imports torch, and torch follows them."""
    import os
    import subprocess
    import sys

    code = ("import os, sys\nsys.argv = ['attnviz', '--version']\nfrom attnviz._entry import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules\nimport torch\n"
            "print(torch.get_num_threads(), os.environ['OMP_WAIT_POLICY'], os.environ['MKL_NUM_THREADS'])\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS") and k != "OMP_WAIT_POLICY"}
    r = subprocess.run([sys.executable, "-c", code], env={**env, "ATTNVIZ_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-3:] == ["2", "PASSIVE", "2"]


@pytest.mark.parametrize(("n_layers", "n_heads"), [(6, 12), (12, 12)])
def test_every_label_of_many_heads_is_readable(tmp_path, monkeypatch, n_layers, n_heads):
    """`compare-heads --out grid.png` of MiniLM's 72 heads labelled them in 4- and 5-point type (8-10 pixels): no
    text under 6 points, and the matrix's head names never overlap one another."""
    _out, fig = _comparison(tmp_path, monkeypatch, n_layers, n_heads)
    renderer = fig.canvas.get_renderer()
    matrix = fig.axes[1]
    texts = [*fig.axes[0].texts, *matrix.get_xticklabels(), *matrix.get_yticklabels()]
    assert min(t.get_fontsize() for t in texts) >= 6
    names = sorted((t.get_window_extent(renderer) for t in matrix.get_yticklabels()), key=lambda box: box.y0)
    assert len(names) == n_layers * n_heads
    assert all(a.y1 <= b.y0 + 0.5 for a, b in itertools.pairwise(names))  # a row each, none on another
    columns = sorted((t.get_window_extent(renderer) for t in matrix.get_xticklabels()), key=lambda box: box.x0)
    assert all(a.x1 <= b.x0 + 0.5 for a, b in itertools.pairwise(columns))
