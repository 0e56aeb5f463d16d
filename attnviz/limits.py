"""Named limits, each checked before anything is allocated, each with a one-line error and an override.

A small input must never cost unbounded memory or time: a list of layers, a model config, a saved
result or a manifest says how big something is before it is built, and that size is checked here.
The README's reliability section lists every limit.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import InputError, ResourceError

MAX_INDEX = 10_000
"""Layers or heads a list may name (``--layers 0-100000000`` is refused before it is expanded)."""

MAX_BUDGETS = 64
"""Budgets one ``kv`` or ``patterns`` run sweeps (``--budget 8,16,…``): a curve of 64 points shows what more would;
each budget is a pass over every layer's scores and, end to end, a decoding run per policy."""

MAX_KV_RUNS = 256
"""Policy × budget runs of one ``kv`` call: each is a cut of every layer and, end to end, the future and the answer
decoded on its own cache (six policies × 42 budgets)."""

MAX_SMALL_FILE = 64 << 20
"""Bytes of a JSON or TOML file attnviz reads whole (config.json, a model or batch config, a manifest line file)."""

MAX_TOKENIZER_FILE = 512 << 20
"""Bytes of a ``tokenizer.json`` (large vocabularies are tens of MB)."""

MAX_POSITIONS = 1 << 24
"""Positions a model may claim (``max_position_embeddings``); no model is near it."""

MAX_TEXT_CHARS = 4_000_000
"""Characters of one text, whatever the model: about a million tokens, well past any context window.
A text is cut or refused at this length before the tokenizer sees it (a 40 MB text costs a
tokenizer gigabytes)."""

CHARS_PER_POSITION = 256
"""A text longer than ``max_positions`` × this cannot fit a model (no token covers 256 characters; a
WordPiece word of over 100 is one [UNK]), so it is cut or refused before it is tokenized."""

MAX_TEXT_FILE = 4 * MAX_TEXT_CHARS
"""Bytes of a file holding one text (``--text-file``, standard input): :data:`MAX_TEXT_CHARS`
characters of up to four UTF-8 bytes each."""

MAX_TEXTS_FILE = 1 << 30
"""Bytes of a file of texts (``export``, ``atlas``, ``heads --file``), and of the text a Parquet
file's column unpacks to: a million texts of a thousand characters. Lower where the memory budget
is smaller (:func:`texts_file_limit`)."""

MEMORY_ENV = "ATTNVIZ_MAX_MEMORY"
"""Environment variable overriding the memory budget: bytes, or with a K, M, G or T suffix."""


def memory_budget() -> int:
    """Bytes a model's weights (or one result) may take: ``ATTNVIZ_MAX_MEMORY``, else this machine's memory, or
    less where the process's address space is limited (``ulimit -v``)."""
    given = os.environ.get(MEMORY_ENV, "").strip()
    if given:
        return parse_size(given)
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover (not POSIX)
        physical = 64 << 30
    return min(physical, _address_space_left())


def _address_space_left() -> int:
    """Bytes this process may still map under its address-space limit (``ulimit -v``): the limit less what it has
    mapped already (Linux; elsewhere the limit); unlimited where none is set."""
    try:
        import resource
    except ImportError:  # pragma: no cover (not POSIX)
        return 1 << 62
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY or limit < 0:
        return 1 << 62
    try:
        with open("/proc/self/statm", "rb") as handle:
            mapped = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # not Linux: the limit alone
        mapped = 0
    return max(0, int(limit) - mapped)


def parse_size(text: str) -> int:
    """``"12G"`` → 12·2³⁰; ``"512M"``, ``"100000"``; anything else is a :class:`ResourceError`."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    body, unit = text.upper().rstrip("B"), ""
    if body and body[-1] in units:
        body, unit = body[:-1], body[-1]
    try:
        value = float(body)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise ResourceError(f"{MEMORY_ENV}={text!r} is not a size; write e.g. 16G, 512M or a number of bytes")
    if value * units[unit] >= 2.0**62:  # 1e308T: no machine has it, and int() of it would overflow or mean nothing
        raise ResourceError(f"{MEMORY_ENV}={text!r} is more memory than any machine has; write e.g. 16G or 1T")
    return int(value * units[unit])


def text_char_limit(max_positions: int | None) -> int:
    """Characters a text may have for a model of ``max_positions`` before it is tokenized."""
    if not max_positions:
        return MAX_TEXT_CHARS
    return min(MAX_TEXT_CHARS, max_positions * CHARS_PER_POSITION)


def check_memory(needed: float, what: str) -> None:
    """Refuse ``what`` if it needs more than :func:`memory_budget` bytes (before building it)."""
    budget = memory_budget()
    if needed > budget:
        raise ResourceError(f"{what} needs about {human(needed)}, more than the {human(budget)} this machine has; "
                            f"check the sizes, or set {MEMORY_ENV} (e.g. {MEMORY_ENV}=256G) to try anyway")


def human(size: float) -> str:
    """``1536`` → ``"1.5 KiB"``; sizes past the yottabytes in powers of ten."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(size) < 1024 or unit == "EiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else (f"{size:.1f} {unit}" if size < 1e6 else f"{size:.2g} {unit}")
        size /= 1024
    return f"{size:.2g} EiB"  # pragma: no cover


def texts_file_limit() -> int:
    """Bytes a file of texts may have: :data:`MAX_TEXTS_FILE`, or an eighth of the memory budget
    where that is less (texts held as Python strings, tokenized, cost several times their bytes)."""
    return min(MAX_TEXTS_FILE, memory_budget() // 8)


def check_regular(path: str | os.PathLike[str], what: str = "file") -> os.stat_result:
    """``path``'s status, refusing a folder, a pipe, a device (``/dev/zero``) or a socket before it is
    opened (a FIFO would block the open, a device never ends). FileNotFoundError passes through."""
    path = Path(path)
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a pipe, device or socket)"
        hint = "; pipe it to standard input with -" if "text" in what and not stat.S_ISDIR(info.st_mode) else ""
        raise ResourceError(f"{path} is {kind}; a {what} must be a regular file{hint}")
    return info


def read_small(path: str | os.PathLike[str], *, limit: int = MAX_SMALL_FILE, what: str = "file") -> bytes:
    """The bytes of a regular file no larger than ``limit``: a FIFO, a device (``/dev/zero``) or a
    folder is refused before it is opened for reading, and a file that grows past ``limit`` while
    read is refused too. Raises :class:`ResourceError`; FileNotFoundError passes through."""
    path = Path(path)
    info = check_regular(path, what)
    if info.st_size > limit:
        raise ResourceError(f"{path} is {human(info.st_size)}, more than the {human(limit)} a {what} may be")
    try:
        with open(path, "rb") as handle:
            data = handle.read(min(limit, info.st_size) + 1)  # no buffer of the limit's size for a small file
            if len(data) > info.st_size:  # it grew as it was read (or says 0 bytes, as /proc's): the rest, bounded
                data += handle.read(limit + 1 - len(data))
    except FileNotFoundError:
        raise
    except OSError as exc:  # a device that refuses (/proc/self/mem), a permission: which file, and why
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ResourceError(f"{path} grew past the {human(limit)} a {what} may be while it was read")
    return data
