"""The `heads` table at 80 and 120 columns (golden-style, after rich's tests/render.py), and the
README's statistics and label rules checked against the tool's own tables."""

from __future__ import annotations

import re
from io import StringIO
from itertools import combinations

import pytest
from docs_text import section as docs_section
from rich.console import Console

import attnviz
from attnviz.analysis.heads import head_table
from attnviz.analysis.statistics import STATISTICS, labels, short_name
from attnviz.render.tables import choose_columns, head_stats_table

LABELS = labels()
SHORT_NAMES = {name: statistic.short for name, statistic in STATISTICS.items()}

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def rows():
    return head_table([attnviz.extract(TEXT)]).rows()


def _render(rows, width: int) -> tuple[str, list[str]]:
    layout = choose_columns(rows, list(STATISTICS), width, header=short_name)
    console = Console(file=StringIO(), width=width, color_system=None, highlight=False)
    console.print(head_stats_table(rows, layout.shown, title="MiniLM", header=short_name))
    return console.file.getvalue(), layout.shown


def _header(text: str) -> list[str]:
    return text.splitlines()[1].split()  # line 0 is the title


@pytest.mark.parametrize("width", [80, 120])
def test_table_fits_without_cutting_a_header_or_label(rows, width):
    text, shown = _render(rows, width)
    assert "…" not in text
    assert all(len(line.rstrip()) <= width for line in text.splitlines())
    assert _header(text) == ["L", "H", *(short_name(s) for s in shown), "labels"]
    body = text.split("─", 1)[1]
    for row in rows:
        for label in row["labels"]:
            assert re.search(rf"(^|\s){re.escape(label)}(,|\s|$)", body), label  # whole, never cut
    assert len(shown) >= (7 if width == 80 else len(STATISTICS))


def test_labels_wrap_between_labels_never_inside_one():
    row = {"layer": 0, "head": 0, **{s: 0.5 for s in STATISTICS},
           "labels": ["previous-token", "next-token", "first-token", "duplicate-token", "induction"]}
    text, _ = _render([row], 80)
    assert "…" not in text and len(text.splitlines()) > 3  # the labels took more than one line
    for label in row["labels"]:
        assert re.search(rf"(^|\s){re.escape(label)}(,|\s|$)", text), label


@pytest.mark.parametrize("width", [80, 120])
def test_heads_command_says_what_it_left_out(run_cli, width):
    r = run_cli("heads", TEXT, "--width", str(width))
    assert r.exit_code == 0, r.stderr
    assert "…" not in r.stdout
    header = _header(r.stdout)
    shown = [s for s in STATISTICS if short_name(s) in header]
    hidden = [s for s in STATISTICS if s not in shown]
    for s in shown:  # the legend under the table explains every header
        assert re.search(rf"^{re.escape(short_name(s))}\s", r.stdout, re.MULTILINE), s
    flat = " ".join(r.stdout.split())
    if hidden:
        assert f"left out at {width} columns:" in flat
        assert f"--columns {','.join(short_name(s) for s in hidden)}" in flat
        assert all(s in flat.split("left out at")[1] for s in hidden)
    else:
        assert "left out" not in flat
    assert width == 120 or hidden  # 80 columns cannot hold all twelve


def test_columns_chooses_and_orders_the_statistics(run_cli):
    r = run_cli("heads", TEXT, "--width", "80", "--columns", "induction,dup,prev")
    assert r.exit_code == 0, r.stderr
    assert _header(r.stdout) == ["L", "H", "ind", "dup", "prev", "labels"]
    assert "left out" not in r.stdout
    r = run_cli("heads", TEXT, "--width", "80", "--columns", "all")
    assert "left out at 80 columns" in " ".join(r.stdout.split())


def test_sort_takes_full_and_short_names(run_cli):
    full = run_cli("heads", TEXT, "--format", "csv", "--sort", "induction", "--top", "5")
    short = run_cli("heads", TEXT, "--format", "csv", "--sort", "ind", "--top", "5")
    assert full.exit_code == short.exit_code == 0 and full.stdout == short.stdout
    table = run_cli("heads", TEXT, "--width", "80", "--sort", "distance", "--top", "3")
    assert "dist" in _header(table.stdout)  # the sort column stays, however narrow


def test_a_column_of_zeros_is_named_not_shown(tiny_hf, run_cli):
    r = run_cli("heads", "The cat sat on the mat and the dog sat on the cat.", "--model", tiny_hf["gpt2"],
                "--width", "80")
    assert r.exit_code == 0, r.stderr
    assert "next" not in _header(r.stdout)  # a causal model never looks ahead
    assert "0.000 for every head, so not shown: next, sep" in r.stdout


def test_short_names_are_short_and_distinct():
    names = [short_name(s) for s in STATISTICS]
    assert len(set(names)) == len(names) and all(len(n) <= 4 for n in names)
    assert set(SHORT_NAMES) <= set(STATISTICS)


def test_no_two_statistics_are_always_equal(rows, tiny_hf):
    """Each column says something of its own, on an encoder and on a decoder."""
    gpt2 = head_table([attnviz.extract("The cat sat on the mat and the dog sat.", model=tiny_hf["gpt2"])]).rows()
    for a, b in combinations(STATISTICS, 2):
        same = [all(abs(float(r[a]) - float(r[b])) < 1e-6 for r in table) for table in (rows, gpt2)]
        assert not all(same), f"{a} and {b} are equal in every head"


# --- the README says what the tool does ---------------------------------------------------------


def _readme_table(first_header: str) -> list[list[str]]:
    section = docs_section("commands.md", "## `attnviz heads`")
    block = section.split(f"| {first_header} |", 1)[1].split("\n\n", 1)[0]
    lines = block.strip().splitlines()[2:]  # the rest of the header line, then |---|
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in lines]


def test_readme_statistics_are_the_tools():
    table = _readme_table("statistic")
    assert [(row[0].strip("`"), row[1].strip("`")) for row in table] == [(s, short_name(s)) for s in STATISTICS]


def test_readme_label_rules_are_the_tools():
    rules = {}
    for label, rule in _readme_table("label"):
        match = re.fullmatch(r"`(\w+) ≥ ([0-9.]+)`", rule)
        assert match, rule
        rules[label] = (match.group(1), float(match.group(2)))
    assert rules == LABELS


def test_the_tool_prints_the_same_rules(run_cli):
    r = run_cli("heads", TEXT, "--width", "400", "--top", "1")
    line = r.stdout.split("\nlabels: ", 1)[1].strip()
    printed = dict(re.findall(r"(\S+) = (\S+ ≥ [0-9.]+)", line))
    assert printed == {label: f"{short_name(stat)} ≥ {thr}" for label, (stat, thr) in LABELS.items()}


def test_layers_are_set_apart_only_in_model_order(rows):
    def blank_lines(table_rows) -> int:
        console = Console(file=StringIO(), width=200, color_system=None)
        console.print(head_stats_table(table_rows, ["self"], title="t", header=short_name))
        return sum(not line.strip() for line in console.file.getvalue().splitlines())

    assert blank_lines(rows[10:14]) == 1  # between layer 0 and layer 1
    assert blank_lines([rows[13], rows[2], rows[40]]) == 0  # sorted: no layer to set apart


def test_json_of_the_probe_names_it(run_cli, tiny_hf):
    import json

    r = run_cli("heads", "--probe", "induction", "--model", tiny_hf["gpt2"], "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["probe"] == "induction" and doc["model"] == "gpt2" and doc["n_texts"] == 1
    assert len(doc["tokens"]) % 2 == 1  # a BOS, then the random tokens twice
    assert [(h["layer"], h["head"]) for h in doc["heads"]][:2] == [(0, 0), (0, 1)]
