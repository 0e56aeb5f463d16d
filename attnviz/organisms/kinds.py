"""Each kind of planted head as one record (:data:`KINDS`): its parameters, its pattern in words, the function that
writes its weights, and the pattern it must make, which the tests read. A plugin adds a kind with :func:`register`
(see docs/development.md); the TOML's ``kind``, the checks, ``attnviz organism``'s words and the build all read it.

The residual's subspaces and the built-in planting functions are :mod:`attnviz.organisms.planting`'s; why each
built-in kind's construction works is documented in :mod:`attnviz.organisms.weights`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

from ..errors import ConfigError
from ..records import Registry, resolve
from .planting import LOCAL, Planting, T


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
    settings: tuple[tuple[str, Any], ...] = ()  # a plugin kind's own parameters, by name

    def setting(self, name: str) -> Any:
        """A parameter of the head's kind: a built-in field, or one of a plugin kind's ``settings``."""
        found = dict(self.settings)
        return found[name] if name in found else getattr(self, name)


BUILT_IN_FIELDS = ("offset", "match", "ties", "window", "token")
"""The parameters of the built-in kinds, each a field of :class:`PlantedHead` (a plugin kind's are its settings)."""


@dataclass(frozen=True)
class Param:
    """One key of a ``[[head]]`` table: a whole number from ``low`` to ``high``, one of ``choices``, or (a ``str``
    default without choices) a printable word; ``required``: no default is taken."""

    name: str
    default: Any
    low: int = 0
    high: int = 0
    choices: tuple[str, ...] = ()
    required: bool = False
    help: str = ""

    def read(self, table: dict[str, Any], where: str) -> Any:
        """The value ``table`` gives (or the default), checked; a wrong one is one line naming the key."""
        value = table.get(self.name, self.default)
        if self.required and self.name not in table:
            raise ConfigError(f"{where}: give its {self.name} ({self.help or 'required'})")
        if isinstance(self.default, int) and not isinstance(self.default, bool):
            if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
                raise ConfigError(f"{where}: {self.name} must be a whole number from {self.low:,} to {self.high:,}; "
                                  f"got {value!r}")
            return value
        if self.choices:
            if value not in self.choices:
                raise ConfigError(f"{where}: {self.name} is {' or '.join(self.choices)}; got {value!r}")
            return value
        if not isinstance(value, str) or not value.strip() or not value.isprintable():
            raise ConfigError(f"{where}: {self.name} is {self.help or 'a word of printable characters'}; got {value!r}")
        return value


@dataclass(frozen=True)
class Expected:
    """The pattern a planted head must make on a text: ``weights`` ``[n, n]`` (rows of NaN: not constrained) to
    ``atol``, and ``strongest`` ``[n]``, each row's strongest key (-1: not constrained)."""

    weights: Tensor | None = None
    strongest: Tensor | None = None
    atol: float = 1e-3


@dataclass(frozen=True)
class HeadKind:
    """One kind of planted head (see the module). ``describe(head)``: what it attends to, in words. ``plant(p)``
    writes its weights (a :class:`Planting`; None: it writes nothing, attention uniform). ``expected(head, ids,
    token_ids)`` the pattern it must make on token ids ``ids``. ``subspaces(head)``: the residual subspaces it needs
    beyond the token's and the position's (``PREV2``, ``PQ2``); ``writes(head)``: dimensions of a unit code it adds
    to the residual for later layers (their LayerNorm scale grows); ``check(head, spec, where)``: what the rest of
    the organism must hold for it (an induction head's previous-token head)."""

    name: str
    summary: str
    describe: Callable[[PlantedHead], str]
    expected: Callable[[PlantedHead, list[int], dict[str, int]], Expected]
    plant: str | Callable[[Planting], None] | None = None
    parameters: tuple[Param, ...] = ()
    subspaces: Callable[[PlantedHead], tuple[str, ...]] = lambda head: ()
    writes: Callable[[PlantedHead], int] = lambda head: 0
    check: Callable[[PlantedHead, Any, str], None] | None = None  # (head, the OrganismSpec, where)

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"a head kind's name is a lower-case identifier such as previous_token; got {self.name!r}")
        taken = {"kind", "layer", "head", "settings"} & {p.name for p in self.parameters}
        if taken:
            raise ValueError(f"head kind {self.name}: {sorted(taken)[0]!r} is every head's own key, not a parameter")

    def planted_by(self, planting: Planting) -> None:
        if self.plant is not None:
            resolve(self.plant, f"head kind {self.name}")(planting)


def _check(registered: Registry[HeadKind], kind: HeadKind) -> None:
    if not isinstance(kind, HeadKind):
        raise TypeError(f"a head kind is an attnviz.organisms.kinds.HeadKind, not {type(kind).__name__}")


KINDS: Registry[HeadKind] = Registry("head kind", _check)
"""Every kind of planted head, by name (the built-ins sealed, a plugin's added)."""
register, unregister, registered = KINDS.register, KINDS.unregister, KINDS.registered


# -- the patterns, for the tests and for anyone checking an organism ------------------------------------------------

def one_hot_rows(targets: Tensor, n: int) -> Tensor:
    """``[n, n]``: row p all its weight on ``targets[p]``."""
    import torch

    weights = torch.zeros(n, n, dtype=torch.float64)
    weights[torch.arange(n), targets] = 1.0
    return weights


def uniform_rows(n: int) -> Tensor:
    """``[n, n]``: every key so far equally (causal)."""
    import torch

    return torch.tril(torch.ones(n, n, dtype=torch.float64)) / torch.arange(1, n + 1, dtype=torch.float64)[:, None]


def _previous(head: PlantedHead, ids: list[int], token_ids: dict[str, int]) -> Expected:
    import torch

    n = len(ids)
    return Expected(weights=one_hot_rows((torch.arange(n) - head.offset).clamp(min=0), n))


def _first(head: PlantedHead, ids: list[int], token_ids: dict[str, int]) -> Expected:
    import torch

    return Expected(weights=one_hot_rows(torch.zeros(len(ids), dtype=torch.long), len(ids)))


def _local(head: PlantedHead, ids: list[int], token_ids: dict[str, int]) -> Expected:
    import torch

    n = len(ids)
    back = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).double()
    weights = torch.where(back >= 0, torch.exp(-LOCAL * back / head.window), torch.zeros((), dtype=torch.float64))
    return Expected(weights=weights / weights.sum(-1, keepdim=True), atol=1e-4)


def _token(head: PlantedHead, ids: list[int], token_ids: dict[str, int]) -> Expected:
    import torch

    n, word = len(ids), token_ids.get(head.token, -1)
    weights = torch.zeros(n, n, dtype=torch.float64)
    for p in range(n):
        stops = [k for k in range(p + 1) if ids[k] == word]
        weights[p, stops or [0]] = 1.0 / max(1, len(stops))
    return Expected(weights=weights)


def _induction(head: PlantedHead, ids: list[int], token_ids: dict[str, int]) -> Expected:
    """The key after the latest (earliest) earlier occurrence of the last ``match`` tokens; rows with none: free."""
    import torch

    n = len(ids)
    strongest = torch.full((n,), -1, dtype=torch.long)
    for p in range(head.match, n):
        after = [j + 1 for j in range(head.match - 1, p - 1)
                 if all(ids[j - m] == ids[p - m] for m in range(head.match))]
        if after:
            strongest[p] = max(after) if head.ties == "latest" else min(after)
    return Expected(strongest=strongest)


def _uniform(head: PlantedHead, ids: list[int], token_ids: dict[str, int]) -> Expected:
    return Expected(weights=uniform_rows(len(ids)), atol=1e-5)


def _induction_needs(head: PlantedHead, spec: Any, where: str) -> None:
    """An induction head reads what a previous-token head wrote in an earlier layer; it writes the copied token,
    so it sits in the last layer (a later layer would read a residual whose scale it changed)."""
    writers = {h.offset: h for h in spec.planted if h.kind == "previous_token"}
    for offset in range(1, head.match + 1):
        before = writers.get(offset)
        if before is None or before.layer >= head.layer:
            raise ConfigError(f"{where}: the induction head at layer {head.layer} head {head.head} (match = "
                              f"{head.match}) reads the token {offset} back, which a previous_token head with offset "
                              f"= {offset} in an earlier layer writes; plant one")
    if head.layer != spec.layers - 1:
        raise ConfigError(f"{where}: the induction head at layer {head.layer} writes the token it copies; put it in "
                          f"the last layer ({spec.layers - 1})")


def _previous_needs(head: PlantedHead, spec: Any, where: str) -> None:
    same = [h for h in spec.planted if h.kind == "previous_token" and h.offset == head.offset]
    if len(same) > 1:
        raise ConfigError(f"{where}: one previous_token head per offset writes the token it reads; plant one of each")


_W = "attnviz.organisms.planting:"
register(HeadKind(
    "previous_token", "the token 1 (or 2) back; writes it into the residual for an induction head",
    lambda h: ("the token before" if h.offset == 1 else "the token two back") + "; writes it down for later layers",
    _previous, _W + "plant_previous_token",
    (Param("offset", 1, 1, 2, help="1, the previous token, or 2, the one before it"),),
    subspaces=lambda h: ("PREV2", "PQ2") if h.offset == 2 else (),
    writes=lambda h: T, check=_previous_needs))
register(HeadKind(
    "induction", "the token after an earlier occurrence of the current one (or two): the model copies it",
    lambda h: (f"the token after the {h.ties} earlier occurrence of "
               f"{'the current token' if h.match == 1 else 'the last two tokens'}; writes it out ten times over "
               "(the model copies it)"),
    _induction, _W + "plant_induction",
    (Param("match", 1, 1, 2, help="tokens matched: 1, the current one, or 2, it and the one before"),
     Param("ties", "latest", choices=("latest", "earliest"))),
    subspaces=lambda h: ("PREV2", "PQ2") if h.match == 2 else (), check=_induction_needs))
register(HeadKind("first_token", "the first token (an attention sink)", lambda h: "the first token (an attention sink)",
                  _first, _W + "plant_first_token"))
register(HeadKind(
    "local", "the last `window` tokens, the nearest most",
    lambda h: f"the last {h.window} tokens, the nearest most (weights fall by e^(-16/{h.window}) a token back)",
    _local, _W + "plant_local", (Param("window", 16, 2, 1024),)))
register(HeadKind(
    "token", "every earlier occurrence of one word, equally (the first token where there is none)",
    lambda h: f"every earlier {h.token!r}, equally (the first token where there is none)",
    _token, _W + "plant_token",
    (Param("token", "", required=True, help='the word it attends to: token = "."'),)))
register(HeadKind("uniform", "every token so far, equally; writes nothing",
                  lambda h: "every token so far, equally; writes nothing", _uniform))
register(HeadKind("zero", "every token so far, equally; writes nothing (as a head not planted)",
                  lambda h: "every token so far, equally; writes nothing", _uniform))
BUILT_IN = KINDS.seal()
