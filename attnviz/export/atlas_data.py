"""A corpus's head statistics summarised for the atlas, from an export's ``heads.parquet`` and ``texts.parquet``.

Everything here is computed with pyarrow group-bys and numpy on whole columns, never a Python loop over
the rows, so 10^5 texts × every head stay quick:

- ``means``: each statistic's mean over the texts, per head (``Table.group_by(["layer", "head"])``);
- ``label_rates``: the share of texts in which each head earns each label (the ``labels`` list column,
  flattened and counted in one group-by);
- ``histograms``: each statistic's distribution over the texts, per head, on bins shared by every head;
- ``top_texts``: per statistic and head, the texts where the head shows it most (max-activating examples).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError

BINS = 20
TOP = 5


@dataclass
class AtlasData:
    """``[layers, heads]`` arrays per statistic or label, over ``n_texts`` texts (see the module)."""

    model: str
    n_texts: int
    layers: list[int]  # the model's layer numbers, in order
    n_heads: int
    stats: list[str]
    means: dict[str, np.ndarray]
    label_rates: dict[str, np.ndarray]
    edges: dict[str, np.ndarray]  # each statistic's bin edges, [bins + 1]
    counts: dict[str, np.ndarray]  # [layers, heads, bins]
    top_texts: dict[str, np.ndarray]  # [layers, heads, top] text indices, largest value first
    texts: dict[int, str] = field(default_factory=dict)  # text_index → text, where texts.parquet has them


def document(data: AtlasData, top: int | None = None) -> dict[str, object]:
    """The atlas's numbers as JSON: per head, every statistic's mean, histogram and max-activating texts, and
    how often it earns each label; ``top``: only the heads with the highest mean of some statistic."""
    heads = []
    for i, layer in enumerate(data.layers):
        for head in range(data.n_heads):
            heads.append({
                "layer": layer, "head": head,
                "means": {s: round(float(data.means[s][i, head]), 6) for s in data.stats},
                "labels": {name: round(float(rates[i, head]), 6) for name, rates in data.label_rates.items()
                           if rates[i, head] > 0},
                "histograms": {s: data.counts[s][i, head].tolist() for s in data.stats},
                "top_texts": {s: [int(t) for t in data.top_texts[s][i, head]] for s in data.stats},
            })
    chosen = heads if top is None else _top_heads(heads, data.stats, top)
    cited = {t for head in chosen for texts in head["top_texts"].values() for t in texts}  # type: ignore[attr-defined]
    return {"model": data.model, "n_texts": data.n_texts, "statistics": data.stats,
            "bins": {s: [round(float(e), 6) for e in data.edges[s]] for s in data.stats},
            # only the texts a head cites (a corpus of 10^5 texts would not fit a page)
            "texts": {str(k): v for k, v in data.texts.items() if k in cited},
            "heads": chosen}


def _top_heads(heads: list[dict[str, object]], stats: list[str], top: int) -> list[dict[str, object]]:
    keep = set()
    for s in stats:
        for head in sorted(heads, key=lambda h: -h["means"][s])[:top]:  # type: ignore[index]
            keep.add((head["layer"], head["head"]))
    return [h for h in heads if (h["layer"], h["head"]) in keep]


def atlas_data(folder: str | Path, *, bins: int = BINS, top: int = TOP) -> AtlasData:
    """The atlas's numbers from the export in ``folder`` (its ``heads.parquet``, and ``texts.parquet`` if there)."""
    from ..analysis.statistics import STATISTICS
    from ..export.table import HEADS_TABLE, TEXTS_TABLE, pyarrow

    pa = pyarrow()
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    folder = Path(folder)
    path = folder / HEADS_TABLE if folder.is_dir() else folder
    if not path.is_file():
        raise InputError(f"{path} does not exist; give the folder of an export with the parquet format, which "
                         f"holds {HEADS_TABLE}")
    table = pq.read_table(path)
    stats = [s for s in STATISTICS if s in table.column_names]
    if not stats or table.num_rows == 0:
        raise InputError(f"{path} holds no head statistics")
    layers = sorted(pc.unique(table["layer"]).to_pylist())
    n_heads = int(pc.max(table["head"]).as_py()) + 1
    n_texts = len(pc.unique(table["text_index"]))
    # Every (text, layer, head) once, in that order: the columns reshape to [texts, layers, heads].
    ordered = table.sort_by([("text_index", "ascending"), ("layer", "ascending"), ("head", "ascending")])
    if ordered.num_rows != n_texts * len(layers) * n_heads:
        raise InputError(f"{path} has {ordered.num_rows} rows, not one per text × layer × head "
                         f"({n_texts} × {len(layers)} × {n_heads}); was it assembled from a finished export?")
    shape = (n_texts, len(layers), n_heads)
    grouped = table.group_by(["layer", "head"]).aggregate([(s, "mean") for s in stats])
    grouped = grouped.sort_by([("layer", "ascending"), ("head", "ascending")])
    means = {s: grouped[f"{s}_mean"].to_numpy().reshape(len(layers), n_heads) for s in stats}
    values = {s: ordered[s].to_numpy(zero_copy_only=False).reshape(shape) for s in stats}
    edges, counts = {}, {}
    for s in stats:
        low, high = float(values[s].min()), float(values[s].max())
        edges[s] = np.linspace(low, high if high > low else low + 1.0, bins + 1)
        which = np.clip(np.searchsorted(edges[s], values[s], side="right") - 1, 0, bins - 1)  # last bin closed
        count = np.zeros((len(layers) * n_heads, bins), dtype=np.int64)
        np.add.at(count, (np.broadcast_to(np.arange(len(layers) * n_heads), (shape[0], len(layers) * n_heads)),
                          which.reshape(shape[0], -1)), 1)
        counts[s] = count.reshape(len(layers), n_heads, bins)
    indices = ordered["text_index"].to_numpy().reshape(shape)[:, 0, 0]
    k = min(top, n_texts)
    top_texts = {s: indices[np.argsort(-values[s], axis=0, kind="stable")[:k]].transpose(1, 2, 0) for s in stats}
    label_rates = _label_rates(pa, pc, table, layers, n_heads, n_texts)
    texts: dict[int, str] = {}
    model = ""
    if folder.is_dir() and (folder / TEXTS_TABLE).is_file():
        text_table = pq.read_table(folder / TEXTS_TABLE, columns=["text_index", "text", "model"])
        texts = dict(zip(text_table["text_index"].to_pylist(), text_table["text"].to_pylist(), strict=True))
        model = str(text_table["model"][0].as_py()) if text_table.num_rows else ""
    return AtlasData(model, n_texts, layers, n_heads, stats, means, label_rates, edges, counts, top_texts, texts)


def _label_rates(pa, pc, table, layers: list[int], n_heads: int, n_texts: int) -> dict[str, np.ndarray]:
    """Per label, the share of texts in which each head earns it: the label lists flattened, then counted."""
    if "labels" not in table.column_names:
        return {}
    lengths = pc.list_value_length(table["labels"]).fill_null(0)
    flat = pa.table({
        "layer": pc.take(table["layer"], pc.list_parent_indices(table["labels"])),
        "head": pc.take(table["head"], pc.list_parent_indices(table["labels"])),
        "label": pc.list_flatten(table["labels"]),
    }) if pc.sum(lengths).as_py() else None
    rates: dict[str, np.ndarray] = {}
    if flat is None:
        return rates
    counted = flat.group_by(["label", "layer", "head"]).aggregate([("label", "count")])
    position = {layer: i for i, layer in enumerate(layers)}
    for label, layer, head, count in zip(counted["label"].to_pylist(), counted["layer"].to_pylist(),
                                         counted["head"].to_pylist(), counted["label_count"].to_pylist(), strict=True):
        rates.setdefault(label, np.zeros((len(layers), n_heads)))[position[layer], head] = count / n_texts
    return rates


SIDE = 40  # a cited text's attention is drawn at most this many cells a side (max-pooled beyond)


def attach_attention(doc: dict[str, object], source: object, layers: list[int], n_heads: int) -> None:
    """Add to an atlas ``doc`` (:func:`document`) each cited text's attention in the heads that cite it, run by
    ``source``: ``doc["attention"][text index] = {"tokens", "pool", "side", "heads": {"L,H": base64 bytes}}``,
    each head's matrix max-pooled to at most :data:`SIDE` a side and scaled to its largest weight (0–255)."""
    import base64
    import math

    import torch

    from ..errors import UsageError

    cites: dict[int, set[tuple[int, int]]] = {}
    for head in doc["heads"]:  # type: ignore[attr-defined]
        for texts in head["top_texts"].values():
            for index in texts:
                cites.setdefault(int(index), set()).add((head["layer"], head["head"]))
    position = {layer: i for i, layer in enumerate(layers)}
    attention: dict[str, object] = {}
    for index, heads in sorted(cites.items()):
        text = doc["texts"].get(str(index))  # type: ignore[attr-defined]
        if text is None:
            continue
        result = source.extract(text, truncate=True)  # type: ignore[attr-defined]
        if tuple(result.attentions.shape[:2]) != (len(layers), n_heads):
            raise UsageError(f"the export has {len(layers)} layers × {n_heads} heads but {result.model_name} has "
                             f"{tuple(result.attentions.shape[:2])}: give the model the export was made with")
        n = result.attentions.shape[-1]
        pool = max(1, math.ceil(n / SIDE))
        drawn = {}
        for layer, head in sorted(heads):
            matrix = result.attentions[position[layer], head].float()
            if pool > 1:
                matrix = torch.nn.functional.max_pool2d(matrix[None], pool, ceil_mode=True)[0]
            top = float(matrix.max()) or 1.0
            cells = (matrix / top * 255).round().clamp(0, 255).to(torch.uint8).numpy().tobytes()
            drawn[f"{layer},{head}"] = base64.b64encode(cells).decode("ascii")
        attention[str(index)] = {"tokens": list(result.tokens), "pool": pool,
                                 "side": math.ceil(n / pool), "heads": drawn}
    doc["attention"] = attention
