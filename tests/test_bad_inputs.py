"""Bad inputs through the CLI: each exits 1 or 2 with one line on stderr naming the problem, prints no
traceback, and leaves no output file behind. One row per case, each named."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SEED, TINY

from attnviz.cli import main

LONG = "word " * 200_000  # about 1 MB


def _files(tmp: Path) -> dict[str, Path]:
    (tmp / "folder").mkdir()
    (tmp / "bad_utf8.txt").write_bytes(b"fine\n\xff\xfe\n")
    (tmp / "nul.txt").write_bytes(b"text\x00more\n")
    (tmp / "empty.txt").write_text("")
    (tmp / "blank.txt").write_text("\n  \n\t\n")
    (tmp / "ok.txt").write_text("The cat sat.\n")
    (tmp / "bad.jsonl").write_text('{"text": "a"}\nnot json\n')
    (tmp / "nofield.jsonl").write_text('{"body": "a"}\n')
    (tmp / "nocol.csv").write_text("a,b\n1,2\n")
    (tmp / "notoml.toml").write_text("this is = = not toml [\n")
    (tmp / "unknown_key.toml").write_text("[model]\nn_head = 4\n")
    (tmp / "heads.toml").write_text("[model]\nn_heads = 5\n")
    (tmp / "shape.toml").write_text(Path(SEED).read_text().replace("[0.7, 0.8]]", "[0.7, 0.8], [0.9, 1.0]]", 1))
    (tmp / "nan.toml").write_text(Path(SEED).read_text().replace("[9, 10, 11, 12]", "[9, 10, 11, nan]"))
    (tmp / "inf.toml").write_text(Path(SEED).read_text().replace("[9, 10, 11, 12]", "[9, 10, 11, inf]"))
    (tmp / "binary.toml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (tmp / "noweights").mkdir()
    (tmp / "noweights" / "config.json").write_text('{"model_type": "bert"}')
    (tmp / "unknown_type").mkdir()
    (tmp / "unknown_type" / "config.json").write_text('{"model_type": "no-such-architecture"}')
    (tmp / "truncated").mkdir()
    (tmp / "truncated" / "config.json").write_text(
        '{"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1, '
        '"intermediate_size": 8, "vocab_size": 10, "max_position_embeddings": 8}')
    (tmp / "truncated" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":")
    (tmp / "truncated" / "tokenizer.json").write_text("{}")
    return {}


# (name, args, expected exit code, a phrase the one line must contain)
CASES = [
    ("text-empty", ["heatmap", ""], 1, "the text is empty"),
    ("text-whitespace", ["heatmap", "  \t\n "], 1, "the text is empty"),
    ("text-1mb", ["heatmap", LONG], 1, "takes at most 512 tokens (at most 131,072 characters are read); shorten it, or pass --truncate"),
    ("text-too-long-tiny", ["heatmap", "w " * 600, "--model", TINY], 1, "takes at most 512"),
    ("file-invalid-utf8", ["heads", "--file", "{tmp}/bad_utf8.txt"], 1, "line 2 is not valid UTF-8"),
    ("file-nul-bytes", ["heads", "--file", "{tmp}/nul.txt"], 1, "line 1 contains a NUL byte"),
    ("file-empty", ["heads", "--file", "{tmp}/empty.txt"], 1, "has no text"),
    ("file-blank-lines", ["export", "{tmp}/blank.txt", "--out", "{tmp}/out"], 1, "has no texts"),
    ("file-missing", ["heads", "--file", "{tmp}/missing.txt"], 1, "does not exist"),
    ("file-is-folder", ["heads", "--file", "{tmp}/folder"], 1, "is a folder"),
    ("export-input-missing", ["export", "{tmp}/missing.txt", "--out", "{tmp}/out"], 1, "does not exist"),
    ("export-input-folder", ["export", "{tmp}/folder", "--out", "{tmp}/out"], 1, "is a folder"),
    ("out-unwritable", ["heatmap", "x", "--model", TINY, "--out", "/sys/attnviz-test.png"], 1, "cannot write /sys/"),
    ("out-missing-folder", ["heatmap", "x", "--model", TINY, "--out", "{tmp}/nope/x.png"], 1, "does not exist"),
    ("out-unknown-extension", ["heatmap", "x", "--model", TINY, "--out", "{tmp}/x.gif"], 2, "unknown extension '.gif'"),
    ("out-no-extension", ["heatmap", "x", "--model", TINY, "--out", "{tmp}/x"], 2, "unknown extension"),
    ("out-is-folder", ["heatmap", "x", "--model", TINY, "--out", "{tmp}/folder"], 2, "unknown extension"),
    ("export-out-is-file", ["export", "{tmp}/ok.txt", "--out", "{tmp}/ok.txt"], 2, "one of this command's inputs"),  # the input itself: refused before "is a file"
    ("layer-out-of-range", ["heatmap", "x", "--model", TINY, "--layer", "9"], 2, "out of range"),
    ("layer-negative", ["heatmap", "x", "--model", TINY, "--layer", "-1"], 2, "numbered from 0"),
    ("layer-not-a-number", ["heatmap", "x", "--layer", "two"], 2, "--layer 'two' is not a layer"),
    ("head-out-of-range", ["heatmap", "x", "--model", TINY, "--head", "4"], 2, "out of range"),
    ("head-negative", ["heatmap", "x", "--model", TINY, "--head", "-3"], 2, "is negative"),
    ("head-not-a-number", ["heatmap", "x", "--head", "first"], 2, "is not a head"),
    ("default-model-layer-too-big", ["heatmap", "x", "--layer", "6"], 2, "has layers 0 to 5"),
    ("config-not-toml", ["heatmap", "x", "--model", "{tmp}/notoml.toml"], 1, "is not valid TOML"),
    ("config-binary", ["heatmap", "x", "--model", "{tmp}/binary.toml"], 1, "not UTF-8"),
    ("config-unknown-key", ["heatmap", "x", "--model", "{tmp}/unknown_key.toml"], 1, "did you mean 'n_heads'"),
    ("config-heads-dont-divide", ["heatmap", "x", "--model", "{tmp}/heads.toml"], 1, "does not divide d_model"),
    ("config-matrix-shape", ["explain", "--model", "{tmp}/shape.toml"], 1, "rows but X has 4 columns"),
    ("config-nan", ["explain", "--model", "{tmp}/nan.toml"], 1, "contains nan"),
    ("config-inf", ["explain", "--model", "{tmp}/inf.toml"], 1, "contains inf"),
    ("config-missing", ["heatmap", "x", "--model", "{tmp}/missing.toml"], 1, "does not exist"),
    ("model-unknown-offline", ["heatmap", "x", "--model", "nobody/nothing-here"], 1, "not in the local Hugging Face cache"),
    ("model-bad-id", ["heatmap", "x", "--model", "bad id!!"], 1, "neither a folder nor a valid hub id"),
    ("model-folder-without-weights", ["heatmap", "x", "--model", "{tmp}/noweights", "--engine", "native"], 1, "no .safetensors weights"),
    ("model-folder-without-config", ["heatmap", "x", "--model", "{tmp}/folder"], 1, "has no config.json"),
    ("model-truncated-safetensors", ["heatmap", "x", "--model", "{tmp}/truncated", "--engine", "native"], 1, "truncated"),
    ("model-type-no-engine", ["heatmap", "x", "--model", "{tmp}/unknown_type"], 1, "no-such-architecture"),
    ("export-shard-3-of-2", ["export", "{tmp}/ok.txt", "--out", "{tmp}/out", "--shard", "3/2"], 2, "K must be between 1 and N"),
    ("export-shard-garbage", ["export", "{tmp}/ok.txt", "--out", "{tmp}/out", "--shard", "half"], 2, "is not K/N"),
    ("export-batch-size-0", ["export", "{tmp}/ok.txt", "--out", "{tmp}/out", "--batch-size", "0"], 2, "must be at least 1"),
    ("export-jsonl-not-json", ["export", "{tmp}/bad.jsonl", "--out", "{tmp}/out"], 1, "line 2 is not JSON"),
    ("export-jsonl-missing-field", ["export", "{tmp}/nofield.jsonl", "--out", "{tmp}/out"], 1, "has no field 'text'"),
    ("export-csv-missing-column", ["export", "{tmp}/nocol.csv", "--out", "{tmp}/out"], 1, "has no column 'text'"),
    ("export-bad-format", ["export", "{tmp}/ok.txt", "--out", "{tmp}/out", "--formats", "gif"], 2, "use some of"),
    ("vmax-not-finite", ["heatmap", "x", "--model", TINY, "--vmax", "inf"], 2, "must be a positive number"),
    ("renormalize-alone", ["heatmap", "x", "--renormalize"], 2, "add --hide-special"),
    ("kind-cross-on-bert", ["heatmap", "x", "--kind", "cross"], 2, "needs an encoder-decoder model"),
    ("target-on-bert", ["heatmap", "x", "--target", "y"], 2, "--target is for encoder-decoder models"),
    ("revision-on-folder", ["heatmap", "x", "--model", "{tmp}/noweights", "--revision", "v1"], 2, "--revision applies to hub ids"),
    ("unknown-command", ["frobnicate"], 2, "No such command"),
    ("unknown-option", ["heatmap", "x", "--frobnicate"], 2, "No such option"),
]


@pytest.mark.parametrize(("args", "code", "phrase"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(tmp_path, capsys, args, code, phrase):
    _files(tmp_path)
    before = {p for p in tmp_path.rglob("*")}
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert exit_info.value.code == code, captured.err
    assert len(lines) == 1 and lines[0].startswith("attnviz: error: "), captured.err
    assert phrase in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    after = {p for p in tmp_path.rglob("*")} - before
    assert not [p for p in after if p.is_file()], f"left files behind: {sorted(after)}"


def test_at_least_forty_cases():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    ("text", "model"),
    [("👍🎉🔥", None), ("👍🎉🔥", TINY), ("שלום 世界 مرحبا hello", None), ("שלום 世界 مرحبا hello", TINY)],
    ids=["emoji-only-minilm", "emoji-only-tiny", "rtl-and-cjk-minilm", "rtl-and-cjk-tiny"],
)
def test_strange_but_valid_text_is_drawn(capsys, text, model):
    """Emoji-only and mixed-script texts are real input, not errors: they draw, with no traceback."""
    args = ["heatmap", text, "--width", "80", "--layer", "0"] + (["--model", model] if model else [])
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    assert exit_info.value.code == 0, captured.err
    assert "Traceback" not in captured.err and "layer 0" in captured.out
