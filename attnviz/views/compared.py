"""What ``attnviz compare-heads`` shows besides one text's heads, as data: two runs compared head by
head (a second text, or a second model on the same text), and the page of one text with the
head distances in a tab of their own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis.reading import Reading
from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..analysis.compare import HeadsOverview
    from ..render.page import Page


@dataclass
class RunComparison:
    """Two runs of the encoder's self-attention, head by head: each run's overview, how much each head
    changes (``change`` ``[layers, heads]``, measured as ``measure`` says), and what the second run was."""

    overview: HeadsOverview
    other: HeadsOverview
    change: torch.Tensor
    measure: str
    other_name: str

    def comparison(self, top: int = 5) -> Any:
        """The table and pictures of :func:`attnviz.analysis.compare.comparison` for these runs."""
        from ..analysis.compare import comparison

        return comparison(self.overview, top=top, other=self.other, change=(self.change, self.measure),
                          other_name=self.other_name)


def compare_runs_of_text(source: Any, text: str | None, *, vs: str | None = None, other: Any = None,
                         layer: int | None = None, truncate: bool = False, pair: str | None = None,
                         reading: Reading = Reading(), other_name: str | None = None) -> RunComparison:
    """``text`` run through ``source`` against ``vs`` (a second text, same model) or through ``other``
    (a second loaded source, same text): every head of ``layer`` (None: every layer). Equal token
    counts are compared pattern against pattern; otherwise by the heads' statistics (see
    :func:`attnviz.analysis.compare.compare_runs`). Different tokens of one count are compared
    position by position, with a warning. ``other_name`` names the second model in the report
    (default: its source's name)."""
    from ..analysis.compare import compare_runs, overview_of_result
    from ..layer_range import check_layer

    if (vs is None) == (other is None):
        raise UsageError("compare a second text ([[vs]]) or a second model ([[vs_model]]), one of the two")
    result = reading.apply(source.extract(text, truncate=truncate, pair=pair))
    second = reading.apply(source.extract(vs, truncate=truncate, pair=pair) if vs is not None else
                           other.extract(text, truncate=truncate, pair=pair))
    if layer is not None:
        check_layer(layer, owner=result.model_name, count=result.n_layers)
    change, measure = compare_runs(result, second)
    if second.tokens != result.tokens and second.attentions.shape == result.attentions.shape:
        import warnings

        from ..errors import AttnvizWarning

        warnings.warn("the two runs have the same number of tokens but different tokens; heads are compared "
                      "position by position", AttnvizWarning, stacklevel=2)
    layers = list(range(result.n_layers)) if layer is None else [layer]
    return RunComparison(overview_of_result(result, layers), overview_of_result(second, layers), change, measure,
                         repr(vs) if vs is not None else other_name or other.name)


def compare_heads_page(source: Any, text: str | None, overview: HeadsOverview, *, top: int = 5,
                       layer: int | None = None, kind: str = "self", pair: str | None = None,
                       target: str | None = None, truncate: bool = False, reading: Reading = Reading()) -> Page:
    """The interactive page of ``text`` (:func:`attnviz.views.pages.page_view`), opened on the head
    distances of ``overview`` (:func:`attnviz.api.compare_heads_of_text`) in a tab of their own."""
    from ..analysis.compare import comparison
    from .pages import page_view

    compared = comparison(overview, top=top)
    page = page_view(source, text, layer=layer, kind=kind, pair=pair, target=target,
                     truncate=truncate, reading=reading, view="extras")
    page.add_matrix("distances", compared.matrix, compared.rows, compared.cols, title=compared.matrix_title,
                    value_name="Jensen–Shannon distance", notes=compared.notes + overview.notes)
    return page
