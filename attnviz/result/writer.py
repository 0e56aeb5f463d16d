"""Writing a result's ``.npz`` layer by layer, while the next layer is being computed.

A long input's attentions are written as each layer arrives, to the same bytes
:meth:`AttentionResult.save` writes for the whole result, so no command has to hold every layer.
The writing itself happens on a thread of its own (file writes and checksums release the GIL):
while layer l goes to disk, layer l+1 is computed, and at most those two layers exist at once.
"""

from __future__ import annotations

import os
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import ResultFileError
from ..fileio import IN_PROGRESS, current_umask
from . import AttentionResult
from .direct import DirectFile, direct_file

_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed zip timestamps, as write_npz uses


class ResultWriter:
    """Writes one result's ``.npz`` layer by layer.

    ``header`` gives the tokens and metadata (its attentions are not read). Call :meth:`add` once
    per layer, in order, with ``[heads, q, k]`` and optionally the value norms ``[heads, k]``; then
    :meth:`close` renames the finished file into place, or :meth:`abort` removes it. A write that
    fails (a full disk) is raised as :class:`ResultFileError` by the next ``add`` or ``close``.
    """

    def __init__(self, path: str | os.PathLike[str], header: AttentionResult, n_layers: int, *,
                 float16: bool = False) -> None:
        self.path = Path(path)
        self.header, self.n_layers, self.dtype = header, n_layers, np.float16 if float16 else np.float32
        self.done = 0
        self.norms: list[np.ndarray] = []
        self._shape: tuple[int, ...] | None = None
        self._error: BaseException | None = None
        self._pending: Any = None  # the block the writer thread is writing (or None)
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        fd, self.tmp = tempfile.mkstemp(prefix=f".{self.path.name[:80]}.{os.getpid()}.", suffix=".tmp.npz",
                                        dir=self.path.parent)
        IN_PROGRESS.add(self.tmp)  # removed on SIGTERM too (attnviz.interrupts)
        os.close(fd)
        self.file: DirectFile | None = None
        try:
            # Past the page cache where the system allows (gigabytes of weights: attnviz.result.direct).
            self.file = direct_file(self.tmp)
            self.archive = zipfile.ZipFile(self.tmp if self.file is None else self.file, "w",
                                           compression=zipfile.ZIP_STORED)
            for name, array in header.token_arrays().items():
                self._entry(name, array)
            self._open = self.archive.open(zipfile.ZipInfo("attentions.npy", date_time=_EPOCH), "w", force_zip64=True)
        except OSError as exc:
            self.abort()
            raise ResultFileError(f"cannot write {self.path}: {exc.strerror or exc}; check free space") from None

    def _entry(self, name: str, array: np.ndarray) -> None:
        with self.archive.open(zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH), "w", force_zip64=True) as fh:
            np.lib.format.write_array(fh, array, allow_pickle=False)

    def add(self, attentions: torch.Tensor, value_norms: torch.Tensor | None = None) -> None:
        """The next layer: ``[heads, q, k]`` (and ``[heads, k]`` value norms, or None)."""
        block = np.ascontiguousarray(attentions.detach().to("cpu").numpy().astype(self.dtype, copy=False))
        if self._shape is None:
            self._shape = block.shape
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(self.dtype)), "fortran_order": False,
                      "shape": (self.n_layers, *block.shape)}
            np.lib.format.write_array_header_1_0(self._open, header)
        elif block.shape != self._shape:
            raise ValueError(f"layer {self.done} is {block.shape}, earlier layers {self._shape}")
        self._wait()  # the previous layer is on disk: at most one layer waits to be written
        with self._ready:
            self._pending = block
            self._ready.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name="attnviz-npz-writer", daemon=True)
            self._thread.start()
        if value_norms is not None:
            self.norms.append(value_norms.detach().to("cpu", torch.float32).numpy())
        self.done += 1

    def wait(self) -> None:
        """Until every layer given is written; a write that failed is raised as :class:`ResultFileError`."""
        self._wait()

    def _drain(self) -> None:
        """The writer thread: write each block handed over, until told to stop (a pending ``False``)."""
        while True:
            with self._ready:
                while self._pending is None:
                    self._ready.wait()
                block = self._pending
            if block is False:
                return
            try:
                if self._error is None:
                    self._open.write(memoryview(block).cast("B"))
            except BaseException as exc:
                self._error = exc
            with self._ready:
                self._pending = None
                self._ready.notify_all()
            del block

    def _wait(self) -> None:
        """Until the writer thread has written what it was given; then raise what it met, if anything."""
        with self._ready:
            while self._pending is not None and self._pending is not False:  # False: stopped (aborted), none to wait
                self._ready.wait()
        if self._error is not None:
            error, self._error = self._error, None
            self.abort()
            detail = error.strerror if isinstance(error, OSError) else error
            raise ResultFileError(f"cannot write {self.path}: {detail}; check free space") from None

    def _stop(self) -> None:
        if self._thread is not None:
            # A Ctrl-C can land after the thread was made and before it started (or a thread can be gone): then
            # nobody would ever take the pending block, so wait only while the writer is alive.
            with self._ready:
                while self._pending is not None and self._thread.is_alive():
                    self._ready.wait(0.1)
                self._pending = False
                self._ready.notify()
            if self._thread.is_alive():
                self._thread.join()
            self._thread = None

    def close(self) -> Path:
        """Finish the file and rename it into place."""
        if self.done != self.n_layers:
            raise ValueError(f"{self.done} of {self.n_layers} layers were written")
        self._wait()
        self._stop()
        try:
            self._open.close()
            self._entry("meta", self.header.meta_array())
            if self.norms and len(self.norms) == self.n_layers:
                self._entry("value_norms", np.stack(self.norms).astype(self.dtype))
            self.archive.close()
            if self.file is not None:
                self.file.close()
            os.chmod(self.tmp, 0o666 & ~current_umask())
            os.replace(self.tmp, self.path)
            IN_PROGRESS.discard(self.tmp)
        except OSError as exc:
            self.abort()
            raise ResultFileError(f"cannot write {self.path}: {exc.strerror or exc}; check free space") from None
        return self.path

    def abort(self) -> None:
        """Stop writing and remove the partial file."""
        self._stop()
        for closing in (getattr(self, "_open", None), getattr(self, "archive", None)):
            try:
                if closing is not None:
                    closing.close()
            except (OSError, ValueError, zipfile.BadZipFile):
                pass
        file = getattr(self, "file", None)  # (None too where __init__ failed before opening it)
        if file is not None:
            file.discard()
        IN_PROGRESS.discard(self.tmp)
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)
