"""The vocabulary where it still had dialects (issue 50, C.10): the table's meanings whole and its defaults as a user
types them, one meaning of --jobs, --depths in percent as --budget is, --lengths saying what k is, and explain
reading --text-file."""

from __future__ import annotations

import pytest
from conftest import TINY, built_command

from attnviz.cli import app
from attnviz.cli.needle import parse_depths, parse_lengths
from attnviz.cli.vocabulary import _first_sentence, markdown, rows
from attnviz.errors import UsageError


def test_a_meaning_is_not_cut_at_an_abbreviation():
    assert _first_sentence("Prompt lengths, e.g. a few. More here.") == "Prompt lengths, e.g. a few"
    assert _first_sentence("Norm-based (Kobayashi et al. 2020). Then more.") == "Norm-based (Kobayashi et al. 2020)"
    assert _first_sentence("A shard (e.g. one task. of an array). Next.") == "A shard (e.g. one task. of an array)"
    table = markdown(rows(app))
    for line in table.splitlines():
        meaning = line.split(" | ")[1] if " | " in line else ""
        assert not meaning.rstrip().endswith((" e.g", " et al", " i.e")), line


def test_defaults_read_as_typed_not_as_python_values():
    table = markdown(rows(app))
    assert "[]" not in table and "(1, 1)" not in table
    assert "| 1/1 |" in table  # export --shard


def test_jobs_has_one_meaning_on_every_command():
    found = rows(app)["--jobs"]
    assert "drawing processes" in found.meaning and "Ray actors" in found.meaning
    for command in found.commands:
        param = next(p for p in built_command(app).commands[command].params if "--jobs" in p.opts)
        assert "Ray actors" in (param.help or "") or "actors" in (param.help or ""), command


def test_depths_take_percentages_as_budgets_do_and_lengths_say_what_k_is():
    assert parse_depths("0%,50%,0.75,100%") == [0.0, 0.5, 0.75, 1.0]
    assert parse_lengths("1k,1.5k,2000") == [1024, 1536, 2000]
    help_text = next(p for p in built_command(app).commands["needle"].params if "--lengths" in p.opts).help
    assert "k is 1,024 tokens" in help_text
    for bad in ("nan", "150%", "-1"):
        with pytest.raises(UsageError):
            parse_depths(bad)
    with pytest.raises(UsageError, match="at most 64"):
        parse_lengths(",".join(["100"] * 65))
    with pytest.raises(UsageError, match="whole number"):
        parse_lengths("1.2k")


def test_explain_reads_its_text_from_a_file(run_cli, tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("The cat sat", encoding="utf-8")
    given = run_cli("explain", "The cat sat", "--model", TINY, "--format", "json")
    read = run_cli("explain", "--text-file", str(path), "--model", TINY, "--format", "json")
    assert given.exit_code == read.exit_code == 0, read.stderr
    assert given.stdout == read.stdout
    both = run_cli("explain", "The cat sat", "--text-file", str(path))
    assert both.exit_code == 2 and "not both" in both.stderr
