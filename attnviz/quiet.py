"""Silencing what native code writes straight to file descriptor 2 (Rust's panics in tokenizers, Ray's
C++ logging), which Python's ``sys.stderr`` never sees: the user reads attnviz's one line instead."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def stderr_silenced() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the duration (keep it short: nothing else can warn meanwhile)."""
    try:
        sys.stderr.flush()
        saved, sink = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):  # no descriptor 2 to save: run as it is
        yield
        return
    try:
        os.dup2(sink, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(sink)
