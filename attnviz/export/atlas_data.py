"""A corpus's head statistics summarised for the atlas, from an export's ``heads.parquet`` and ``texts.parquet``
(read by :mod:`attnviz.export.heads_reader`), and a checkpoint diff's numbers for the atlas page.

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
from typing import Any

import numpy as np

from ..errors import InputError
from .heads_reader import HeadsTable, importance_values, read_heads
from .table_check import MAX_KEY, TableFile

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


def add_head_columns(data: AtlasData, columns: dict[str, np.ndarray], labels: dict[str, tuple[str, float]]) -> None:
    """Add statistics measured once per head, not per text (a needle run's retrieval scores, ``[layers, heads]``
    over ``data.layers``): every text gets the head's value, so a histogram is one bar and no text shows it more
    than another (no max-activating texts); ``labels`` (label → (column, threshold)) fire on all texts or none."""
    for name, values in columns.items():
        values = np.asarray(values, dtype=np.float64)
        if name not in data.stats:
            data.stats.append(name)
        data.means[name] = values
        edges = np.linspace(0.0, max(float(values.max()), 1e-9), BINS + 1)
        bins = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, BINS - 1)
        counts = np.zeros((*values.shape, BINS))
        np.put_along_axis(counts, bins[..., None], float(data.n_texts), axis=-1)
        data.edges[name], data.counts[name] = edges, counts
        data.top_texts[name] = np.zeros((*values.shape, 0), dtype=np.int64)
    for label, (column, threshold) in labels.items():
        data.label_rates[label] = (data.means[column] >= threshold).astype(np.float64)


def document(data: AtlasData, top: int | None = None) -> dict[str, object]:
    """The atlas's numbers as JSON: per head, every statistic's mean, histogram and max-activating texts, and
    how often it earns each label; ``top``: only the heads with the highest mean of some statistic."""
    heads: list[dict[str, Any]] = []  # JSON objects, one per head
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
    cited = {t for head in chosen for texts in head["top_texts"].values() for t in texts}
    return {"model": data.model, "n_texts": data.n_texts, "statistics": data.stats,
            "bins": {s: [round(float(e), 6) for e in data.edges[s]] for s in data.stats},
            # only the texts a head cites (a corpus of 10^5 texts would not fit a page)
            "texts": {str(k): v for k, v in data.texts.items() if k in cited},
            "heads": chosen}


def _top_heads(heads: list[dict[str, Any]], stats: list[str], top: int) -> list[dict[str, Any]]:
    keep = set()
    for s in stats:
        for head in sorted(heads, key=lambda h: -h["means"][s])[:top]:
            keep.add((head["layer"], head["head"]))
    return [h for h in heads if (h["layer"], h["head"]) in keep]


def histograms(values: np.ndarray, bins: int = BINS) -> tuple[np.ndarray, np.ndarray]:
    """``values`` ``[texts, layers, heads]`` counted per head on ``bins`` bins shared by every head (the last bin
    closed): ``(edges [bins + 1], counts [layers, heads, bins])``."""
    n, layers, heads = values.shape
    low, high = float(values.min()), float(values.max())
    edges = np.linspace(low, high if high > low else low + 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, bins - 1).reshape(n, -1)
    cells = which + np.arange(layers * heads) * bins  # each value's (head, bin), flat
    count = np.bincount(cells.ravel(), minlength=layers * heads * bins)
    return edges, count.reshape(layers, heads, bins)


def top_indices(values: np.ndarray, indices: np.ndarray, k: int = TOP) -> np.ndarray:
    """Per head, the text indices of the ``k`` largest ``values`` ``[texts, layers, heads]``, largest first:
    ``[layers, heads, k]`` (a partition, then a sort of the ``k``: linear in the texts)."""
    k = min(k, values.shape[0])
    part = np.argpartition(-values, k - 1, axis=0)[:k] if k < values.shape[0] else \
        np.broadcast_to(np.arange(k)[:, None, None], values.shape).copy()
    order = np.argsort(-np.take_along_axis(values, part, axis=0), axis=0, kind="stable")
    return indices[np.take_along_axis(part, order, axis=0)].transpose(1, 2, 0)


def atlas_data(folder: str | Path, *, bins: int = BINS, top: int = TOP) -> AtlasData:
    """The atlas's numbers from the export in ``folder`` (its ``heads.parquet``, and ``texts.parquet`` if there).
    The tables' sizes are checked against the memory budget before they are read (:mod:`.table_check`); where the
    process still runs out (its address space limited below what the arrays and their histograms take), a
    :class:`~attnviz.errors.ResourceError` says so."""
    try:
        return _atlas_data(folder, bins=bins, top=top)
    except MemoryError:
        from ..errors import ResourceError
        raise ResourceError(f"the atlas of {folder} ran out of memory reading its tables: give an export of fewer "
                            "texts or layers, or run it where more memory is allowed (ulimit -v, or a larger "
                            "machine)") from None


def _atlas_data(folder: str | Path, *, bins: int, top: int) -> AtlasData:
    from ..export.table import pyarrow

    pa = pyarrow()
    import pyarrow.compute as pc

    heads = read_heads(folder, labels=True)
    heads.values.update(importance_values(folder, heads))  # which heads matter, where the export has it
    stats, layers, n_heads = list(heads.values), heads.layers, heads.n_heads
    n_texts = len(heads.indices)
    means = {s: heads.values[s].mean(axis=0) for s in stats}
    edges, counts = {}, {}
    for s in stats:
        edges[s], counts[s] = histograms(heads.values[s], bins)
    top_texts = {s: top_indices(heads.values[s], heads.indices, top) for s in stats}
    label_rates = _label_rates(pa, pc, heads.labels, layers, n_heads, n_texts) if heads.labels is not None else {}
    texts, model = read_texts_table(folder, heads)
    return AtlasData(model, n_texts, layers, n_heads, stats, means, label_rates, edges, counts, top_texts, texts)


def read_texts_table(folder: str | Path, heads: HeadsTable | None = None) -> tuple[dict[int, str], str]:
    """``(text_index → text, model name)`` from an export folder's ``texts.parquet`` (empty where it has none),
    read and checked as the heads table is (:mod:`.table_check`): one row per text, each text the one its
    ``text_hash`` names and, given the folder's ``heads`` table, the same hash as that table gives the text (a
    ``texts.parquet`` of another corpus is refused, naming the first text that differs)."""
    import hashlib

    from ..export.table import TEXTS_TABLE

    folder = Path(folder)
    path = folder / TEXTS_TABLE
    if not (folder.is_dir() and (path.exists() or path.is_symlink())):
        return {}, ""
    table = TableFile(path, TEXTS_TABLE, {"text_index": "integer", "text_hash": "string", "text": "string",
                                          "model": "string"})
    # beside the columns: each text and hash as a Python string (at most twice their UTF-8 bytes, and a header)
    table.check_memory(table.names, extra=table.rows * 200 + 2 * table.sizes.get("text", 0))
    index = table.integers("text_index", 0, MAX_KEY)
    unique, counts = np.unique(index, return_counts=True)
    if len(unique) != len(index):
        raise InputError(f"{path}: column 'text_index' has text {int(unique[np.argmax(counts > 1)])} twice; "
                         f"{TEXTS_TABLE} has one row per text: write the export again")
    hash_codes, hash_names = table.strings("text_hash")
    text_codes, text_names = table.strings("text")
    model_codes, model_names = table.strings("model")
    texts = [text_names[c] for c in text_codes]
    hashes = np.asarray([hash_names[c] for c in hash_codes], dtype=object)
    for row, (text, said) in enumerate(zip(texts, hashes, strict=True)):
        if hashlib.sha256(text.encode("utf-8")).hexdigest()[:16] != said:
            raise InputError(f"{path}: text {int(index[row])} is not the text its text_hash ({said}) names; the "
                             "table was changed after attnviz wrote it: write the export again")
    if heads is not None:
        if heads.hashes is None:
            raise InputError(f"{heads.path} has no 'text_hash' column, so {path}'s texts cannot be matched with its "
                             "rows; give the tables attnviz wrote (they have it)")
        common, mine, theirs = np.intersect1d(heads.indices, index, return_indices=True)
        differ = heads.hashes[mine] != hashes[theirs]
        if differ.any():
            first = int(np.argmax(differ))
            raise InputError(f"text {int(common[first])} of {path} is not the text of {heads.path} (column "
                             f"'text_hash': {hashes[theirs][first]} and {heads.hashes[mine][first]}); the two "
                             "tables come from different exports: give one export's folder as it was written")
    model = model_names[model_codes[0]] if len(model_codes) else ""
    return dict(zip(index.tolist(), texts, strict=True)), model


def _label_rates(pa, pc, table, layers: list[int], n_heads: int, n_texts: int) -> dict[str, np.ndarray]:
    """Per label, the share of texts in which each head earns it: the label lists flattened, then counted."""
    lengths = pc.list_value_length(table["labels"]).fill_null(0)
    flat = pa.table({
        "layer": pc.take(table["layer"], pc.list_parent_indices(table["labels"])),
        "head": pc.take(table["head"], pc.list_parent_indices(table["labels"])),
        "label": pc.list_flatten(table["labels"]),
    }) if pc.sum(lengths).as_py() else None
    rates: dict[str, np.ndarray] = {}
    if flat is None:
        return rates
    # each row group's labels are read as their own dictionary: one dictionary for all, or the grouping fails
    counted = flat.unify_dictionaries().group_by(["label", "layer", "head"]).aggregate([("label", "count")])
    position = {layer: i for i, layer in enumerate(layers)}
    for label, layer, head, count in zip(counted["label"].to_pylist(), counted["layer"].to_pylist(),
                                         counted["head"].to_pylist(), counted["label_count"].to_pylist(), strict=True):
        rates.setdefault(label, np.zeros((len(layers), n_heads)))[position[layer], head] = count / n_texts
    return rates


def diff_document(diff: object, texts: dict[int, str], *, bins: int = BINS, top: int = TOP) -> dict[str, object]:
    """The atlas page's numbers for a checkpoint diff (:class:`~attnviz.analysis.checkpoint_diff.CheckpointDiff`):
    per head each measure's mean change with its interval and p-value, its distribution over the texts, and the
    texts where it changed most (largest distance, or largest absolute change of a statistic)."""
    from ..analysis.checkpoint_diff import DISTANCE, CheckpointDiff

    assert isinstance(diff, CheckpointDiff)
    indices = np.asarray(diff.text_index)
    position = {layer: i for i, layer in enumerate(diff.layers)}
    measures = list(diff.per_text)
    edges, counts, tops = {}, {}, {}
    for name in measures:
        values = diff.per_text[name].numpy()
        edges[name], counts[name] = histograms(values, bins)
        tops[name] = top_indices(values if name == DISTANCE else np.abs(values), indices, top)
    heads: list[dict[str, Any]] = []  # JSON objects, one per head
    for head in diff.heads:
        i = position[head.layer]
        changes = {**({DISTANCE: head.distance.document()} if head.distance is not None else {}),
                   **{name: change.document() for name, change in head.stats.items()}}
        heads.append({"layer": head.layer, "head": head.head, "score": round(head.score, 6), "changes": changes,
                      "strongest": {"statistic": head.strongest, "d_z": round(head.effect, 4)},
                      "histograms": {m: counts[m][i, head.head].tolist() for m in measures},
                      "top_texts": {m: [int(t) for t in tops[m][i, head.head]] for m in measures}})
    cited = {t for head in heads for texts_ in head["top_texts"].values() for t in texts_}
    return {"kind": "diff", "model": diff.model, "other": diff.other, "n_texts": diff.n_texts,
            "ranked_by": diff.ranked_by, "note": diff.note, "measures": measures,
            "bootstrap": diff.bootstrap, "permutations": diff.permutations,
            "bins": {m: [round(float(e), 6) for e in edges[m]] for m in measures},
            "texts": {str(k): texts[k] for k in sorted(cited) if k in texts}, "heads": heads}
