"""What ``attnviz serve`` keeps between requests, bounded in bytes: one least-recently-used cache.

Every cache of the server (the pages whose tiles it answers, with each layer's queries and keys or
whole weights and the pooled tiles kept while the page was built; the tiles computed on request;
each head's row normalisers) is an entry of one :class:`ByteCache`, so their bytes together stay
under one bound (``attnviz serve --cache-size``), the least recently used going first. An entry's
size is measured, not guessed: its tensors' and arrays' bytes (a view counts its whole storage,
which it keeps alive; a storage shared by several views counts once) plus its Python objects'.

An entry may belong to another (a page's tiles and normalisers to the page): when the owner goes,
evicted or dropped, what it owns goes with it, and nothing is added for an owner that is gone.
"""

from __future__ import annotations

import sys
import threading
import types
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, cast

import numpy as np
import torch

ENTRY_OVERHEAD = 256
"""Bytes an entry costs beyond what it holds (its key, its place in the cache)."""


@dataclass
class _Entry:
    value: Any
    size: int
    owner: Hashable | None
    owned: set[Hashable] = field(default_factory=set)
    pinned: bool = False


class ByteCache:
    """Values by key, their measured bytes together at most ``limit``; the least recently used
    go first. Safe to use from several threads."""

    def __init__(self, limit: int) -> None:
        self.limit = int(limit)
        self.total = 0
        self.evicted = 0  # entries evicted to make room (not counting those dropped with their owner)
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._entries)

    def get(self, key: Hashable) -> Any:
        """The value kept under ``key`` (now the most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry.value

    def put(self, key: Hashable, value: Any, size: int | None = None, *, owner: Hashable | None = None,
            pinned: bool = False) -> bool:
        """Keep ``value`` (its bytes: ``size``, else measured by :func:`size_of`), evicting the least
        recently used until the total is within the limit. False (and nothing kept) when it alone is
        over the limit, or its ``owner`` is not kept. ``pinned``: never evicted (counted all the same)."""
        size = (size_of(value) if size is None else int(size)) + ENTRY_OVERHEAD
        with self._lock:
            self._remove(key)
            if (owner is not None and owner not in self._entries) or size > self.limit - self._pinned_bytes():
                return False
            self._entries[key] = _Entry(value, size, owner, pinned=pinned)
            self.total += size
            if owner is not None:
                self._entries[owner].owned.add(key)
            self._shrink(keep=key)
            return key in self._entries

    def discard(self, key: Hashable) -> None:
        """Drop ``key`` and what it owns."""
        with self._lock:
            self._remove(key)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.total = 0

    def _pinned_bytes(self) -> int:
        return sum(e.size for e in self._entries.values() if e.pinned)

    def _shrink(self, keep: Hashable) -> None:
        while self.total > self.limit:
            victim = next((k for k, e in self._entries.items() if not e.pinned and k != keep and k != self._entries[keep].owner),
                          None)
            if victim is None:
                victim = keep  # nothing else can go: the newcomer does not stay
            self.evicted += 1
            self._remove(victim)
            if victim == keep:
                return

    def _remove(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        self.total -= entry.size
        if entry.owner is not None and entry.owner in self._entries:
            self._entries[entry.owner].owned.discard(key)
        for child in list(entry.owned):
            self._remove(child)
        entry.value = None  # whatever still refers to the entry no longer keeps the value


def size_of(value: Any) -> int:
    """Bytes ``value`` holds: its tensors' storages and arrays' buffers (each counted once, whole:
    a view keeps its storage alive), and its Python objects, through containers, dataclasses and
    objects' attributes. Functions, modules, classes, models and caches are not followed (they are not the
    value's)."""
    seen_objects: set[int] = set()
    seen_buffers: set[tuple[str, int]] = set()
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if id(item) in seen_objects or item is None or isinstance(item, _NOT_FOLLOWED):
            continue
        seen_objects.add(id(item))
        # (An array's getsizeof counts the buffer it owns: counted below, once, for views too.)
        total += _ARRAY_OBJECT if isinstance(item, np.ndarray) else sys.getsizeof(item, 64)
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            place = (str(item.device), storage.data_ptr())
            if place not in seen_buffers:
                seen_buffers.add(place)
                total += storage.nbytes()
        elif isinstance(item, np.ndarray):
            base = item
            while isinstance(base.base, np.ndarray):
                base = base.base
            place = ("numpy", id(base))
            if place not in seen_buffers:
                seen_buffers.add(place)
                total += base.nbytes
        elif isinstance(item, (str, bytes, bytearray, int, float, bool, complex)):
            continue  # getsizeof counted them whole
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif is_dataclass(item):
            stack.extend(getattr(item, f.name, None) for f in fields(item))
        elif hasattr(item, "__dict__"):
            stack.extend(vars(item).values())
    return total


_ARRAY_OBJECT = sys.getsizeof(np.zeros(0))
_NOT_FOLLOWED: tuple[type, ...] = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType,
                                   type, torch.nn.Module, torch.device, torch.dtype,
                                   cast(type, Callable),  # an ABC at runtime (isinstance works), a special form to mypy
                                   ByteCache)  # (a page refers to the cache it is kept in: not its bytes)


def trim_heap() -> None:
    """Give the heap's free memory back to the system (glibc's ``malloc_trim``; elsewhere nothing). A page's
    weights are freed when it is answered, but the C heap of the worker thread that built it keeps the pages
    (each worker thread its own arena): without this, 120 MiniLM pages left the server 1 GB over what it
    kept, with it about 60 MB."""
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC: Any = None


class KeptLayers(list):
    """A page's layers kept while it is built (``layers_out``) while their bytes stay within ``limit``:
    past it the server could not keep them, so it holds none (the page then gets no tiles on request)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.bytes, self.over = limit, 0, False

    def append(self, layer: Any) -> None:
        if self.over:
            return
        self.bytes += size_of(layer)
        if self.bytes > self.limit:
            self.over = True
            self.clear()
            return
        super().append(layer)
