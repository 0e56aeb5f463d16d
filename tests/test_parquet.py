"""Head statistics as Parquet: export --formats parquet, heads --format parquet, Parquet inputs, resume,
shards and merge; every row checked against the statistics computed directly from the extracted weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")  # the test extra installs it; CI fails without it (see test_ci_installs_pyarrow)
import pyarrow.parquet as pq  # noqa: E402

from attnviz import api  # noqa: E402
from attnviz.analysis.heads import head_table  # noqa: E402
from attnviz.analysis.statistics import STATISTICS  # noqa: E402

TEXTS = ["the cat sat on the mat .", "a dog ran to the cat", "the mat , the cat , the dog", "birds sing",
         "the dog sat on the mat again ."]


def _texts(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _rows(folder: Path) -> list[dict]:
    return pq.read_table(folder / "heads.parquet").to_pylist()


def test_ci_installs_pyarrow():
    """The test extra brings pyarrow, so the Parquet tests run (a skip would hide them)."""
    extras = Path(__file__).resolve().parent.parent.joinpath("pyproject.toml").read_text(encoding="utf-8")
    assert "pyarrow" in extras.split("test = [", 1)[1].split("]", 1)[0]


def test_export_parquet_rows_are_the_statistics_of_each_text(run_cli, tmp_path, tiny_hf):
    out = tmp_path / "out"
    done = run_cli("export", str(_texts(tmp_path, TEXTS)), "--out", str(out), "--model", tiny_hf["gpt2"],
                   "--formats", "parquet", "--batch-size", "2", "--quiet")
    assert done.exit_code == 0, done.output
    rows = _rows(out)
    texts = pq.read_table(out / "texts.parquet").to_pylist()
    source = api.load(tiny_hf["gpt2"])
    n_layers, n_heads = source.n_layers, 4
    assert len(rows) == len(TEXTS) * n_layers * n_heads
    assert [t["text"] for t in texts] == TEXTS and [t["text_index"] for t in texts] == list(range(len(TEXTS)))
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    for index, text in enumerate(TEXTS):
        result = source.extract(text)  # one text alone: the reference (the export ran padded batches)
        assert texts[index]["n_tokens"] == len(result.tokens) and texts[index]["text_hash"] == manifest[index]["hash"]
        table = head_table([result])
        expected = table.rows()
        assert table.all_labels() == [table.labels(la, h) for la in range(n_layers) for h in range(n_heads)]
        got = [r for r in rows if r["text_index"] == index]
        assert [(r["layer"], r["head"]) for r in got] == [(r["layer"], r["head"]) for r in expected]
        for g, e in zip(got, expected, strict=True):
            assert all(abs(g[name] - e[name]) < 1e-5 for name in STATISTICS), (index, g, e)
            assert g["labels"] == e["labels"] and g["sinks"] == e["sinks"]
    schema = pq.read_schema(out / "heads.parquet")
    assert all(schema.field(name).type == pa.float64() for name in STATISTICS)


def test_resume_shards_and_merge_give_one_table(run_cli, tmp_path, tiny_hf):
    texts = _texts(tmp_path, TEXTS)
    common = [str(texts), "--model", tiny_hf["bert"], "--formats", "parquet", "--batch-size", "2", "--quiet"]
    whole, a, b, merged = (tmp_path / n for n in ("whole", "a", "b", "merged"))
    assert run_cli("export", *common, "--out", str(whole)).exit_code == 0
    reference = _rows(whole)
    # An interrupted run: the last item never finished. The rerun redoes its block, rewrites the block's
    # part with both items, and a third run trusts everything (the first item was recorded with the new size).
    manifest = whole / "manifest.jsonl"
    lines = manifest.read_text().splitlines()
    manifest.write_text("\n".join(lines[:-2]) + "\n" + lines[-1] + "\n")  # item 3 lost: its block runs again
    again = run_cli("export", *common[:-1], "--out", str(whole))  # not --quiet: it says what it did
    assert again.exit_code == 0 and "1 exported, 4 already done" in again.stdout, again.stdout
    assert _rows(whole) == reference
    third = run_cli("export", *common[:-1], "--out", str(whole))
    assert "0 exported, 5 already done" in third.stdout, third.stdout
    for shard, folder in (("1/2", a), ("2/2", b)):
        assert run_cli("export", *common, "--shard", shard, "--out", str(folder)).exit_code == 0
    from attnviz.export.items import Item, blocks

    items = [Item(i, t) for i, t in enumerate(TEXTS)]
    for k, folder in ((1, a), (2, b)):  # each shard's table holds its own blocks' texts
        assert {r["text_index"] for r in _rows(folder)} == {item.index for block in blocks(items, 2, k, 2) for item in block}
    done = run_cli("export", "--merge", str(a), str(b), "--out", str(merged))
    assert done.exit_code == 0, done.output
    assert _rows(merged) == reference
    assert pq.read_table(merged / "texts.parquet").to_pylist() == pq.read_table(whole / "texts.parquet").to_pylist()


def test_a_failing_text_is_left_out_and_the_run_goes_on(run_cli, tmp_path, tiny_hf):
    long = " ".join(["cat"] * 400)  # past the tiny model's positions, without --truncate
    out = tmp_path / "out"
    done = run_cli("export", str(_texts(tmp_path, [TEXTS[0], long, TEXTS[1]])), "--out", str(out), "--model",
                   tiny_hf["gpt2"], "--formats", "parquet", "--batch-size", "3", "--quiet")
    assert done.exit_code == 1 and "1 of 3 items failed" in done.stderr
    assert {r["text_index"] for r in _rows(out)} == {0, 2}
    assert [t["text_index"] for t in pq.read_table(out / "texts.parquet").to_pylist()] == [0, 2]


def test_parquet_input_by_column(run_cli, tmp_path, tiny_hf):
    table = pa.table({"id": list(range(len(TEXTS))), "body": TEXTS, "n": [1.0] * len(TEXTS)})
    path = tmp_path / "corpus.parquet"
    pq.write_table(table, path)
    out = tmp_path / "out"
    done = run_cli("export", str(path), "--column", "body", "--out", str(out), "--model", tiny_hf["bert"],
                   "--formats", "parquet", "--quiet")
    assert done.exit_code == 0, done.output
    assert [t["text"] for t in pq.read_table(out / "texts.parquet").to_pylist()] == TEXTS
    missing = run_cli("export", str(path), "--out", str(tmp_path / "x"), "--formats", "parquet", "--quiet")
    assert missing.exit_code == 1 and "has no column 'text' (columns: id, body, n)" in missing.stderr
    numbers = run_cli("export", str(path), "--column", "n", "--out", str(tmp_path / "y"), "--quiet")
    assert numbers.exit_code == 1 and "holds double, not text" in numbers.stderr
    (tmp_path / "fake.parquet").write_text("not parquet")
    fake = run_cli("heads", "--file", str(tmp_path / "fake.parquet"))
    assert fake.exit_code == 1 and "is not a Parquet file" in fake.stderr


def test_heads_parquet_keeps_each_text_and_averages_to_the_table(run_cli, tmp_path, tiny_hf):
    texts = _texts(tmp_path, TEXTS[:3])
    out = tmp_path / "heads"
    done = run_cli("heads", "--file", str(texts), "--model", tiny_hf["llama"], "--format", "parquet", "--out", str(out))
    assert done.exit_code == 0, done.output
    assert "heads.parquet" in done.stdout
    rows = _rows(out)
    averaged = json.loads(run_cli("heads", "--file", str(texts), "--model", tiny_hf["llama"], "--format",
                                  "json").stdout)["heads"]
    for row in averaged:
        mine = [r for r in rows if (r["layer"], r["head"]) == (row["layer"], row["head"])]
        assert len(mine) == 3
        assert abs(sum(r["entropy"] for r in mine) / 3 - row["entropy"]) < 1e-5
    for args, message in ((["--out", str(tmp_path / "z")], "a folder is what --format parquet writes"),
                          (["--format", "parquet"], "needs --out DIR"),
                          (["--format", "parquet", "--out", str(tmp_path / "z"), "--top", "3"],
                           "--top does not go with --format parquet")):
        refused = run_cli("heads", "--file", str(texts), *args)
        assert refused.exit_code == 2 and message in refused.stderr, refused.stderr


def test_without_pyarrow_parquet_says_how_to_get_it(run_cli, tmp_path, monkeypatch):
    from conftest import refuse_import

    refuse_import(monkeypatch, "pyarrow")
    done = run_cli("export", str(_texts(tmp_path, TEXTS)), "--out", str(tmp_path / "o"), "--formats", "parquet")
    assert done.exit_code == 2 and "pip install pyarrow (or pip install -e '.[parquet]' in attnviz's clone)" in done.stderr
    assert not (tmp_path / "o").exists()  # said before any work


def test_tables_never_outlive_or_overwrite_what_they_describe(run_cli, tmp_path, tiny_hf):
    """A rerun without parquet removes the old tables; heads --format parquet refuses a folder holding
    another export (it would remove that export's files); a category (dictionary) column is text."""
    texts = _texts(tmp_path, TEXTS[:2])
    out = tmp_path / "out"
    common = ["--model", tiny_hf["bert"], "--quiet", "--out", str(out)]
    assert run_cli("export", str(texts), "--formats", "parquet,npz", *common).exit_code == 0
    assert (out / "heads.parquet").exists()
    refused = run_cli("heads", "--file", str(texts), "--model", tiny_hf["bert"], "--format", "parquet", "--out", str(out))
    assert refused.exit_code == 2 and "holds another export" in refused.stderr
    assert len(list(out.glob("*.npz"))) == 2  # nothing of it removed
    assert run_cli("export", str(texts), "--formats", "npz", *common).exit_code == 0
    assert not (out / "heads.parquet").exists() and not (out / "texts.parquet").exists()
    category = tmp_path / "category.parquet"
    pq.write_table(pa.table({"text": pa.array(TEXTS[:2]).dictionary_encode()}), category)
    done = run_cli("heads", "--file", str(category), "--model", tiny_hf["bert"], "--format", "json")
    assert done.exit_code == 0 and json.loads(done.stdout)["n_texts"] == 2, done.stderr
