"""attnviz needle on the command line, and heads --retrieval reading what it wrote."""

from __future__ import annotations

import csv
import io
import json

import copy_circuit as cc
import pytest

from attnviz.errors import UsageError


@pytest.fixture(scope="module")
def circuit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("needle_cli")
    model = cc.build(folder / "copy")
    haystack = folder / "haystack.txt"
    haystack.write_text(cc.haystack(), encoding="utf-8")
    return str(model), str(haystack)


def _args(circuit, *more):
    model, haystack = circuit
    return ["needle", "--model", model, "--haystack", haystack, "--needle", cc.NEEDLE, "--question", cc.QUESTION,
            "--lengths", "300,600", "--depths", "0,0.5,1", "-n", "16", "--width", "100", *more]


@pytest.fixture(scope="module")
def written(circuit, tmp_path_factory):
    from typer.testing import CliRunner

    from attnviz.cli import app

    out = tmp_path_factory.mktemp("needle_out")
    paths = {kind: out / f"run.{kind}" for kind in ("json", "png", "csv", "parquet", "svg", "html")}
    result = CliRunner().invoke(app, _args(circuit, *[x for p in paths.values() for x in ("--out", str(p))]))
    assert result.exit_code == 0, result.stderr
    return result, paths


def test_needle_prints_the_grid_the_answers_and_the_heads_and_writes_every_output(written):
    result, paths = written
    for path in paths.values():
        assert f"wrote {path}" in result.stdout and path.stat().st_size > 0
    lines = result.stdout.splitlines()
    grid = lines[lines.index(next(line for line in lines if line.startswith("depth"))) + 1:][:3]
    assert [line.split() for line in grid] == [["0%", "93", "93"], ["50%", "93", "93"], ["100%", "93", "93"]]
    heads = next(line for line in lines if "retrieval" in line and line.strip().startswith("1 "))
    assert heads.split()[:3] == ["1", "L1H0", "0.938"]
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths["svg"].read_text().lstrip().startswith("<")


def test_the_json_csv_and_parquet_hold_the_same_ranking(written):
    import pyarrow.parquet as pq

    from attnviz.needle.result import NeedleResult

    _, paths = written
    result = NeedleResult.load(paths["json"])
    assert len(result.runs) == 6 and all(run.retrieved for run in result.runs)
    expected = [(h["layer"], h["head"], h["retrieval_score"]) for h in result.heads()]
    rows = list(csv.DictReader(io.StringIO(paths["csv"].read_text())))
    assert [(int(r["layer"]), int(r["head"]), float(r["retrieval_score"])) for r in rows] == expected
    table = pq.read_table(paths["parquet"]).to_pylist()
    assert [(r["layer"], r["head"], r["retrieval_score"]) for r in table] == expected
    assert expected[0][:2] == cc.RETRIEVAL_HEAD and expected[0][2] == pytest.approx(15 / 16)


def test_format_json_prints_the_document_and_says_wrote_on_stderr(run_cli, circuit, tmp_path):
    path = tmp_path / "run.json"
    result = run_cli(*_args(circuit, "--format", "json", "--lengths", "300", "--depths", "0.5", "--out", str(path)))
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "attnviz.needle/1" and document["heads"][0]["name"] == "L1H0"
    assert f"wrote {path}" in result.stderr and json.loads(path.read_text()) == document


@pytest.mark.parametrize(("more", "says"), [
    (["--depths", "0,50"], "0.5, not 50"),
    (["--lengths", "10k"], "positions"),
    (["--lengths", "many"], "not a whole number"),
    (["--out", "x.docx"], "unknown extension"),
    (["--format", "yaml"], "yaml"),
    (["--field", "text"], "haystack"),
])
def test_bad_options_are_one_line_before_the_model_runs(run_cli, circuit, more, says):
    args = _args(circuit, *more)
    if "--field" in more:  # no haystack file to read that way
        args = [a for a in args if a != circuit[1]]
        args.remove("--haystack")
    result = run_cli(*args)
    assert result.exit_code in (1, 2) and says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_needle_without_a_model_names_the_option(run_cli):
    result = run_cli("needle")
    assert result.exit_code == 2 and "--model" in result.stderr


def test_heads_retrieval_adds_the_scores_and_the_retrieval_label(run_cli, circuit, written):
    _, paths = written
    text = "h1 h2 . Answer: n1 n2 h3 . h4 Answer: n1"
    for source in (paths["json"], paths["csv"], paths["parquet"]):
        result = run_cli("heads", text, "--model", circuit[0], "--retrieval", str(source), "--format", "json")
        assert result.exit_code == 0, result.stderr
        heads = {(h["layer"], h["head"]): h for h in json.loads(result.stdout)["heads"]}
        assert heads[cc.RETRIEVAL_HEAD]["retrieval_score"] == pytest.approx(15 / 16, abs=1e-6)
        assert "retrieval" in heads[cc.RETRIEVAL_HEAD]["labels"]
        assert all("retrieval" not in h["labels"] for key, h in heads.items() if key != cc.RETRIEVAL_HEAD)
    table = run_cli("heads", text, "--model", circuit[0], "--retrieval", str(paths["json"]), "--width", "120",
                    "--sort", "retrieval_score")
    assert table.exit_code == 0 and "retrieval_score ≥ 0.1" in table.stdout
    first = next(line for line in table.stdout.splitlines() if line[:1].isdigit())
    assert first.split()[:2] == ["1", "0"]


def test_the_library_adds_the_retrieval_columns_as_the_command_does(run_cli, circuit, written):
    """heads_of(..., retrieval=PATH) is what `heads --retrieval` prints: the command only parses and prints."""
    from attnviz import api

    _, paths = written
    text = "h1 h2 . Answer: n1 n2 h3 . h4 Answer: n1"
    table = api.heads_of(api.load(circuit[0]), [text], retrieval=paths["json"])
    rows = {(row["layer"], row["head"]): row for row in table.select()}
    printed = json.loads(run_cli("heads", text, "--model", circuit[0], "--retrieval", str(paths["json"]),
                                 "--format", "json").stdout)["heads"]
    for head in printed:
        mine = rows[(head["layer"], head["head"])]
        assert mine["retrieval_score"] == pytest.approx(head["retrieval_score"]) and mine["labels"] == head["labels"]
    assert "retrieval" in rows[cc.RETRIEVAL_HEAD]["labels"]


def test_heads_retrieval_of_another_model_is_refused(run_cli, written):
    _, paths = written
    result = run_cli("heads", "the cat sat", "--retrieval", str(paths["json"]))
    assert result.exit_code == 1 and "same model" in result.stderr
    result = run_cli("heads", "the cat sat", "--sort", "retrieval_score")
    assert result.exit_code == 2 and "--retrieval" in result.stderr


def test_the_atlas_reads_the_retrieval_scores(run_cli, circuit, written, tmp_path):
    _, paths = written
    texts = tmp_path / "texts.txt"
    texts.write_text("h1 h2 . Answer: n1 n2 h3 .\nh4 h5 h6 . h7 h8 .\n", encoding="utf-8")
    result = run_cli("atlas", str(texts), "--model", circuit[0], "--retrieval", str(paths["json"]), "--format", "json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert {"retrieval_score", "reasoning_score"} <= set(document["statistics"])
    heads = {(h["layer"], h["head"]): h for h in document["heads"]}
    assert heads[cc.RETRIEVAL_HEAD]["means"]["retrieval_score"] == pytest.approx(15 / 16, abs=1e-6)
    assert heads[cc.RETRIEVAL_HEAD]["labels"]["retrieval"] == 1.0
    assert all("retrieval" not in h["labels"] for key, h in heads.items() if key != cc.RETRIEVAL_HEAD)
    assert sum(heads[cc.RETRIEVAL_HEAD]["histograms"]["retrieval_score"]) == 2  # one bar: every text, one value


def test_the_page_data_keeps_its_contract_and_its_numbers(circuit):
    from attnviz.needle import needle
    from attnviz.needle.page import check_document, page_document

    result = needle(circuit[0], haystack=cc.haystack(), needle=cc.NEEDLE, question=cc.QUESTION, lengths=[60, 900],
                    depths=[0.5], max_new_tokens=16, pictures=True)
    document = page_document(result)
    check_document(document)
    assert document["shown"][:2] == ["mean", "L1H0"]
    long = document["runs"][1]
    assert long["prompt"] == 900 and long["width"] == 2 and long["bins"] == 450  # 900 tokens max-pooled in pairs
    # The induction head's strongest key while generating n2 is the needle's n2, with weight ≈ 1, named.
    start, _ = long["needle"]
    position, weight = long["top"]["L1H0"][1][0]
    assert position == start + 2 and weight > 0.99 and long["labels"][str(position)] == "n2"
    with pytest.raises(UsageError, match="page"):
        from attnviz.needle.result import NeedleResult

        page_document(NeedleResult.from_dict(result.to_dict()))  # read back from JSON: no pictures


@pytest.mark.slow
def test_the_page_opens_offline_and_a_click_opens_a_run(written, browser):
    from conftest import open_offline

    _, paths = written
    requests, errors = [], []
    page = open_offline(browser, paths["html"], requests, errors, ready="body[data-drawn]")
    try:
        first = page.evaluate("document.body.dataset.drawn")
        assert first.startswith("0:L1H0:0")  # the first run that retrieved, on the best head
        page.click('td[data-run="4"]')
        page.wait_for_function("document.body.dataset.drawn.startsWith('4:')")
        page.click(".answer button:nth-of-type(3)")
        page.wait_for_function("document.body.dataset.drawn === '4:L1H0:2'")
        assert "n3" in page.inner_text("#onetoken") and "in the needle" in page.inner_text("#onetoken")
        size = page.evaluate("[document.getElementById('matrix').width, document.getElementById('matrix').height]")
        assert size[0] > 100 and size[1] >= 16 * 6
        page.select_option("#headpick", "mean")
        page.wait_for_function("document.body.dataset.drawn === '4:mean:2'")
        assert errors == [] and requests == [paths["html"].as_uri()]
    finally:
        page.close()
