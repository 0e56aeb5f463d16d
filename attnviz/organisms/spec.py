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

``family = "llava"`` or ``"vit"`` in ``[model]`` makes a picture organism instead (:mod:`.picture_spec`), which
:func:`read_spec` reads too; ``family = "gpt2"`` (the default) is this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .kinds import BUILT_IN_FIELDS, KINDS, PlantedHead
from .picture_spec import FAMILIES, PictureSpec, read_picture_spec
from .reading import (
    HEAD,
    checked_name,
    head_tables,
    organism_table,
    read_data,
    read_head,
    refuse_other_tables,
    refuse_twice,
    refuse_unknown_keys,
    whole,
)

MIN_POSITIONS, MAX_POSITIONS = 4096, 16384
MODEL_KEYS = ("type", "family", "name", "tokenizer", "layers", "heads", "positions", "seed", "needle", "question")
__all__ = ["HEAD", "MODEL_KEYS", "OrganismSpec", "PictureSpec", "PlantedHead", "describe", "is_organism_file",
           "is_picture_organism", "read_spec"]


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
    """Whether a ``--model`` value is an organism's TOML (``[model] type = "organism"``, a text organism or a picture
    organism), without reading more. A file that cannot be read is not one here: the config reader, or
    :func:`read_spec`, says why."""
    return _organism_of(path) is not None


def is_picture_organism(path: str | Path) -> bool:
    """Whether a ``--model`` value is a picture organism's TOML (``[model] family = "llava"`` or ``"vit"``)."""
    found = _organism_of(path)
    return found is not None and found.get("family") in FAMILIES


def _organism_of(path: str | Path) -> dict[str, Any] | None:
    """The ``[model]`` table of an organism's TOML at ``path``, else None (not a .toml, not readable, not one)."""
    path = Path(path)
    if path.suffix.lower() != ".toml":
        return None
    from ..sources.places import sample_config

    found = sample_config(path)
    if not found.is_file():  # (a FIFO, a device: not a regular file; the config reader says so)
        return None
    from ..config import read_toml

    try:
        return organism_table(read_toml(found, "an organism"))
    except ConfigError:
        return None  # the config reader says what is wrong with it


def read_spec(path: str | Path) -> OrganismSpec | PictureSpec:
    """Read and check an organism's TOML (errors name the table and the key): a text organism's
    :class:`OrganismSpec`, or a picture organism's :class:`~attnviz.organisms.picture_spec.PictureSpec`
    (``[model] family = "llava"`` or ``"vit"``)."""
    from ..sources.places import sample_config

    found = sample_config(path)
    data = read_data(found, path)
    model = organism_table(data)
    if model is None:
        raise ConfigError(f"{path} is not a model organism (a .toml whose [model] has type = \"organism\"); see "
                          "sample_configs/organism_needle.toml")
    refuse_other_tables(data, path)
    where = f"{path} [model]"
    family = model.get("family", "gpt2")
    if family in FAMILIES:
        return read_picture_spec(data, model, path, found)
    if family != "gpt2":
        raise ConfigError(f"{where}: family is gpt2 (a text organism), {' or '.join(FAMILIES)} (a picture organism); "
                          f"got {family!r}")
    refuse_unknown_keys(model, MODEL_KEYS, where)
    if model.get("tokenizer", "embedded") != "embedded":
        raise ConfigError(f"{where}: tokenizer = {model['tokenizer']!r}; an organism reads text with the embedded "
                          "MiniLM's WordPiece vocabulary: tokenizer = \"embedded\" (offline, 30,522 tokens)")
    name = checked_name(model, path, where)
    layers = whole(model, "layers", 2, where, 1, 12)
    heads = whole(model, "heads", 4, where, 1, 16)
    positions = whole(model, "positions", 4608, where, MIN_POSITIONS, MAX_POSITIONS)
    seed = whole(model, "seed", 0, where, 0, 2**31 - 1)
    for key in ("needle", "question"):
        if key in model and (not isinstance(model[key], str) or not model[key].strip() or not model[key].isprintable()):
            raise ConfigError(f"{where}: {key} is a sentence of printable characters; got {model[key]!r}")
    planted = [read_head(t, f"{path} {HEAD} #{i + 1}", layers, heads, KINDS, BUILT_IN_FIELDS)
               for i, t in enumerate(head_tables(data, path))]
    refuse_twice(planted, path)
    spec = OrganismSpec(name, layers, heads, positions, seed, tuple(planted), model.get("needle"),
                        model.get("question"), str(found))
    _check_circuit(spec, str(path))
    return spec


def _check_circuit(spec: OrganismSpec, where: str) -> None:
    """What each planted head needs of the rest of the organism (its kind's ``check``)."""
    for head in spec.planted:
        check = KINDS[head.kind].check
        if check is not None:
            check(head, spec, where)


def describe(head: PlantedHead) -> str:
    """What a planted head attends to, in words (its kind's record)."""
    return KINDS[head.kind].describe(head)
