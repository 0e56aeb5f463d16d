"""The kv page's data: per layer and key/value head what the future needs of each prompt key (its attention mass on
the key, averaged over the future rows and the group's query heads), and per policy × budget which keys that head
keeps, on one scale of columns (the keys themselves, or max-pooled bins where every head's columns would pass
:data:`MAX_CELLS`); each run's summary and losses; the curves. :func:`check_document` is the page script's
contract."""

from __future__ import annotations

import base64
import math
from typing import Any

import torch

from ..render.kv import budget_label, policy_colour
from .result import KVResult

MAX_CELLS = 1 << 21  # columns × heads kept for the page: 2 M (a 32 × 8-head model at 8,192 keys)


def _bytes(values: torch.Tensor) -> str:
    return base64.b64encode(values.contiguous().numpy().tobytes()).decode("ascii")


def page_document(result: KVResult, need: torch.Tensor) -> dict[str, Any]:
    """``need`` ``[layers, kv heads, T]``: the future's mean attention on each prompt key (see the module)."""
    n_layers, n_kv, n = need.shape
    width = max(1, math.ceil(n * n_layers * n_kv / MAX_CELLS))
    bins = math.ceil(n / width)
    padded = torch.nn.functional.pad(need.float(), (0, bins * width - n))
    pooled = padded.reshape(n_layers, n_kv, bins, width).amax(-1)
    peak = pooled.amax(-1, keepdim=True).clamp_min(1e-12)
    runs = []
    for run in result.runs:
        if run.kept is None:
            raise ValueError("the page needs each run's kept keys: run kv with keep_sets=True")
        share = torch.zeros(n_layers, n_kv, bins * width)
        for layer, heads in enumerate(run.kept):
            for head, positions in enumerate(heads):
                share[layer, head, torch.tensor(positions, dtype=torch.long)] = 1.0
        kept = (share.reshape(n_layers, n_kv, bins, width).mean(-1) * 255).round().to(torch.uint8)
        runs.append({"policy": run.policy, "budget": run.budget, "budget_label": budget_label(run.budget), "keys": run.keys, "recall": round(run.recall, 6),
                     "error": round(run.error, 6), "kl": None if run.kl is None else round(run.kl, 8),
                     "changed": run.changed, "answer": run.answer, "kept": _bytes(kept),
                     "heads": [{"layer": h.layer, "kv_head": h.kv_head, "recall": round(h.recall, 6),
                                "error": round(h.error, 6), "dropped": [[p, t, round(m, 6)] for p, t, m in h.dropped]}
                               for h in run.heads]})
    return {"model": result.model_name, "engine": result.engine, "n_layers": n_layers, "n_kv_heads": n_kv,
            "n_context": n, "width": width, "bins": bins, "future_mode": result.future_mode, "future": result.future,
            "full_answer": result.full_answer, "tokens": result.tokens,
            "need": _bytes((pooled / peak * 255).round().to(torch.uint8)), "need_peaks": peak[..., 0].tolist(),
            "runs": runs, "colours": {run.policy: policy_colour(run.policy) for run in result.runs}}


def check_document(doc: dict[str, Any]) -> None:
    """The shapes the page's script counts on; a ValueError names the first that is not so."""
    cells = doc["n_layers"] * doc["n_kv_heads"] * doc["bins"]
    if len(base64.b64decode(doc["need"])) != cells:
        raise ValueError("need is not layers × key/value heads × bins")
    if len(doc["tokens"]) != doc["n_context"] or doc["bins"] != math.ceil(doc["n_context"] / doc["width"]):
        raise ValueError("tokens and bins do not cover the prompt")
    for n, run in enumerate(doc["runs"]):
        if len(base64.b64decode(run["kept"])) != cells:
            raise ValueError(f"runs[{n}].kept is not layers × key/value heads × bins")
        if len(run["heads"]) != doc["n_layers"] * doc["n_kv_heads"]:
            raise ValueError(f"runs[{n}].heads is not every key/value head")
