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


def distinct_budgets(budgets: Sequence[Budget], n_keys: int) -> list[tuple[Budget, int]]:
    """``(budget as given, keys kept)`` for each budget that keeps a number of keys no earlier one keeps, in the
    order given; refused in one line: none, more than :data:`attnviz.limits.MAX_BUDGETS`, or one that is not a
    number of keys ≥ 1 or a fraction in (0, 1]."""
    from ..analysis.kv_policies import resolve_budget

    if not budgets:
        raise UsageError("give at least one budget")
    if len(budgets) > MAX_BUDGETS:
        raise UsageError(f"{len(budgets):,} budgets; at most {MAX_BUDGETS} (a curve of {MAX_BUDGETS} points shows "
                         "what more would)")
    kept: dict[int, Budget] = {}
    for budget in budgets:
        if isinstance(budget, float) and not math.isfinite(budget):
            raise UsageError(f"budget {budget}: give a number of keys (256) or a fraction (0.25, 25%)")
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
