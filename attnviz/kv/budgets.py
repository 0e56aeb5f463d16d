"""The budgets of one ``kv`` or ``patterns`` run, checked and made distinct before any layer is read.

A budget is a number of keys (``8``) or a fraction of the context's (``0.5``, ``50%``); two that keep the same number
of keys of this context (``8,8``, ``0.5,50%``, or ``8`` and ``0.5`` of 16 keys) are one run, and a warning says which.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

from ..errors import AttnvizWarning, UsageError
from ..limits import MAX_BUDGETS

Budget = int | float


FORM = "give numbers of keys (256) or fractions (0.25, 25%)"


def check_budgets(budgets: Sequence[Budget], given: str | None = None) -> None:
    """The one check of a list of budgets before any work: at least one, at most :data:`attnviz.limits.MAX_BUDGETS`,
    each a number of keys ≥ 1 or a fraction in (0, 1] (``given``: the text they were read from, for the message)."""
    _check_count(len(budgets))
    for budget in budgets:
        if (isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget)
                or budget <= 0 or (isinstance(budget, float) and budget > 1 and not budget.is_integer())):
            raise UsageError(f"[[budget={given if given is not None else budget!r}]]: {FORM}")


def parse_budgets(text: str) -> list[Budget]:
    """``"256,0.25,25%"`` → ``[256, 0.25, 0.25]``: numbers of keys or fractions, comma-separated (``--budget``),
    checked by :func:`check_budgets`; the count is checked before anything is parsed."""
    from ..analysis.kv_policies import parse_budget

    parts = [part for part in text.split(",") if part.strip()]
    _check_count(len(parts))
    shown = text if len(text) <= 60 else text[:57] + "..."
    try:
        budgets = [parse_budget(part) for part in parts]
    except ValueError:
        raise UsageError(f"[[budget={shown!r}]]: {FORM}") from None
    check_budgets(budgets, repr(shown))
    return budgets


def _check_count(count: int) -> None:
    if count == 0:
        raise UsageError(f"give at least one budget: {FORM}")
    if count > MAX_BUDGETS:
        raise UsageError(f"{count:,} budgets; at most {MAX_BUDGETS} (a curve of {MAX_BUDGETS} points shows what more "
                         "would)")


def distinct_budgets(budgets: Sequence[Budget], n_keys: int) -> list[tuple[Budget, int]]:
    """``(budget as given, keys kept)`` for each budget that keeps a number of keys no earlier one keeps, in the
    order given; refused in one line: none, more than :data:`attnviz.limits.MAX_BUDGETS`, or one that is not a
    number of keys ≥ 1 or a fraction in (0, 1]."""
    from ..analysis.kv_policies import resolve_budget

    check_budgets(budgets)
    kept: dict[int, Budget] = {}
    for budget in budgets:
        try:
            count = resolve_budget(budget, n_keys)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if count in kept:
            warnings.warn(f"budgets {_shown(kept[count])} and {_shown(budget)} both keep {count:,} of {n_keys:,} "
                          "keys: one run", AttnvizWarning, stacklevel=2)
            continue
        kept[count] = budget
    return [(budget, count) for count, budget in kept.items()]


def _shown(budget: Budget) -> str:
    return f"{budget:,}" if isinstance(budget, int) or budget > 1 else f"{budget:g}"
