"""transformers' key/value cache, named as the installed release names it: the one shim for it.

transformers 5.x calls a model's cache ``cache`` (in ``forward`` and in its outputs) and keeps ``past_key_values``, the
earlier name, as a deprecated alias that warns; releases before 5 know only ``past_key_values``. Every place attnviz
hands a cache to a model or takes one from an output goes through here (the stepper, kv's cut caches and values,
generate's last step, an encoder-decoder's last step), so a rename is one change.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=64)
def _argument_of(forward: Any) -> str:
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def cache_argument(model: Any) -> str:
    """The name ``model.forward`` takes its cache by: ``cache`` (transformers 5.x) or ``past_key_values``."""
    return _argument_of(type(model).forward)


def with_cache(model: Any, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` to pass to ``model(...)`` (see :func:`cache_argument`)."""
    return {cache_argument(model): cache}


def cache_of(output: Any) -> Any:
    """A transformers output's key/value cache (``cache`` in 5.x, ``past_key_values`` before; None without one)."""
    found = getattr(output, "cache", None)
    if found is not None:
        return found
    return output.get("past_key_values") if hasattr(output, "get") else getattr(output, "past_key_values", None)
