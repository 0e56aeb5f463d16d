"""A registry of records by name: what the head statistics, the attribution methods and their like
are kept in. Each record has a ``name``; the records the package defines itself are sealed as built
in (they stay), and others may be added and removed (by a user's code, a test, a notebook, a plugin).

Reading a sealed registry (``in``, ``[]``, ``get``, iterating, ``keys``/``values``/``items``, ``len``)
first loads the plugins (:func:`attnviz.plugins.load_plugins`, once per process), so what a plugin
registers is there wherever the built-ins are."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

Record = TypeVar("Record")


class _Named(Protocol):
    @property
    def name(self) -> str: ...


Named = TypeVar("Named", bound=_Named)  # what register takes: a record with a name (a registry may hold classes)


def _plural(what: str) -> str:
    return what[:-1] + "ies" if what.endswith("y") else what + "s"


def resolve(function: str | Callable[..., Any], what: str) -> Callable[..., Any]:
    """The one resolver of a record's function: itself, or what ``"module:function"`` names, imported on first use
    (so ``--help`` imports no matplotlib). One that cannot be imported is its author's error (``what``: the record,
    e.g. ``result format kv.json``), said in one line, never an internal error."""
    if callable(function):
        return function
    import importlib

    module, _, name = str(function).partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except Exception as exc:  # ImportError, AttributeError, or whatever the module raised as it was imported
        from .errors import PluginError

        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise PluginError(f"the {what}'s function {function} cannot be loaded ({type(exc).__name__}: {first}); "
                          "reinstall what registered it, or run without it") from None
    if not callable(found):
        from .errors import PluginError

        raise PluginError(f"the {what}'s function {function} is not a function")
    return found


def function_name(function: str | Callable[..., Any]) -> str:
    """A record's function as ``"module:function"``, as messages name it."""
    if isinstance(function, str):
        return function
    return f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', repr(function))}"


class Registry(dict[str, Record], Generic[Record]):
    """Records by their ``name``, in the order they were registered. ``what`` names a record in
    messages (``statistic``); ``check`` refuses a record that clashes with those already there."""

    def __init__(self, what: str, check: Callable[[Registry[Record], Record], None] | None = None) -> None:
        super().__init__()
        self.what, self._check = what, check
        self.built_in: frozenset[str] = frozenset()

    def _read(self) -> None:
        """Before a read: load the plugins once the built-ins are sealed (not while they register)."""
        if self.built_in:
            from .plugins import load_plugins

            load_plugins()

    def __contains__(self, name: object) -> bool:
        self._read()
        return super().__contains__(name)

    def __getitem__(self, name: str) -> Record:
        self._read()
        return super().__getitem__(name)

    def __iter__(self) -> Iterator[str]:
        self._read()
        return super().__iter__()

    def __len__(self) -> int:
        self._read()
        return super().__len__()

    def get(self, name: str, default: Any = None) -> Any:
        self._read()
        return super().get(name, default)

    def keys(self) -> Any:
        self._read()
        return super().keys()

    def values(self) -> Any:
        self._read()
        return super().values()

    def items(self) -> Any:
        self._read()
        return super().items()

    # Writing: the built-ins are sealed however the registry is reached (``FAMILIES["llama"] = None``, ``del``,
    # ``pop``, ``clear``, ``update``): one error naming the record, and the registry as it was.
    def _refuse_built_in(self, name: object) -> None:
        if name in self.built_in:
            raise TypeError(f"{name} is one of attnviz's own {_plural(self.what)}; it stays as it is (register another "
                            "name)")

    def __setitem__(self, name: str, record: Record) -> None:
        self._refuse_built_in(name)
        super().__setitem__(name, record)

    def __delitem__(self, name: str) -> None:
        self._refuse_built_in(name)
        super().__delitem__(name)

    def pop(self, name: str, *default: Any) -> Any:
        self._refuse_built_in(name)
        return super().pop(name, *default)

    def popitem(self) -> tuple[str, Record]:
        added = [name for name in dict.keys(self) if name not in self.built_in]
        if not added:
            raise KeyError(f"no {self.what} but attnviz's own, which stay")
        return added[-1], super().pop(added[-1])

    def clear(self) -> None:
        for name in [name for name in dict.keys(self) if name not in self.built_in]:
            super().pop(name)

    def setdefault(self, name: str, default: Any = None) -> Any:
        if not super().__contains__(name):
            self[name] = default
        return super().__getitem__(name)

    def update(self, *others: Any, **more: Any) -> None:
        for name, record in dict(*others, **more).items():
            self[name] = record

    def __ior__(self, other: Any) -> Registry[Record]:  # type: ignore[override,misc]
        self.update(other)
        return self

    def register(self: Registry[Named], record: Named) -> Named:
        """Add ``record``; its name must be new."""
        name = record.name
        if name in self:
            raise ValueError(f"a {self.what} named {name!r} is already registered")
        if self._check is not None:
            self._check(self, record)
        self[name] = record
        return record

    def register_own(self: Registry[Named], record: Named) -> Named:
        """Add one of attnviz's own records from the module that owns it (a result's formats, registered where the
        result is defined), sealed as built in at once; plugins are not loaded for it (the module may be importing)."""
        name = record.name
        if dict.__contains__(self, name):
            raise ValueError(f"a {self.what} named {name!r} is already registered")
        if self._check is not None:
            self._check(self, record)
        dict.__setitem__(self, name, record)
        self.built_in = self.built_in | {name}
        return record

    def seal(self) -> frozenset[str]:
        """Mark every record registered so far as built in; returns their names."""
        self.built_in = frozenset(dict.keys(self))
        return self.built_in

    def unregister(self, name: str) -> None:
        """Remove a record :meth:`register` added (the built-ins stay)."""
        if name in self.built_in:
            raise ValueError(f"{name} is one of attnviz's own {_plural(self.what)}; it stays")
        self.pop(name, None)

    @contextmanager
    def registered(self: Registry[Named], record: Named) -> Iterator[Named]:
        """``record`` registered for the ``with`` block only (tests, notebooks trying one out)."""
        self.register(record)
        try:
            yield record
        finally:
            self.unregister(record.name)

