"""One registry of the files the long-context results write (needle, kv, patterns): a result kind and an extension
→ the function that writes it, with one signature, ``writer(result, path)``.

Every ``save`` goes through here (``NeedleResult.save``, ``KVResult.save``, ``PatternsResult.save``, by the file's
extension), and the commands' ``--out`` checks its extensions against it before the model runs: so a format is
one function and one :func:`register` call, in a user's code or in a plugin (:mod:`attnviz.plugins`). Each result's
own formats are registered by the module that defines the result (:func:`register_result_kind`), so this core module
names no method above it; a plugin's result kind is a name of its own.
Writers are named ``"module:function"`` and imported only when used (``--help`` loads no matplotlib or pyarrow).
:data:`RESULT_FORMATS` is a :class:`~attnviz.records.Registry` keyed ``"kind.suffix"`` (``"kv.json"``); the
built-in ones are sealed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .records import Registry, function_name, resolve


@dataclass(frozen=True)
class ResultFormat:
    kind: str  # the result it writes: needle, kv, patterns, or a plugin's own kind
    suffix: str  # of the file it writes
    writer: str | Callable[[Any, Path], object]  # "module:function" (or the function) writing (result, path)
    description: str = ""

    @property
    def name(self) -> str:
        return f"{self.kind}{self.suffix}"

    def write(self, result: Any, path: str | Path) -> None:
        """``result`` written to ``path`` through a temporary file (:func:`attnviz.fileio.write_through`): a writer
        that fails or writes nothing leaves an existing file as it was, and is named."""
        from .fileio import write_through

        write: Callable[[Any, Path], object] = resolve(self.writer, f"result format {self.name}")
        write_through(path, lambda tmp: write(result, tmp), writer=function_name(self.writer))



def _check(registered: Registry[ResultFormat], fmt: ResultFormat) -> None:
    if not isinstance(fmt.kind, str) or not fmt.kind.isidentifier() or fmt.kind != fmt.kind.lower():
        raise ValueError(f"a result format's kind is a lower-case name such as kv; got {fmt.kind!r}")
    if not isinstance(fmt.suffix, str) or not re.fullmatch(r"\.[a-z0-9][a-z0-9_-]*(\.[a-z0-9][a-z0-9_-]*)*", fmt.suffix):
        raise ValueError(f"a result format's suffix is a lower-case extension such as .json; got {fmt.suffix!r}")
    if not callable(fmt.writer) and ":" not in str(fmt.writer):
        raise ValueError(f"a result format's writer is 'module:function'; got {fmt.writer!r}")


RESULT_FORMATS: Registry[ResultFormat] = Registry("result format", _check)


register, unregister, registered = RESULT_FORMATS.register, RESULT_FORMATS.unregister, RESULT_FORMATS.registered


def suffixes(kind: str) -> list[str]:
    """The extensions a ``kind`` result writes (what ``--out`` accepts), in registration order."""
    return [f.suffix for f in RESULT_FORMATS.values() if f.kind == kind]


def save(kind: str, result: Any, path: str | Path) -> Path:
    """Write ``result`` (a ``kind`` result) to ``path`` in the format its extension names."""
    from .errors import UnknownFormatError

    path = Path(path)
    fmt = RESULT_FORMATS.get(f"{kind}{path.suffix.lower()}")
    if fmt is None:
        raise UnknownFormatError(f"cannot write {path}: unknown extension {path.suffix or '(none)'!r}; use one of "
                                 f"{', '.join(suffixes(kind))}")
    fmt.write(result, path)
    return path


def register_result_kind(kind: str, module: str, *, figures: bool = True, page: bool = True) -> None:
    """The files every long-context result writes, registered by the module that defines the result (``kind``; its
    writers in ``module``, imported when a file is written): .json (the whole result), .csv and .parquet (its rows),
    and, with ``figures``, .png, .svg and .pdf, with ``page`` an .html page. Sealed as built in."""
    own = RESULT_FORMATS.register_own
    own(ResultFormat(kind, ".json", f"{module}:write_json", "the whole result (its load reads it)"))
    own(ResultFormat(kind, ".csv", f"{module}:write_rows", "one row per head (per run and head in kv)"))
    own(ResultFormat(kind, ".parquet", f"{module}:write_rows", "the CSV's rows as Parquet (pyarrow)"))
    if figures:
        for suffix in (".png", ".svg", ".pdf"):
            own(ResultFormat(kind, suffix, f"{module}:write_figure", "the figure (matplotlib)"))
    if page:
        own(ResultFormat(kind, ".html", f"{module}:write_page", "an interactive page, one self-contained file"))
