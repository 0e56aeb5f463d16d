"""What ``attnviz rollout --method …`` shows: attribution beyond raw attention, as views.

Raw attention weights are known to mislead about what a model uses (Jain & Wallace 2019; Abnar &
Zuidema 2020; Kobayashi et al. 2020). Each method here is a pure function of :mod:`attnviz.analysis.metrics`
(or :mod:`attnviz.attribution.flow`, :mod:`attnviz.attribution.relevance`, :mod:`attnviz.attribution.mixing`) fed by a source, and
comes back as a :class:`~attnviz.render.view.HeatmapView`, so every output (terminal, PNG, HTML,
npz/JSON) draws it:

- ``rollout`` and ``flow`` (Abnar & Zuidema 2020): how much of each input token reaches each
  position through layer l, chained (rollout) or as a max-flow (flow);
- ``grad-rollout`` (Chefer, Gur & Wolf 2021) and ``attn-grad`` (A ⊙ ∂y/∂A): attention weighted by
  the gradient of an output y the user chooses;
- ``norm`` (Kobayashi et al. 2020), ``norm-layer``, ``norm-res``, ``norm-resln`` and ``mixing``
  (Kobayashi et al. 2021): the size of what each token passes on, with the heads summed through W_O,
  the residual, and the LayerNorm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..analysis.reading import Reading
from .methods import METHODS, Request, check_request, method_named
from .views import flow_of_text, flow_view, norm_view, rollout_of_text, rollout_view

__all__ = ["METHODS", "attribution_view", "check_method_options", "flow_of_text", "flow_view", "norm_view",
           "rollout_of_text", "rollout_view"]

if TYPE_CHECKING:  # pragma: no cover
    from ..analysis.weights import HeadFusion
    from ..render.view import HeadChoice, HeatmapView
    from ..sources.base import Source


def check_method_options(method: str, *, fusion: HeadFusion | None = None, head: HeadChoice | None = None,
                         target_token: str | None = None, vs: str | None = None, force: bool = False,
                         kind: str = "self", target: str | None = None, reading: Reading = Reading(),
                         pair: str | None = None) -> None:
    """Refuse, before any model runs, an option the method does not use (the user meant something):
    :func:`attnviz.attribution.methods.check_request` for these options."""
    check_request(method_named(method), Request(head=head, fusion=fusion, target_token=target_token, vs=vs,
                                                force=force, pair=pair, reading=reading, kind=kind, target=target))


def attribution_view(source: Source, text: str | None, *, method: str = "rollout", layer: int | None = None,
                     head: HeadChoice | None = None, fusion: HeadFusion | None = None, target_token: str | None = None,
                     vs: str | None = None, force: bool = False, truncate: bool = False, cmap: str | None = None,
                     pair: str | None = None, reading: Reading = Reading(), kind: str = "self",
                     target: str | None = None, notice: Callable[[str], object] | None = None) -> HeatmapView:
    """What ``attnviz rollout --method METHOD`` draws (see :data:`attnviz.attribution.methods.METHODS`).

    ``layer``: for rollout, flow and grad-rollout the last layer chained (default: the model's last);
    for the others one layer, or None (default) for a panel per layer. ``head`` (norm,
    attn-grad): a head number, ``"all"`` or ``"mean"`` (default). ``fusion`` (rollout, flow): mean
    (default), max or min. ``target_token`` and ``vs`` choose the output y the gradient methods
    differentiate (see :func:`attnviz.sources.gradients.attention_gradients`). ``force`` lets
    attention flow run past :func:`attnviz.attribution.flow.check_flow_cost`'s limit. ``notice`` receives a
    line before a long computation (the flow's cost)."""
    chosen = method_named(method)
    request = Request(layer=layer, head=head, fusion=fusion,
                      target_token=target_token, vs=vs, force=force, truncate=truncate, cmap=cmap, pair=pair,
                      reading=reading, kind=kind, target=target, notice=notice)
    check_request(chosen, request)
    return chosen.view(source, text, request)
