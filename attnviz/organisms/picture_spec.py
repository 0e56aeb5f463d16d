"""A picture organism's description: ``[model] family = "llava"`` (a vision-language model: a CLIP vision tower, a
projector and a Llama language model, LLaVA-1.5's layout, reading text with the embedded MiniLM's WordPiece
vocabulary and an ``<image>`` token) or ``family = "vit"`` (an image encoder, ViT), each head of its attention planted
by a ``[[head]]`` table whose kind is a record of :data:`~attnviz.organisms.picture_kinds.PICTURE_KINDS`; read from
its TOML and checked before anything is built.

```toml
[model]
type = "organism"
family = "llava"      # or "vit"
name = "llava-organism"
layers = 2            # of the language model (llava) or the encoder (vit)
heads = 4             # per layer
image_size = 48       # the processed picture's side, in pixels
patch_size = 8        # a patch's side: a 6 × 6 grid of patches

[[head]]
kind = "patch_reader"
layer = 0
head = 0
row = 2
col = 3
```
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .kinds import PlantedHead
from .picture_kinds import FAMILIES, PICTURE_KINDS
from .reading import HEAD, checked_name, head_tables, read_head, refuse_twice, refuse_unknown_keys, whole

VERSION = 1  # of the picture organisms' construction and files: a new one builds new folders
COMMON_KEYS = ("type", "family", "name", "layers", "heads", "image_size", "patch_size")
KEYS = {"llava": (*COMMON_KEYS, "tokenizer", "positions", "seed"), "vit": COMMON_KEYS}
MAX_GRID = 16  # patches a side: at most 256 image tokens
__all__ = ["FAMILIES", "PictureSpec", "read_picture_spec"]


@dataclass(frozen=True)
class PictureSpec:
    """A whole picture organism (see the module). ``positions``: the language model's (llava; 0 for vit);
    ``seed``: the text tokens' codes (llava)."""

    name: str
    family: str
    layers: int
    heads: int
    image_size: int
    patch_size: int
    positions: int
    seed: int
    planted: tuple[PlantedHead, ...]
    source: str = ""

    @property
    def grid(self) -> int:
        """Patches a side of the processed picture."""
        return self.image_size // self.patch_size

    @property
    def language(self) -> bool:
        """Whether it reads a text beside the picture (a vision-language organism)."""
        return self.family == "llava"

    def head(self, layer: int, head: int) -> PlantedHead | None:
        return next((h for h in self.planted if (h.layer, h.head) == (layer, head)), None)

    def fingerprint(self) -> str:
        """What names its folder: its description and this construction's version."""
        described = {k: v for k, v in vars(self).items() if k != "source"}
        described["planted"] = [{k: v for k, v in vars(h).items() if k != "settings" or v} for h in self.planted]
        text = json.dumps({"version": VERSION, **described}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def read_picture_spec(data: dict[str, Any], model: dict[str, Any], path: str | Path, found: Path) -> PictureSpec:
    """Check a picture organism's ``[model]`` (``model``) and ``[[head]]`` tables of ``data`` (the TOML at ``path``,
    read from ``found``); errors name the table and the key."""
    family = str(model["family"])
    where = f"{path} [model]"
    refuse_unknown_keys(model, KEYS[family], where)
    if family == "llava" and model.get("tokenizer", "embedded") != "embedded":
        raise ConfigError(f"{where}: tokenizer = {model['tokenizer']!r}; a picture organism reads text with the "
                          "embedded MiniLM's WordPiece vocabulary and an <image> token: tokenizer = \"embedded\"")
    name = checked_name(model, path, where)
    layers = whole(model, "layers", 2, where, 1, 12)
    heads = whole(model, "heads", 4, where, 1, 16)
    patch_size = whole(model, "patch_size", 8, where, 2, 32)
    image_size = whole(model, "image_size", 48, where, 2 * patch_size, MAX_GRID * patch_size)
    if image_size % patch_size:
        raise ConfigError(f"{where}: image_size {image_size} is not a whole number of patches of {patch_size} "
                          f"pixels; use {image_size // patch_size * patch_size} or "
                          f"{(image_size // patch_size + 1) * patch_size}")
    grid = image_size // patch_size
    positions = whole(model, "positions", 1024, where, grid * grid + 16, 8192) if family == "llava" else 0
    seed = whole(model, "seed", 0, where, 0, 2**31 - 1) if family == "llava" else 0
    planted = [read_head(t, f"{path} {HEAD} #{i + 1}", layers, heads, PICTURE_KINDS)
               for i, t in enumerate(head_tables(data, path))]
    refuse_twice(planted, path)
    spec = PictureSpec(name, family, layers, heads, image_size, patch_size, positions, seed, tuple(planted),
                       str(found))
    for number, head in enumerate(planted, start=1):
        kind = PICTURE_KINDS[head.kind]
        if family not in kind.families:
            raise ConfigError(f"{path} {HEAD} #{number}: a {head.kind} head goes in a "
                              f"{' or '.join(repr(f) for f in kind.families)} organism; this one is family = "
                              f"{family!r} ({'an image encoder, which reads no text' if family == 'vit' else family})")
        if kind.check is not None:
            kind.check(head, spec, f"{path} {HEAD} #{number}")
    return spec
