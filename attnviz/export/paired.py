"""A checkpoint diff from two exports' tables (:mod:`attnviz.analysis.checkpoint_diff`): the same texts exported
with each model (on Ray, a Slurm array or here), paired by ``text_index`` and checked by their hashes; each
statistic's per-text difference is a whole-column subtraction, so 10^5 texts need no model run at all."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..analysis.checkpoint_diff import CheckpointDiff, diff_of
from ..errors import InputError, UsageError
from .atlas_data import read_heads


def exports_diff(folder: str | Path, other: str | Path, *, bootstrap: int = 1000, permutations: int = 1000,
                 seed: int = 0) -> CheckpointDiff:
    """Every head's change from the export in ``folder`` to the one in ``other`` over the texts both hold."""
    import torch

    a, b = read_heads(folder), read_heads(other)
    if a.layers != b.layers or a.n_heads != b.n_heads:
        raise UsageError(f"{a.path} has layers {a.layers} × {a.n_heads} heads and {b.path} layers {b.layers} × "
                         f"{b.n_heads}: a checkpoint diff needs two exports of one architecture, of the same layers")
    common, ia, ib = np.intersect1d(a.indices, b.indices, return_indices=True)
    if not len(common):
        raise InputError(f"{a.path} and {b.path} share no text_index: export the same file of texts with each model")
    hashes_a, model_a = _hashes(Path(folder), common)
    hashes_b, model_b = _hashes(Path(other), common)
    if hashes_a is not None and hashes_b is not None and not np.array_equal(hashes_a, hashes_b):
        first = int(common[np.flatnonzero(hashes_a != hashes_b)[0]])
        raise UsageError(f"text {first} differs between the two exports (its text_hash): export the same file of "
                         "texts, in the same order, with each model")
    stats = [s for s in a.stats if s in b.stats]
    aligned = len(common) == len(a.indices) == len(b.indices)  # the usual case: no rows to pick
    per_text = {}
    for s in stats:  # one statistic at a time, each export's copy let go once used
        before, after = a.values.pop(s), b.values.pop(s)
        change = np.subtract(after if aligned else after[ib], before if aligned else before[ia], dtype=np.float64)
        per_text[s] = torch.from_numpy(change)
        del before, after
    diff = diff_of(per_text, common.tolist(), model_a or Path(folder).name, model_b or Path(other).name,
                   layers=a.layers, bootstrap=bootstrap, permutations=permutations, seed=seed)
    left = (len(a.indices) - len(common), len(b.indices) - len(common))
    if any(left):
        partial = (f"{len(common)} texts are in both exports; {left[0]} only in the first and {left[1]} only in the "
                   "second were left out")
        diff.note = "; ".join(filter(None, [diff.note, partial]))
    return diff


def _hashes(folder: Path, indices: np.ndarray) -> tuple[np.ndarray | None, str]:
    """The texts' hashes at ``indices`` (None without ``texts.parquet``) and the export's model name."""
    from .table import TEXTS_TABLE

    if not (folder.is_dir() and (folder / TEXTS_TABLE).is_file()):
        return None, ""
    import pyarrow.parquet as pq

    table = pq.read_table(folder / TEXTS_TABLE, columns=["text_index", "text_hash", "model"])
    order = np.argsort(table["text_index"].to_numpy())
    known = table["text_index"].to_numpy()[order]
    where = np.searchsorted(known, indices)
    if (where >= len(known)).any() or not np.array_equal(known[np.minimum(where, len(known) - 1)], indices):
        return None, str(table["model"][0].as_py()) if table.num_rows else ""
    hashes = np.asarray(table["text_hash"].to_numpy(zero_copy_only=False), dtype=object)[order][where]
    return hashes, str(table["model"][0].as_py()) if table.num_rows else ""
