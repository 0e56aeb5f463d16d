"""Issue 12 on files attnviz reads: result .npz files, model folders and configs, text inputs.
Every failure is a named error of one line, found before the memory or time a hostile file asks for."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

import attnviz
from attnviz.errors import ResultFileError
from attnviz.result import AttentionResult, write_npz

from conftest import TINY


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
    assert AttentionResult.load(tmp_path / "good.npz").tokens == ["the", "cat", "sat"]


def test_a_result_larger_than_the_memory_budget_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "good.npz"
    attnviz.extract("the cat sat on the mat", model=TINY).save(path)
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "1K")
    with pytest.raises(ResultFileError, match="ATTNVIZ_MAX_MEMORY"):
        AttentionResult.load(path)
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "1G")
    assert AttentionResult.load(path).n_layers == 2
