"""An organism's TOML read and its values checked, for the text organisms (:mod:`.spec`) and the picture organisms
(:mod:`.picture_spec`) alike: bounded and not nested past what an organism is, every unknown table and key named
with the nearest known one, every whole number checked against its range, and each ``[[head]]`` table read by its
kind's record (its ``parameters``)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError, toml_table
from .kinds import PlantedHead

HEAD = toml_table("head")  # the [[head]] table in a message (never taken for the command line's --head)
MAX_DEPTH = 4  # tables and arrays within each other: [[head]] holds values, nothing deeper


def read_data(found: Path, path: str | Path) -> dict[str, Any]:
    """An organism's TOML, read as the config reader reads it (bounded, regular, UTF-8), and refused if nested deeper
    than an organism is."""
    from ..config import read_toml

    data = read_toml(found, "an organism")  # bounded, regular, UTF-8, not nested past the parser's depth
    level: list[Any] = [data]
    for _ in range(MAX_DEPTH + 1):  # a level at a time, never recursing (a header may be 50,000 keys deep)
        level = [v for item in level for v in (item.values() if isinstance(item, dict) else item)
                 if isinstance(v, (dict, list))]
        if not level:
            return data
    raise ConfigError(f"{path} nests tables or arrays more than {MAX_DEPTH} levels deep; an organism is a [model] "
                      f"table and {HEAD} tables of values")


def organism_table(data: dict[str, Any]) -> dict[str, Any] | None:
    """The ``[model]`` table of an organism's TOML (``type = "organism"``), else None."""
    model = data.get("model")
    return model if isinstance(model, dict) and model.get("type") == "organism" else None


def nearest(name: str, known: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(known)}"


def shown(key: str) -> str:
    """A key as a message shows it: quoted, at most 64 characters of it."""
    return repr(key[:64]) + ("…" if len(key) > 64 else "")


def table_name(key: str, value: Any) -> str:
    """How a top-level ``key`` was written: ``[[key]]``, ``[key]`` or ``key = …`` (a strange key quoted, cut)."""
    plain = re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key) is not None
    named = key if plain else shown(key)
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return toml_table(key) if plain else f"[[{named}]]"
    return f"[{named}]" if isinstance(value, dict) else f"key {named}"


def refuse_other_tables(data: dict[str, Any], path: str | Path) -> None:
    """Only ``[model]`` and ``[[head]]`` tables: anything else would be read by nothing."""
    for key, value in data.items():
        if key not in ("model", "head"):
            named = table_name(key, value)
            close = difflib.get_close_matches(key, ["head", "model"], n=1, cutoff=0.5)
            hint = (f"did you mean {HEAD}?" if close == ["head"] else "did you mean [model]?" if close else
                    f"an organism has a [model] table and {HEAD} tables")
            raise ConfigError(f"{path}: unknown {named} (nothing would read it); {hint}")


def refuse_unknown_keys(model: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(model) - set(keys))
    if unknown:
        raise ConfigError(f"{where}: unknown key {shown(unknown[0])}; {nearest(unknown[0], keys)}")


def whole(table: dict[str, Any], key: str, default: int, where: str, low: int, high: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: {key} must be a whole number from {low:,} to {high:,}; got {value!r}")
    return value


def checked_name(model: dict[str, Any], path: str | Path, where: str) -> str:
    """The organism's ``name`` (its cache folder's), else the file's stem."""
    name = model.get("name", Path(path).stem)
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ConfigError(f"{where}: name is letters, digits, -, _ and .; got {name!r}")
    return name


def head_tables(data: dict[str, Any], path: str | Path) -> list[dict[str, Any]]:
    tables = data.get("head", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{path}: each planted head is a {HEAD} table")
    return tables


def read_head(table: dict[str, Any], where: str, layers: int, heads: int, kinds: Mapping[str, Any],
              fields: tuple[str, ...] = ()) -> PlantedHead:
    """One ``[[head]]`` table as a :class:`PlantedHead`, read by its kind's record in ``kinds`` (its ``parameters``);
    ``fields``: the parameters that are fields of :class:`PlantedHead` (the rest are its ``settings``)."""
    kind = table.get("kind")
    record = kinds.get(kind) if isinstance(kind, str) else None
    if record is None or not isinstance(kind, str):
        raise ConfigError(f"{where}: kind must be one of {', '.join(kinds)}; got {kind!r}")
    own = {name: {p.name for p in k.parameters} for name, k in kinds.items()}
    allowed = {"kind", "layer", "head"} | own[kind]
    unknown = sorted(set(table) - allowed)
    if unknown:
        every = {"kind", "layer", "head"}.union(*own.values())
        close = difflib.get_close_matches(unknown[0], sorted(allowed), n=1, cutoff=0.5)
        other = [k for k, keys in own.items() if unknown[0] in keys]
        hint = (f"; did you mean {close[0]!r}?" if close else f" ({other[0]} heads take it)" if other else
                f" (a head's keys: {', '.join(sorted(every))})")
        raise ConfigError(f"{where}: a {kind} head takes {', '.join(sorted(allowed))}; not {shown(unknown[0])}{hint}")
    layer = whole(table, "layer", -1, where, 0, layers - 1) if "layer" in table else None
    head = whole(table, "head", -1, where, 0, heads - 1) if "head" in table else None
    if layer is None or head is None:
        raise ConfigError(f"{where}: give its layer (0 to {layers - 1}) and head (0 to {heads - 1})")
    values = {param.name: param.read(table, where) for param in record.parameters}
    built_in = {name: value for name, value in values.items() if name in fields}
    settings = tuple(sorted((name, value) for name, value in values.items() if name not in fields))
    return PlantedHead(kind, layer, head, **built_in, settings=settings)


def refuse_twice(planted: list[PlantedHead], path: str | Path) -> None:
    seen: set[tuple[int, int]] = set()
    for h in planted:
        if (h.layer, h.head) in seen:
            raise ConfigError(f"{path}: layer {h.layer} head {h.head} is planted twice")
        seen.add((h.layer, h.head))
