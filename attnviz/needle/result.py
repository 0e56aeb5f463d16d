"""What a needle grid returns: every run (its cell, answer, recall and per-head scores) and the heads' scores
over the runs that retrieved; saved as JSON (``attnviz needle --out run.json``) and read back."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..limits import MAX_INDEX
from .scores import RETRIEVAL_HEAD_FROM

SCHEMA = "attnviz.needle/1"
MAX_HEADS = 1 << 20
"""Heads (layers × heads) a needle result or heads table read back may hold: far more than any model has
(126 × 128 is the largest), so a forged count is refused before its grid is built."""


@dataclass
class NeedleRun:
    """One cell of the grid: the prompt's length and the needle's depth, where the needle lies, the answer
    and whether it recalls the needle, and each head's two scores on this run (``[layer][head]``)."""

    length: int
    depth: float
    needle_start: int
    needle_end: int
    answer: str
    answer_tokens: list[str]
    answer_ids: list[int]
    recall: float
    retrieved: bool
    retrieval: list[list[float]]
    reasoning: list[list[float]]


@dataclass
class NeedleResult:
    """A depth × length grid of needle runs on one model, and its heads' scores (see :mod:`.scores`)."""

    KIND = "needle"  # its files in attnviz.result_formats (a class attribute, not a field)

    model_name: str
    engine: str
    n_layers: int
    n_heads: int
    needle: str
    question: str
    haystack: str
    lengths: list[int]
    depths: list[float]
    max_new_tokens: int
    runs: list[NeedleRun] = field(default_factory=list)
    # What the page draws of each run (:class:`attnviz.needle.picture.RunPicture`, in the order of ``runs``),
    # kept by a run asked for it; never saved (a loaded result has none).
    pictures: list[Any] = field(default_factory=list, repr=False, compare=False)

    def run_at(self, length: int, depth: float) -> NeedleRun:
        for run in self.runs:
            if run.length == length and math.isclose(run.depth, depth):
                return run
        raise KeyError((length, depth))

    @property
    def counted(self) -> list[NeedleRun]:
        """The runs that retrieved the needle: the ones a head's score is averaged over."""
        return [run for run in self.runs if run.retrieved]

    def _mean(self, key: str) -> list[list[float]]:
        runs = self.counted
        return [[sum(getattr(r, key)[layer][head] for r in runs) / len(runs) if runs else 0.0
                 for head in range(self.n_heads)] for layer in range(self.n_layers)]

    def retrieval_scores(self) -> list[list[float]]:
        """Each head's retrieval score (Wu et al.): its mean over the runs that retrieved (0 where none did)."""
        return self._mean("retrieval")

    def reasoning_scores(self) -> list[list[float]]:
        """Each head's retrieval-reasoning score (HeadKV): its mean over the runs that retrieved."""
        return self._mean("reasoning")

    def heads(self) -> list[dict[str, Any]]:
        """Every head, ranked by retrieval score, then retrieval-reasoning score, then position."""
        from ..labels import head_name

        retrieval, reasoning = self.retrieval_scores(), self.reasoning_scores()
        rows: list[dict[str, Any]] = [{"layer": layer, "head": head, "name": head_name(layer, head),
                 "retrieval_score": retrieval[layer][head], "reasoning_score": reasoning[layer][head],
                 "retrieval": retrieval[layer][head] >= RETRIEVAL_HEAD_FROM}
                for layer in range(self.n_layers) for head in range(self.n_heads)]
        rows.sort(key=lambda r: (-float(r["retrieval_score"]), -float(r["reasoning_score"]), int(r["layer"]),
                                 int(r["head"])))
        for rank, row in enumerate(rows, 1):
            row["rank"] = rank
        return rows

    def run_rows(self) -> list[dict[str, Any]]:
        """Each run as the answers table shows it: its cell, recall and answer, and the needle's words the answer
        missed (why its recall is below 1)."""
        from .scores import missed_words

        return [{**vars(run), "missed": missed_words(self.needle, run.answer)} for run in self.runs]

    def success(self) -> list[list[float]]:
        """The grid of recall, ``[depth][length]`` (NaN where a cell was not run)."""
        grid = [[math.nan] * len(self.lengths) for _ in self.depths]
        for run in self.runs:
            grid[_index(self.depths, run.depth)][self.lengths.index(run.length)] = run.recall
        return grid

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["pictures"]
        data["schema"] = SCHEMA
        data["heads"] = self.heads()
        data["retrieved_runs"] = len(self.counted)
        return data

    def save(self, path: str | Path) -> None:
        """Write the result to ``path`` in the format its extension names (:mod:`attnviz.result_formats`: .json,
        .csv, .parquet, .png, .svg, .pdf, .html, or one a plugin registered)."""
        from ..result_formats import save

        save("needle", self, path)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "the needle result") -> NeedleResult:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise InputError(f"{where} is not an attnviz needle result (no \"schema\": \"{SCHEMA}\"); write one "
                             "with attnviz's needle command, saving its JSON")
        _check_fields(data, where)  # types and sizes before anything is built from them
        try:
            runs = [NeedleRun(**run) for run in data["runs"]]
            names = [f for f in cls.__dataclass_fields__ if f not in ("runs", "pictures")]
            result = cls(**{name: data[name] for name in names}, runs=runs)
        except (KeyError, TypeError) as exc:
            raise InputError(f"{where} is damaged: {type(exc).__name__} {exc}") from None
        _check(result, where)
        return result

    @classmethod
    def load(cls, path: str | Path) -> NeedleResult:
        from ..limits import read_small

        try:
            data = json.loads(read_small(Path(path), what="the needle result").decode("utf-8"))
        except FileNotFoundError:
            raise InputError(f"{path} does not exist; give the JSON that attnviz's needle command wrote") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise InputError(f"{path} is not JSON ({exc})") from None
        except RecursionError:
            raise InputError(f"{path} is nested too deep to be a needle result; give the JSON that attnviz's "
                             "needle command wrote") from None
        return cls.from_dict(data, str(path))


def _index(depths: list[float], depth: float) -> int:
    for n, d in enumerate(depths):
        if math.isclose(d, depth):
            return n
    raise KeyError(depth)


def _check_fields(data: dict[str, Any], where: str) -> None:
    """The types of the fields a needle result's readers count on, and a size that any model could have,
    checked on the parsed JSON before anything is built from it (a 4 KB file may claim 10¹⁰ heads)."""
    for name in ("n_layers", "n_heads", "max_new_tokens"):
        value = data.get(name)
        if name in data and (isinstance(value, bool) or not isinstance(value, int)):
            raise InputError(f"{where}: \"{name}\" is {_shown(value)}, not a whole number; give the JSON that "
                             "attnviz's needle command wrote")
    for name in ("model_name", "engine", "needle", "question", "haystack"):
        if name in data and not isinstance(data[name], str):
            raise InputError(f"{where}: \"{name}\" is {_shown(data[name])}, not text")
    for name in ("runs", "lengths", "depths"):
        if name in data and not isinstance(data[name], list):
            raise InputError(f"{where}: \"{name}\" is {_shown(data[name])}, not a list")
    if any(not isinstance(run, dict) for run in data.get("runs", [])):
        raise InputError(f"{where}: a run is not an object; give the JSON that attnviz's needle command wrote")
    n_layers, n_heads = data.get("n_layers"), data.get("n_heads")
    if isinstance(n_layers, int) and isinstance(n_heads, int):
        if n_layers < 1 or n_heads < 1:
            raise InputError(f"{where}: {n_layers} layers × {n_heads} heads is no model's shape")
        if n_layers > MAX_INDEX or n_heads > MAX_INDEX or n_layers * n_heads > MAX_HEADS:
            raise InputError(f"{where} claims {n_layers:,} layers × {n_heads:,} heads: more heads than any model has "
                             f"(at most {MAX_HEADS:,}); give the JSON that attnviz's needle command wrote")


def _shown(value: object) -> str:
    """A JSON value as a message names it: null, a list, an object, or its value cut short."""
    if value is None or isinstance(value, (list, dict)):
        return {type(None): "null", list: "a list", dict: "an object"}[type(value)]
    text = json.dumps(value)
    return text[:40] + ("…" if len(text) > 40 else "")


def _check(result: NeedleResult, where: str) -> None:
    """The shapes and ranges a needle result's readers count on."""
    shape = (result.n_layers, result.n_heads)
    for run in result.runs:
        for key in ("retrieval", "reasoning"):
            grid = getattr(run, key)
            if not isinstance(grid, list) or len(grid) != shape[0] or \
                    any(not isinstance(row, list) or len(row) != shape[1] for row in grid):
                raise InputError(f"{where}: a run's {key} scores are not {shape[0]} layers × {shape[1]} heads")
            if not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for row in grid for v in row):
                raise InputError(f"{where}: a run's {key} scores hold a value that is not a finite number ≥ 0")


from ..result_formats import register_result_kind  # noqa: E402 - the formats of the result defined above

register_result_kind(NeedleResult.KIND, "attnviz.needle.outputs")
