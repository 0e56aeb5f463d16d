"""Token ranges as a user writes them (``A:B``, ``:B``, ``A:``): a region of a long input's matrix.

A leaf module (no torch, no numpy): the command line checks a range before any model loads."""

from __future__ import annotations

from .errors import UsageError

Span = tuple[int | None, int | None]


def parse_span(text: str, name: str) -> Span:
    """``"A:B"`` (either end may be left out: ``:B``, ``A:``) as token positions, B not included."""
    parts = text.split(":")
    if len(parts) != 2:
        raise UsageError(f"[[{name}={text}]] is a range of token positions: A:B (B not included), :B or A:")
    ends: list[int | None] = []
    for part in parts:
        part = part.strip()
        if not part:
            ends.append(None)
        elif part.isascii() and part.isdigit():  # not ² or ٣: int() refuses those
            ends.append(int(part))
        else:
            raise UsageError(f"[[{name}={text}]] is a range of token positions: A:B with whole numbers from 0")
    return ends[0], ends[1]


def resolve_span(span: Span, n: int, name: str) -> tuple[int, int]:
    """``span`` within a text of ``n`` tokens: ``(first, stop)``, refused when empty or past its end."""
    first, stop = 0 if span[0] is None else span[0], n if span[1] is None else span[1]
    shown = f"{'' if span[0] is None else span[0]}:{'' if span[1] is None else span[1]}"
    if first >= n:
        raise UsageError(f"[[{name}={shown}]] starts past the text's {n:,} tokens (positions 0 to {n - 1})")
    if stop > n:
        raise UsageError(f"[[{name}={shown}]] ends past the text's {n:,} tokens; end it at {n} or leave the end out")
    if stop <= first:
        raise UsageError(f"[[{name}={shown}]] holds no token; give A:B with A < B")
    return first, stop
