"""The README's export commands: `--merge shards/*` and `--config sample_configs/batch.toml` as written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# --- the two fixes the README commands needed ----------------------------------------------------


def _invoke(*args: str):
    from typer.testing import CliRunner

    from attnviz.cli import app

    return CliRunner().invoke(app, list(args))


@pytest.fixture
def two_shards(tmp_path, monkeypatch) -> Path:
    """shards/1 and shards/2 of three texts on the tiny config model (fast: no images)."""
    monkeypatch.chdir(tmp_path)
    Path("texts.txt").write_text("a b c\nd e\nf g h i\n", encoding="utf-8")
    for k in (1, 2):
        r = _invoke("export", "texts.txt", "--out", f"shards/{k}", "--shard", f"{k}/2", "--batch-size", "1",
                    "--model", "sample_configs/tiny.toml", "--formats", "npz,json", "--quiet")
        assert r.exit_code == 0, r.stderr
    return tmp_path


@pytest.mark.parametrize("form", [
    ["--merge", "shards/1", "shards/2"],  # what `--merge shards/*` becomes in the shell
    ["--merge", "shards/1", "--merge", "shards/2"],  # the repeated form keeps working
    ["shards/1", "shards/2", "--merge"],
])
def test_merge_takes_every_folder_after_it(two_shards, form):
    r = _invoke("export", *form, "--out", "results")
    assert r.exit_code == 0, r.stderr
    assert "merged 3 items from 2 folders" in r.stdout
    lines = Path("results/manifest.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["index"] for line in lines] == [0, 1, 2]


@pytest.mark.parametrize(("args", "message"), [
    (["shards/1", "shards/2"], "give one INPUT, not 2 (shards/1 shards/2); to join shard folders add --merge"),
    (["--merge"], "--merge needs the shard folders to join"),
    (["--merge", "shards/1", "shards/2", "--layers", "0"], "--layers applies to exporting; --merge only joins"),
    (["--merge", "shards/1", "--config", "sample_configs/batch.toml"], "--config applies to exporting"),
    ([], "give INPUT (a file of texts, or - for stdin), or --merge SHARD_DIR…"),
])
def test_merge_and_input_mistakes_are_one_line(two_shards, args, message):
    r = _invoke("export", *args, "--out", "results")
    assert r.exit_code == 2
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("attnviz: error: ") and message in r.stderr
    assert not Path("results").exists()


def test_sample_config_is_found_from_any_folder(tmp_path, monkeypatch):
    """--config sample_configs/batch.toml, like --model sample_configs/tiny.toml, needs no checkout."""
    from attnviz.sources.resolve import sample_config

    monkeypatch.chdir(tmp_path)
    assert not Path("sample_configs").exists()
    for name in ("batch.toml", "tiny.toml", "seed_example.toml"):
        found = sample_config(f"sample_configs/{name}")
        assert found.is_file() and found.read_bytes() == (ROOT / "sample_configs" / name).read_bytes()
    assert sample_config("elsewhere/batch.toml") == Path("elsewhere/batch.toml")  # a typo is not a sample
    assert sample_config("sample_configs/none.toml") == Path("sample_configs/none.toml")
    Path("texts.txt").write_text("a b\n", encoding="utf-8")
    r = _invoke("export", "texts.txt", "--out", "out", "--config", "sample_configs/batch.toml",
                "--model", "sample_configs/tiny.toml", "--formats", "json")
    assert r.exit_code == 0, r.stderr
    assert Path("out/manifest.jsonl").is_file()
    r = _invoke("export", "texts.txt", "--out", "out", "--config", "elsewhere/batch.toml")
    assert r.exit_code == 1 and r.stderr == "attnviz: error: config file elsewhere/batch.toml does not exist; check --config\n"
    r = _invoke("export", "texts.txt", "--out", "out", "--config", ".")
    assert r.exit_code == 1 and r.stderr == "attnviz: error: --config . is a folder; give a .toml file with an [export] table\n"


def test_batch_toml_is_installed_with_the_package():
    """pyproject ships every sample config (batch.toml included) inside attnviz.sample_configs."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    from importlib.resources import files

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert setuptools["package-dir"]["attnviz.sample_configs"] == "sample_configs"
    patterns = setuptools["package-data"]["attnviz.sample_configs"]
    for path in (ROOT / "sample_configs").glob("*.toml"):
        assert any(path.match(p) for p in patterns), path.name
        assert (files("attnviz.sample_configs") / path.name).is_file()
