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
from typing import Any

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


PLUGIN_SECONDS = 20.0
"""How long one plugin may take to import before it is left out with a warning naming it (a plugin whose import
waits on a network or a lock would otherwise hang every command, silently)."""

MODULES: dict[str, str] = {}
"""Each module a plugin's loading imported, by name → ``NAME (DISTRIBUTION)``: an error raised later inside one of
them is that plugin's, and is said so (:func:`blame`)."""


def load_plugins() -> list[str]:
    """Load every ``attnviz.plugins`` entry point, once per process; returns those loaded. A plugin that raises,
    exits (``sys.exit``, ``os._exit``), is interrupted or takes longer than :data:`PLUGIN_SECONDS` to import is one
    warning line (``plugin NAME (DIST) could not load: …``), and is left out; a distribution whose metadata cannot
    be read (an entry point without ``=``, bytes that are not UTF-8) is skipped, with a warning when it names this
    group."""
    global _started
    if _started or _attnviz_importing():
        return list(LOADED)
    _started = True
    if os.environ.get(NO_PLUGINS_ENV, "") not in ("", "0"):
        return []
    from .errors import AttnvizWarning

    for entry, dist in _entries():
        who = f"{_clean(getattr(entry, 'name', '?'))} ({dist})"
        failed = _load(entry)
        top = str(getattr(entry, "value", "")).split(":")[0].strip().split(".")[0]
        for name in list(sys.modules):  # the plugin's own package: its records' code runs there later
            if top and top != "attnviz" and (name == top or name.startswith(top + ".")):
                MODULES.setdefault(name, who)
        if failed is not None:
            warnings.warn(f"plugin {who} could not load: {failed}; attnviz goes on without it ({NO_PLUGINS_ENV}=1 "
                          "loads no plugin)", AttnvizWarning, stacklevel=2)
            continue
        LOADED.append(who)
    return list(LOADED)


def _load(entry: object) -> str | None:
    """Import one entry point (and call it, if it names a callable); what went wrong, or None."""
    try:
        with _guarded():
            loaded = entry.load()  # type: ignore[attr-defined]
            if callable(loaded) and not isinstance(loaded, types.ModuleType):
                loaded()
    except _FromPlugin as exc:
        return str(exc)
    except KeyboardInterrupt:
        return "it raised KeyboardInterrupt"
    except SystemExit as exc:
        return f"it raised SystemExit({exc.code!r})"
    except Exception as exc:  # a plugin's bug must not stop the command
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return f"{type(exc).__name__}: {_clean(first)}"
    return None


class _FromPlugin(Exception):
    """What a plugin did while loading that attnviz stopped: an exit, or an import past :data:`PLUGIN_SECONDS`."""


def _clean(text: object) -> str:
    """A name from another distribution's metadata, printable: control characters shown as ``\\xNN``."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in str(text))[:100]


BROKEN: list[str] = []
"""Distributions whose entry points could not be read (by :func:`tolerate_broken_metadata`'s reader), by path."""


def tolerate_broken_metadata() -> None:
    """Make ``importlib.metadata.entry_points`` read past a distribution whose entry points cannot be read (a line
    without ``=``, bytes that are not UTF-8): without this, one broken tool anywhere on the path stops torch's own
    import (it reads the ``torch.backends`` group) and so every command. The command line calls it once; the broken
    distributions are skipped and named in :data:`BROKEN` (a warning says so when the plugins load)."""
    import importlib.metadata as metadata

    original = metadata.entry_points
    if getattr(original, "_attnviz_tolerant", False):
        return

    def entry_points(**params: Any) -> Any:
        try:
            return original(**params)
        except Exception:  # some distribution's metadata is broken: read the others
            found = _readable_entry_points()
            if params:
                return metadata.EntryPoints(found).select(**params)
            groups = getattr(metadata, "SelectableGroups", None)  # what Python 3.11 returns without parameters
            return groups.load(found) if groups is not None else metadata.EntryPoints(found)

    entry_points._attnviz_tolerant = True  # type: ignore[attr-defined]
    metadata.entry_points = entry_points


def _readable_entry_points() -> list[Any]:
    from importlib.metadata import distributions

    found: list[Any] = []
    for dist in distributions():
        try:
            found.extend(dist.entry_points)
        except Exception:
            where = _clean(getattr(dist, "_path", None) or "?")
            if where not in BROKEN:
                BROKEN.append(where)
    return found


def _entries() -> list[tuple[object, str]]:
    """``(entry point, distribution name)`` for the group, read past distributions whose metadata cannot be read (one
    broken tool must not stop attnviz); one that names this group among its unreadable lines is said in a warning."""
    from importlib.metadata import entry_points

    from .errors import AttnvizWarning

    try:
        found = list(entry_points(group=GROUP))
    except Exception:  # the reader is not the tolerant one (a library caller): read distribution by distribution
        found = [entry for entry in _readable_entry_points() if entry.group == GROUP]
    for where in BROKEN:
        raw = _raw_entry_points(where)
        if raw is not None and GROUP in raw:
            warnings.warn(f"the entry points of {where} cannot be read: its attnviz plugins are left out",
                          AttnvizWarning, stacklevel=3)
    return [(entry, _dist_name(entry)) for entry in found]


def _dist_name(entry: object, dist: object = None) -> str:
    try:
        found = dist if dist is not None else getattr(entry, "dist", None)
        return _clean(getattr(found, "name", None) or "?")
    except Exception:
        return "?"


def _raw_entry_points(where: str) -> str | None:
    """A distribution folder's ``entry_points.txt`` as text (undecodable bytes replaced), or None."""
    from pathlib import Path

    try:
        return (Path(where) / "entry_points.txt").read_bytes()[:1 << 20].decode("utf-8", "replace")
    except OSError:
        return None


class _guarded:
    """While one plugin loads: ``sys.exit`` and ``os._exit`` raise instead of ending attnviz, and past
    :data:`PLUGIN_SECONDS` (in the main thread, where a timer signal can reach it) the import is stopped."""

    def __enter__(self) -> None:
        import signal
        import threading

        self._exit, self._os_exit = sys.exit, os._exit

        def refuse(code: object = None) -> None:
            raise _FromPlugin(f"it called exit({code!r})")

        sys.exit = refuse  # type: ignore[assignment]
        os._exit = refuse  # type: ignore[assignment]
        self._timer = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
        if self._timer:
            def stop(signum: int, frame: object) -> None:
                raise _FromPlugin(f"it took more than {PLUGIN_SECONDS:g} s to import")

            self._handler = signal.signal(signal.SIGALRM, stop)
            signal.setitimer(signal.ITIMER_REAL, PLUGIN_SECONDS)

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._handler)
        sys.exit, os._exit = self._exit, self._os_exit


def blame(exc: BaseException) -> str | None:
    """``NAME (DISTRIBUTION)`` of the plugin in whose code ``exc`` was raised (the innermost frame of a module a
    plugin's loading imported), or None when no plugin's code is on its traceback."""
    if not MODULES:
        return None
    tb = exc.__traceback__
    culprit = None
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__")
        if isinstance(name, str) and name in MODULES:
            culprit = MODULES[name]
        tb = tb.tb_next
    return culprit
