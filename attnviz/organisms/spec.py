"""An organism's description, read from its TOML file and checked before anything is built (see the package).

```toml
[model]
type = "organism"
name = "needle-organism"
tokenizer = "embedded"  # the embedded MiniLM's WordPiece vocabulary (offline)
layers = 2            # attention-only blocks
heads = 4             # per layer
positions = 4608      # at least 4,096
seed = 0              # the random codes (the same seed, the same weights)

[[head]]              # one table per planted head; every other head is zero (uniform attention, writes nothing)
kind = "previous_token"
layer = 0
head = 0
```
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, toml_table
from .kinds import BUILT_IN_FIELDS, KINDS, PlantedHead

MIN_POSITIONS, MAX_POSITIONS = 4096, 16384
MODEL_KEYS = ("type", "name", "tokenizer", "layers", "heads", "positions", "seed", "needle", "question")
HEAD = toml_table("head")  # the [[head]] table in a message (never taken for the command line's --head)
MAX_DEPTH = 4  # tables and arrays within each other: [[head]] holds values, nothing deeper


@dataclass(frozen=True)
class OrganismSpec:
    """A whole organism (see the module)."""

    name: str
    layers: int
    heads: int
    positions: int
    seed: int
    planted: tuple[PlantedHead, ...]
    needle: str | None = None  # what ``attnviz needle`` hides and asks by default on this organism
    question: str | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def head(self, layer: int, head: int) -> PlantedHead | None:
        return next((h for h in self.planted if (h.layer, h.head) == (layer, head)), None)


def is_organism_file(path: str | Path) -> bool:
    """Whether a ``--model`` value is an organism's TOML (``[model] type = "organism"``), without reading more.
    A file that cannot be read is not one here: the config reader, or :func:`read_spec`, says why."""
    path = Path(path)
    if path.suffix.lower() != ".toml":
        return False
    from ..sources.places import sample_config

    found = sample_config(path)
    if not found.is_file():  # (a FIFO, a device: not a regular file; the config reader says so)
        return False
    from ..config import read_toml

    try:
        return _organism_model(read_toml(found, "an organism")) is not None
    except ConfigError:
        return False  # the config reader says what is wrong with it


def _read(found: Path, path: str | Path) -> dict[str, Any]:
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


def _organism_model(data: dict[str, Any]) -> dict[str, Any] | None:
    model = data.get("model")
    return model if isinstance(model, dict) and model.get("type") == "organism" else None


def _nearest(name: str, known: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(known)}"


def _shown(key: str) -> str:
    """A key as a message shows it: quoted, at most 64 characters of it."""
    return repr(key[:64]) + ("…" if len(key) > 64 else "")


def _table_name(key: str, value: Any) -> str:
    """How a top-level ``key`` was written: ``[[key]]``, ``[key]`` or ``key = …`` (a strange key quoted, cut)."""
    import re

    plain = re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key) is not None
    shown = key if plain else _shown(key)
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return toml_table(key) if plain else f"[[{shown}]]"
    return f"[{shown}]" if isinstance(value, dict) else f"key {shown}"


def _int(table: dict[str, Any], key: str, default: int, where: str, low: int, high: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: {key} must be a whole number from {low:,} to {high:,}; got {value!r}")
    return value


def read_spec(path: str | Path) -> OrganismSpec:
    """Read and check an organism's TOML (errors name the table and the key)."""
    from ..sources.places import sample_config

    found = sample_config(path)
    data = _read(found, path)
    model = _organism_model(data)
    if model is None:
        raise ConfigError(f"{path} is not a model organism (a .toml whose [model] has type = \"organism\"); see "
                          "sample_configs/organism_needle.toml")
    for key, value in data.items():
        if key not in ("model", "head"):
            named = _table_name(key, value)
            close = difflib.get_close_matches(key, ["head", "model"], n=1, cutoff=0.5)
            hint = (f"did you mean {HEAD}?" if close == ["head"] else "did you mean [model]?" if close else
                    f"an organism has a [model] table and {HEAD} tables")
            raise ConfigError(f"{path}: unknown {named} (nothing would read it); {hint}")
    where = f"{path} [model]"
    unknown = sorted(set(model) - set(MODEL_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {_shown(unknown[0])}; {_nearest(unknown[0], MODEL_KEYS)}")
    if model.get("tokenizer", "embedded") != "embedded":
        raise ConfigError(f"{where}: tokenizer = {model['tokenizer']!r}; an organism reads text with the embedded "
                          "MiniLM's WordPiece vocabulary: tokenizer = \"embedded\" (offline, 30,522 tokens)")
    name = model.get("name", Path(path).stem)
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ConfigError(f"{where}: name is letters, digits, -, _ and .; got {name!r}")
    layers = _int(model, "layers", 2, where, 1, 12)
    heads = _int(model, "heads", 4, where, 1, 16)
    positions = _int(model, "positions", 4608, where, MIN_POSITIONS, MAX_POSITIONS)
    seed = _int(model, "seed", 0, where, 0, 2**31 - 1)
    for key in ("needle", "question"):
        if key in model and (not isinstance(model[key], str) or not model[key].strip() or not model[key].isprintable()):
            raise ConfigError(f"{where}: {key} is a sentence of printable characters; got {model[key]!r}")
    tables = data.get("head", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{path}: each planted head is a {HEAD} table")
    planted = [_head(t, f"{path} {HEAD} #{i + 1}", layers, heads) for i, t in enumerate(tables)]
    seen: set[tuple[int, int]] = set()
    for h in planted:
        if (h.layer, h.head) in seen:
            raise ConfigError(f"{path}: layer {h.layer} head {h.head} is planted twice")
        seen.add((h.layer, h.head))
    spec = OrganismSpec(name, layers, heads, positions, seed, tuple(planted), model.get("needle"),
                        model.get("question"), str(found))
    _check_circuit(spec, str(path))
    return spec


def _head(table: dict[str, Any], where: str, layers: int, heads: int) -> PlantedHead:
    kind = table.get("kind")
    record = KINDS.get(kind) if isinstance(kind, str) else None
    if record is None:
        raise ConfigError(f"{where}: kind must be one of {', '.join(KINDS)}; got {kind!r}")
    own = {name: {p.name for p in k.parameters} for name, k in KINDS.items()}
    allowed = {"kind", "layer", "head"} | own[kind]
    unknown = sorted(set(table) - allowed)
    if unknown:
        every = {"kind", "layer", "head"}.union(*own.values())
        close = difflib.get_close_matches(unknown[0], sorted(allowed), n=1, cutoff=0.5)
        other = [k for k, keys in own.items() if unknown[0] in keys]
        hint = (f"; did you mean {close[0]!r}?" if close else f" ({other[0]} heads take it)" if other else
                f" (a head's keys: {', '.join(sorted(every))})")
        raise ConfigError(f"{where}: a {kind} head takes {', '.join(sorted(allowed))}; not {_shown(unknown[0])}{hint}")
    layer = _int(table, "layer", -1, where, 0, layers - 1) if "layer" in table else None
    head = _int(table, "head", -1, where, 0, heads - 1) if "head" in table else None
    if layer is None or head is None:
        raise ConfigError(f"{where}: give its layer (0 to {layers - 1}) and head (0 to {heads - 1})")
    values = {param.name: param.read(table, where) for param in record.parameters}
    fields = {name: value for name, value in values.items() if name in BUILT_IN_FIELDS}
    settings = tuple(sorted((name, value) for name, value in values.items() if name not in BUILT_IN_FIELDS))
    return PlantedHead(str(kind), layer, head, **fields, settings=settings)


def _check_circuit(spec: OrganismSpec, where: str) -> None:
    """What each planted head needs of the rest of the organism (its kind's ``check``)."""
    for head in spec.planted:
        check = KINDS[head.kind].check
        if check is not None:
            check(head, spec, where)


def describe(head: PlantedHead) -> str:
    """What a planted head attends to, in words (its kind's record)."""
    return KINDS[head.kind].describe(head)
