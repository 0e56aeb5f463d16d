"""Library errors speak the library's terms; the CLI says the same in its flags (issue 11, point 2)."""

from __future__ import annotations

import pytest

import attnviz
from attnviz.errors import InputError, UsageError, in_api_terms, in_cli_terms


def test_option_markers_in_both_terms():
    text = "[[layers=99]] is out of range; pass [[truncate=True]] or give a [[pair]]"
    assert in_api_terms(text) == "layers=99 is out of range; pass truncate=True or give a pair"
    assert in_cli_terms(text) == "--layers 99 is out of range; pass --truncate or give a --pair"
    assert in_cli_terms(text, {"layers": "--layer"}).startswith("--layer 99 is out of range")
    assert in_api_terms("no markers here") == in_cli_terms("no markers here") == "no markers here"


def test_python_users_read_parameters_not_flags():
    with pytest.raises(UsageError) as caught:
        attnviz.extract("the cat sat", layers=[99])
    assert str(caught.value).startswith("layers=99 is out of range") and "--" not in str(caught.value)
    with pytest.raises(InputError) as long:
        attnviz.extract("word " * 600)
    assert "pass truncate=True to cut it" in str(long.value) and "--" not in str(long.value)


def test_the_command_line_reads_its_own_flags(run_cli, tmp_path):
    r = run_cli("heatmap", "the cat sat", "--layer", "99")
    assert r.exit_code == 2 and r.stderr.startswith("attnviz: error: --layer 99 is out of range")
    r = run_cli("heatmap", "word " * 600)
    assert r.exit_code == 1 and "pass --truncate to cut it" in r.stderr and "truncate=True" not in r.stderr
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat\n")
    r = run_cli("export", str(texts), "--out", str(tmp_path / "o"), "--layer", "0,99")
    assert r.exit_code == 2 and "--layer 99 is out of range" in r.stderr  # every command spells it --layer
