"""How a picture organism's planted head is written: the residual's marks (:class:`Residual`: where the text's, the
picture's, the CLS token's and each patch's mark lie, and what one weighs after the layer's norm), the
:class:`PicturePlanting` a kind's function writes a head's query and key into, and the built-in kinds' functions
(:mod:`attnviz.organisms.picture_kinds` names them on their records; :mod:`attnviz.organisms.picture_weights` says
why the marks are what they are).

Every planted head uses one query dimension and one key dimension (the head's first). The query reads the marks of
the tokens that ask (:attr:`Residual.readers`: the text's tokens, or CLS) or of every token; the key sums the marks
it looks for (one patch's, a row's, the text's). A mark is ``u`` after the norm wherever it is set and 0 elsewhere,
so a query that asks scores ``MATCH`` on every key that carries a mark it looks for and 0 on every other key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

MATCH = 60.0  # nats: a planted head's score on what it looks for (every other key: 0)


@dataclass(frozen=True)
class Residual:
    """Where a picture organism's marks lie in its residual (see the module): ``marks`` by name (``text`` and
    ``image`` in a vision-language organism, ``cls`` in an image encoder), the first ``patch`` mark (patch ``i``'s
    is ``patch + i``, row-major over a ``grid × grid`` picture), what the tokens that read carry (``readers``), what
    every token carries (``every``; None: a query bias stands for it), the width, the head size, and ``u``, a mark's
    value after the layer's norm."""

    family: str
    marks: dict[str, int]
    patch: int
    grid: int
    readers: tuple[str, ...]
    every: tuple[str, ...] | None
    d_model: int
    d_head: int
    u: float

    def patch_mark(self, row: int, col: int) -> int:
        return self.patch + row * self.grid + col


@dataclass
class PicturePlanting:
    """What a kind's planting function writes into: the layer's query and key weights (``[out, in]``, as
    ``torch.nn.Linear`` holds them) and, where the family has one, the query's bias; this head's place; the
    residual's marks."""

    head: Any  # the PlantedHead being planted (attnviz.organisms.kinds)
    residual: Residual
    query_weight: Tensor
    key_weight: Tensor
    query_bias: Tensor | None

    @property
    def row(self) -> int:
        """The head's first query and key dimension, the one a planted head uses."""
        return self.head.head * self.residual.d_head

    def query(self, who: str) -> None:
        """The head's query: ``"readers"`` (the tokens that read: the text's, or CLS) or ``"every"`` token; scaled
        so that a key carrying one mark it looks for scores :data:`MATCH`."""
        r = self.residual
        marks = r.readers if who == "readers" else r.every
        if marks is None:  # every token: a constant, the query's bias
            if self.query_bias is None:  # pragma: no cover - a family without a bias has an `every` mark
                raise ValueError(f"{r.family}: no query bias and no mark every token carries")
            self.query_bias[self.row] = MATCH * math.sqrt(r.d_head) / r.u
            return
        for mark in marks:
            self.query_weight[self.row, r.marks[mark]] = MATCH * math.sqrt(r.d_head) / (r.u * r.u)

    def key(self, marks: list[int]) -> None:
        """The head's key: the sum of the residual's dimensions ``marks`` (each a mark: ``u`` where set)."""
        for mark in marks:
            self.key_weight[self.row, mark] = 1.0


# Each built-in kind's weights (its record in :mod:`.picture_kinds` names these).

def plant_patch_reader(p: PicturePlanting) -> None:
    p.query("readers")
    p.key([p.residual.patch_mark(p.head.setting("row"), p.head.setting("col"))])


def plant_first_row(p: PicturePlanting) -> None:
    p.query("readers")
    p.key([p.residual.patch_mark(0, col) for col in range(p.residual.grid)])


def plant_text_only(p: PicturePlanting) -> None:
    p.query("every")
    p.key([p.residual.marks["text"]])


def plant_visual_sink(p: PicturePlanting) -> None:
    p.query("every")
    p.key([p.residual.patch_mark(p.head.setting("row"), p.head.setting("col"))])
