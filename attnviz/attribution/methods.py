"""The attribution methods, one record each: what ``attnviz rollout --method`` and
:func:`attnviz.api.attribution_view` can show.

A :class:`Method` says everything the program needs of it: its ``name`` (the ``--method`` value),
a ``summary`` for ``--help`` and a ``description`` for the docs, the ``options`` it takes, by name (any
other option given is refused before a model loads, with a message naming the methods that take it),
whether it ``chains`` the layers (its ``layer`` is the last one chained) or shows one layer or
every layer, what it ``needs`` of a source, and the ``view`` that computes it: a function
``(source, text, request) -> HeatmapView``. :func:`register` adds one; the built-ins are below.

The options are records too (:class:`Option`, in :data:`OPTIONS`): a field of :class:`Request`, when
it counts as given, and what the check says to a method that does not take it. A method declares
the ones it takes; the check reads each method's declaration, not a list of its own.

Light to import (the CLI builds its help from it): each built-in view imports its module on use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..analysis.reading import Reading
from ..errors import UsageError
from ..records import Registry

if TYPE_CHECKING:  # pragma: no cover
    from ..analysis.weights import HeadFusion
    from ..render.view import HeadChoice, HeatmapView

@dataclass(frozen=True)
class Request:
    """What a method's view is asked for. ``layer``: for a method that chains, the last layer
    chained (None: the model's last); otherwise one layer, or None for a panel per layer."""

    layer: int | None = None
    head: HeadChoice | None = None  # a head, "all" or "mean" (None: the method's default)
    fusion: HeadFusion | None = None  # mean, max or min (None: mean)
    target_token: str | None = None
    vs: str | None = None
    force: bool = False
    truncate: bool = False
    cmap: str | None = None  # None: the view's default
    pair: str | None = None
    reading: Reading = field(default_factory=Reading)
    kind: str = "self"
    target: str | None = None
    notice: Callable[[str], object] | None = None

    def given(self, option: str) -> bool:
        """Whether ``option`` (a name of :data:`OPTIONS`) was asked for (not left at its default)."""
        return OPTIONS[option].is_given(self)


@dataclass(frozen=True)
class Method:
    """One attribution method (see the module)."""

    name: str
    summary: str  # a few words, for --help
    description: str  # one line with its citation, for the docs and the API
    view: Callable[[Any, str | None, Request], HeatmapView]
    options: frozenset[str] = frozenset()
    chains: bool = False
    needs: str = "attention weights"  # what it reads of a source, said in the docs


@dataclass(frozen=True)
class Option:
    """One option a method may take (see the module): ``name``, a field of :class:`Request`; ``refusal``,
    what the check says when it is given to a method that does not take it, from that method and the
    names of those that do (``"rollout and flow"``); ``given``, when it counts as asked for (None: the
    field is not at its default of None or False)."""

    name: str
    refusal: Callable[[Method, str], str]
    given: Callable[[Request], bool] | None = None

    def __post_init__(self) -> None:
        if self.given is None and self.name not in Request.__dataclass_fields__:
            raise ValueError(f"option {self.name!r} is not a field of Request; give it a given(request) function")

    def is_given(self, request: Request) -> bool:
        if self.given is not None:
            return self.given(request)
        value = getattr(request, self.name)
        return value is not None and value is not False  # `in (None, False)` would take head 0 for False (0 == False)


OPTIONS: Registry[Option] = Registry("method option")
"""The options a method may take, in the order an unused one is reported."""


def _gradient_refusal(method: Method, takers: str) -> str:
    return f"[[target_token]] and [[vs]] choose the output y that {takers} differentiate; {method.name} uses no gradient"


for _option in (
    Option("pair", lambda m, takers: f"{m.name} reads one text; [[pair]] goes with {takers}"),
    Option("fusion", lambda m, takers: f"[[fusion]] belongs to {takers}, which fuse a layer's heads; {m.name} does not"),
    Option("head", lambda m, takers: f"[[head]] applies to {takers}, which show heads; {m.name} " + (
        "fuses every head of a layer (choose how with [[fusion]])" if "fusion" in m.options
        else "sums or averages the heads")),
    Option("target_token", _gradient_refusal),
    Option("vs", _gradient_refusal, lambda r: r.target_token is not None or r.vs is not None),
    Option("force", lambda m, takers: f"[[force]] lets attention flow run past its cost limit; only {takers} has one"),
    Option("kind", lambda m, takers: f"{m.name} runs on a model's self-attention; [[kind]] and [[target]] go with "
           f"{takers}", lambda r: r.kind not in ("self", "encoder") or r.target is not None),
    Option("reading", lambda m, takers: f"{m.name} is per token: [[hide_special]], [[renormalize]] and [[words]] apply "
           f"to {takers} only", lambda r: not r.reading.plain),
):
    OPTIONS.register(_option)
OPTIONS.seal()


def _check(registered: Registry[Method], method: Method) -> None:
    unknown = set(method.options) - set(OPTIONS)
    if unknown:
        raise ValueError(f"{method.name}: unknown options {sorted(unknown)}; a method takes some of {', '.join(OPTIONS)}")


METHODS: Registry[Method] = Registry("method", _check)
"""Every method, by name, in the order ``--help`` lists them."""
register, unregister, registered = METHODS.register, METHODS.unregister, METHODS.registered


def method_named(name: str) -> Method:
    if name not in METHODS:
        raise UsageError(f"[[method={name!r}]] is unknown; use one of {', '.join(METHODS)}")
    return METHODS[name]


def _takers(option: str) -> str:
    names = [m.name for m in METHODS.values() if option in m.options]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1] if names else "no method"


def check_request(method: Method, request: Request) -> None:
    """Refuse, before any model runs, an option the method does not take (the user meant something):
    each option of :data:`OPTIONS` given that the method does not declare, in their order."""
    for option in OPTIONS.values():
        if option.name not in method.options and option.is_given(request):
            raise UsageError(option.refusal(method, _takers(option.name)))


# --- the built-in methods ---------------------------------------------------------------------------


def _rollout(source: Any, text: str | None, r: Request) -> HeatmapView:
    from .views import rollout_view

    return rollout_view(source, text, layer=r.layer, fusion=r.fusion or "mean", truncate=r.truncate,
                        cmap=r.cmap or "viridis", pair=r.pair, reading=r.reading, kind=r.kind, target=r.target)


def _flow(source: Any, text: str | None, r: Request) -> HeatmapView:
    from .views import flow_view

    return flow_view(source, text, layer=r.layer, fusion=r.fusion or "mean", truncate=r.truncate,
                     cmap=r.cmap or "viridis", pair=r.pair, reading=r.reading, kind=r.kind, target=r.target,
                     force=r.force, notice=r.notice)


def _norm(source: Any, text: str | None, r: Request) -> HeatmapView:
    from .views import norm_view

    return norm_view(source, text, layer=r.layer, head="mean" if r.head is None else r.head,
                     truncate=r.truncate, cmap=r.cmap or "viridis", pair=r.pair, reading=r.reading)


def _gradient(name: str) -> Callable[[Any, str | None, Request], HeatmapView]:
    def view(source: Any, text: str | None, r: Request) -> HeatmapView:
        from .grad import gradient_view

        layer = r.layer if name == "grad-rollout" or r.layer is not None else "all"
        return gradient_view(source, text, method=name, layer=layer, head="mean" if r.head is None else r.head,
                             target_token=r.target_token, vs=r.vs, truncate=r.truncate, cmap=r.cmap)

    return view


def _mixing(name: str) -> Callable[[Any, str | None, Request], HeatmapView]:
    def view(source: Any, text: str | None, r: Request) -> HeatmapView:
        from .mixing_view import mixing_view

        return mixing_view(source, text, method=name, layer="all" if r.layer is None else r.layer,
                           truncate=r.truncate, cmap=r.cmap or "viridis", pair=r.pair)

    return view


_THROUGH = frozenset({"pair", "fusion", "kind", "reading"})
_MIXING_NEEDS = "each layer's value vectors, residual and LayerNorm (native engine, config models)"
for _method in (
    Method("rollout", "default", "attention rollout: heads fused, the residual added, layers chained (Abnar & Zuidema "
           "2020)", _rollout, _THROUGH, chains=True),
    Method("flow", "attention flow, max-flow", "attention flow: max-flow through the rollout's graph of layers (Abnar & "
           "Zuidema 2020)", _flow, _THROUGH | {"force"}, chains=True),
    Method("norm", "‖α f(x)‖ per head", "norm-based attention ‖α f(x)‖ per head (Kobayashi et al. 2020)", _norm,
           frozenset({"pair", "head"}), needs="each head's value vectors (native engine, config models)"),
    Method("norm-layer", "heads summed through W_O", "‖Σ_h α f_h(x)‖: the heads summed through W_O (Kobayashi et al. "
           "2021)", _mixing("norm-layer"), needs=_MIXING_NEEDS),
    Method("norm-res", "+ the residual", "the heads summed, with the residual x_i on the diagonal (Kobayashi et al. "
           "2021)", _mixing("norm-res"), needs=_MIXING_NEEDS),
    Method("norm-resln", "+ residual and LayerNorm, post-LN models", "the heads summed, the residual, split through "
           "the LayerNorm; post-LN models (Kobayashi et al. 2021)", _mixing("norm-resln"), needs=_MIXING_NEEDS),
    Method("mixing", "context-mixing ratio per token", "context-mixing ratio per token and layer (Kobayashi et al. "
           "2021)", _mixing("mixing"), needs=_MIXING_NEEDS),
    Method("grad-rollout", "Chefer et al. 2021", "gradient-weighted rollout, R ← R + mean_h((∂y/∂A ⊙ A)⁺)·R (Chefer, "
           "Gur & Wolf 2021)", _gradient("grad-rollout"), frozenset({"target_token", "vs"}), chains=True,
           needs="gradients of an output y with respect to the attention weights"),
    Method("attn-grad", "attention × gradient, per head", "attention × gradient, A ⊙ ∂y/∂A, per head, signed",
           _gradient("attn-grad"), frozenset({"head", "target_token", "vs"}),
           needs="gradients of an output y with respect to the attention weights"),
):
    register(_method)
BUILT_IN = METHODS.seal()
