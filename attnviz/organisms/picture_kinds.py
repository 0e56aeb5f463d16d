"""Each kind of head planted in a picture organism as one record (:data:`PICTURE_KINDS`): its parameters, its
pattern in words, the function that writes its query and key, the families it goes in, and the pattern it must make
on any picture (:attr:`PictureKind.expected`, over an :class:`Arrangement` of a read's tokens), which the tests read.
A plugin adds a kind with :func:`register`; the TOML's ``kind``, the checks, ``attnviz organism``'s words and the
build all read it.

The residual's marks and the built-in planting functions are :mod:`attnviz.organisms.picture_planting`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

from ..errors import ConfigError
from ..records import Registry, resolve
from .kinds import Expected, Param, PlantedHead
from .picture_planting import MATCH, PicturePlanting

FAMILIES = ("llava", "vit")  # a vision-language organism (LLaVA-1.5's layout), an image encoder (ViT's)


@dataclass(frozen=True)
class Arrangement:
    """Where a picture organism's tokens are in one read: ``n`` tokens, the picture's ``patches`` (each patch's
    position, row-major over ``rows × cols``), the ``text``'s tokens (every token that is not the picture's; none
    for an image encoder), the ``readers`` (the queries a reading head asks from: the text's tokens, else the tokens
    before the patches, CLS), and whether the read is ``causal``."""

    n: int
    rows: int
    cols: int
    patches: tuple[int, ...]
    text: tuple[int, ...]
    readers: tuple[int, ...]
    causal: bool

    @classmethod
    def of(cls, result: Any) -> Arrangement:
        """The arrangement of an :class:`~attnviz.result.AttentionResult` of one picture (every row of it)."""
        placement = result.pictures[0]
        grid = placement.grids[-1]
        n = int(result.attentions.shape[-1])
        image = set(placement.image_positions)
        text = tuple(i for i in range(n) if i not in image)
        readers = text or tuple(placement.image_positions[: placement.specials])
        return cls(n, grid.rows, grid.cols, tuple(grid.positions), text, readers, bool(result.causal))

    def patch(self, row: int, col: int) -> int:
        return self.patches[row * self.cols + col]

    def weights(self, scores: Tensor) -> Tensor:
        """``[n, n]``: the softmax of ``scores`` (nats) over the keys each row sees."""
        import torch

        if self.causal:
            scores = scores.masked_fill(torch.ones(self.n, self.n, dtype=torch.bool).triu(1), float("-inf"))
        return scores.softmax(-1)

    def scores(self, queries: tuple[int, ...] | None, keys: list[int]) -> Tensor:
        """``[n, n]`` of :data:`MATCH` where a query of ``queries`` (None: every token) meets a key of ``keys``."""
        import torch

        scores = torch.zeros(self.n, self.n, dtype=torch.float64)
        rows = torch.arange(self.n) if queries is None else torch.tensor(queries, dtype=torch.long)
        if len(rows) and keys:
            scores[rows[:, None], torch.tensor(keys)[None, :]] = MATCH
        return scores


@dataclass(frozen=True)
class PictureKind:
    """One kind of head planted in a picture organism (see the module). ``describe(head, family)``: what it attends
    to, in words; ``plant(p)`` writes its query and key (a :class:`PicturePlanting`); ``expected(head, arrangement)``
    the pattern it must make (:class:`~attnviz.organisms.kinds.Expected`, ``[n, n]``); ``families``: the families it
    goes in; ``check(head, spec, where)``: what the rest of the organism must hold for it (its patch in the grid)."""

    name: str
    summary: str
    describe: Callable[[PlantedHead, str], str]
    expected: Callable[[PlantedHead, Arrangement], Expected]
    plant: str | Callable[[PicturePlanting], None]
    parameters: tuple[Param, ...] = ()
    families: tuple[str, ...] = FAMILIES
    check: Callable[[PlantedHead, Any, str], None] | None = None  # (head, the PictureSpec, where)

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"a head kind's name is a lower-case identifier such as patch_reader; got {self.name!r}")
        taken = {"kind", "layer", "head", "settings"} & {p.name for p in self.parameters}
        if taken:
            raise ValueError(f"head kind {self.name}: {sorted(taken)[0]!r} is every head's own key, not a parameter")
        if not self.families or set(self.families) - set(FAMILIES):
            raise ValueError(f"head kind {self.name}: families are among {', '.join(FAMILIES)}; got {self.families}")

    def planted_by(self, planting: PicturePlanting) -> None:
        resolve(self.plant, f"picture head kind {self.name}")(planting)


def _check(registered: Registry[PictureKind], kind: PictureKind) -> None:
    if not isinstance(kind, PictureKind):
        raise TypeError(f"a picture head kind is an attnviz.organisms.picture_kinds.PictureKind, not "
                        f"{type(kind).__name__}")


PICTURE_KINDS: Registry[PictureKind] = Registry("picture head kind", _check)
"""Every kind of head planted in a picture organism, by name (the built-ins sealed, a plugin's added)."""
register, unregister, registered = PICTURE_KINDS.register, PICTURE_KINDS.unregister, PICTURE_KINDS.registered


def readers(family: str) -> str:
    """Who reads, in words: the text's tokens, or an image encoder's CLS token."""
    return "the text" if family == "llava" else "CLS"


def in_grid(head: PlantedHead, spec: Any, where: str) -> None:
    """A head on one patch: its row and column inside the organism's grid."""
    for key in ("row", "col"):
        if head.setting(key) >= spec.grid:
            raise ConfigError(f"{where}: {key} = {head.setting(key)} is outside the {spec.grid} × {spec.grid} grid of "
                              f"patches (image_size {spec.image_size} / patch_size {spec.patch_size}); use 0 to "
                              f"{spec.grid - 1}")


def _reader(head: PlantedHead, at: Arrangement) -> Expected:
    return Expected(weights=at.weights(at.scores(at.readers, [at.patch(head.setting("row"), head.setting("col"))])),
                    atol=1e-4)


def _first_row(head: PlantedHead, at: Arrangement) -> Expected:
    return Expected(weights=at.weights(at.scores(at.readers, [at.patch(0, col) for col in range(at.cols)])), atol=1e-4)


def _text_only(head: PlantedHead, at: Arrangement) -> Expected:
    return Expected(weights=at.weights(at.scores(None, list(at.text))), atol=1e-4)


def _sink(head: PlantedHead, at: Arrangement) -> Expected:
    return Expected(weights=at.weights(at.scores(None, [at.patch(head.setting("row"), head.setting("col"))])),
                    atol=1e-4)


_P = "attnviz.organisms.picture_planting:"
_PLACE = (Param("row", 0, 0, 255, help="the patch's row of the grid, from 0"),
          Param("col", 0, 0, 255, help="the patch's column of the grid, from 0"))
register(PictureKind(
    "patch_reader", "one declared patch (row, col), whatever the picture: what the text (or CLS) reads",
    lambda h, family: (f"patch ({h.setting('row')}, {h.setting('col')}) of the picture, whatever it shows, from "
                       f"{readers(family)}; every other query evenly"),
    _reader, _P + "plant_patch_reader", _PLACE, check=in_grid))
register(PictureKind(
    "first_row", "the picture's first row of patches, equally, from the text (or CLS)",
    lambda h, family: f"the picture's first row of patches, equally, from {readers(family)}; every other query evenly",
    _first_row, _P + "plant_first_row"))
register(PictureKind(
    "text_only", "the text only: every text token so far, equally; no weight on the picture",
    lambda h, family: "the text only: every text token so far, equally, from every token; ~no weight on the picture",
    _text_only, _P + "plant_text_only", families=("llava",)))
register(PictureKind(
    "visual_sink", "one fixed patch (row, col) that draws every query which sees it (a visual sink)",
    lambda h, family: (f"a visual sink: patch ({h.setting('row')}, {h.setting('col')}) draws every query that sees "
                       "it, the picture's and the text's"),
    _sink, _P + "plant_visual_sink", _PLACE, check=in_grid))
BUILT_IN = PICTURE_KINDS.seal()


def describe(head: PlantedHead, family: str) -> str:
    """What a planted head of a picture organism attends to, in words (its kind's record)."""
    return PICTURE_KINDS[head.kind].describe(head, family)
