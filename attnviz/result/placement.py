"""Where one picture's tokens sit in a result, as one typed record (issue 59, item 6): its layout, its size, its image
tokens, and each grid of patches (a picture, or its tiles and crops) with every patch's position in the sequence and
its box in the original picture. The layouts return it (:mod:`attnviz.images`), the result saves it (as the JSON of
``metadata["images"]``, unchanged: :meth:`Placement.to_dict`) and loads it, and every view reads it by attribute
(:attr:`attnviz.result.AttentionResult.pictures`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Box = tuple[float, float, float, float]  # left, top, right, bottom in the original picture's pixels


def _boxes(found: Iterable[Sequence[float]]) -> tuple[Box, ...]:
    return tuple((b[0], b[1], b[2], b[3]) for b in found)  # as saved (their JSON unchanged)


@dataclass(frozen=True)
class PatchGrid:
    """One grid of patches, row-major: ``rows × cols`` patches, each a token at ``positions[i]`` of the sequence
    covering ``boxes[i]`` of the original picture (LLaVA-NeXT's base grid and canvas, Idefics3's tiles and whole
    picture, Gemma 3's crops: one grid each)."""

    name: str
    rows: int
    cols: int
    positions: tuple[int, ...]
    boxes: tuple[Box, ...]

    @classmethod
    def of(cls, name: str, rows: int, cols: int, positions: Iterable[int], boxes: Iterable[Sequence[float]]) -> PatchGrid:
        """A grid as a layout finds it: its boxes rounded to a thousandth of a pixel (as a result saves them)."""
        return cls(name, int(rows), int(cols), tuple(int(p) for p in positions),
                   tuple((round(b[0], 3), round(b[1], 3), round(b[2], 3), round(b[3], 3)) for b in boxes))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rows": self.rows, "cols": self.cols, "positions": list(self.positions),
                "boxes": [list(box) for box in self.boxes]}

    @classmethod
    def from_dict(cls, found: Mapping[str, Any]) -> PatchGrid:
        return cls(str(found.get("name", "patches")), int(found["rows"]), int(found["cols"]),
                   tuple(int(p) for p in found["positions"]), _boxes(found["boxes"]))


@dataclass(frozen=True)
class Tiles:
    """What a family's ``place`` function (a layout whose picture is several grids: tiles, crops, a canvas) finds for
    one picture: its tokens' ``labels``, the ``specials`` before its patches, its ``grids`` (the finest last) and the
    processed pixels of a ``patch``; :mod:`attnviz.images.vlm` makes the :class:`Placement` of it."""

    labels: tuple[str, ...]
    specials: int
    grids: tuple[PatchGrid, ...]
    patch: int

    @classmethod
    def of(cls, labels: Iterable[str], specials: int, grids: Iterable[Mapping[str, Any]], patch: int) -> Tiles:
        """From grids written as ``{name, rows, cols, positions, boxes}``."""
        return cls(tuple(labels), int(specials), tuple(PatchGrid.of(g["name"], g["rows"], g["cols"], g["positions"],
                                                                    g["boxes"]) for g in grids), int(patch))


@dataclass(frozen=True)
class Placement:
    """One picture in a result (see the module). ``first``: its first token; ``specials``: the tokens before its
    patches (a CLS token, registers); ``patch``: the processed pixels a patch covers; ``image_positions``: every
    token of the picture; ``grids``: its grids, the finest last (what the overlay draws and the statistics read);
    ``names``: its tokens' labels as its layout names them (``r0c1``; not saved: the result's tokens carry them);
    ``path``: the file it was read from."""

    layout: str
    size: tuple[int, int]  # the original picture's width and height
    first: int
    specials: int
    patch: int
    image_positions: tuple[int, ...]
    grids: tuple[PatchGrid, ...]
    names: tuple[str, ...] = ()
    path: str | None = None
    grids_saved: bool = True  # its grids, tokens and labels saved too (an image encoder's single grid is not)
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys a plugin's layout saved beside these

    @property
    def main(self) -> PatchGrid:
        """The finest grid (the last)."""
        return self.grids[-1]

    @property
    def rows(self) -> int:
        return self.main.rows

    @property
    def cols(self) -> int:
        return self.main.cols

    @property
    def positions(self) -> tuple[int, ...]:
        """The finest grid's patch tokens, row-major."""
        return self.main.positions

    @property
    def boxes(self) -> tuple[Box, ...]:
        return self.main.boxes

    @property
    def seen(self) -> tuple[float, float, float, float]:
        """The part of the original picture the finest grid's patches cover, ``(x0, y0, x1, y1)`` in its pixels: the
        picture itself, less what a centre crop cut (or more, where the processor padded it)."""
        boxes = self.boxes
        return (float(min(b[0] for b in boxes)), float(min(b[1] for b in boxes)), float(max(b[2] for b in boxes)),
                float(max(b[3] for b in boxes)))

    @property
    def patch_positions(self) -> tuple[int, ...]:
        """Every token of the picture after its specials."""
        return self.image_positions[self.specials :]

    @property
    def file_name(self) -> str:
        from pathlib import Path

        return Path(self.path).name if self.path else ""

    def to_dict(self, *, with_grids: bool | None = None) -> dict[str, Any]:
        """The record as ``metadata["images"]`` saves it (the keys and their order as attnviz has always written
        them: a saved result reads back the same, byte for byte). ``with_grids``: write the grids (default: where
        the record came with them, as a vision-language model's do)."""
        grids = self.grids_saved if with_grids is None else with_grids
        found: dict[str, Any] = {} if self.path is None else {"path": self.path}
        found.update({"size": list(self.size), "layout": self.layout, "first": self.first, "specials": self.specials,
                      "rows": self.rows, "cols": self.cols, "patch": self.patch,
                      "image_positions": list(self.image_positions), "positions": list(self.positions),
                      "boxes": [list(box) for box in self.boxes]})
        if grids:
            found["grids"] = [grid.to_dict() for grid in self.grids]
        found.update(self.extra)
        return found

    @classmethod
    def from_dict(cls, found: Mapping[str, Any]) -> Placement:
        """A record from its saved form (also the older one without ``grids``: one grid, the patches)."""
        main = PatchGrid("patches", int(found["rows"]), int(found["cols"]),
                         tuple(int(p) for p in found["positions"]), _boxes(found["boxes"]))
        listed = found.get("grids")
        grids = tuple(PatchGrid.from_dict(g) for g in listed) if listed else (main,)
        known = {"path", "size", "layout", "first", "specials", "rows", "cols", "patch", "image_positions",
                 "positions", "boxes", "grids", "at", "names"}
        extra = {k: v for k, v in found.items() if k not in known}
        size = found["size"]
        path = found.get("path")
        return cls(str(found["layout"]), (int(size[0]), int(size[1])), int(found["first"]), int(found["specials"]),
                   int(found["patch"]), tuple(int(p) for p in found["image_positions"]), grids,
                   tuple(str(n) for n in found.get("names", ())), None if path is None else str(path), bool(listed),
                   extra)

    def with_path(self, path: str) -> Placement:
        from dataclasses import replace

        return replace(self, path=path)


def placements(metadata: Mapping[str, Any]) -> list[Placement]:
    """The pictures a result's metadata places (none for a text)."""
    return [Placement.from_dict(found) for found in metadata.get("images") or []]


def image_token_positions(pictures: Sequence[Placement]) -> list[int]:
    """Every image token of every picture, in order."""
    return [p for picture in pictures for p in picture.image_positions]
