"""One registry of the files needle, kv and patterns write: every save goes through it, --out checks against it,
and a format registered from outside (a plugin, a user's code) is written by the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnviz import result_formats
from attnviz.result_formats import ResultFormat, registered

TEXT = "the cat sat on the mat and the dog ran far away over the hill and then the cat came back home"


@pytest.fixture(scope="module")
def llama(tiny_hf, tmp_path_factory):
    from tiny_models import causal_lm

    return causal_lm(tiny_hf["llama"], tmp_path_factory.mktemp("formats_lm") / "llama", positions=512)


def write_tsv(result, path: Path) -> None:
    """A writer from outside attnviz: one line per run, tab-separated."""
    path.write_text("".join(f"{run.policy}\t{run.budget}\t{run.recall:.6f}\n" for run in result.runs),
                    encoding="utf-8")


def test_a_registered_format_is_written_by_the_command_and_an_unknown_one_refused_first(run_cli, llama, tmp_path):
    target = tmp_path / "runs.tsv"
    common = ["kv", TEXT, "--model", llama, "--question", "where is the cat", "--policy", "h2o,tova", "--budget",
              "4", "--no-end-to-end", "-q", "--format", "json"]
    refused = run_cli(*common, "--out", str(target))
    assert refused.exit_code != 0 and ".tsv" in refused.stderr and ".json" in refused.stderr
    assert not target.exists()
    with registered(ResultFormat("kv", ".tsv", "test_result_formats:write_tsv", "runs as TSV")):
        assert ".tsv" in result_formats.suffixes("kv") and ".tsv" not in result_formats.suffixes("needle")
        done = run_cli(*common, "--out", str(target), "--out", str(tmp_path / "runs.json"))
    assert done.exit_code == 0, done.stderr
    lines = [line.split("\t") for line in target.read_text(encoding="utf-8").splitlines()]
    saved = json.loads((tmp_path / "runs.json").read_text(encoding="utf-8"))  # the JSON writer, the same runs
    assert [p for p, _, _ in lines] == [run["policy"] for run in saved["runs"]] == ["h2o", "tova"]
    assert [float(r) for _, _, r in lines] == pytest.approx([run["recall"] for run in saved["runs"]], abs=1e-6)
    assert ".tsv" not in result_formats.suffixes("kv")  # gone with the block


def test_save_writes_by_extension_and_built_ins_are_sealed(tmp_path):
    from attnviz.errors import UnknownFormatError
    from attnviz.kv.patterns import PatternsResult

    result = PatternsResult(model_name="m", engine="native", n_layers=1, n_heads=1, n_kv_heads=1, n_tokens=4,
                            threshold=0.5)
    result.save(tmp_path / "p.json")
    assert json.loads((tmp_path / "p.json").read_text(encoding="utf-8"))["schema"].startswith("attnviz.patterns/")
    with pytest.raises(UnknownFormatError, match=r"\.csv, \.parquet"):
        result.save(tmp_path / "p.png")  # patterns draws no figure
    with pytest.raises(ValueError):
        result_formats.unregister("kv.json")
    with pytest.raises(ValueError, match="lower-case name"):
        result_formats.register(ResultFormat("Heads!", ".x", "m:f"))
    with result_formats.registered(ResultFormat("mykind", ".x", "m:f")):  # a plugin's result kind is its own name
        assert result_formats.suffixes("mykind") == [".x"]
