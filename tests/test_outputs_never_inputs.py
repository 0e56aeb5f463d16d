"""An output is never one of the command's own inputs (issue 58, A1): `heatmap --image p.png --out p.png` replaced
the picture with its heatmap, `atlas c.csv --out c.csv` the corpus, `kv --text-file t.json --out t.json` the text,
`needle --haystack h.csv --out h.csv` the haystack, `patterns --minference` the text file, each with exit 0. The
same file by device and inode, whatever its spelling (``./p.png``, an absolute path, a hard link), or a file inside a
model's folder, is refused in one line before any model is loaded, and the input is left as it was."""

from __future__ import annotations

import os

import pytest
from conftest import TINY

from attnviz.errors import UsageError
from attnviz.fileio import refuse_overwriting_inputs

MISSING_MODEL = "no-such-model-anywhere"  # were the model loaded first, the error would name it instead


@pytest.fixture
def files(tmp_path, monkeypatch):
    from PIL import Image

    monkeypatch.chdir(tmp_path)
    Image.new("RGB", (64, 48), "red").save(tmp_path / "p.png")
    (tmp_path / "c.csv").write_text("text\nhello world\n", encoding="utf-8")
    (tmp_path / "t.json").write_text('{"text": "hello"}\n', encoding="utf-8")
    (tmp_path / "h.csv").write_text("text\nhay stack\n", encoding="utf-8")
    (tmp_path / "t.txt").write_text("hello there\n", encoding="utf-8")
    return tmp_path


def _refused(r, out: str) -> None:
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("attnviz: error: cannot write"), r.stderr
    assert "one of this command's inputs" in r.stderr and out.split("/")[-1] in r.stderr, r.stderr
    assert MISSING_MODEL not in r.stderr  # refused before the model was looked for


COMMANDS = [
    (["heatmap", "a cat", "--image", "p.png", "--model", MISSING_MODEL, "--out", "{}"], "p.png"),
    (["rollout", "--image", "p.png", "--model", MISSING_MODEL, "--out", "{}"], "p.png"),
    (["generate", "a cat", "--image", "p.png", "--model", MISSING_MODEL, "--out", "{}"], "p.png"),
    (["heads", "--image", "p.png", "--model", MISSING_MODEL, "--out", "{}"], "p.png"),
    (["atlas", "c.csv", "--model", MISSING_MODEL, "--out", "{}"], "c.csv"),
    (["kv", "--text-file", "t.json", "--model", MISSING_MODEL, "--out", "{}"], "t.json"),
    (["patterns", "--text-file", "t.txt", "--model", MISSING_MODEL, "--minference", "{}"], "t.txt"),
    (["patterns", "--text-file", "t.txt", "--model", MISSING_MODEL, "--duo", "{}"], "t.txt"),
    (["needle", "--haystack", "h.csv", "--model", MISSING_MODEL, "--out", "{}"], "h.csv"),
    (["heatmap", "--text-file", "t.txt", "--model", MISSING_MODEL, "--out", "{}"], "t.txt"),
    (["view", "--text-file", "t.txt", "--model", MISSING_MODEL, "--page", "{}"], "t.txt"),
]


@pytest.mark.parametrize("spelling", ["plain", "dot", "absolute", "hard link"])
@pytest.mark.parametrize(("argv", "name"), COMMANDS, ids=lambda v: v[0] if isinstance(v, list) else v)
def test_an_output_naming_an_input_is_refused_before_the_model(run_cli, files, argv, name, spelling):
    before = (files / name).read_bytes()
    out = {"plain": name, "dot": f"./{name}", "absolute": str(files / name), "hard link": f"linked-{name}"}[spelling]
    if spelling == "hard link":
        os.link(files / name, files / out)
    r = run_cli(*[a.replace("{}", out) for a in argv])
    _refused(r, out)
    assert (files / name).read_bytes() == before


def test_a_saved_result_given_as_the_model_is_not_overwritten(run_cli, files):
    made = run_cli("heatmap", "--model", TINY, "--out", str(files / "saved.npz"))
    assert made.exit_code == 0, made.stderr
    before = (files / "saved.npz").read_bytes()
    r = run_cli("heatmap", "--model", "saved.npz", "--out", "saved.npz")
    assert r.exit_code == 2 and "one of this command's inputs" in r.stderr, r.stderr
    assert (files / "saved.npz").read_bytes() == before


def test_a_file_of_a_model_folder_is_not_overwritten(run_cli, files):
    folder = files / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}\n', encoding="utf-8")
    r = run_cli("heatmap", "hello", "--model", str(folder), "--out", str(folder / "config.json"))
    assert r.exit_code == 2 and f"inside {folder}" in r.stderr, r.stderr
    assert (folder / "config.json").read_text(encoding="utf-8") == '{"model_type": "bert"}\n'


def test_new_files_and_other_files_pass(tmp_path):
    """What the check lets through: an output not yet there, or another file; a text that is no path at all."""
    (tmp_path / "in.png").write_bytes(b"x")
    (tmp_path / "old.png").write_bytes(b"y")
    refuse_overwriting_inputs([tmp_path / "new.png", tmp_path / "old.png"],
                              [tmp_path / "in.png", "a sentence, not a path\x00", "x" * 5000])
    with pytest.raises(UsageError, match="one of this command's inputs"):
        refuse_overwriting_inputs([tmp_path / "in.png"], [str(tmp_path / "." / "in.png")])
