"""Which sparse prefill pattern serves each head of one's own prompt (issue 44): MInference's A-shape, vertical-slash
and block-sparse, each head's recall under each at a budget and the winner, as MInference's ``search_pattern``
defines them; and DuoAttention's split of the key/value heads into streaming (sinks and a recent window keep their
attention) and full-attention heads (the paper's "retrieval heads"). The search itself is :mod:`attnviz.analysis.sparse_patterns`; the prompt's layers
are read as row blocks with their queries and keys (:mod:`.layers`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..analysis import sparse_patterns as sp
from ..analysis.patterns_registry import PATTERNS, winners
from ..defaults import BUDGETS
from ..errors import UsageError
from .budgets import distinct_budgets

SCHEMA = "attnviz.patterns/2"  # 2: DuoAttention's heads are full_attention (1 said retrieval)


@dataclass
class HeadPattern:
    """One query head at one budget."""

    layer: int
    head: int
    kv_head: int
    recall: dict[str, float]  # a_shape, vertical_slash, block_sparse, and any pattern a plugin registered
    winner: str
    streaming_mass: float  # DuoAttention: the attention mass sinks + a recent window keep


@dataclass
class PatternsResult:
    """Every head's search at each budget, the key/value heads' DuoAttention class, and MInference's config."""

    KIND = "patterns"  # its files in attnviz.result_formats (a class attribute, not a field)

    model_name: str
    engine: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    n_tokens: int
    threshold: float
    budgets: list[int] = field(default_factory=list)
    heads: dict[int, list[HeadPattern]] = field(default_factory=dict)  # budget → every head
    full_attention: list[list[bool]] = field(default_factory=list)  # [layer][kv head]: DuoAttention's full-attention heads
    configs: dict[int, list[dict[str, list[object]]]] = field(default_factory=dict, repr=False)  # budget → MInference

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = SCHEMA
        data["heads"] = {str(b): rows for b, rows in data["heads"].items()}
        data["configs"] = {str(b): config for b, config in data["configs"].items()}
        return data

    def save(self, path: str | Path) -> None:
        """Write the result to ``path`` in the format its extension names (:mod:`attnviz.result_formats`: .json,
        .csv, .parquet, or one a plugin registered)."""
        from ..result_formats import save

        save("patterns", self, path)

    def minference_json(self, budget: int | None = None) -> str:
        """MInference's per-head config (``configs/*_best_pattern.json``) at ``budget`` (default the first)."""
        return json.dumps(self.configs[self.budgets[0] if budget is None else budget])

    def duo_tsv(self) -> str:
        """DuoAttention's ``full_attention_heads.tsv``: layers × key/value heads, 1 a full-attention head."""
        import torch

        return sp.duo_attention_tsv([torch.tensor([float(x) for x in row]) for row in self.full_attention])

    def rows(self) -> list[dict[str, Any]]:
        """One row per budget × layer × head (CSV, Parquet)."""
        return [{"budget": budget, "layer": h.layer, "head": h.head, "kv_head": h.kv_head,
                 **{f"recall_{p}": round(h.recall[p], 6) for p in h.recall}, "winner": h.winner,
                 "streaming_mass": round(h.streaming_mass, 6),
                 "duo": "full" if self.full_attention[h.layer][h.kv_head] else "streaming"}
                for budget in self.budgets for h in self.heads[budget]]


def patterns(model: str | None, text: str, *, budgets: Sequence[float] = BUDGETS, threshold: float = sp.DUO_THRESHOLD,
             engine: str = "auto", revision: str | None = None, device: str = "cpu", trust_remote_code: bool = False,
             dtype: str | None = None, truncate: bool = False,
             progress: Callable[[str], None] | None = None) -> PatternsResult:
    """Search every head of ``model`` on ``text`` at each of ``budgets`` (keys per query row, or a fraction of the
    prompt's), and class the key/value heads as DuoAttention does at ``threshold`` (see the module)."""
    from ..sources.resolve import checked_engine, load_source
    from .context_pass import read_sequence

    if not 0.0 < threshold <= 1.0:
        raise UsageError(f"[[threshold={threshold}]] is a share of the attention mass, in (0, 1]")
    source: Any = load_source(model, engine=checked_engine(engine),
                              revision=revision, device=device, trust_remote_code=trust_remote_code, dtype=dtype)
    if not source.causal:
        raise UsageError(f"{source.name} is not a causal model: sparse prefill patterns are for decoders")
    info = source.encode(text, truncate=truncate)
    n = len(info.ids)
    if n < 2:
        raise UsageError("the text gives fewer than 2 tokens")
    resolved = sorted(count for _, count in distinct_budgets(budgets, n))
    say = progress or (lambda _: None)
    say("reading the layers")
    result = PatternsResult(source.name, source.engine, source.n_layers, 0, 1, n, threshold, resolved)
    searches: dict[int, list[sp.PatternSearch]] = {b: [] for b in resolved}
    for parts in read_sequence(source, list(info.ids), list(info.labels), n, queries_keys=True, narrow=True):
        rows, n_kv = parts.context, parts.n_kv_heads
        result.n_heads, result.n_kv_heads = rows.n_heads, n_kv
        group = rows.n_heads // n_kv
        mass = None
        for budget in resolved:
            search = sp.search_patterns(rows, budget)
            searches[budget].append(search)
            mass = search.streaming_mass
            recall = {**search.recall, **{name: pattern.measure(rows, search.budget) for name, pattern in
                                          PATTERNS.items() if pattern.recall is not None}}  # plugins' patterns
            chosen = winners(recall)
            for head in range(rows.n_heads):
                found = {p: float(recall[p][head]) for p in PATTERNS}
                result.heads.setdefault(budget, []).append(HeadPattern(
                    parts.layer, head, head // group, found, chosen[head], float(search.streaming_mass[head])))
        assert mass is not None
        result.full_attention.append([bool(x) for x in sp.full_attention_heads(mass, n_kv, threshold)])
    for budget in resolved:
        result.configs[budget] = sp.minference_config(searches[budget])
    return result


from ..result_formats import register_result_kind  # noqa: E402 - the formats of the result defined above

register_result_kind(PatternsResult.KIND, "attnviz.kv.patterns_outputs", figures=False, page=False)
