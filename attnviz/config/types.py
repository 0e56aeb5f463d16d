"""What a config model describes beyond a transformer (matrices given by hand, and what a tutorial
printed for them), and the typed readers of TOML tables that :mod:`attnviz.config` and
:mod:`attnviz.config.matrices` share. A leaf: both import it; it imports neither."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

Matrix = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class SoftmaxClaim:
    """One row's softmax as a tutorial worked it out (``[reference.softmax]``): its scores, e^s of
    each, their sum and the weights it divided out. Only compared, never computed with."""

    head: int = 0  # counted from 0
    row: int = 0  # the query row, counted from 0 (row 0 is x1)
    scores: tuple[float, ...] | None = None
    exp: tuple[float, ...] | None = None
    sum: float | None = None
    weights: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Reference:
    """Numbers a tutorial printed for the same computation, to show a learner where it differs.

    They are never used to compute anything; ``attnviz explain`` compares them with its own.
    """

    source: str
    q: Matrix | None = None
    k: Matrix | None = None
    v: Matrix | None = None
    scale: float | None = None
    weights: tuple[Matrix, ...] = ()  # per head, from head 0; may cover fewer heads than the model
    output: Matrix | None = None
    x_shape: tuple[int, int] | None = None  # (rows, cols) the tutorial states for X
    scores: tuple[Matrix, ...] = ()  # the scaled scores per head, from head 0
    softmax: SoftmaxClaim | None = None  # one row's softmax, step by step
    mask_true_means: str | None = None  # "masked" or "attend": what True means in the tutorial's mask
    q_from: str | None = None  # "x" or "context": where the tutorial says cross-attention's Q comes from


@dataclass(frozen=True)
class MatrixConfig:
    """One attention layer with X and the weights given explicitly (row-vector convention)."""

    name: str
    x: Matrix
    w_q: Matrix
    w_k: Matrix
    w_v: Matrix
    n_heads: int
    tokens: tuple[str, ...]
    w_o: Matrix | None = None
    b_q: tuple[float, ...] | None = None
    b_k: tuple[float, ...] | None = None
    b_v: tuple[float, ...] | None = None
    b_o: tuple[float, ...] | None = None
    causal: bool = False
    reference: Reference | None = None
    context: Matrix | None = None  # cross-attention: the encoder's states; K and V come from it
    context_tokens: tuple[str, ...] | None = None  # labels of the context's rows (with a context)
    padding: tuple[bool, ...] | None = None  # per key position (context's rows, else x's): True = padding

    @property
    def d_qk(self) -> int:
        return len(self.w_q[0])

    @property
    def d_v(self) -> int:
        return len(self.w_v[0])

    @property
    def key_tokens(self) -> tuple[str, ...]:
        """The labels of the key positions: the context's rows in cross-attention, else x's."""
        return self.tokens if self.context_tokens is None else self.context_tokens


def check_keys(table: dict[str, Any], allowed: set[str], source: str, where: str) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(sorted(allowed))}"
            raise ConfigError(f"{source}: unknown key {key!r} in {where}; {hint}")


def typed(table: dict[str, Any], key: str, kind: type, source: str, where: str) -> Any:
    value = table[key]
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise ConfigError(f"{source}: {where} {key} = {value!r} must be {kind.__name__}")
    return value


def divisors(n: int, shown: int = 12) -> str:
    """Some divisors of ``n`` (the smallest ``shown``), found up to √n; never slow, whatever ``n`` is."""
    found: set[int] = set()
    d = 1
    while d * d <= n and d <= 1 << 16:
        if n % d == 0:
            found.update((d, n // d))
        d += 1
    ordered = sorted(found)
    return ", ".join(map(str, ordered[:shown])) + (", …" if len(ordered) > shown else "")
