"""What needle, kv and patterns share about their outputs: what stdout prints (``--format``), the files ``--out``
writes (each extension checked, and Parquet's pyarrow, before the model runs), the tables as CSV or Parquet, and
``wrote PATH`` on stdout beside the tables or on stderr beside a document printed there."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path

from ..api import csv_text, write_document, write_text
from ..api import write_rows as write_table

__all__ = ["StdoutFormat", "announcer", "check_distinct", "check_outputs", "check_view_outputs", "csv_text",
           "write_document", "write_table", "write_text"]

class StdoutFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


def check_outputs(paths: Sequence[Path], allowed: Sequence[str], *, written: str | None = None) -> list[Path]:
    """``paths``, each with an extension in ``allowed``, writable (Parquet: pyarrow installed; not a link, a pipe or
    a device) and each named once (:func:`check_distinct`). ``written``: what the command writes, in words, for the
    message naming a wrong extension (default: the extensions)."""
    from ..api import check_writable, pyarrow
    from ..errors import UnknownFormatError

    for path in paths:
        if path.suffix.lower() not in allowed:
            raise UnknownFormatError(f"cannot write {path}: " + (written or f"unknown extension "
                                     f"{path.suffix or '(none)'!r}; use one of {', '.join(allowed)}"))
        if path.suffix.lower() == ".parquet":
            pyarrow()
    checked = [check_writable(path) for path in paths]
    check_distinct([("out", path) for path in checked])
    return checked


def check_view_outputs(paths: Sequence[Path]) -> list[Path]:
    """The ``--out`` files of a command that draws a view: each an output the format registry knows (its folder
    there, not a link, a pipe or a device) and each named once."""
    from ..render.output import check_output_path

    checked = [Path(check_output_path(path)) for path in paths]
    check_distinct([("out", path) for path in checked])
    return checked


def check_distinct(named: Sequence[tuple[str, Path | None]]) -> None:
    """Refuse one file named for two outputs (``--out x.json --out x.json``, ``--minference x --duo x``): the second
    write would replace the first. ``named``: each output's option (without dashes) and its path (None: not given);
    two paths are one file when they resolve to the same place (``x.json`` and ``./x.json``)."""
    import os

    from ..errors import UsageError

    seen: dict[str, str] = {}
    for option, path in named:
        if path is None:
            continue
        key = os.path.normcase(os.path.realpath(path))
        if key in seen:
            given = f"[[{option}]] twice" if seen[key] == option else f"both [[{seen[key]}]] and [[{option}]]"
            raise UsageError(f"{path} is given for {given}; the second would replace the first: give each output "
                             "its own file")
        seen[key] = option


def announcer(fmt: StdoutFormat) -> Callable[[Path], None]:
    """How a written file is said: ``wrote PATH`` on stdout beside the tables, on stderr when stdout holds a document."""
    from .common import note, wrote

    return wrote if fmt is StdoutFormat.table else (lambda path: note(f"wrote {path}"))
