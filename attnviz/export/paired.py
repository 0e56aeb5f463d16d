"""A checkpoint diff from two exports' tables (:mod:`attnviz.analysis.checkpoint_diff`): the same texts exported
with each model (on Ray, a Slurm array or here), paired by ``text_index`` and checked by their hashes; each
statistic's per-text difference is a whole-column subtraction, so 10^5 texts need no model run at all."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..analysis.checkpoint_diff import CheckpointDiff, check_summary_cost, diff_of
from ..errors import InputError, UsageError
from .atlas_data import read_texts_table
from .heads_reader import IMPORTANCE_TABLE, importance_loss, importance_values, read_heads


def exports_diff(folder: str | Path, other: str | Path, *, bootstrap: int = 1000, permutations: int = 1000,
                 seed: int = 0, force: bool = False) -> CheckpointDiff:
    """Every head's change from the export in ``folder`` to the one in ``other`` over the texts both hold; the
    diff's ``texts`` are the first export's (its ``texts.parquet``, checked against its heads table). The
    resampling's cost is estimated first and refused past its limit unless ``force``
    (:func:`~attnviz.analysis.checkpoint_diff.check_summary_cost`)."""
    import torch

    a, b = read_heads(folder), read_heads(other)
    if a.layers != b.layers or a.n_heads != b.n_heads:
        raise UsageError(f"{a.path} has layers {a.layers} × {a.n_heads} heads and {b.path} layers {b.layers} × "
                         f"{b.n_heads}: a checkpoint diff needs two exports of one architecture, of the same layers")
    common, ia, ib = np.intersect1d(a.indices, b.indices, return_indices=True)
    if not len(common):
        raise InputError(f"{a.path} and {b.path} share no text_index: export the same file of texts with each model")
    if a.hashes is None or b.hashes is None:
        raise InputError(f"{(a if a.hashes is None else b).path} has no text_hash column, so the two exports cannot be "
                         "checked to hold the same texts; give the tables attnviz wrote (they have it)")
    if not np.array_equal(a.hashes[ia], b.hashes[ib]):
        first = int(common[np.flatnonzero(a.hashes[ia] != b.hashes[ib])[0]])
        raise UsageError(f"text {first} differs between the two exports (its text_hash): export the same file of "
                         "texts, in the same order, with each model")
    _same_reading(Path(folder), Path(other))
    stats = [s for s in a.stats if s in b.stats]
    both_importance = all((Path(f) / IMPORTANCE_TABLE).exists() for f in (folder, other))
    check_summary_cost(len(common), len(a.layers) * a.n_heads, len(stats) + 2 * both_importance, bootstrap,
                       permutations, force=force)
    (texts, model_a), model_b = read_texts_table(folder, a), read_texts_table(other, b)[1]
    aligned = len(common) == len(a.indices) == len(b.indices)  # the usual case: no rows to pick
    per_text = {}
    for s in stats:  # one statistic at a time, each export's copy let go once used
        before, after = a.values.pop(s), b.values.pop(s)
        change = np.subtract(after if aligned else after[ib], before if aligned else before[ia], dtype=np.float64)
        per_text[s] = torch.from_numpy(change)
        del before, after
    # which heads matter, where both exports have it with one loss (attnviz heads --importance --format parquet)
    mattered = importance_values(folder, a), importance_values(other, b)
    losses = _loss(Path(folder)), _loss(Path(other))
    if losses[0] != losses[1] and mattered[0] and mattered[1]:
        mattered = ({}, {})
        skipped = "importance is left out: the two exports took it with different losses (" + " and ".join(
            f"{objective}{f' with {vs!r}' if vs else ''}" for objective, vs in losses) + ")"
    else:
        skipped = ""
    for name in [n for n in mattered[0] if n in mattered[1]]:
        before, after = mattered[0][name], mattered[1][name]
        per_text[name] = torch.from_numpy(np.subtract(after if aligned else after[ib], before if aligned else before[ia],
                                                      dtype=np.float64))
    diff = diff_of(per_text, common.tolist(), model_a or Path(folder).name, model_b or Path(other).name,
                   layers=a.layers, bootstrap=bootstrap, permutations=permutations, seed=seed, force=force)
    diff.texts = texts
    if skipped:
        diff.note = "; ".join(filter(None, [diff.note, skipped]))
    left = (len(a.indices) - len(common), len(b.indices) - len(common))
    if any(left):
        partial = (f"{len(common)} text{' is' if len(common) == 1 else 's are'} in both exports; {left[0]} only in the first and {left[1]} only in the "
                   "second were left out")
        diff.note = "; ".join(filter(None, [diff.note, partial]))
    return diff


def _same_reading(folder: Path, other: Path) -> None:
    """Refuse two exports whose statistics were read differently (special tokens hidden, say): their
    differences would be the reading's, not the models'. Exports from before it was recorded pass."""
    first, second = _reading(folder), _reading(other)
    if first is None or second is None or first == second:
        return
    names = sorted(k for k in {**first, **second} if first.get(k) != second.get(k))
    said = ", ".join(f"{k}: {first.get(k)} and {second.get(k)}" for k in names)
    raise UsageError(f"the two exports read their statistics differently ({said}); a diff of them would show the "
                     "reading, not the models: export both with the same options")


def _reading(folder: Path) -> dict[str, object] | None:
    """How the export in ``folder`` read its statistics, from its manifest (None where none says); a
    ``reading`` that is not an object of plain values (as attnviz writes it) is refused, naming the field."""
    from .manifest import read_entries

    for manifest in sorted(folder.glob("manifest*.jsonl")):
        for index, entry in read_entries(manifest).items():
            if "reading" in entry:
                reading = entry["reading"]
                if not isinstance(reading, dict) or not all(map(_plain, reading.values())):
                    kind = "null" if reading is None else type(reading).__name__
                    said = (f"is {kind}, not an object" if not isinstance(reading, dict) else
                            "holds a value that is not a number, text, true/false or a list of numbers")
                    raise InputError(f"{manifest}: item {index}'s field 'reading' {said}; attnviz writes how the "
                                     "statistics were read there: write the export again")
                return dict(reading)
    return None


def _plain(value: object) -> bool:
    """A value of a manifest's ``reading`` as attnviz writes one: null, true/false, a number, a text, or a list
    of numbers (layers)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return not isinstance(value, str) or len(value) <= 1000
    return isinstance(value, list) and len(value) <= 100_000 and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value)


def _loss(folder: Path) -> tuple[str, str]:
    """The loss an export's ``importance.parquet`` took: its objective and the text it compared with."""
    return importance_loss(folder)

