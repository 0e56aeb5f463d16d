"""The head statistics computed the other way: each one from a whole layer, by the functions of
attnviz.analysis.metrics that define it (docs/design.md's citations). The package computes every statistic
block by block from one record each (attnviz.analysis.statistics); these are the independent
reference its tests compare with."""

from __future__ import annotations

import torch

from attnviz.analysis import metrics
from attnviz.analysis.heads import sep_keys, token_ids


def dense_statistics(result, attentions: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """``{name: [layers, heads]}`` float64 for ``result``'s tokens and ``attentions`` (default: its own)."""
    a = result.attentions if attentions is None else attentions
    rows = metrics.row_entropy(a)
    ids = token_ids(result)
    values = {
        "entropy": rows.mean(-1),
        "entropy_norm": metrics.entropy_normalized(a, causal=result.causal, rows=rows),
        "self": metrics.self_score(a),
        "prev_score": metrics.previous_token_score(a),
        "next": metrics.next_token_score(a),
        "first": metrics.first_token_score(a),
        "sep": metrics.attention_to(a, sep_keys(result)),
        "punct": metrics.punctuation_attention(a, result.tokens),
        "max": metrics.max_weight(a),
        "distance": metrics.mean_distance(a),
        "duplicate": metrics.duplicate_token_score(a, ids),
        "induction": metrics.induction_score(a, ids),
        "sink": metrics.sink_importance(a, causal=result.causal).amax(-1),
    }
    return {name: value.to(torch.float64) for name, value in values.items()}
