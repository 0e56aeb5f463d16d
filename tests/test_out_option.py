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
    ("heatmap", [TEXT, "--model", TINY, "--head", "all"]),
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



def test_heads_writes_its_table_to_files_by_extension(run_cli, tmp_path):
    pyarrow = pytest.importorskip("pyarrow.parquet")
    paths = [tmp_path / "h.json", tmp_path / "h.csv", tmp_path / "h.parquet"]
    result = run_cli("heads", TEXT, "--model", TINY, "--format", "csv", *[x for p in paths for x in ("--out", str(p))])
    assert result.exit_code == 0, result.stderr
    import json

    document = json.loads(paths[0].read_text(encoding="utf-8"))
    assert paths[1].read_text(encoding="utf-8") == result.stdout  # the file is what stdout shows as CSV
    table = pyarrow.read_table(paths[2]).to_pylist()
    assert [(row["layer"], row["head"]) for row in table] == [(h["layer"], h["head"]) for h in document["heads"]]
    assert table[0]["entropy"] == pytest.approx(document["heads"][0]["entropy"])
    assert table[0]["labels"] == ";".join(document["heads"][0]["labels"])
    wrong = run_cli("heads", TEXT, "--model", TINY, "--out", str(tmp_path / "h.png"))
    assert wrong.exit_code != 0 and ".json, .csv, .parquet" in wrong.stderr


def test_heads_format_parquet_still_writes_its_folder_with_a_note(run_cli, tmp_path):
    pytest.importorskip("pyarrow")
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat\nthe dog ran\n", encoding="utf-8")
    result = run_cli("heads", "--file", str(texts), "--model", TINY, "--format", "parquet", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "o" / "heads.parquet").is_file()
    assert "kept for this release" in result.stderr


def test_heatmap_writes_its_numbers_a_picture_and_the_page_in_one_run(run_cli, tmp_path):
    npz, png, html = tmp_path / "h.npz", tmp_path / "h.png", tmp_path / "h.html"
    result = run_cli("heatmap", TEXT, "--model", TINY, "--out", str(npz), "--out", str(png), "--out", str(html))
    assert result.exit_code == 0, result.stderr
    with np.load(npz) as saved:
        assert len(saved.files) > 0
    assert _png(png) and "<html" in html.read_text(encoding="utf-8").lower()
    assert result.stdout.count("wrote ") == 3
