"""Plugins: records from other distributions, found through Python entry points (as pytest and llm do).

A distribution declares an entry point in the group ``attnviz.plugins``::

    [project.entry-points."attnviz.plugins"]
    far = "myplug"              # a module: importing it registers its records
    # far = "myplug:register"   # or a callable, called with no arguments, that registers them

and its records (a statistic, an output format, an attribution method, a page view, a native
family) reach the commands, their help, checks, tables, pages and Parquet as a built-in one does.
A plugin registers with the same functions a user's own code calls (``statistics.register``,
``registry.register``, ``methods.register``, ``page_views.register``, ``native.register_family``).

:func:`load_plugins` runs once per process, the first time a registry of :mod:`attnviz.records`
is read after attnviz's own modules have imported (so ``attnviz --help`` and an argument error
load none): a registry read while an attnviz module is still importing (help text computed at
import) sees the built-ins only. A plugin that fails is one :class:`~attnviz.errors.AttnvizWarning`
naming it, and the command goes on without it. ``ATTNVIZ_NO_PLUGINS=1`` loads none.

Core: standard library only (``importlib.metadata`` is imported when plugins are looked for).
"""

from __future__ import annotations

import os
import sys
import types
import warnings

GROUP = "attnviz.plugins"
"""The entry point group a plugin distribution declares."""

NO_PLUGINS_ENV = "ATTNVIZ_NO_PLUGINS"
"""``ATTNVIZ_NO_PLUGINS=1`` in the environment: load no plugin."""

LOADED: list[str] = []
"""The entry points that loaded, as ``NAME (DISTRIBUTION)``, in order."""

_started = False


def _attnviz_importing() -> bool:
    """Whether one of attnviz's modules is still running its import (help text computed at import)."""
    return any(name.split(".")[0] == "attnviz" and getattr(getattr(module, "__spec__", None), "_initializing", False)
               for name, module in list(sys.modules.items()))


def load_plugins() -> list[str]:
    """Load every ``attnviz.plugins`` entry point, once per process; returns those loaded. A plugin
    that raises is one warning line (``plugin NAME (DIST) could not load: …``), and is left out."""
    global _started
    if _started or _attnviz_importing():
        return list(LOADED)
    _started = True
    if os.environ.get(NO_PLUGINS_ENV, "") not in ("", "0"):
        return []
    from importlib.metadata import entry_points

    from .errors import AttnvizWarning

    for entry in entry_points(group=GROUP):
        dist = getattr(getattr(entry, "dist", None), "name", None) or "?"
        try:
            loaded = entry.load()
            if callable(loaded) and not isinstance(loaded, types.ModuleType):
                loaded()
        except Exception as exc:  # a plugin's bug must not stop the command
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            warnings.warn(f"plugin {entry.name} ({dist}) could not load: {type(exc).__name__}: {first}; "
                          "attnviz goes on without it", AttnvizWarning, stacklevel=2)
            continue
        LOADED.append(f"{entry.name} ({dist})")
    return list(LOADED)
