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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

KINDS = ("previous_token", "induction", "first_token", "local", "token", "uniform", "zero")
MIN_POSITIONS, MAX_POSITIONS = 4096, 16384
TIES = ("latest", "earliest")


@dataclass(frozen=True)
class PlantedHead:
    """One planted head: its kind, place and parameters (see :mod:`attnviz.organisms.weights` for each pattern)."""

    kind: str
    layer: int
    head: int
    offset: int = 1  # previous_token: 1 (the previous token) or 2 (the one before it)
    match: int = 1  # induction: tokens matched (1: the current token; 2: it and the one before)
    ties: str = "latest"  # induction: which earlier occurrence wins a tie
    window: int = 16  # local: the tokens that hold all but ~1e-7 of each row's weight
    token: str = ""  # token: the word it attends to


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
    """Whether a ``--model`` value is an organism's TOML (``[model] type = "organism"``), without reading more."""
    path = Path(path)
    if path.suffix.lower() != ".toml":
        return False
    from ..sources.places import sample_config

    found = sample_config(path)
    if not found.is_file():  # (a FIFO, a device: not a regular file; the config reader says so)
        return False
    from ..config import read_toml

    try:
        data = read_toml(found, "a model config")
    except ConfigError:
        return False  # the config reader says what is wrong with it
    model = data.get("model")
    return isinstance(model, dict) and model.get("type") == "organism"


def _int(table: dict[str, Any], key: str, default: int, where: str, low: int, high: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: {key} must be a whole number from {low:,} to {high:,}; got {value!r}")
    return value


def read_spec(path: str | Path) -> OrganismSpec:
    """Read and check an organism's TOML (errors name the table and the key)."""
    from ..config import read_toml
    from ..sources.places import sample_config

    found = sample_config(path)
    data = read_toml(found, "an organism")  # bounded, regular, UTF-8, not nested past the parser's depth
    model = data.get("model", {})
    where = f"{path} [model]"
    unknown = set(model) - {"type", "name", "tokenizer", "layers", "heads", "positions", "seed", "needle", "question"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}; an organism has type, name, tokenizer, layers, "
                          "heads, positions, seed, needle and question")
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
        raise ConfigError(f"{path}: each planted head is a [[head]] table")
    planted = [_head(t, f"{path} [[head]] #{i + 1}", layers, heads) for i, t in enumerate(tables)]
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
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind must be one of {', '.join(KINDS)}; got {kind!r}")
    own = {"previous_token": {"offset"}, "induction": {"match", "ties"}, "local": {"window"}, "token": {"token"}}
    allowed = {"kind", "layer", "head"} | own.get(kind, set())
    unknown = set(table) - allowed
    if unknown:
        raise ConfigError(f"{where}: a {kind} head takes {', '.join(sorted(allowed))}; not {sorted(unknown)[0]!r}")
    layer = _int(table, "layer", -1, where, 0, layers - 1) if "layer" in table else None
    head = _int(table, "head", -1, where, 0, heads - 1) if "head" in table else None
    if layer is None or head is None:
        raise ConfigError(f"{where}: give its layer (0 to {layers - 1}) and head (0 to {heads - 1})")
    ties = table.get("ties", "latest")
    if ties not in TIES:
        raise ConfigError(f"{where}: ties is latest or earliest; got {ties!r}")
    token = table.get("token", "")
    if kind == "token" and (not isinstance(token, str) or not token.strip() or not token.isprintable()):
        raise ConfigError(f"{where}: a token head names its word: token = \".\"")
    return PlantedHead(kind, layer, head, offset=_int(table, "offset", 1, where, 1, 2),
                       match=_int(table, "match", 1, where, 1, 2), ties=ties,
                       window=_int(table, "window", 16, where, 2, 1024), token=str(token))


def _check_circuit(spec: OrganismSpec, where: str) -> None:
    """An induction head reads what a previous-token head wrote in an earlier layer; it writes the copied token,
    so it sits in the last layer (a later layer would read a residual whose scale it changed)."""
    writers = {h.offset: h for h in spec.planted if h.kind == "previous_token"}
    for h in spec.planted:
        if h.kind != "induction":
            continue
        for offset in range(1, h.match + 1):
            before = writers.get(offset)
            if before is None or before.layer >= h.layer:
                raise ConfigError(f"{where}: the induction head at layer {h.layer} head {h.head} (match = {h.match}) "
                                  f"reads the token {offset} back, which a previous_token head with offset = "
                                  f"{offset} in an earlier layer writes; plant one")
        if h.layer != spec.layers - 1:
            raise ConfigError(f"{where}: the induction head at layer {h.layer} writes the token it copies; put it in "
                              f"the last layer ({spec.layers - 1})")
    offsets = [h.offset for h in spec.planted if h.kind == "previous_token"]
    if len(offsets) != len(set(offsets)):
        raise ConfigError(f"{where}: one previous_token head per offset writes the token it reads; plant one of each")


def describe(head: PlantedHead) -> str:
    """What a planted head attends to, in words (the pattern :mod:`attnviz.organisms.weights` builds)."""
    if head.kind == "previous_token":
        return ("the token before" if head.offset == 1 else "the token two back") + "; writes it down for later layers"
    if head.kind == "induction":
        what = "the current token" if head.match == 1 else "the last two tokens"
        return (f"the token after the {head.ties} earlier occurrence of {what}; writes it out ten times over "
                "(the model copies it)")
    if head.kind == "first_token":
        return "the first token (an attention sink)"
    if head.kind == "local":
        return f"the last {head.window} tokens, the nearest most (weights fall by e^(-16/{head.window}) a token back)"
    if head.kind == "token":
        return f"every earlier {head.token!r}, equally (the first token where there is none)"
    return "every token so far, equally; writes nothing"
