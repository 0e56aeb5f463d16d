"""What ``attnviz kv`` returns: for each policy and budget, each layer's and key/value head's loss (recall, output
error, the tokens it drops that the future needed) and, end to end, the KL divergence and the answer."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "attnviz.kv/1"


@dataclass
class HeadLoss:
    """One layer's key/value head under one policy and budget."""

    layer: int
    kv_head: int
    kept: int  # keys kept of the context's
    recall: float  # the future queries' attention mass kept (their own keys count as kept), group mean
    error: float  # ‖o − o_kept‖ / ‖o‖ over the future rows, group mean
    dropped: list[tuple[int, str, float]] = field(default_factory=list)  # (position, token, mass) the future needed


@dataclass
class PolicyRun:
    """One policy at one budget: every head's loss and the end-to-end effect."""

    policy: str
    budget: int | float  # as given: keys per head (an int ≥ 1) or a fraction of the context's keys (a float ≤ 1)
    keys: list[int]  # keys kept per head, layer by layer (PyramidKV's differ by layer)
    heads: list[HeadLoss]
    kl: float | None = None  # mean over the future positions of KL(p_full ‖ p_kept), nats
    kl_max: float | None = None
    answer: str | None = None  # the greedy answer on the cut cache (question mode)
    changed: bool | None = None  # whether the greedy answer (or continuation) differs from the full cache's
    kept: list[list[list[int]]] | None = field(default=None, repr=False)  # [layer][kv head] kept positions

    @property
    def recall(self) -> float:
        return sum(h.recall for h in self.heads) / max(len(self.heads), 1)

    @property
    def error(self) -> float:
        return sum(h.error for h in self.heads) / max(len(self.heads), 1)

    @property
    def worst(self) -> HeadLoss:
        return min(self.heads, key=lambda h: (h.recall, -h.error))


@dataclass
class KVResult:
    """A context, its future tokens, and every policy × budget asked for (see the module)."""

    KIND = "kv"  # its files in attnviz.result_formats (a class attribute, not a field)

    model_name: str
    engine: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    n_context: int
    future_mode: str  # "question" or "continue"
    future: list[str]  # the future tokens' labels
    full_answer: str | None
    runs: list[PolicyRun] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list, repr=False)  # the context's labels (the page)
    # [layers, kv heads, T]: the future's mean attention on each prompt key, kept when the page is asked for; never saved.
    need: Any = field(default=None, repr=False, compare=False)

    def losses(self) -> list[tuple[PolicyRun, HeadLoss]]:
        """Every (run, head), the worst first: lowest recall, then highest output error."""
        pairs = [(run, head) for run in self.runs for head in run.heads]
        return sorted(pairs, key=lambda p: (p[1].recall, -p[1].error, p[0].policy, p[1].layer, p[1].kv_head))

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON: every run, its heads' losses and, where kept (``kv(keep_sets=True)``), each head's kept
        keys as ranges ``[[start, stop], …]`` (stop excluded) — a window or a few clusters are a few numbers."""
        need, self.need = self.need, None  # asdict would copy the tensor
        try:
            data = asdict(self)
        finally:
            self.need = need
        data.pop("need", None)
        data.pop("tokens", None)
        data["schema"] = SCHEMA
        for run, original in zip(data["runs"], self.runs, strict=True):
            run["recall"], run["error"] = round(original.recall, 6), round(original.error, 6)
            run["kept"] = None if original.kept is None else [[_ranges(heads) for heads in layer]
                                                               for layer in original.kept]
        return _finite(data)

    def save(self, path: str | Path) -> None:
        """Write the result to ``path`` in the format its extension names (:mod:`attnviz.result_formats`: .json,
        .csv, .parquet, .png, .svg, .pdf, .html, or one a plugin registered)."""
        from ..result_formats import save

        save("kv", self, path)

    def rows(self) -> list[dict[str, Any]]:
        """One row per run × layer × key/value head, worst first (the CSV and Parquet tables)."""
        return [{"policy": run.policy, "budget": run.budget, "layer": head.layer, "kv_head": head.kv_head,
                 "kept": head.kept, "recall": head.recall, "error": head.error, "kl": run.kl,
                 "changed": run.changed,
                 "dropped": json.dumps([[p, t, round(m, 6)] for p, t, m in head.dropped], ensure_ascii=False)}
                for run, head in self.losses()]


def _finite(value: Any) -> Any:
    """JSON has no NaN: a number that is not finite becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _ranges(positions: list[int]) -> list[list[int]]:
    """Sorted positions as ``[start, stop)`` ranges of consecutive ones."""
    out: list[list[int]] = []
    for p in positions:
        if out and out[-1][1] == p:
            out[-1][1] = p + 1
        else:
            out.append([p, p + 1])
    return out


from ..result_formats import register_result_kind  # noqa: E402 - the formats of the result defined above

register_result_kind(KVResult.KIND, "attnviz.kv.outputs")
