"""How a planted head's weights are written: the residual's code sizes and score scales, the :class:`Planting`
a kind's function writes into, and the built-in kinds' functions (:mod:`attnviz.organisms.weights` says why each
works; :mod:`attnviz.organisms.kinds` names them on their records)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

from ..errors import ConfigError

T = 192  # dims of a token code
C = 192  # dims of a position code
MATCH = 60.0  # nats: a planted head's score on what it looks for
TIE = 12.0  # nats: an induction head's position preference among equal matches
LOCAL = 16.0  # nats: a local head's score rise over its window (e^-16 ≈ 1e-7 of a row beyond it)
COPY = 10.0  # an induction head writes the attended token's code this many times over

@dataclass
class Planting:
    """What a kind's planting function writes into: the layer's ``c_attn`` (``[d, 3d]``: query, key and value
    columns), its bias and ``c_proj``, with this head's columns, the layer's LayerNorm scale ``s``, ``√d_head``, the
    residual's layout, the token and position codes, and the vocabulary's ids."""

    head: Any  # the PlantedHead being planted (attnviz.organisms.kinds)
    layout: Any  # weights.Layout
    c_attn: Tensor
    bias: Tensor
    c_proj: Tensor
    tokens: Tensor  # [vocabulary, T] token codes
    codes: Tensor  # [positions, C] position codes
    token_ids: dict[str, int]
    s: float
    root: float

    @property
    def q0(self) -> int:
        return self.head.head * self.layout.d_head

    @property
    def k0(self) -> int:
        return self.layout.d_model + self.head.head * self.layout.d_head

    @property
    def v0(self) -> int:
        return 2 * self.layout.d_model + self.head.head * self.layout.d_head

    def read(self, column: int, subspace: str, size: int, scale: float) -> None:
        """``c_attn[:, column + j] = scale · x̂[subspace + j]``: a query, key or value reads a subspace."""
        import torch

        start = self.layout.slot[subspace]
        self.c_attn[torch.arange(start, start + size), torch.arange(column, column + size)] = scale

    def write(self, subspace: str, size: int, scale: float) -> None:
        """The head's value dimensions ``0..size`` are written into ``subspace`` (times ``scale``)."""
        import torch

        start, own = self.layout.slot[subspace], self.head.head * self.layout.d_head
        self.c_proj[torch.arange(own, own + size), torch.arange(start, start + size)] = scale


# Each built-in kind's weights (its record in :mod:`.kinds` names these; the module's docstring says why each works).

def plant_previous_token(p: Planting) -> None:
    h, slot_scale = p.head, MATCH * p.s * p.s * p.root / C
    p.read(p.q0, f"PQ{h.offset}", C, slot_scale)
    p.read(p.k0, "PK", C, 1.0)
    p.read(p.v0, "TOK", T, 1.0)
    p.write(f"PREV{h.offset}", T, p.s)


def plant_induction(p: Planting) -> None:
    h, scale = p.head, MATCH * p.s * p.s * p.root / T
    p.read(p.q0, "TOK", T, scale)
    p.read(p.k0, "PREV1", T, 1.0)
    if h.match == 2:
        p.read(p.q0 + T, "PREV1", T, scale)
        p.read(p.k0 + T, "PREV2", T, 1.0)
    tie = 2 * T  # one more query/key dimension: a constant against the key's position u
    p.bias[p.q0 + tie] = (TIE if h.ties == "latest" else -TIE) * p.s * p.root
    p.c_attn[p.layout.slot["POS"], p.k0 + tie] = 1.0
    p.read(p.v0, "TOK", T, 1.0)
    p.write("TOK", T, COPY * p.s)


def plant_first_token(p: Planting) -> None:
    p.bias[p.q0 : p.q0 + C] = p.codes[0] * (MATCH * p.s * p.root / C)
    p.read(p.k0, "PK", C, 1.0)


def plant_local(p: Planting) -> None:
    p.bias[p.q0] = LOCAL * (p.codes.shape[0] - 1) / p.head.window * p.s * p.root
    p.c_attn[p.layout.slot["POS"], p.k0] = 1.0


def plant_token(p: Planting) -> None:
    h = p.head
    if h.token not in p.token_ids:
        raise ConfigError(f"the token head at layer {h.layer} head {h.head} names {h.token!r}, which is not one "
                          "token of the organism's vocabulary (the embedded MiniLM's WordPiece, lower case)")
    # The word's code, and the first token's ([CLS]) at half strength: every occurrence of the word scores the
    # same (one token, one code), so they share the row equally.
    wanted = p.tokens[p.token_ids[h.token]] + 0.5 * p.tokens[p.token_ids["[CLS]"]]
    p.bias[p.q0 : p.q0 + T] = wanted * (MATCH * p.s * p.root / T)
    p.read(p.k0, "TOK", T, 1.0)
