"""Forged and damaged corpus tables for ``attnviz atlas`` and ``atlas --vs-model`` (issue 41, items 5, 6, 7 and 10):
each is one line on stderr naming the file and the column (or the field), exit 1, never an internal error; a
table too large for the memory budget is refused from its footer before a column is read; the texts of another
corpus are refused; counts that buy unbounded work are refused with their estimate before the work starts.

The export is made once (one model run); every case copies it and forges one thing with pyarrow."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

TEXTS = ["The cat sat on the mat.", "A dog chased the cat around the garden.", "Attention is all you need.",
         "The river runs through the old city.", "She read the letter twice before she answered.",
         "Birds sing at dawn in the quiet park.", "He plays the piano every evening."]
FAST = ["--bootstrap", "100", "--permutations", "100", "--format", "json"]


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """The texts exported once with the default model, with importance (as a cluster would write them)."""
    from typer.testing import CliRunner

    from attnviz.cli import app

    root = tmp_path_factory.mktemp("hostile-tables")
    texts = root / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["heads", "--file", str(texts), "--format", "parquet", "--out", str(root / "out"),
                                      "--importance", "--similar-to", "A cat sat on a rug."])
    assert result.exit_code == 0, result.output
    return root / "out"


def copy(export, tmp_path, name="forged"):
    folder = tmp_path / name
    shutil.copytree(export, folder)
    return folder


def one_error_line(result, *words):
    """The command's stderr is one error line naming each of ``words``, and no internal error."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnviz: error: "), result.stderr
    assert "internal error" not in lines[0], lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


# ---- forgeries of one column of a table ----------------------------------------------------------------------------

def with_column(path, name, make):
    """Rewrite the table at ``path`` with column ``name`` replaced by ``make(old column, table)``."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    column = make(table.column(name), table)
    pq.write_table(table.set_column(table.column_names.index(name), name, column), path)


def without_column(path, name):
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    pq.write_table(table.drop_columns([name]), path)


def cast(kind):
    import pyarrow as pa

    return lambda column, table: column.cast(getattr(pa, kind)())


def as_strings(column, table):
    import pyarrow as pa

    return pa.array([str(v) for v in column.to_pylist()], pa.string())


def one_null(column, table):
    import pyarrow as pa

    values = column.to_pylist()
    values[len(values) // 2] = None
    return pa.array(values, column.type)


def all_null(column, table):
    import pyarrow as pa

    return pa.nulls(len(column))


def one_value(value):
    def make(column, table):
        import pyarrow as pa

        values = column.to_pylist()
        values[len(values) // 2] = value
        return pa.array(values, column.type)
    return make


def as_bool(column, table):
    import pyarrow as pa

    return pa.array([v > 0.5 for v in column.to_pylist()], pa.bool_())


def plain_string_labels(column, table):
    import pyarrow as pa

    return pa.array([";".join(v) for v in column.to_pylist()], pa.string())


def null_label(column, table):
    import pyarrow as pa

    values = column.to_pylist()
    values[3] = ["first-token", None]
    return pa.array(values, column.type)


HEADS = "heads.parquet"
IMPORTANCE = "importance.parquet"
TEXTS_TABLE = "texts.parquet"

COLUMN_CASES = {
    **{f"{key} of {kind}s": (HEADS, key, cast(kind)) for key in ("head", "layer", "text_index")
       for kind in ("float64", "float32")},
    **{f"{key} of strings": (HEADS, key, as_strings) for key in ("head", "layer", "text_index")},
    **{f"{key} with a null": (HEADS, key, one_null) for key in ("head", "layer", "text_index")},
    **{f"{key} all null": (HEADS, key, all_null) for key in ("head", "layer", "text_index")},
    "a negative head": (HEADS, "head", one_value(-1)),
    "a head of 10^9": (HEADS, "head", one_value(10**9)),
    "a negative text_index": (HEADS, "text_index", one_value(-5)),
    **{f"{stat} of strings": (HEADS, stat, as_strings) for stat in ("entropy", "sink")},
    **{f"{stat} of booleans": (HEADS, stat, as_bool) for stat in ("entropy", "prev_score")},
    **{f"{stat} as {value}": (HEADS, stat, one_value(value)) for stat in ("entropy", "first")
       for value in (float("nan"), float("inf"), float("-inf"), 1e308, -1e308)},
    "entropy with a null": (HEADS, "entropy", one_null),
    "distance all null": (HEADS, "distance", all_null),
    "labels a plain string": (HEADS, "labels", plain_string_labels),
    "labels with a null list": (HEADS, "labels", one_null),
    "labels with a null label": (HEADS, "labels", null_label),
    "text_hash of integers": (HEADS, "text_hash", lambda column, table: table.column("text_index")),
    "text_hash with a null": (HEADS, "text_hash", one_null),
    "texts of integers": (TEXTS_TABLE, "text", lambda column, table: table.column("text_index")),
    "a null text": (TEXTS_TABLE, "text", one_null),
    "a null model": (TEXTS_TABLE, "model", one_null),
    "text_index of floats in texts": (TEXTS_TABLE, "text_index", cast("float64")),
    "importance as NaN": (IMPORTANCE, "importance", one_value(float("nan"))),
    "importance as inf": (IMPORTANCE, "importance", one_value(float("inf"))),
    "importance of strings": (IMPORTANCE, "importance", as_strings),
    "importance's head of floats": (IMPORTANCE, "head", cast("float64")),
}


@pytest.mark.parametrize("case", sorted(COLUMN_CASES))
def test_a_forged_column_is_one_line_naming_the_file_and_column(case, export, run_cli, tmp_path):
    table, column, make = COLUMN_CASES[case]
    folder = copy(export, tmp_path)
    with_column(folder / table, column, make)
    result = run_cli("atlas", str(folder), "--format", "json")
    assert result.exit_code == 1, (result.stdout[:200], result.stderr)
    one_error_line(result, table, f"'{column}'")


@pytest.mark.parametrize("table, column", [(TEXTS_TABLE, "model"), (TEXTS_TABLE, "text"), (TEXTS_TABLE, "text_hash"),
                                           (HEADS, "head"), (HEADS, "text_index")])
def test_a_missing_column_is_named(table, column, export, run_cli, tmp_path):
    folder = copy(export, tmp_path)
    without_column(folder / table, column)
    result = run_cli("atlas", str(folder), "--format", "json")
    assert result.exit_code == 1, result.stderr
    one_error_line(result, table, f"'{column}'")


# ---- files that are not tables --------------------------------------------------------------------------------------

def random_bytes(path):
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())


def empty(path):
    path.write_bytes(b"")


def first_half(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def pages_overwritten(path):
    """The footer intact, the column pages in the middle of the file overwritten."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle - 4000:middle + 4000] = b"\xff" * 8000
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("table", [HEADS, TEXTS_TABLE, IMPORTANCE])
@pytest.mark.parametrize("damage", [random_bytes, empty, first_half], ids=lambda f: f.__name__)
def test_a_file_that_is_not_a_table_is_one_line_naming_it(table, damage, export, run_cli, tmp_path):
    folder = copy(export, tmp_path)
    damage(folder / table)
    result = run_cli("atlas", str(folder), "--format", "json")
    assert result.exit_code == 1, result.stderr
    one_error_line(result, table, "Parquet")


def test_damaged_pages_name_the_file_and_the_column(export, run_cli, tmp_path):
    folder = copy(export, tmp_path)
    pages_overwritten(folder / HEADS)
    result = run_cli("atlas", str(folder), "--format", "json")
    assert result.exit_code == 1, result.stderr
    assert "column '" in one_error_line(result, HEADS)


def test_a_table_that_is_a_folder_or_a_pipe_is_refused_unread(export, run_cli, tmp_path):
    import os

    folder = copy(export, tmp_path)
    (folder / TEXTS_TABLE).unlink()
    os.mkfifo(folder / TEXTS_TABLE)  # opening it for reading would wait for a writer forever
    result = run_cli("atlas", str(folder), "--format", "json")
    assert result.exit_code == 1, result.stderr
    one_error_line(result, TEXTS_TABLE, "not a regular file")


# ---- the manifest and the other side of a diff ---------------------------------------------------------------------

@pytest.mark.parametrize("reading", [5, "hide_special", [1, 2], None, {"layers": {"a": 1}}])
def test_a_manifest_whose_reading_is_not_an_object_is_named(reading, export, run_cli, tmp_path):
    other = copy(export, tmp_path)
    manifest = other / "manifest.jsonl"
    lines = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines()]
    for entry in lines:
        entry["reading"] = reading
    manifest.write_text("".join(json.dumps(entry) + "\n" for entry in lines), encoding="utf-8")
    result = run_cli("atlas", str(export), "--vs-model", str(other), *FAST)
    assert result.exit_code == 1, result.stderr
    one_error_line(result, "manifest.jsonl", "'reading'")


@pytest.mark.parametrize("table, column, value", [(HEADS, "entropy", float("nan")), (HEADS, "sink", float("inf")),
                                                  (HEADS, "max", -1e308), (IMPORTANCE, "importance", float("nan"))])
def test_a_non_finite_value_on_one_side_of_a_diff_is_named(table, column, value, export, run_cli, tmp_path):
    other = copy(export, tmp_path)
    with_column(other / table, column, one_value(value))
    for first, second in ((export, other), (other, export)):
        result = run_cli("atlas", str(first), "--vs-model", str(second), *FAST)
        assert result.exit_code == 1, result.stderr
        one_error_line(result, str(other / table), f"'{column}'")


# ---- item 6: a table too large for the budget, refused from its footer -------------------------------------------

ROWS = 10**7


def huge_heads(path):
    """10^7 rows, one per text × 5 layers × 20 heads (10^5 texts), written a million rows at a time: a small file
    (dictionary-encoded, compressed) whose columns would take gigabytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("text_index", pa.int64()), ("text_hash", pa.string()), ("layer", pa.int32()),
                        ("head", pa.int32()), ("entropy", pa.float64()), ("first", pa.float64())])
    step = 10**6
    row = np.arange(step)  # a step is whole texts (100 rows each): only the text index differs between steps
    same = {"text_hash": pa.array(["0123456789abcdef"] * step), "layer": ((row // 20) % 5).astype(np.int32),
            "head": (row % 20).astype(np.int32), "entropy": np.full(step, 0.5), "first": np.full(step, 0.25)}
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for start in range(0, ROWS, step):
            writer.write_table(pa.table({"text_index": (start + row) // 100, **same}, schema=schema))


def test_a_table_of_ten_million_rows_is_refused_before_a_column_is_read(run_cli, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    folder = tmp_path / "huge"
    folder.mkdir()
    huge_heads(folder / HEADS)
    assert (folder / HEADS).stat().st_size < 2 << 20 and pq.ParquetFile(folder / HEADS).metadata.num_rows == ROWS

    def no_reading(*args, **kwargs):
        raise AssertionError("a column was read")

    monkeypatch.setattr(pq.ParquetFile, "read", no_reading)
    monkeypatch.setattr(pq, "read_table", no_reading)
    result = run_cli("atlas", str(folder), "--format", "json", env={"ATTNVIZ_MAX_MEMORY": "256M"})
    assert result.exit_code == 1, result.stderr
    one_error_line(result, HEADS, "10,000,000 rows", "ATTNVIZ_MAX_MEMORY")


# ---- item 7: texts from another corpus ------------------------------------------------------------------------------

def texts_of_another_corpus(path, *, rehash: bool):
    """``texts.parquet`` with text 4 replaced (its hash made anew, as another export's would be, or kept)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    texts, hashes = table.column("text").to_pylist(), table.column("text_hash").to_pylist()
    row = table.column("text_index").to_pylist().index(4)
    texts[row] = "Stocks fell sharply in early trading."
    if rehash:
        hashes[row] = hashlib.sha256(texts[row].encode("utf-8")).hexdigest()[:16]
    table = table.set_column(table.column_names.index("text"), "text", pa.array(texts, pa.string()))
    table = table.set_column(table.column_names.index("text_hash"), "text_hash", pa.array(hashes, pa.string()))
    pq.write_table(table, path)


@pytest.mark.parametrize("rehash", [True, False], ids=["another-export", "text-changed"])
def test_texts_of_another_corpus_are_refused_naming_the_text(rehash, export, run_cli, tmp_path):
    folder = copy(export, tmp_path)
    texts_of_another_corpus(folder / TEXTS_TABLE, rehash=rehash)
    for args in (["--format", "json"], ["--vs-model", str(export), *FAST]):
        result = run_cli("atlas", str(folder), *args)
        assert result.exit_code == 1, result.stderr
        assert "Stocks" not in result.stdout
        one_error_line(result, TEXTS_TABLE, "text 4", "text_hash")


def test_the_export_as_written_still_reads(export, run_cli):
    from attnviz.export.atlas_data import atlas_data

    data = atlas_data(export)
    assert data.texts == dict(enumerate(TEXTS)) and data.model and "importance" in data.stats
    result = run_cli("atlas", str(export), "--vs-model", str(export), *FAST)
    assert result.exit_code == 0, result.stderr


# ---- item 10: counts that buy unbounded work -------------------------------------------------------------------------

def forty_texts(export, folder, shift=0.0):
    """Two exports' worth of heads.parquet of 40 texts, from the real one's rows (text t is text t mod 7's)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(export / HEADS)
    parts = []
    for t in range(40):
        rows = table.filter(pc.equal(table.column("text_index"), t % 7))
        rows = rows.set_column(0, "text_index", pa.array(np.full(rows.num_rows, t), pa.int64()))
        rows = rows.set_column(1, "text_hash", pa.array([f"{t:016x}"] * rows.num_rows, pa.string()))
        parts.append(rows)
    out = pa.concat_tables(parts)
    out = out.set_column(out.column_names.index("entropy"), "entropy", pc.add(out.column("entropy"), shift))
    folder.mkdir()
    pq.write_table(out, folder / HEADS)
    return folder


@pytest.fixture
def no_resampling(monkeypatch):
    """The diff's resampling may not start: a refusal must come before it."""
    import attnviz.analysis.checkpoint_diff as checkpoint_diff

    def refused(*args, **kwargs):
        raise AssertionError("the resampling started")

    monkeypatch.setattr(checkpoint_diff, "summarise_all", refused)


def test_a_billion_permutations_are_refused_with_the_estimate(export, run_cli, tmp_path, no_resampling):
    base, other = forty_texts(export, tmp_path / "base"), forty_texts(export, tmp_path / "other", 0.01)
    result = run_cli("atlas", str(base), "--vs-model", str(other), "--permutations", "1000000000")
    assert result.exit_code == 2, result.stderr
    line = one_error_line(result, "1,000,000,000 sign flips", "40 texts", "--permutations", "about", "--force")
    assert "internal error" not in line


def test_ten_million_bootstrap_resamples_are_refused_with_the_estimate(export, run_cli, tmp_path, no_resampling):
    other = copy(export, tmp_path)
    result = run_cli("atlas", str(export), "--vs-model", str(other), "--bootstrap", "10000000")
    assert result.exit_code == 1, result.stderr
    one_error_line(result, "10,000,000 bootstrap resamples", "7 texts", "--bootstrap", "GiB")


def test_a_diff_run_on_texts_is_refused_before_the_models_run(run_cli, tmp_path, monkeypatch, no_resampling):
    import attnviz.analysis.checkpoint_diff as checkpoint_diff
    from attnviz.sources.base import Source

    def no_model_runs(*args, **kwargs):
        raise AssertionError("a model ran")

    monkeypatch.setattr(Source, "extract_batch", no_model_runs)
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"Text number {i} is here.\n" for i in range(40)), encoding="utf-8")
    result = run_cli("atlas", str(texts), "--model", "sample_configs/tiny.toml", "--vs-model",
                     "sample_configs/tiny.toml", "--permutations", "1000000000")
    assert result.exit_code == 2, result.stderr
    one_error_line(result, "sign flips", "--permutations")
    cost = checkpoint_diff.check_summary_cost(40, 72, 14, 1000, 10**9, force=True)  # forced: the time is allowed
    assert cost.seconds > checkpoint_diff.SUMMARY_SECONDS_LIMIT and cost.flips == 10**9


def test_the_estimate_follows_the_exact_test_and_the_defaults_pass():
    from attnviz.analysis.checkpoint_diff import SUMMARY_SECONDS_LIMIT, summary_cost

    assert summary_cost(6, 72, 14, 1000, 10**9).flips == 64  # every sign pattern of 6 texts: cheap at any count
    assert summary_cost(100_000, 72, 16, 1000, 1000).seconds < SUMMARY_SECONDS_LIMIT


def test_embed_tokens_past_its_bound_is_refused_before_the_model_loads(export, run_cli, tmp_path, monkeypatch):
    import attnviz.analysis.qk_embedding as qk

    def refused(*args, **kwargs):
        raise AssertionError("the embedding ran")

    monkeypatch.setattr(qk, "qk_embedding", refused)
    result = run_cli("atlas", str(export), "--out", str(tmp_path / "atlas.html"), "--embed-tokens", "1000000000")
    assert result.exit_code == 2, result.stderr
    one_error_line(result, "--embed-tokens 1000000000", "100,000")
    assert not (tmp_path / "atlas.html").exists()
