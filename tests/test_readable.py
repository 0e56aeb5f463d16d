"""Readable at 80 columns (issue 27): the pair's boundary in every panel, masked cells left blank with
--values, a signed view without colour shaded by sign and magnitude, and a sink note in whole items."""

from __future__ import annotations

import numpy as np
from conftest import TINY

from attnviz.render.colors import SHADES, SIGNED_SHADES, ColorScale


def test_the_pair_boundary_is_drawn_in_every_panel(run_cli):
    r = run_cli("heatmap", "The cat sat.", "--pair", "It was tired.", "--width", "80", env={"NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    panels_per_row = lines[2].count("L")  # the panel titles' line ("L0   L1 …")
    cell_rows = [line for line in lines if line.startswith("  The") or line.startswith("  cat")]
    assert cell_rows and all(line.count("│") == panels_per_row for line in cell_rows), lines[:12]
    rules = [line for line in lines if line.strip().startswith("─")]
    assert rules and all(line.split().__len__() == panels_per_row for line in rules), rules


def test_masked_cells_are_blank_not_zero_with_values(run_cli):
    causal = TINY.replace("tiny.toml", "causal.toml")
    r = run_cli("heatmap", "the cat sat on", "--model", causal, "--layer", "0", "--values", env={"NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    first = next(line for line in r.stdout.splitlines() if line.lstrip().startswith("the "))
    assert first.split()[1:] == ["1.0", "·", "·", "·"], first  # the first token sees only itself


def test_a_signed_scale_shades_by_sign_and_magnitude_without_colour():
    scale = ColorScale(-2.0, 1.0, "coolwarm")
    levels = scale.shade(np.array([-2.0, -1.0, -0.1, 0.0, 0.1, 0.5, 1.0]))
    assert levels.tolist() == [-4, -2, 0, 0, 0, 1, 2]
    assert [SIGNED_SHADES[-s - 1] if s < 0 else SHADES[s] for s in levels] == ["■", "=", " ", " ", " ", "░", "▒"]
    plain = ColorScale(0.0, 1.0, "viridis")
    assert plain.shade(np.array([0.0, 0.5, 1.0])).tolist() == [0, 2, 4]  # unsigned views are unchanged


def test_a_signed_view_is_not_one_field_of_the_middle_shade(run_cli):
    r = run_cli("rollout", "The cat sat on the mat.", "--method", "attn-grad", "--layer", "5", "--similar-to",
                "A dog barked.", "--width", "80", env={"NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    grid = "".join(line[6:] for line in r.stdout.splitlines() if line[:6].strip() in ("The", "cat", "sat", "mat"))
    assert "▒" * 6 not in grid and any(ch in grid for ch in SIGNED_SHADES + SHADES[1:])
    assert "negative" in r.stdout  # the legend says what the marks mean
