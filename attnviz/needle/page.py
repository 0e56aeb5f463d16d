"""The needle page's data: the grid, the heads' scores, and per run what :class:`.picture.RunPicture` kept, for the
best-ranked heads (:data:`~.picture.SHOWN_HEADS`) and the mean of every head. The matrix is quantized to a byte
per cell (the prompt's pooled columns, then one per answer token), scaled per row (the page colours each answer token's row by its own largest weight); the needle's
window and the strongest keys keep their weights to four decimals. :func:`check_document` is the contract the
page's script reads."""

from __future__ import annotations

import base64
import math
from typing import Any

import torch

from ..errors import UsageError
from ..labels import head_name
from .picture import SHOWN_HEADS, RunPicture
from .result import NeedleResult

MEAN = "mean"


def _rows_bytes(rows: torch.Tensor) -> tuple[str, list[float]]:
    """``rows`` ``[A, bins]`` as base64 bytes scaled per row (255 = the row's largest), and each row's largest."""
    top = rows.float().amax(dim=-1).clamp_min(1e-12)
    scaled = (rows.float() / top[:, None] * 255).round().clamp(0, 255).to(torch.uint8)
    return base64.b64encode(scaled.contiguous().numpy().tobytes()).decode("ascii"), [round(float(v), 6) for v in top]


def _padded(row: torch.Tensor, steps: int) -> torch.Tensor:
    """An answer token's row over the answer's keys (itself and those before), zeros for the keys after it."""
    return torch.nn.functional.pad(row, (0, steps - row.shape[-1]))


def _run(picture: RunPicture, shown: list[tuple[int, int]]) -> dict[str, Any]:
    steps = len(picture.pooled)
    matrix, window, top = {}, {}, {}
    for name, (layer, head) in [(MEAN, (-1, -1)), *((head_name(layer, head), (layer, head)) for layer, head in shown)]:
        if name == MEAN:
            rows = torch.stack([torch.cat([p, _padded(t, steps)]) for p, t in zip(picture.mean, picture.mean_tail,
                                                                                  strict=True)])
            win = None
        else:
            rows = torch.stack([torch.cat([p[layer, head], _padded(t[layer, head], steps)])
                                for p, t in zip(picture.pooled, picture.tail, strict=True)])
            win = torch.stack([w[layer, head] for w in picture.window])
            top[name] = [[[int(p), round(float(v), 4)] for v, p in zip(values[layer, head], positions[layer, head],
                                                                       strict=True)]
                         for values, positions in picture.top]
        data, peaks = _rows_bytes(rows)
        matrix[name] = {"bytes": data, "peaks": peaks}
        if win is not None:
            window[name] = [[round(float(v), 4) for v in row] for row in win]
    return {"prompt": picture.prompt, "width": picture.width, "bins": picture.bins,
            "window": {"start": picture.window_start, "end": picture.window_end, "values": window},
            "matrix": matrix, "top": top, "labels": {str(k): v for k, v in picture.labels.items()}}


def page_document(result: NeedleResult) -> dict[str, Any]:
    """What the page's script reads (see the module's docs)."""
    if len(result.pictures) != len(result.runs):
        raise UsageError("the needle page draws each run's answer attention: run the grid with the page asked for "
                         "(a result read back from JSON has only the scores)")
    ranked = result.heads()
    shown = [(int(h["layer"]), int(h["head"])) for h in ranked[:SHOWN_HEADS]]
    success = [[None if math.isnan(v) else round(v, 4) for v in row] for row in result.success()]
    runs = []
    for run, picture in zip(result.runs, result.pictures, strict=True):
        runs.append({"length": run.length, "depth": run.depth, "recall": round(run.recall, 4),
                     "retrieved": run.retrieved, "answer": run.answer, "answer_tokens": run.answer_tokens,
                     "needle": [run.needle_start, run.needle_end], **_run(picture, shown)})
    return {
        "model": result.model_name, "engine": result.engine, "needle": result.needle, "question": result.question,
        "haystack": result.haystack, "lengths": result.lengths, "depths": result.depths, "success": success,
        "n_layers": result.n_layers, "n_heads": result.n_heads,
        "scores": {"retrieval": [[round(v, 4) for v in row] for row in result.retrieval_scores()],
                   "reasoning": [[round(v, 4) for v in row] for row in result.reasoning_scores()]},
        "ranked": [{k: h[k] for k in ("name", "layer", "head", "retrieval_score", "reasoning_score", "retrieval")}
                   for h in ranked[:20]],
        "shown": [MEAN, *(head_name(layer, head) for layer, head in shown)],
        "counted": len(result.counted), "runs": runs,
    }


def check_document(doc: dict[str, Any]) -> None:
    """The shapes the page's script counts on; a ValueError names the first that is not so."""
    n_depths, n_lengths = len(doc["depths"]), len(doc["lengths"])
    if len(doc["success"]) != n_depths or any(len(row) != n_lengths for row in doc["success"]):
        raise ValueError("success is not depths × lengths")
    for key in ("retrieval", "reasoning"):
        grid = doc["scores"][key]
        if len(grid) != doc["n_layers"] or any(len(row) != doc["n_heads"] for row in grid):
            raise ValueError(f"scores.{key} is not layers × heads")
    for n, run in enumerate(doc["runs"]):
        steps = len(run["answer_tokens"])
        if set(run["matrix"]) != set(doc["shown"]):
            raise ValueError(f"runs[{n}].matrix does not hold every shown head")
        for name, cell in run["matrix"].items():
            if len(base64.b64decode(cell["bytes"])) != steps * (run["bins"] + steps) or len(cell["peaks"]) != steps:
                raise ValueError(f"runs[{n}].matrix.{name} is not answer tokens × (bins + answer tokens)")
        width = run["window"]["end"] - run["window"]["start"]
        for name, rows in run["window"]["values"].items():
            if len(rows) != steps or any(len(r) != width for r in rows):
                raise ValueError(f"runs[{n}].window.{name} is not answer tokens × window")
        if not 0 <= run["needle"][0] < run["needle"][1] <= run["prompt"]:
            raise ValueError(f"runs[{n}].needle is not a span of the prompt")
