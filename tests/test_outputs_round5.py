"""One rule for --out (issue 50, C.8): in every command that writes results, --out FILE is repeatable and its kind
comes from its extension; one file named twice is refused before anything runs."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY

TEXT = "the cat sat on the mat"
CAUSAL = "sample_configs/causal.toml"


def _png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("command", "args"), [
    ("rollout", [TEXT, "--model", TINY]),
    ("compare-heads", [TEXT, "--model", TINY]),
    ("generate", [TEXT, "--model", CAUSAL, "-n", "3"]),
])
def test_out_is_repeatable_and_each_file_is_its_own_kind(run_cli, tmp_path, command, args):
    png, svg, html = tmp_path / "a.png", tmp_path / "b.svg", tmp_path / "c.html"
    result = run_cli(command, *args, "--out", str(png), "--out", str(svg), "--out", str(html))
    assert result.exit_code == 0, result.stderr
    assert _png(png) and svg.read_text(encoding="utf-8").lstrip().startswith(("<?xml", "<svg"))
    assert "<html" in html.read_text(encoding="utf-8").lower()
    same = run_cli(command, *args, "--out", str(tmp_path / "x.png"), "--out", str(tmp_path / "." / "x.png"))
    assert same.exit_code == 2 and "given for [[out]] twice" not in same.stderr and "twice" in same.stderr


def test_generate_writes_its_numbers_and_a_picture_in_one_run(run_cli, tmp_path):
    npz, png = tmp_path / "g.npz", tmp_path / "g.png"
    result = run_cli("generate", TEXT, "--model", CAUSAL, "-n", "3", "--out", str(npz), "--out", str(png))
    assert result.exit_code == 0, result.stderr
    with np.load(npz) as saved:
        assert len(saved.files) > 0
    assert _png(png)

