"""A file written past the page cache (``O_DIRECT``), for the gigabytes a long input's ``.npz`` holds.

Written through the page cache, every byte of a 2,048-token GPT-2 export (2.4 GB of float32 weights)
is copied into cache pages the kernel allocates one by one: 1.8–4.5 s of system time on the project's
2-core machine, taken from the cores computing the next layer, then as much again in the kernel's
writeback. Written with ``O_DIRECT`` from an aligned buffer, the same bytes cost 0.25 s of system time
(and 0.2 s of copying into the buffer); the writer thread waits for the disk instead of using a core.

:class:`DirectFile` is the file object :mod:`zipfile` writes through (seekable, as a file is, so the
archive's bytes are those :class:`zipfile.ZipFile` writes to a path): appended bytes gather in one
aligned buffer and go to disk a whole buffer at a time; a write behind what reached the disk (the zip
rewriting an entry's header with its size and CRC) and the last partial block go through an ordinary
descriptor of the same file. Where ``O_DIRECT`` is missing or refused (tmpfs, macOS, Windows, an
alignment the device will not take), every write is an ordinary one.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os

BLOCK = 4096  # the alignment O_DIRECT asks of offsets, lengths and memory on common devices
CHUNK = 8 * 2**20  # bytes gathered before one direct write (a multiple of BLOCK)


def direct_file(path: str | os.PathLike[str]) -> DirectFile | None:
    """``path`` (an existing, empty file) opened to be written with ``O_DIRECT`` (see the module), or None
    where this system or its file system has no direct I/O: then write it the ordinary way."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag or not hasattr(os, "pwrite"):
        return None
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        direct = os.open(path, os.O_WRONLY | flag)
    except OSError:  # tmpfs, among others
        os.close(fd)
        return None
    return DirectFile(fd, direct)


class DirectFile:
    """A file opened by :func:`direct_file`, its appended bytes written with ``O_DIRECT`` (see the module).
    Supports what :mod:`zipfile` asks of a file: ``write``, ``tell``, ``seek``, ``flush``, ``seekable``;
    :meth:`close` writes what is left."""

    def __init__(self, fd: int, direct: int) -> None:
        self.fd = fd  # an ordinary descriptor of the file
        self.direct: int | None = direct  # one with O_DIRECT (None once the device refused an alignment)
        self.buffer: mmap.mmap | None = mmap.mmap(-1, CHUNK)  # page-aligned memory
        self.view: memoryview | None = memoryview(self.buffer)
        self.flushed = 0  # bytes 0 … flushed − 1 are on disk (a multiple of BLOCK)
        self.fill = 0  # bytes flushed … flushed + fill − 1 wait in the buffer
        self.position = 0
        self.closed = False

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.position, os.SEEK_END: self.flushed + self.fill}[whence]
        self.position = base + offset
        return self.position

    def flush(self) -> None:
        """Nothing to do: buffered bytes are written when the buffer fills, or on :meth:`close`."""

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        size = len(view)
        end = self.flushed + self.fill
        if self.view is None:
            raise ValueError("write to a closed file")
        if self.position == end:  # appended: gathered in the buffer, written a whole buffer at a time
            self._append(view)
        else:  # behind the end (a header rewritten): on disk already, or still in the buffer
            first, stop = self.position, self.position + size
            if stop > end:
                raise ValueError("a write behind the end of the file may not pass it")  # zipfile never does
            if first < self.flushed:
                below = min(stop, self.flushed) - first
                _pwrite_all(self.fd, view[:below], first)
                view, first = view[below:], first + below
            if len(view):
                at = first - self.flushed
                self.view[at : at + len(view)] = view
        self.position += size
        return size

    def _append(self, view: memoryview) -> None:
        assert self.view is not None
        while len(view):
            take = min(CHUNK - self.fill, len(view))
            self.view[self.fill : self.fill + take] = view[:take]
            self.fill += take
            view = view[take:]
            if self.fill == CHUNK:
                self._write_buffer()

    def _write_buffer(self) -> None:
        """The full buffer to disk at ``flushed``: directly, unless the device refused this alignment."""
        assert self.view is not None
        written = 0
        if self.direct is not None:
            try:
                written = os.pwrite(self.direct, self.view, self.flushed)
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # a full disk, say: the caller names the file
                    raise
                os.close(self.direct)  # the device refuses this alignment: ordinary writes from here on
                self.direct = None
        if written < CHUNK:  # a short direct write, or none: the rest the ordinary way
            _pwrite_all(self.fd, self.view[written:], self.flushed + written)
        self.flushed += CHUNK
        self.fill = 0

    def close(self) -> None:
        """Write what the buffer holds (the last, partial blocks: the ordinary way) and close the file."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.view is not None and self.fill:
                _pwrite_all(self.fd, self.view[: self.fill], self.flushed)
                self.flushed, self.fill = self.flushed + self.fill, 0
        finally:
            self.discard()

    def discard(self) -> None:
        """Close without writing what is left (the file is being abandoned)."""
        self.closed = True
        for fd in (-1 if self.direct is None else self.direct, self.fd):
            if fd >= 0:  # (each closed once: a number closed twice may be another file's by then)
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.direct, self.fd = None, -1
        view, buffer, self.view, self.buffer = self.view, self.buffer, None, None
        if view is not None:
            view.release()
        if buffer is not None:
            with contextlib.suppress(BufferError):  # a slice of it still held (a traceback's frame): freed with it
                buffer.close()


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while len(view):
        written = os.pwrite(fd, view, offset)
        if written <= 0:  # pragma: no cover - a regular file writes something or raises (ENOSPC)
            raise OSError("no bytes written")
        view, offset = view[written:], offset + written
