"""Issue 50, D.15 and D.16: forged retrieval results (`heads --retrieval`, `atlas --retrieval`) are refused with one
line before anything is built from them, a needle too long for the model says what is true, and an output under a
regular file says the file is in the way. Each test failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY  # sample_configs/tiny.toml: 2 layers × 4 heads, no download

HEADER = "layer,head,retrieval_score,reasoning_score\n"


def needle_json(**changes: object) -> dict[str, object]:
    """A needle result of the tiny config's shape (2 layers × 4 heads) with no runs, and ``changes``."""
    return {"schema": "attnviz.needle/1", "model_name": "tiny", "engine": "own", "n_layers": 2, "n_heads": 4,
            "needle": "The code is 42.", "question": "Which code?", "haystack": "given", "lengths": [100],
            "depths": [0.5], "max_new_tokens": 4, "runs": [], **changes}


def refused(done, *says: str) -> str:
    """One line on stderr naming the problem, a non-zero exit, no traceback and no internal error."""
    assert done.exit_code != 0, done.stdout[-300:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnviz: error: "), done.stderr[-600:]
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-600:]
    for text in says:
        assert text in done.stderr, done.stderr
    return done.stderr


def heads(run_cli, path: Path):
    return run_cli("heads", "the cat sat on the mat", "--model", TINY, "--retrieval", str(path))


def atlas(run_cli, path: Path, tmp_path: Path):
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat on the mat\nthe dog ran far away\n", encoding="utf-8")
    return run_cli("atlas", str(texts), "--model", TINY, "--retrieval", str(path), "--format", "json")


@pytest.mark.parametrize("name", ["run.json", "run.csv", "run.parquet"])
def test_a_missing_retrieval_file_is_named(run_cli, tmp_path, name):
    """`heads --retrieval missing.json` was `internal error (FileNotFoundError)`."""
    refused(heads(run_cli, tmp_path / name), f"{name} does not exist", "needle command wrote")
    refused(atlas(run_cli, tmp_path / name, tmp_path), f"{name} does not exist")


def test_json_nested_deeper_than_python_recurses_is_refused(run_cli, tmp_path):
    """A JSON array nested 100,000 deep was an internal RecursionError."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    refused(heads(run_cli, path), "nested too deep")
    refused(atlas(run_cli, path, tmp_path), "nested too deep")


@pytest.mark.parametrize(("field", "value", "shown"), [
    ("n_layers", "2", '"2"'), ("n_layers", None, "null"), ("n_heads", True, "true"), ("n_heads", 4.0, "4.0"),
    ("n_layers", [2], "a list")])
def test_a_count_that_is_not_a_whole_number_is_named(run_cli, tmp_path, field, value, shown):
    """`"n_layers": "2"` or `null` was an internal TypeError ('<' not supported between str and int)."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps(needle_json(**{field: value})), encoding="utf-8")
    refused(heads(run_cli, path), f'"{field}" is {shown}, not a whole number')


@pytest.mark.parametrize("runs", [5, ["not a run"], [{"retrieval": 3}]])
def test_runs_of_the_wrong_type_are_refused(run_cli, tmp_path, runs):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(needle_json(runs=runs)), encoding="utf-8")
    refused(heads(run_cli, path))


def test_a_run_whose_scores_are_not_lists_is_refused(run_cli, tmp_path):
    """A run's `retrieval` as a number was an internal TypeError (len() of an int)."""
    run = {"length": 100, "depth": 0.5, "needle_start": 10, "needle_end": 14, "answer": "42", "answer_tokens": ["42"],
           "answer_ids": [1], "recall": 1.0, "retrieved": True, "retrieval": [1, 2], "reasoning": 7}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(needle_json(runs=[run])), encoding="utf-8")
    refused(heads(run_cli, path), "retrieval scores are not 2 layers × 4 heads")


def test_a_csv_field_over_the_csv_modules_limit_is_one_line(run_cli, tmp_path):
    """A CSV field over 128 KiB was `internal error (Error: field larger than field limit (131072))`."""
    path = tmp_path / "run.csv"
    path.write_text(HEADER + '0,0,"' + "1" * 200_000 + '",0\n', encoding="utf-8")
    refused(heads(run_cli, path), "line 2", "field larger than field limit")
    refused(atlas(run_cli, path, tmp_path), "line 2")


def test_a_csv_index_past_any_model_is_refused_before_a_grid(run_cli, tmp_path):
    path = tmp_path / "run.csv"
    path.write_text(HEADER + f"{10**40},0,0.5,0\n", encoding="utf-8")
    refused(heads(run_cli, path), "no model's")


def test_a_json_claiming_ten_billion_heads_is_refused_before_its_grid_is_built(run_cli, tmp_path, monkeypatch):
    """A 4 KB JSON claiming 100,000 × 100,000 heads built its 10¹⁰ scores (5.7 GB) before failing: the claim is
    checked on the parsed fields, so the grid (`NeedleResult._mean`) is never reached."""
    from attnviz.needle.result import NeedleResult

    def built(*args: object) -> None:
        raise AssertionError("the scores' grid was built")

    monkeypatch.setattr(NeedleResult, "_mean", built)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(needle_json(n_layers=100_000, n_heads=100_000)), encoding="utf-8")
    assert path.stat().st_size < 4096
    refused(heads(run_cli, path), "100,000 layers × 100,000 heads", "more heads than any model has")
    refused(atlas(run_cli, path, tmp_path), "more heads than any model has")


def test_a_parquet_of_millions_of_rows_is_refused_from_its_footer(run_cli, tmp_path, monkeypatch):
    """A 9.7 KB Parquet file of millions of equal rows was read whole (4.1 GB) before its rows were counted; now its
    footer's row count and types are checked and no column is read."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = (1 << 20) + 1
    zeros = pa.array(np.zeros(rows, dtype=np.int64))
    path = tmp_path / "heads.parquet"
    pq.write_table(pa.table({"layer": zeros, "head": zeros, "retrieval_score": zeros.cast(pa.float64()),
                             "reasoning_score": zeros.cast(pa.float64())}), path, compression="zstd")
    assert path.stat().st_size < 64 << 10

    def read(*args: object, **kwargs: object) -> None:
        raise AssertionError("a column was read")

    monkeypatch.setattr(pq, "read_table", read)
    monkeypatch.setattr(pq.ParquetFile, "read", read)
    refused(heads(run_cli, path), f"{rows:,} rows", "more heads than any model has")


def test_a_parquet_column_of_strings_is_refused_from_its_footer(run_cli, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "heads.parquet"
    pq.write_table(pa.table({"layer": ["0"], "head": [0], "retrieval_score": [0.5], "reasoning_score": [0.0]}), path)
    refused(heads(run_cli, path), "column layer holds string")


def test_scores_of_a_model_with_more_layers_are_refused(run_cli, tmp_path):
    """Scores of 40 layers for a model of 2 were accepted (the table's layers all lay below 40)."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps(needle_json(n_layers=40)), encoding="utf-8")
    refused(heads(run_cli, path), "40 layers × 4 heads", "tiny has 2 layers", "same model")
    refused(atlas(run_cli, path, tmp_path), "40 layers × 4 heads", "has 2 layers")
    table = tmp_path / "run.csv"  # a heads table of 3 layers × 4 heads
    table.write_text(HEADER + "".join(f"{la},{h},0.5,0\n" for la in range(3) for h in range(4)), encoding="utf-8")
    refused(heads(run_cli, table), "3 layers × 4 heads", "tiny has 2 layers")


def test_scores_of_the_same_shape_are_still_read(run_cli, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cells = [(la, h) for la in range(2) for h in range(4)]
    scores = [0.5 if cell == (1, 2) else 0.0 for cell in cells]
    csv_path, parquet_path, json_path = tmp_path / "run.csv", tmp_path / "run.parquet", tmp_path / "run.json"
    csv_path.write_text(HEADER + "".join(f"{la},{h},{s},0\n" for (la, h), s in zip(cells, scores, strict=True)),
                        encoding="utf-8")
    pq.write_table(pa.table({"layer": [c[0] for c in cells], "head": [c[1] for c in cells],
                             "retrieval_score": scores, "reasoning_score": [0.0] * 8}), parquet_path)
    json_path.write_text(json.dumps(needle_json()), encoding="utf-8")
    for path in (csv_path, parquet_path):
        done = run_cli("heads", "the cat sat on the mat", "--model", TINY, "--retrieval", str(path), "--format", "json")
        assert done.exit_code == 0, done.stderr
        rows = {(h["layer"], h["head"]): h for h in json.loads(done.stdout)["heads"]}
        assert rows[(1, 2)]["retrieval_score"] == pytest.approx(0.5) and "retrieval" in rows[(1, 2)]["labels"]
        assert rows[(0, 0)]["retrieval_score"] == 0.0
    assert heads(run_cli, json_path).exit_code == 0


def test_a_needle_too_long_for_the_model_says_what_it_needs(run_cli, tiny_hf):
    """A needle longer than the model's positions said "give lengths above 24026" of a model holding 4,096."""
    long_needle = " ".join(["The secret code of the old lighthouse is 42."] * 20)
    for more in ((), ("--lengths", "60")):
        done = run_cli("needle", "--model", tiny_hf["gpt2"], "--needle", long_needle, "-n", "2", *more)
        said = refused(done, "the model holds 64 positions", "--needle", "--question")
        assert "give lengths above" not in said
        fixed = int(said.split(" tokens (and the answer")[0].rsplit(" ", 1)[1].replace(",", ""))
        assert fixed > 64


def test_check_grid_names_the_tokens_the_prompt_needs_and_the_positions():
    from attnviz.errors import UsageError
    from attnviz.needle.cells import check_grid

    with pytest.raises(UsageError) as caught:
        check_grid([4000], [0.5], 4096, 20, 24026)
    message = caught.value.for_cli()
    assert "need 24,026 tokens" in message and "holds 4,096 positions" in message and "--needle" in message
    check_grid([200], [0.5], 4096, 20, 100)  # a grid that fits still passes


def test_an_output_under_a_regular_file_says_the_file_is_in_the_way(run_cli, tmp_path):
    """`--out somefile.txt/x.png` said "folder somefile.txt does not exist" of a file that does."""
    blocker = tmp_path / "somefile.txt"
    blocker.write_text("hi", encoding="utf-8")
    for out in (blocker / "x.png", blocker / "deeper" / "x.png"):
        said = refused(run_cli("heatmap", "the cat sat", "--model", TINY, "--out", str(out)),
                       f"{blocker} is a file, not a folder")
        assert "does not exist" not in said
    said = refused(run_cli("heatmap", "the cat sat", "--model", TINY, "--out", str(tmp_path / "none" / "x.png")),
                   "does not exist")  # a folder that is missing is still named so


def small_export(folder: Path, groups: list[list[str]]) -> Path:
    """An export folder whose heads.parquet holds 2 texts × 1 layer × 2 heads, one row group per text, each row the
    labels of its group (``groups``: each group's label)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    schema = pa.schema([("text_index", pa.int64()), ("layer", pa.int64()), ("head", pa.int64()),
                        ("entropy", pa.float64()), ("labels", pa.list_(pa.string()))])
    with pq.ParquetWriter(folder / "heads.parquet", schema) as writer:
        for text, labels in enumerate(groups):
            writer.write_table(pa.table({"text_index": [text, text], "layer": [0, 0], "head": [0, 1],
                                         "entropy": [0.5, 1.5], "labels": [labels, []]}, schema=schema))
    return folder


def test_an_export_whose_row_groups_hold_different_labels_has_an_atlas(run_cli, tmp_path):
    """A heads.parquet of several row groups (as a large export writes) whose labels differ between them was
    `internal error (ArrowNotImplementedError: Unifying differing dictionaries)` in the atlas."""
    folder = small_export(tmp_path / "export", [["prev"], ["sink"]])
    done = run_cli("atlas", str(folder), "--format", "json")
    assert done.exit_code == 0, done.stderr
    head = next(h for h in json.loads(done.stdout)["heads"] if (h["layer"], h["head"]) == (0, 0))
    assert head["labels"] == {"prev": 0.5, "sink": 0.5}


def test_the_atlas_running_out_of_memory_is_one_line(run_cli, tmp_path, monkeypatch):
    """A 4-million-row heads.parquet under `ulimit -v` ended in `internal error (MemoryError)`."""
    import attnviz.export.atlas_data as atlas_data

    def short(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(atlas_data, "histograms", short)
    folder = small_export(tmp_path / "export", [["prev"], ["prev"]])
    refused(run_cli("atlas", str(folder), "--format", "json"), "ran out of memory", "fewer texts")


def test_the_memory_budget_is_what_the_address_space_limit_leaves(monkeypatch):
    """Under `ulimit -v` the budget was the machine's memory, so a heads table past the limit was read until a
    MemoryError: now the footer's sizes are checked against what the limit leaves."""
    import resource

    from attnviz.errors import ResourceError
    from attnviz.limits import MEMORY_ENV, check_memory, memory_budget

    monkeypatch.delenv(MEMORY_ENV, raising=False)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (64 << 40, resource.RLIM_INFINITY)
                        if which == resource.RLIMIT_AS else (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert memory_budget() > 1 << 30  # a limit past what is mapped leaves room
    mapped = 1 << 30
    monkeypatch.setattr(resource, "getrlimit", lambda which: (mapped, resource.RLIM_INFINITY))
    assert memory_budget() < mapped  # this process has mapped something already
    with pytest.raises(ResourceError, match="needs about"):
        check_memory(2 << 30, "reading heads.parquet")
