"""AttentionResult: validation and the .npz round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import TINY

import attnviz
from attnviz.errors import ResultFileError
from attnviz.result import AttentionResult


def test_save_load_round_trip(tmp_path):
    r = attnviz.extract("猫 sat on 垫子", model=TINY, causal=True)
    r.metadata["note"] = "ü"
    path = r.save(tmp_path / "result")
    assert path.name == "result.npz" and path.exists()
    back = AttentionResult.load(path)
    assert back.tokens == r.tokens and back.token_ids == r.token_ids
    assert torch.equal(back.attentions, r.attentions)
    assert back.causal and back.model_name == "tiny" and back.metadata["note"] == "ü"
    assert back.special == [False] * len(r.tokens) and back.attention_mask == [1] * len(r.tokens)
    assert not list(tmp_path.glob(".*tmp*"))  # the temporary file was renamed away


def test_cross_attentions_round_trip(tmp_path):
    r = AttentionResult(tokens=["a", "b"], attentions=torch.rand(1, 2, 2, 2).softmax(-1),
                        cross_attentions=torch.rand(1, 2, 3, 2).softmax(-1), target_tokens=["x", "y", "z"])
    back = AttentionResult.load(r.save(tmp_path / "x.npz"))
    assert torch.equal(back.cross_attentions, r.cross_attentions) and back.target_tokens == ["x", "y", "z"]


def test_validation():
    with pytest.raises(ValueError, match="layers, heads, q, k"):
        AttentionResult(tokens=["a"], attentions=torch.ones(1, 1, 1))
    with pytest.raises(ValueError, match="2 tokens but attentions have 3"):
        AttentionResult(tokens=["a", "b"], attentions=torch.ones(1, 1, 3, 3))
    r = AttentionResult(tokens=["a"], attentions=np.ones((1, 1, 1, 1), dtype=np.float64))
    assert r.attentions.dtype == torch.float32


def test_load_errors(tmp_path):
    with pytest.raises(ResultFileError, match="does not exist"):
        AttentionResult.load(tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ResultFileError, match="not an attnviz result"):
        AttentionResult.load(bad)
    other = tmp_path / "other.npz"
    np.savez(other, a=np.ones(3))
    with pytest.raises(ResultFileError, match="not an attnviz result"):
        AttentionResult.load(other)
    good = attnviz.extract("a b", model=TINY).save(tmp_path / "good.npz")
    data = good.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ResultFileError):
        AttentionResult.load(tmp_path / "cut.npz")
