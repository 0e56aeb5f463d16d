"""Terminal heatmaps: golden text without colour, width fitting, colour escapes, NO_COLOR."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY
from rich.cells import cell_len
from rich.console import Console

import attnviz
from attnviz.render.colors import ColorScale
from attnviz.render.terminal import render_terminal
from attnviz.render.view import max_pool
from attnviz.result import AttentionResult
from attnviz.views.heatmap import heatmap_view

GOLDEN = Path(__file__).parent / "golden"


def render(view, width=60, color_system=None, **kw) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=color_system, force_terminal=color_system is not None)
    render_terminal(view, console, **kw)
    return buf.getvalue()


def known_result() -> AttentionResult:
    """Weights chosen by hand so the golden text can be checked by eye."""
    w = torch.tensor([
        [1.0, 0.0, 0.0, 0.0],
        [0.5, 0.5, 0.0, 0.0],
        [0.1, 0.2, 0.7, 0.0],
        [0.0, 0.3, 0.3, 0.4],
    ])
    return AttentionResult(tokens=["我", "爱", "cat", "."], attentions=w[None, None], model_name="hand")


def test_golden_known_weights():
    text = render(heatmap_view(known_result()))
    assert text == (GOLDEN / "known_weights.txt").read_text(encoding="utf-8")


def test_golden_known_weights_with_values():
    text = render(heatmap_view(known_result()), values=True)
    assert text == (GOLDEN / "known_weights_values.txt").read_text(encoding="utf-8")


def test_golden_tiny_cli(run_cli):
    result = run_cli("heatmap", "The cat sat on the mat", "--model", TINY, "--width", "60", "--layer", "0",
                     env={"NO_COLOR": "1"})
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (GOLDEN / "tiny_layer0_head0.txt").read_text(encoding="utf-8")


def test_shades_follow_the_scale():
    scale = ColorScale(0.0, 1.0)
    assert scale.shade(np.array([0.0, 0.19, 0.2, 0.5, 0.79, 0.8, 1.0])).tolist() == [0, 0, 1, 2, 3, 4, 4]
    assert scale.rgb(np.array([0.0]))[0].tolist() == [68, 1, 84]  # viridis at 0
    assert scale.rgb(np.array([1.0]))[0].tolist() == [253, 231, 37]  # viridis at 1


@pytest.mark.parametrize("n_tokens", [3, 30, 120])
@pytest.mark.parametrize("width", [40, 80, 120])
@pytest.mark.parametrize("head", [0, "all", "mean"])
def test_output_fits_the_width(n_tokens, width, head):
    r = AttentionResult(tokens=[f"tok{i}" for i in range(n_tokens)], attentions=torch.rand(1, 3, n_tokens, n_tokens))
    text = render(heatmap_view(r, head=head), width=width)
    assert max(cell_len(line) for line in text.splitlines()) <= width
    if n_tokens * 2 + 7 > width:
        assert "downsampled" in text
    assert "paged" not in text  # downsampling alone makes it fit


def test_paging_keeps_every_column():
    r = AttentionResult(tokens=[f"t{i}" for i in range(50)], attentions=torch.rand(1, 1, 50, 50))
    text = render(heatmap_view(r), width=40, fit="page")
    # (40 cells − 3 for the label − 1 space) // 2 cells per column = 18 columns a page
    assert "paged: 50 columns in 3 pages of ≤18" in text
    assert "page 3/3: keys 36–49" in text and "downsampled" not in text
    assert max(cell_len(line) for line in text.splitlines()) <= 40


def test_max_pool_keeps_the_largest_weight():
    w = torch.zeros(1, 1, 5, 5)
    w[0, 0, 3, 4] = 0.9
    view = max_pool(heatmap_view(AttentionResult(tokens=list("abcde"), attentions=w)), 2)
    assert view.panels.shape == (1, 3, 3)
    assert view.panels[0, 1, 2] == pytest.approx(0.9) and view.panels.sum() == pytest.approx(0.9)
    assert view.row_labels == ["0-1 a", "2-3 c", "4-4 e"] and view.col_labels == ["a", "c", "e"]
    assert "downsampled 5×5 → 3×3" in view.notes[0]


def test_truecolor_when_the_terminal_has_colour():
    text = render(heatmap_view(known_result()), color_system="truecolor")
    assert "\x1b[" in text and "48;2;253;231;37" in text  # the 1.0 cell: viridis' top as background
    assert "█" not in text.split("scale")[0]  # colour, not shade characters, in the grid


def test_no_color_env_gives_shades(run_cli):
    coloured = run_cli("heatmap", "a b c", "--model", TINY, env={"FORCE_COLOR": "1", "NO_COLOR": ""})
    assert coloured.exit_code == 0 and "48;2;" in coloured.stdout  # a forced terminal gets colour …
    plain = run_cli("heatmap", "a b c", "--model", TINY, env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert plain.exit_code == 0 and "48;2;" not in plain.stdout  # … unless NO_COLOR is set (bold may stay)
    assert "scale ' ' <" in plain.stdout and "░" in plain.stdout + "▒▓█"


def test_grid_shows_every_head():
    r = attnviz.extract("The cat sat on the mat", model=TINY)
    text = render(heatmap_view(r, head="all"), width=80)
    for h in range(4):
        assert f"head {h}" in text
    header = next(line for line in text.splitlines() if line.strip().startswith("T c s"))
    assert header.count("T c s   t m") == 4  # each panel has its own column labels


def test_vertical_column_labels_and_cjk_width():
    text = render(heatmap_view(known_result()))
    lines = text.splitlines()
    header = next(line for line in lines if "我" in line and "爱" in line)
    assert header.rstrip().endswith("我爱t .")  # last letter of "cat" touches the grid, CJK takes 2 cells
