"""Where a layer's whole weights are written: memory that costs no fresh pages where it can be helped.

A 2,048-token GPT-2 layer's weights are 201 MB; allocated afresh for each layer, the kernel zeroes every page
before the layer is written (9 % of an export's CPU time on the project's 2-core machine, a third of the time
:func:`attnviz.attention.rows.causal_weights` takes). So:

* while a layer stream runs (:func:`reused_buffers`, around the native engine's layers), a buffer nobody holds any
  more (no tensor, view or array of it: its mapping's reference count says so) is written again by the next layer
  of the same size: the next-but-one layer takes the one before it, as the stream keeps at most two;
* a new buffer asks Linux for 2 MiB pages (``madvise(MADV_HUGEPAGE)``, where transparent huge pages run in
  ``madvise`` or ``always`` mode): ~100 page faults instead of 49,152 for 201 MB. Advice only: elsewhere, or
  refused, nothing changes.
"""

from __future__ import annotations

import contextlib
import functools
import math
import mmap
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

HUGE_PAGE = 2 * 2**20
POOLED_FROM = 16 * 2**20  # buffers this large are kept for reuse (smaller ones come from the allocator's own)
KEEP = 2  # buffers kept: the layer being read and the one computed

_lock = threading.Lock()
_pool: list[mmap.mmap] = []
_streams = 0  # how many reused_buffers blocks are open


@contextmanager
def reused_buffers() -> Iterator[None]:
    """Meanwhile, :func:`weights_buffer` reuses buffers nobody holds; after the last such block, none is kept."""
    global _streams
    with _lock:
        _streams += 1
    try:
        yield
    finally:
        with _lock:
            _streams -= 1
            if not _streams:
                _pool.clear()  # (buffers still held stay alive with their holders)


def weights_buffer(shape: tuple[int, ...], like: Tensor) -> Tensor:
    """An uninitialised tensor of ``shape`` with ``like``'s dtype and device (every element is written by the
    caller): reused or on huge pages where it can be (see the module)."""
    nbytes = math.prod(shape) * like.element_size()
    if like.device.type != "cpu" or nbytes < POOLED_FROM or not _streams or not sys.platform.startswith("linux"):
        return huge_pages(like.new_empty(shape))
    with _lock:
        found = next((i for i in range(len(_pool)) if len(_pool[i]) == nbytes + HUGE_PAGE and _free(_pool[i])), None)
        if found is None:
            # Anonymous and private (shared anonymous memory is shmem: no huge pages), page-aligned: a 2 MiB
            # boundary lies within the first 2 MiB.
            _pool.append(mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
            found = len(_pool) - 1
            _advise(_pool[found])
            del _pool[: max(0, len(_pool) - KEEP)]  # the oldest let go (alive while a tensor holds it)
            found = len(_pool) - 1
        buffer = _pool[found]
    offset = _aligned_offset(buffer)
    return torch.frombuffer(buffer, dtype=like.dtype, count=math.prod(shape), offset=offset).view(shape)


def _free(buffer: mmap.mmap) -> bool:
    """No tensor, view or array holds ``buffer``: its only references are the pool's, this argument's and
    ``getrefcount``'s own (a tensor made from it holds the mapping while its storage lives)."""
    return sys.getrefcount(buffer) <= 3


def _aligned_offset(buffer: mmap.mmap) -> int:
    """The offset of the buffer's first 2 MiB boundary (mmap gives page alignment only)."""
    import ctypes

    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    return -address % HUGE_PAGE


def _advise(buffer: mmap.mmap) -> None:
    if hasattr(mmap, "MADV_HUGEPAGE") and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):  # advice only
            buffer.madvise(mmap.MADV_HUGEPAGE)


def huge_pages(fresh: Tensor) -> Tensor:
    """``fresh`` (memory not touched yet, on the CPU) backed by 2 MiB pages where Linux's transparent huge pages
    allow it (see the module). Advice only: anywhere else, or refused, nothing changes."""
    size = fresh.numel() * fresh.element_size()
    madvise = _madvise() if fresh.device.type == "cpu" and size >= 4 * HUGE_PAGE else None
    if madvise is not None:
        start = -(-fresh.data_ptr() // HUGE_PAGE) * HUGE_PAGE
        stop = (fresh.data_ptr() + size) // HUGE_PAGE * HUGE_PAGE
        madvise(start, stop - start, mmap.MADV_HUGEPAGE)  # (its result is advice too: not checked)
    return fresh


@functools.cache
def _madvise() -> Any:
    """libc's ``madvise`` on Linux, or None."""
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"):
        return None
    import ctypes

    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise
