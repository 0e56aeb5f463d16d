"""``heatmap --rows A:B --cols C:D`` (issue 29): a region of the matrix cell by cell, equal to transformers'
weights there, computed from its query rows alone; and the pooled overview that numbers its rows and
columns so a user knows what region to ask for."""

from __future__ import annotations

import numpy as np
import pytest
from test_row_blocks import _never_whole
from test_sinks import _hf_attentions

from attnviz import api
from attnviz.sources import stream
from attnviz.spans import parse_span, resolve_span

TEXT = " ".join(["the cat sat on the mat and the dog ran far away"] * 2)  # 50 tokens: the tiny models take 64


@pytest.mark.parametrize("family", ["llama", "mistral"])  # causal; mistral with a sliding window
def test_a_region_equals_transformers_there_from_its_rows_alone(tiny_hf, family, monkeypatch):
    tokens, weights = _hf_attentions(tiny_hf[family], TEXT)  # transformers' eager weights
    monkeypatch.setattr(stream, "ROWS_FROM_BYTES", -1)  # the layers come as row blocks, made on demand
    _never_whole(monkeypatch)
    source = api.load(tiny_hf[family], engine="native")
    n = len(tokens)
    view = api.attention_view(source, TEXT, layer=1, head=2, rows=(10, 30), cols=(5, None))
    assert view.panels.shape == (1, 20, n - 5)
    np.testing.assert_allclose(view.panels[0], weights[1, 2, 10:30, 5:].numpy(), atol=1e-5)
    assert view.row_labels[0].startswith("10 ") and (view.row_start, view.col_start) == (10, 5)
    assert "queries 10–29 × keys 5–" in view.title
    every = api.attention_view(source, TEXT, layer=None, head="mean", rows=(None, 4), cols=(0, 4))
    assert every.panels.shape == (2, 4, 4) and every.panel_titles == ["L0", "L1"]
    np.testing.assert_allclose(every.panels[1], weights[1, :, :4, :4].mean(0).numpy(), atol=1e-5)
    grid = api.attention_view(source, TEXT, layer=0, head="all", rows=(3, 6), cols=(0, 6))
    np.testing.assert_allclose(grid.panels, weights[0, :, 3:6, :6].numpy(), atol=1e-5)


@pytest.mark.parametrize(("text", "span"), [("3:9", (3, 9)), (":9", (None, 9)), ("3:", (3, None)), (" 3 : 9 ", (3, 9))])
def test_spans_are_read_as_python_slices(text, span):
    assert parse_span(text, "rows") == span


@pytest.mark.parametrize(("span", "message"), [
    ("5", "is a range of token positions"), ("a:b", "whole numbers"), ("-3:", "whole numbers"), ("1:2:3", "A:B"),
])
def test_a_span_that_is_not_one_is_refused(span, message):
    with pytest.raises(Exception, match=message):
        parse_span(span, "rows")


@pytest.mark.parametrize(("span", "message"), [
    ((50, None), "starts past the text's 40 tokens"), ((0, 41), "ends past the text's 40 tokens; end it at 40"),
    ((7, 7), "holds no token"), ((9, 3), "holds no token"),
])
def test_a_span_outside_the_text_says_where_the_text_ends(span, message):
    with pytest.raises(Exception, match=message):
        resolve_span(span, 40, "rows")


def test_the_command_draws_a_region_and_the_overview_numbers_its_columns(run_cli):
    long = " ".join(["the cat sat on the mat"] * 60)  # 362 tokens on the default model: pooled to fit
    r = run_cli("heatmap", long, "--layer", "0", "--width", "100")
    assert r.exit_code == 0, r.stderr
    ruler = next(line for line in r.stdout.splitlines() if "key at" in line)
    numbers = [int(x) for x in ruler.split("key at")[1].split()]
    assert numbers[0] == 0 and numbers == sorted(numbers) and len(numbers) > 5
    step = int(r.stdout.split("blocks of ")[1].split("×")[0])
    assert all(x % step == 0 for x in numbers)  # each column's first token
    assert f"0-{step - 1} [CLS]" in r.stdout  # rows carry their ranges
    r = run_cli("heatmap", long, "--layer", "0", "--head", "3", "--rows", "100:110", "--cols", "80:100")
    assert r.exit_code == 0, r.stderr
    assert "queries 100–109 × keys 80–99" in r.stdout and "downsampled" not in r.stdout
    ruler = next(line for line in r.stdout.splitlines() if "key at" in line)
    assert ruler.split("key at")[1].split()[0] == "80"
    rows = [line for line in r.stdout.splitlines() if line.strip()[:3].isdigit() and "key at" not in line]
    assert [int(line.split()[0]) for line in rows] == list(range(100, 110))


@pytest.mark.parametrize(("args", "message"), [
    (("--rows", "0:5", "--query", "cat"), "--rows and --cols draw a region"),
    (("--cols", "0:5", "--out", "x.html"), "the page zooms into any region itself"),
    (("--rows", "0:5", "--hide-special"), "drop --hide-special and --words"),
    (("--rows", "2:999"), "ends past the text's"),
    (("--rows", "five"), "--rows five is a range of token positions"),
])
def test_region_errors_are_one_line(run_cli, args, message, tmp_path):
    r = run_cli("heatmap", "The cat sat on the mat.", *args)
    assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_text_file_reads_one_text(run_cli, tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text("The cat sat\non the mat.\n", encoding="utf-8")
    r = run_cli("heatmap", "--text-file", str(path), "--layer", "0")
    assert r.exit_code == 0 and "mat" in r.stdout, r.stderr
    r = run_cli("heatmap", "Also a text", "--text-file", str(path))
    assert r.exit_code == 2 and "give TEXT or --text-file" in r.stderr
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\x00caf\xe9")
    # a file whose content cannot be used is an input error (1), as every file of texts is; a bad value is 2
    r = run_cli("view", "--text-file", str(tmp_path / "bad.txt"), "--page", str(tmp_path / "p.html"))
    assert r.exit_code == 1 and "is not UTF-8 text" in r.stderr
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    r = run_cli("view", "--text-file", str(tmp_path / "empty.txt"), "--page", str(tmp_path / "p.html"))
    assert r.exit_code == 1 and "is empty" in r.stderr
