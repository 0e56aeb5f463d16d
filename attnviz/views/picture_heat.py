"""What a picture command shows, as data (issue 59): one query's weights on each picture's patches, a panel per layer ×
head (or per new token, or per rollout step), on one colour scale across the figure unless asked, with a title that
names the model, the query, the layer and head, and a note where the processor cropped or padded the picture. The
renderers draw it: heat over the picture (:mod:`attnviz.render.picture_figure`: PNG, SVG, PDF) and each panel's
patch grid as a labelled heatmap in the terminal (shades without colour)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..render.colors import ColorScale
from ..render.view import HeatmapView, matrix_view
from ..result.placement import Placement


@dataclass(frozen=True)
class PicturePanel:
    """One panel: ``weights`` ``[rows, cols]`` over picture ``picture``'s finest grid, titled in full."""

    title: str
    weights: np.ndarray
    picture: int


@dataclass(frozen=True)
class PictureHeat:
    """Panels of heat over pictures (see the module). ``scale`` spans every panel unless ``per_panel`` (then each
    panel is drawn against its own largest weight, and the title says so); ``smooth``: the heat interpolated at the
    picture's resolution (else a block per patch); ``columns``: panels per row."""

    title: str
    panels: list[PicturePanel]
    pictures: list[Placement]
    scale: ColorScale
    columns: int
    per_panel: bool = False
    smooth: bool = True
    notes: list[str] = field(default_factory=list)
    value_name: str = "attention weight"
    uniform: float | None = None  # the weight of attention spread evenly over the query's keys (marked on the bar)

    def panel_scale(self, panel: PicturePanel) -> ColorScale:
        """The scale a panel is drawn on: the figure's, or (``per_panel``) its own."""
        if not self.per_panel:
            return self.scale
        return ColorScale.for_values(panel.weights, cmap=self.scale.cmap)

    def terminal_views(self) -> list[HeatmapView]:
        """Each panel's patch grid as a heatmap (rows ``r0…``, columns ``c0…``) on the figure's scale: the terminal
        draws its shades (and colours), its scale line and its labels."""
        views = []
        for panel in self.panels:
            rows, cols = panel.weights.shape
            scale = self.panel_scale(panel)
            views.append(matrix_view(panel.weights[None], [f"r{r}" for r in range(rows)],
                                     [f"c{c}" for c in range(cols)], title=panel.title, panel_titles=[panel.title],
                                     vmax=scale.vmax, cmap=scale.cmap, row_axis="patch rows (top to bottom)",
                                     col_axis="patch columns (left to right)", value_name=self.value_name))
        return views


def view_notes(pictures: list[Placement]) -> list[str]:
    """What a reader must know of each picture's region: the bands a crop cut, the padding the model also saw."""
    notes = []
    for number, picture in enumerate(pictures, start=1):
        which = "" if len(pictures) == 1 else f"picture {number}: "
        width, height = picture.size
        x0, y0, x1, y1 = picture.seen
        slack = 0.5  # a pixel's rounding
        if x0 > slack or y0 > slack or x1 < width - slack or y1 < height - slack:
            notes.append(f"{which}the processor cropped the picture: the hatched bands outside the dashed frame were "
                         "never seen by the model")
        if x0 < -slack or y0 < -slack or x1 > width + slack or y1 > height + slack:
            notes.append(f"{which}the processor padded the picture: the model also saw padding beyond its edges, "
                         "whose heat is not drawn")
    return notes


Query = int | tuple[int, ...] | None  # a token's row, the mean of several, or None: the patches' own mean
PanelSpec = tuple[str, int | None, int | None, Query, int]  # title, layer, head, query, picture


def picture_heat(result: Any, panels: list[PanelSpec], *, who: str,
                 what: str, per_panel: bool = False, smooth: bool = True, cmap: str = "magma", columns: int | None = None,
                 value_name: str = "attention weight") -> PictureHeat:
    """Panels ``(title, layer, head, query, picture)`` of ``result`` (None: the mean of the layers, of the heads, of
    the patches' queries; :func:`attnviz.render.overlay.patch_weights`), titled ``{model} · {who} · {what}``."""
    from ..render.overlay import patch_weights

    def weights(layer: int | None, head: int | None, query: Any, picture: int) -> np.ndarray:
        if isinstance(query, tuple):  # several queries: their mean
            return np.mean([patch_weights(result, layer, head, q, picture) for q in query], axis=0)
        return np.asarray(patch_weights(result, layer, head, query, picture), dtype=np.float64)

    drawn = [PicturePanel(title, weights(layer, head, query, picture), picture)
             for title, layer, head, query, picture in panels]
    every = np.concatenate([p.weights.reshape(-1) for p in drawn]) if drawn else np.zeros(1)
    scale = ColorScale(vmin=0.0, vmax=float(every.max()) if float(every.max()) > 0 else 1.0, cmap=cmap)
    scaled = "each panel scaled to its own largest weight" if per_panel else "one colour scale across the panels"
    pictures = result.pictures
    queries = {query for _, _, _, query, _ in panels}
    n_keys = int(result.attentions.shape[-1])
    keys = [n_keys if query is None or isinstance(query, tuple) or not result.causal else query + 1
            for query in queries]
    several = any(isinstance(query, tuple) for query in queries)  # a mean of rows of different lengths: no one level
    uniform = 1.0 / keys[0] if len(set(keys)) == 1 and value_name == "attention weight" and not several else None
    return PictureHeat(title=f"{result.model_name} · {who} · {what} · {scaled}", panels=drawn, pictures=pictures,
                       scale=scale, columns=columns or max(1, min(len(drawn), 6)), per_panel=per_panel, smooth=smooth,
                       notes=view_notes(pictures), value_name=value_name, uniform=uniform)


def layer_head_panels(result: Any, *, layers: list[int], heads: list[int] | None, query: int | None,
                      label: str = "") -> list[PanelSpec]:
    """A panel per layer × head (``heads`` None: their mean) × picture, titled ``L2 H3`` (``picture 2 · L2 H3``)."""
    several = len(result.pictures) > 1
    return [((f"picture {n + 1} · " if several else "") + f"{label}L{layer} " + ("mean" if head is None else f"H{head}"),
             layer, head, query, n)
            for layer in layers for head in (heads if heads is not None else [None]) for n in range(len(result.pictures))]


def heads_over_pictures(result: Any, *, cmap: str = "magma") -> PictureHeat:
    """``heads --image``'s picture views: every head's attention over each picture, a panel per layer × head, from
    the text after the pictures (its mean over those words; the text before them where none follow), or an image
    encoder's patches' own mean: where each head looks, at a glance, on one colour scale."""
    every = {p for picture in result.pictures for p in picture.image_positions}
    held = result.metadata.get("rows")
    rows = list(held) if held is not None else list(range(len(result.tokens)))
    after = [q for q in rows if q not in every and q > max(every)]
    text = tuple(after or [q for q in rows if q not in every])
    query: tuple[int, ...] | None = text or None
    n_layers, n_heads = result.attentions.shape[:2]
    panels: list[PanelSpec] = [(title, layer, head, query, picture) for title, layer, head, _, picture in
                               layer_head_panels(result, layers=list(range(n_layers)), heads=list(range(n_heads)),
                                                 query=None)]
    who = "the text's words (their mean)" if query else "the patches' mean query"
    return picture_heat(result, panels, who=who, what="every head", cmap=cmap,
                        columns=n_heads * len(result.pictures))
