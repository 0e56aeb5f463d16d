"""The shortcuts export takes for speed give the same numbers and the same bytes (issue 58, E21): a causal
layer's weights computed over the keys each block of rows sees, and an ``.npz`` written past the page cache."""

from __future__ import annotations

import errno
import os
import sys
import zipfile

import numpy as np
import pytest
import torch

import attnviz
from attnviz.attention import MultiHeadAttention
from attnviz.attention.ops import attention_scores, attention_weights
from attnviz.attention.rows import RowMask, causal_weights
from attnviz.result import direct
from attnviz.result import writer as writer_module
from attnviz.result.writer import ResultWriter

TEXT = "The cat sat on the mat because it was warm, and the dog watched it from the door."


@pytest.mark.parametrize("t", [257, 258, 300, 512, 513, 777, 1025])
def test_causal_weights_are_the_whole_matrix_bit_for_bit(t):
    gen = torch.Generator().manual_seed(t)
    q, k = torch.randn(2, 3, t, 16, generator=gen), torch.randn(2, 3, t, 16, generator=gen)
    padding = torch.ones(2, t, dtype=torch.long)
    padding[1, t - 40 :] = 0  # the second text is shorter: its last keys are padding
    for mask in (RowMask.of(None, t, start=0), RowMask.of(padding, t, start=0)):
        whole = attention_weights(attention_scores(q, k), mask=mask.dense(), inplace=True)
        assert torch.equal(causal_weights(q, k, mask), whole)


def test_attention_on_a_described_causal_mask_equals_the_dense_one():
    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4).eval()
    x = torch.randn(1, 600, 32)
    with torch.no_grad():
        fast = attn(x, mask=RowMask.of(None, 600, start=0), keep_scores=False)
        dense = attn(x, mask=RowMask.of(None, 600, start=0).dense(), keep_scores=False)
    assert torch.equal(fast.weights, dense.weights) and torch.equal(fast.output, dense.output)
    assert bool((fast.weights[..., 0, 1:] == 0).all())  # the first query sees the first key only


def _direct_or_skip(path):
    handle = direct.direct_file(path)
    if handle is None:
        pytest.skip("this file system has no direct I/O")
    return handle


def _archive(target, big: np.ndarray) -> None:
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr(zipfile.ZipInfo("tokens.npy", date_time=(1980, 1, 1, 0, 0, 0)), b"x" * 1234)
        with archive.open(zipfile.ZipInfo("attentions.npy", date_time=(1980, 1, 1, 0, 0, 0)), "w",
                          force_zip64=True) as fh:
            for part in np.array_split(big, 5):  # unaligned pieces, each crossing buffers
                fh.write(memoryview(np.ascontiguousarray(part)).cast("B"))
        archive.writestr(zipfile.ZipInfo("meta.npy", date_time=(1980, 1, 1, 0, 0, 0)), b"meta" * 100)


def test_a_zip_written_directly_has_the_bytes_of_one_written_to_a_path(tmp_path, monkeypatch):
    monkeypatch.setattr(direct, "CHUNK", 3 * direct.BLOCK)  # many direct writes, and headers rewritten on disk
    big = np.arange(100_003, dtype=np.float32)
    _archive(tmp_path / "plain.zip", big)
    (tmp_path / "direct.zip").touch()
    handle = _direct_or_skip(tmp_path / "direct.zip")
    _archive(handle, big)
    handle.close()
    assert (tmp_path / "direct.zip").read_bytes() == (tmp_path / "plain.zip").read_bytes()


def test_a_device_refusing_the_alignment_gets_ordinary_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(direct, "CHUNK", 2 * direct.BLOCK)
    big = np.arange(50_001, dtype=np.float32)
    _archive(tmp_path / "plain.zip", big)
    (tmp_path / "direct.zip").touch()
    handle = _direct_or_skip(tmp_path / "direct.zip")
    real = os.pwrite
    refused = []

    def pwrite(fd, data, offset):
        if fd == handle.direct:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    monkeypatch.setattr(direct.os, "pwrite", pwrite)
    _archive(handle, big)
    handle.close()
    assert refused and handle.direct is None
    assert (tmp_path / "direct.zip").read_bytes() == (tmp_path / "plain.zip").read_bytes()


@pytest.mark.parametrize("directly", [True, False])
def test_the_streamed_npz_has_the_bytes_save_writes_either_way(tmp_path, monkeypatch, directly):
    monkeypatch.setattr(direct, "CHUNK", 4 * direct.BLOCK)
    if not directly:  # a system without direct I/O (tmpfs, macOS): written the ordinary way
        monkeypatch.setattr(writer_module, "direct_file", lambda path: None)
    result = attnviz.extract(TEXT)
    whole = result.save(tmp_path / "whole.npz")
    writer = ResultWriter(tmp_path / "streamed.npz", result, result.n_layers)
    assert writer.file is None or directly
    for layer in range(result.n_layers):
        writer.add(result.attentions[layer], result.value_norms[layer])
    assert writer.close().read_bytes() == whole.read_bytes()
    assert not list(tmp_path.glob(".*tmp*"))


def test_an_aborted_direct_write_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(direct, "CHUNK", 2 * direct.BLOCK)
    result = attnviz.extract(TEXT)
    writer = ResultWriter(tmp_path / "x.npz", result, result.n_layers)
    writer.add(result.attentions[0])
    writer.abort()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="buffers are pooled on Linux only")
def test_a_weights_buffer_is_reused_only_once_nobody_holds_it():
    from attnviz.attention import buffers

    like = torch.zeros(1)
    shape = (4, 1024, 1024)  # 16 MiB: pooled
    with buffers.reused_buffers():
        first = buffers.weights_buffer(shape, like)
        first.fill_(1.0)
        address = first.data_ptr()
        view = first[1:2].numpy()  # an array of it still held: not reused
        del first
        second = buffers.weights_buffer(shape, like)
        assert second.data_ptr() != address and float(view.sum()) == 1024 * 1024
        del view
        third = buffers.weights_buffer(shape, like)  # nobody holds the first any more
        assert third.data_ptr() == address
    assert buffers._pool == []  # let go after the block (the tensors still alive keep theirs)
    assert float(second.sum()) == 0 and third.shape == shape
    outside = buffers.weights_buffer(shape, like)  # no block open: an ordinary tensor
    assert outside.data_ptr() not in (address, second.data_ptr())
