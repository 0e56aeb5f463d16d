"""The check of an output file before any work: its extension names a format the registry knows
(:mod:`attnviz.render.registry`), and it can be written there (:func:`attnviz.fileio.check_writable`).
Here, beside the registry, so the core's file writing never asks the renderers which formats exist."""

from __future__ import annotations

import os
from pathlib import Path

from ..fileio import check_writable
from .registry import output_suffixes


def check_output_path(path: str | os.PathLike[str]) -> Path:
    """Fail early, before any model runs, for an extension or a folder that cannot work."""
    path = Path(path)
    suffixes = output_suffixes()
    if path.suffix.lower() not in suffixes:
        from ..errors import UnknownFormatError  # a bad option value, as a bad layer is: exit code 2

        raise UnknownFormatError(f"cannot write {path}: unknown extension {path.suffix or '(none)'!r}; use one of "
                         f"{', '.join(suffixes)}")
    return check_writable(path)
