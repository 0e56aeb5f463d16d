"""A statistic carries its own column order (issue 42): ``Statistic.order`` places its column in the table,
the CSV, the JSON and the Parquet rows; ``Statistic.priority`` says how long it stays in a narrow table.
The built-ins' orders give today's columns exactly (the golden tables stay as they were)."""

from __future__ import annotations

import csv
import io
import json

import pytest
import torch
from conftest import TINY

from attnviz.analysis.statistics import STATISTICS, Statistic, column_order, priority_order, registered

TEXT = "the cat sat on the mat and the dog sat on the log"

BUILT_IN_COLUMNS = ["entropy", "entropy_norm", "self", "prev_score", "next", "first", "sep", "punct", "max",
                    "distance", "duplicate", "induction", "sink"]
BUILT_IN_PRIORITY = ["prev_score", "next", "self", "first", "entropy_norm", "sep", "punct", "induction",
                     "duplicate", "max", "distance", "entropy", "sink"]


def _ones(block) -> torch.Tensor:
    """Per head, 1 per query row: the statistic is 1.000 for every head (a column easy to find)."""
    return torch.full((block.weights.shape[0],), float(block.weights.shape[1]), dtype=torch.float64)


# Between ``self`` (30) and ``prev_score`` (40).
AFTER_SELF = Statistic("ones", "one", "1 for every head (a test's)", _ones, order=35, priority=5)
UNPLACED = Statistic("later", "ltr", "1 for every head (a test's, with no order)", _ones)


def test_the_built_ins_keep_todays_orders():
    assert column_order() == BUILT_IN_COLUMNS
    assert priority_order() == BUILT_IN_PRIORITY


def test_a_statistic_without_an_order_goes_after_the_built_ins():
    with registered(UNPLACED), registered(AFTER_SELF):
        assert column_order() == [*BUILT_IN_COLUMNS[:3], "ones", *BUILT_IN_COLUMNS[3:], "later"]
        assert priority_order()[0] == "ones" and priority_order()[-1] == "later"
    assert column_order() == BUILT_IN_COLUMNS  # gone with the block, the order as it was


def _table_header(stdout: str) -> list[str]:
    return next(line for line in stdout.splitlines() if line.split()[:2] == ["L", "H"]).split()


def test_a_placed_statistic_is_at_its_place_in_the_table_csv_and_json(run_cli):
    with registered(AFTER_SELF):
        expected = [*BUILT_IN_COLUMNS[:3], "ones", *BUILT_IN_COLUMNS[3:]]
        r = run_cli("heads", TEXT, "--model", TINY, "--format", "json")
        assert r.exit_code == 0, r.stderr
        head = json.loads(r.stdout)["heads"][0]
        assert [k for k in head if k in STATISTICS] == expected
        r = run_cli("heads", TEXT, "--model", TINY, "--format", "csv")
        assert r.exit_code == 0, r.stderr
        names = next(csv.reader(io.StringIO(r.stdout)))
        assert names[:-2] == ["layer", "head", *expected] and names[-2:] == ["labels", "sinks"]
        r = run_cli("heads", TEXT, "--model", TINY, "--columns", "all", "--width", "250")
        assert r.exit_code == 0, r.stderr
        short = [STATISTICS[s].short for s in expected]
        assert _table_header(r.stdout) == ["L", "H", *short, "labels"]
        # The usual table (no --columns) at a width for all: the same order; 1.000 everywhere, it is shown.
        r = run_cli("heads", TEXT, "--model", TINY, "--width", "250")
        assert r.exit_code == 0, r.stderr
        header = _table_header(r.stdout)
        assert header.index("one") == header.index("self") + 1


def test_a_narrow_table_keeps_the_statistic_that_says_it_stays_longest(run_cli):
    with registered(AFTER_SELF):
        r = run_cli("heads", TEXT, "--model", TINY, "--width", "40")
        assert r.exit_code == 0, r.stderr
        assert "one" in _table_header(r.stdout)


def test_the_parquet_rows_follow_the_order(run_cli, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    texts = tmp_path / "texts.txt"
    texts.write_text(f"{TEXT}\nthe dog sat\n", encoding="utf-8")
    with registered(AFTER_SELF):
        r = run_cli("heads", "--file", str(texts), "--model", TINY, "--format", "parquet", "--out", str(tmp_path / "out"))
        assert r.exit_code == 0, r.stderr
        names = pq.read_schema(tmp_path / "out" / "heads.parquet").names
    assert [n for n in names if n in [*BUILT_IN_COLUMNS, "ones"]] == [*BUILT_IN_COLUMNS[:3], "ones",
                                                                      *BUILT_IN_COLUMNS[3:]]
