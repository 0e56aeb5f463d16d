"""Issue 12 on files attnviz reads: result .npz files, model folders and configs, text inputs.
Every failure is a named error of one line, found before the memory or time a hostile file asks for."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY

import attnviz
from attnviz.errors import ResultFileError
from attnviz.result import AttentionResult, write_npz


def _result_arrays(tmp_path: Path) -> dict[str, np.ndarray]:
    path = attnviz.extract("the cat sat", model=TINY).save(tmp_path / "good.npz")
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def _npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    write_npz(str(path), arrays)
    return path


def test_a_zip_bomb_is_refused_before_it_is_inflated(tmp_path):
    arrays = _result_arrays(tmp_path)
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as fh:
                if name == "attentions":  # [1, 1, 8192, 8192] of zeros: 256 MiB from about 250 KB
                    header = io.BytesIO()
                    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                                  "shape": (1, 1, 8192, 8192)})
                    fh.write(header.getvalue())
                    zeros = bytes(1 << 20)
                    for _ in range(256):
                        fh.write(zeros)
                else:
                    np.lib.format.write_array(fh, array)
    assert bomb.stat().st_size < 2 << 20
    with pytest.raises(ResultFileError, match="zip bomb"):
        AttentionResult.load(bomb)


def test_shape_claims_and_wrong_kinds_of_file_are_result_file_errors(tmp_path):
    arrays = _result_arrays(tmp_path)
    # A header claiming 4 TB over a few bytes of data.
    claim = tmp_path / "claim.npz"
    with zipfile.ZipFile(claim, "w") as archive:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                      "shape": (1, 1, 1 << 20, 1 << 20)})
        archive.writestr("attentions.npy", header.getvalue() + bytes(64))
    cases = {
        "claim": (claim, "claims shape"),
        "meta-list": (_npz(tmp_path / "m.npz", {**arrays, "meta": np.array(json.dumps([1, 2]))}), "metadata"),
        "meta-deep": (_npz(tmp_path / "d.npz", {**arrays, "meta": np.array("[" * 100_000 + "]" * 100_000)}), "metadata"),
        "nan": (_npz(tmp_path / "n.npz", {**arrays, "attentions": arrays["attentions"] * np.nan}), "NaN or infinite"),
        "lengths": (_npz(tmp_path / "l.npz", {**arrays, "token_ids": arrays["token_ids"][:1]}), "one per token"),
    }
    pickled = tmp_path / "o.npz"
    with zipfile.ZipFile(pickled, "w") as archive:
        for name, array in {**arrays, "special": np.array([object()] * 3)}.items():
            with archive.open(f"{name}.npy", "w") as fh:
                np.lib.format.write_array(fh, array, allow_pickle=True)
    cases["objects"] = (pickled, "holds object data")
    npy = tmp_path / "renamed.npz"
    np.save(npy.with_suffix(".npy"), arrays["attentions"])
    os.replace(npy.with_suffix(".npy"), npy)
    cases["npy"] = (npy, "not an attnviz result file")
    for name, (path, expected) in cases.items():
        with pytest.raises(ResultFileError, match=expected):
            AttentionResult.load(path)
            pytest.fail(f"{name}: loaded")
    assert AttentionResult.load(tmp_path / "good.npz").tokens == ["the", "cat", "sat"]


def test_a_result_larger_than_the_memory_budget_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "good.npz"
    attnviz.extract("the cat sat on the mat", model=TINY).save(path)
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "1K")
    with pytest.raises(ResultFileError, match="ATTNVIZ_MAX_MEMORY"):
        AttentionResult.load(path)
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "1G")
    assert AttentionResult.load(path).n_layers == 2


# --- model configs and folders -------------------------------------------------------------------


def _toml(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "m.toml"
    path.write_text('[model]\ntype = "transformer"\n' + body + "\n")
    return path


def test_config_models_too_large_are_refused_before_they_are_built(run_cli, tmp_path):
    for body, expected in (
        ("d_model = 9223372036854775807", "more than the"),
        ("d_model = 40000", "more than the"),
        ("n_layers = 1000000000", "1,000,000,000 layers"),
        ("max_positions = 100000000000", "positions attnviz allows"),
        ("d_model = 999999999989\nn_heads = 7", "ATTNVIZ_MAX_MEMORY"),  # a prime width: the divisor hint stays fast
    ):
        r = run_cli("heatmap", "a b", "--model", str(_toml(tmp_path, body)))
        assert r.exit_code == 1 and expected in r.stderr and r.stderr.count("\n") == 1, (body, r.stderr)
    r = run_cli("heatmap", "a b", "--model", str(_toml(tmp_path, "d_model = 30\nn_heads = 7")))
    assert r.exit_code == 1 and "choose n_heads among 1, 2, 3, 5, 6, 10, 15, 30" in r.stderr
    big = _toml(tmp_path, "d_model = 4096\nd_ff = 4096\nn_layers = 2\nvocab_size = 100")  # ~0.5 GB: fine
    r = run_cli("heads", "a b", "--model", str(big), "--format", "json", env={"ATTNVIZ_MAX_MEMORY": "100M"})
    assert r.exit_code == 1 and "more than the 100.0 MiB" in r.stderr


def _folder(tiny_hf, tmp_path: Path, family: str = "bert", **config_changes) -> Path:
    import shutil

    folder = tmp_path / f"{family}-edited"
    shutil.copytree(tiny_hf[family], folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(config_changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_hostile_config_json_fields_are_named_errors_on_both_engines(run_cli, tiny_hf, tmp_path):
    for changes, expected in (
        ({"num_hidden_layers": 1_000_000_000}, "more than the"),
        ({"num_attention_heads": 0}, "num_attention_heads = 0 must be a whole number"),
        ({"num_attention_heads": -4}, "num_attention_heads = -4"),
        ({"layer_norm_eps": "tiny"}, "layer_norm_eps = 'tiny' must be a positive number"),
        ({"model_type": ["bert"]}, "model_type is a list"),
        ({"max_position_embeddings": 0}, "max_position_embeddings = 0"),
        ({"max_position_embeddings": 10**12}, "positions is more than"),
    ):
        folder = _folder(tiny_hf, tmp_path / str(abs(hash(json.dumps(changes)))), **changes)
        for engine in ("native", "hf"):
            r = run_cli("heatmap", "the cat", "--model", str(folder), "--engine", engine)
            assert r.exit_code == 1 and expected in r.stderr, (changes, engine, r.stderr)
            assert r.stderr.count("\n") == 1 and "internal error" not in r.stderr


def test_config_json_that_is_not_a_regular_file_is_refused_without_reading_it(run_cli, tiny_hf, tmp_path):
    fifo = _folder(tiny_hf, tmp_path / "fifo")
    (fifo / "config.json").unlink()
    os.mkfifo(fifo / "config.json")  # reading it would wait for a writer forever
    zero = _folder(tiny_hf, tmp_path / "zero")
    (zero / "config.json").unlink()
    (zero / "config.json").symlink_to("/dev/zero")  # reading it would fill memory
    for folder in (fifo, zero):
        r = run_cli("heatmap", "the cat", "--model", str(folder))
        assert r.exit_code == 1 and "not a regular file" in r.stderr, r.stderr


def test_only_the_tensors_a_model_uses_are_read(tiny_hf, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    from attnviz.sources.native import weights as weights_module
    from attnviz.sources.resolve import load_source

    folder = _folder(tiny_hf, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    save_file({**tensors, "unused.huge": torch.zeros(4, 1024, 1024)}, folder / "model.safetensors")  # 16 MB, never used
    read: list[str] = []
    real = weights_module.LazyWeights.__getitem__

    def spy(self, key):
        read.append(key)
        return real(self, key)

    weights_module.LazyWeights.__getitem__ = spy
    try:
        source = load_source(str(folder), engine="native")
    finally:
        weights_module.LazyWeights.__getitem__ = real
    assert read and "unused.huge" not in read
    assert source.extract("the cat").n_layers == 2


def test_token_ids_past_the_embedding_are_a_named_error(run_cli, tiny_hf, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _folder(tiny_hf, tmp_path, vocab_size=10)
    tensors = load_file(folder / "model.safetensors")
    key = next(k for k in tensors if k.endswith("word_embeddings.weight"))
    save_file({**tensors, key: tensors[key][:10].contiguous()}, folder / "model.safetensors")
    r = run_cli("heatmap", "the cat sat", "--model", str(folder), "--engine", "native")
    assert r.exit_code == 1 and "embedding has 10 rows" in r.stderr, r.stderr


def test_a_panicking_tokenizer_is_one_line(run_cli, tiny_hf, tmp_path):
    folder = _folder(tiny_hf, tmp_path)
    spec = json.loads((folder / "tokenizer.json").read_text())
    spec["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a+)+b"}, "behavior": "Isolated", "invert": False}
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    # A real process: Rust prints its panic to file descriptor 2 itself, past Python's sys.stderr.
    r = subprocess.run([sys.executable, "-m", "attnviz", "heatmap", "a" * 5000 + "!", "--model", str(folder),
                        "--engine", "native"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "RUST_BACKTRACE": "1"})
    assert r.returncode == 1 and "the tokenizer of" in r.stderr and "PanicException" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr


def test_inputs_nested_too_deeply_and_text_that_is_not_utf8(run_cli, tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"text": "fine"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    r = run_cli("export", str(deep), "--out", str(tmp_path / "o"), "--model", TINY, "--formats", "json")
    assert r.exit_code == 1 and "line 2 nests too deeply" in r.stderr
    with pytest.raises(attnviz.AttnvizError, match="not valid UTF-8"):
        attnviz.extract("The cat \udc80 sat")


def test_nan_attention_is_refused_where_it_arises(run_cli, tmp_path):
    """init_scale = 1e10 is finite, so the config is valid, but every score overflows: heads printed nan
    with exit 0 and heatmap failed with an internal IndexError."""
    model = str(_toml(tmp_path, "init_scale = 1e10"))
    for command in ("heatmap", "heads", "rollout", "compare-heads"):
        r = run_cli(command, "the cat sat", "--model", model)
        assert r.exit_code == 1 and "computed NaN attention weights in layer" in r.stderr, (command, r.stderr)
    with pytest.raises(attnviz.AttnvizError, match="NaN attention"):
        attnviz.extract("the cat sat", model=model)
