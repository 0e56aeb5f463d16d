"""The one check that asked-for layers and heads exist, and the one way it is said.

Every path that takes a layer number (a view, a head table, an extraction, a saved result, a
walkthrough) calls :func:`check_layers` once, so the message is the same everywhere: which number is
out of range, and which layers there are (``tiny has layers 0 to 5``, or for a result that kept some,
``run.npz holds layers 1, 4``); every path that takes a head number calls :func:`check_heads`
(``tiny has heads 0 to 11``). A leaf: standard library and :mod:`attnviz.errors` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .errors import UsageError


def check_layers(wanted: Iterable[int], *, owner: str, count: int | None = None, held: Sequence[int] | None = None,
                 option: str = "layers") -> list[int]:
    """``wanted`` sorted and without repeats, each one of the layers there are: ``0 … count − 1``, or
    the model numbers a saved result ``held``. ``owner`` says whose layers (a model's name, ``the
    decoder of t5``, a file); ``option`` is the argument's name in the message (``layer`` or ``layers``).
    None asked for at all is an error too."""
    numbers = sorted(set(wanted))
    if held is not None:
        there = set(held)
    elif count is not None:
        there = set(range(count))
    else:
        raise ValueError("check_layers needs the layer count or the layers held")
    bad: list[int | str] = [n for n in numbers if n not in there] or ([] if numbers else ["(none)"])
    if bad:
        first = bad[0]
        if held is not None:
            where = f"{owner} holds layers {spans(sorted(held))}"
        else:
            where = f"{owner} has layers 0 to {count - 1}" if count else f"{owner} has no layers"
        if isinstance(first, int) and first < 0:
            where += " (layers are numbered from 0)"
        raise UsageError(f"[[{option}={first}]] is out of range; {where}")
    return numbers


def check_layer(layer: int, *, owner: str, count: int | None = None, held: Sequence[int] | None = None) -> int:
    """One ``layer`` (the ``layer`` argument of a view), checked as :func:`check_layers` checks."""
    return check_layers([layer], owner=owner, count=count, held=held, option="layer")[0]


def check_heads(wanted: Iterable[int], *, owner: str, count: int, option: str = "head") -> list[int]:
    """``wanted`` in the order given, each one of the heads ``0 … count − 1`` of ``owner``; ``option`` is the argument's
    name in the message (``head``, ``heads``, ``only_head``)."""
    heads = [int(h) for h in wanted]
    bad = [h for h in heads if not 0 <= h < count]
    if bad:
        where = f"{owner} has heads 0 to {count - 1}" if count else f"{owner} has no heads"
        if bad[0] < 0:
            where += " (heads are numbered from 0)"
        raise UsageError(f"[[{option}={bad[0]}]] is out of range; {where}")
    return heads


def check_head(head: int, *, owner: str, count: int, option: str = "head") -> int:
    """One ``head``, checked as :func:`check_heads` checks."""
    return check_heads([head], owner=owner, count=count, option=option)[0]


def spans(numbers: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0 to 2, 5"``: layer numbers as short ranges."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]} to {r[-1]}" for r in runs)
