"""What a vision-language model's heads do with pictures across a corpus of questions (``atlas`` with pictures):
each head's share of attention on the pictures, its entropy over their patches and its sink, averaged over the
texts; and the **visual sinks** (Kang et al. 2025, arXiv 2503.03321): the grid places drawn to whatever is asked.

Per text, the text's rows are read (:func:`~attnviz.images.vlm.VisionLanguageModel.read` with ``rows="text"``) and
:func:`~attnviz.images.statistics.image_head_rows` gives each head's numbers. Across the texts:

- per head: the mean ``image_share`` and ``patch_entropy``; its most frequent sink place and ``sink_agreement``, the
  fraction of texts whose sink is that place;
- per grid place (row, column of the finest grid; the texts' grids must share a shape, else places are not
  compared and only the heads are given): its ``weight``, the mean over texts, layers, heads and the texts' queries
  of the place's share of the attention on patches, times the number of patches (1 = what an even spread gives);
  and ``texts``, the fraction of texts in which it is the place with the most weight. The places are listed by
  weight: the first are the sinks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import UsageError
from ..result.placement import Placement, image_token_positions
from .corpus import PictureRow

HEAD_COLUMNS = ("layer", "head", "image_share", "patch_entropy", "sink", "sink_row", "sink_col", "sink_agreement")
SINK_COLUMNS = ("row", "col", "weight", "texts")


@dataclass
class PictureAtlas:
    model: str
    texts: int
    grid: tuple[int, int] | None  # the finest grid's rows and columns, where every text's is the same
    heads: list[dict[str, Any]] = field(default_factory=list)
    sinks: list[dict[str, Any]] = field(default_factory=list)
    picture: Placement | None = None  # the last text's last picture: where the sinks' places are drawn

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "texts": self.texts, "grid": list(self.grid) if self.grid else None,
                "heads": self.heads, "sinks": self.sinks}


def picture_atlas(rows: list[PictureRow], model: Any, *, on_text: Any = None) -> PictureAtlas:
    """The atlas of ``rows`` (texts with their pictures) on ``model``, a loaded
    :class:`~attnviz.images.vlm.VisionLanguageModel` (see the module). ``on_text(n, total)`` after each text."""
    from .statistics import image_head_rows

    if not rows:
        raise UsageError("no texts to read the pictures with")
    per_head: dict[tuple[int, int], list[dict[str, Any]]] = {}
    places: list[torch.Tensor] = []  # per text: [rows × cols] mean share of each place
    shapes = set()
    name = ""
    last: Placement | None = None
    for n, row in enumerate(rows, start=1):
        result = model.read(row.text, list(row.pictures), rows="text")
        name = result.model_name
        for entry in image_head_rows(result):
            per_head.setdefault((entry["layer"], entry["head"]), []).append(entry)
        last = result.pictures[-1]
        shapes.add((last.rows, last.cols))
        places.append(_place_weights(result, last))
        if on_text is not None:
            on_text(n, len(rows))
    heads = []
    for (layer, head), entries in sorted(per_head.items()):
        counted = Counter((e["sink_row"], e["sink_col"]) for e in entries)
        (sink_row, sink_col), count = counted.most_common(1)[0]
        heads.append({"layer": layer, "head": head,
                      "image_share": round(sum(e["image_share"] for e in entries) / len(entries), 6),
                      "patch_entropy": round(sum(e["patch_entropy"] for e in entries) / len(entries), 6),
                      "sink": f"r{sink_row}c{sink_col}", "sink_row": sink_row, "sink_col": sink_col,
                      "sink_agreement": round(count / len(entries), 6)})
    grid = next(iter(shapes)) if len(shapes) == 1 else None
    sinks: list[dict[str, Any]] = []
    if grid is not None:
        stacked = torch.stack(places)  # [texts, rows, cols]
        mean = stacked.mean(0) * (grid[0] * grid[1])
        top = stacked.flatten(1).argmax(-1)  # each text's heaviest place
        for index in torch.argsort(mean.flatten(), descending=True).tolist():
            r, c = divmod(index, grid[1])
            sinks.append({"row": r, "col": c, "weight": round(float(mean[r, c]), 6),
                          "texts": round(float((top == index).double().mean()), 6)})
    return PictureAtlas(name, len(rows), grid, heads, sinks, last)


def _place_weights(result: Any, picture: Placement) -> torch.Tensor:
    """``[rows, cols]``: each place of the (last picture's finest) grid's mean share of the attention on its
    patches, over layers, heads and the text's queries after the pictures (the text before them where none
    follow)."""
    from ..render.overlay import row_of

    every = image_token_positions(result.pictures)
    total = len(result.tokens)
    queries = list(range(max(every) + 1, total)) or [q for q in range(total) if q not in set(every)]
    chosen = result.attentions.double()[:, :, row_of(result, queries)][..., list(picture.positions)]  # [L, H, q, patches]
    share = chosen / chosen.sum(-1, keepdim=True).clamp_min(1e-300)
    return share.mean((0, 1, 2)).reshape(picture.rows, picture.cols).float()
