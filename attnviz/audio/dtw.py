"""The two filters word timings are made with, as openai-whisper's ``whisper/timing.py`` (release 20250625) defines
them and transformers' ``generation_whisper.py`` copies them (``_median_filter``, ``_dynamic_time_warping``): the same
numbers, computed here without numba.

- :func:`median_filter`: the median of each window of ``width`` (odd) values along the last axis, the edges padded by
  reflection (``F.pad(..., mode="reflect")``); an axis no longer than ``width // 2`` is left as it is.
- :func:`dtw`: dynamic time warping of a cost matrix ``x`` ``[N, M]`` (tokens × time): the cheapest monotone path
  from (0, 0) to (N − 1, M − 1) by steps down, right or diagonal, where
  ``cost[i, j] = x[i − 1, j − 1] + min(cost[i − 1, j − 1], cost[i − 1, j], cost[i, j − 1])`` with openai's ties
  (the diagonal only where strictly cheapest, then up where strictly cheapest, else left) and its float32 cost table
  (each sum of the float64 cost and the float32 table rounded to float32, as ``dtw_cpu`` stores it). The table is
  filled an anti-diagonal at a time (every cell of one depends only on the two before it), and traced back as
  ``backtrace`` does."""

from __future__ import annotations

from typing import Any

import numpy as np


def median_filter(x: Any, width: int) -> Any:
    """The median filter of ``x`` (a torch tensor of 1 to 4 axes) along its last axis (see the module)."""
    import torch.nn.functional as F

    if width <= 0 or width % 2 != 1:
        raise ValueError(f"a median filter's width is odd and positive, not {width}")
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    shape = x.shape
    flat = x.reshape(1, -1, shape[-1])  # reflect-padding pads the last axis of a 3-D input
    padded = F.pad(flat, (pad, pad), mode="reflect")
    return padded.unfold(-1, width, 1).sort()[0][..., pad].reshape(shape)


def dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """openai-whisper's dynamic time warping of ``x`` ``[N, M]``: the path's row and column indices, from (0, 0) to
    (N − 1, M − 1) (see the module)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"dynamic time warping needs a matrix of at least one cell, not shape {x.shape}")
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    cost[0, 0] = 0
    for d in range(2, n + m + 1):
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
        diagonal = (c0 < c1) & (c0 < c2)
        up = ~diagonal & (c1 < c0) & (c1 < c2)
        step = np.where(diagonal, 0, np.where(up, 1, 2)).astype(np.int8)
        best = np.where(diagonal, c0, np.where(up, c1, c2))
        cost[i, j] = (x[i - 1, j - 1] + best.astype(np.float64)).astype(np.float32)
        trace[i, j] = step
    return _backtrace(trace)


def _backtrace(trace: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """openai-whisper's ``backtrace``: from the last cell to the first along the steps the table took."""
    trace = trace.copy()
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = trace.shape[0] - 1, trace.shape[1] - 1
    rows: list[int] = []
    columns: list[int] = []
    steps = trace.tolist()  # Python ints: a path of N + M steps, read one by one
    while i > 0 or j > 0:
        rows.append(i - 1)
        columns.append(j - 1)
        step = steps[i][j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        elif step == 2:
            j -= 1
        else:  # pragma: no cover (every cell the path reaches was filled)
            raise ValueError(f"unexpected step {step} at ({i}, {j})")
    return np.array(rows[::-1], dtype=np.int64), np.array(columns[::-1], dtype=np.int64)
