"""Every head statistic of one layer reduced one block of query rows at a time
(``row_statistics.layer_row_statistics(...).statistics()``) against the dense path that reads the whole
``[heads, n, n]`` layer (each statistic's function in ``analysis.metrics``, as design.md defines it), on (a) [12, 512, 512] bidirectional (the default
model's size) and (b) [12, 2048, 2048] causal. Goal (issue 17, part 4): ≤ 1.0×.

The two sides alternate run by run (a busy machine slows both alike), after one warm-up each; the
tokens are a word-level text with repeats and punctuation, so the duplicate and induction patterns hit.

Run: python benchmarks/bench_row_statistics.py [--runs 5] [--threads N]
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from _common import report

from attnviz.analysis import heads, metrics
from attnviz.analysis.row_statistics import layer_row_statistics
from attnviz.result import AttentionResult

WORDS = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
         "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
         "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more",
         "when", "will", "would", "who", "so", "no", "cat", "dog", "sat", "mat", "log", "ran")
MARKS = (",", ".", ";", "!")


def _layer(n_heads: int, n: int, causal: bool) -> tuple[AttentionResult, torch.Tensor]:
    """Random softmax attention (float32, as sources give it) over a text of ``n`` word tokens."""
    rng = random.Random(0)
    tokens = ["[CLS]"] + [rng.choice(MARKS) if rng.random() < 0.1 else rng.choice(WORDS) for _ in range(n - 2)]
    tokens.append("[SEP]")
    result = AttentionResult(tokens=tokens, attentions=torch.zeros(1, 1, n, n), causal=causal,
                             special=[t in ("[CLS]", "[SEP]") for t in tokens])
    scores = torch.randn(n_heads, n, n, generator=torch.Generator().manual_seed(0)) * 3
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return result, scores.softmax(-1)


def _dense(result: AttentionResult, attn: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every statistic from the whole layer ``[1, heads, n, n]``, by the functions that define them."""
    rows = metrics.row_entropy(attn)
    ids = heads.token_ids(result)
    values = {
        "entropy": rows.mean(-1), "entropy_norm": metrics.entropy_normalized(attn, causal=result.causal, rows=rows),
        "self": metrics.self_score(attn), "prev_score": metrics.previous_token_score(attn),
        "next": metrics.next_token_score(attn), "first": metrics.first_token_score(attn),
        "sep": metrics.attention_to(attn, heads.sep_keys(result)),
        "punct": metrics.punctuation_attention(attn, result.tokens), "max": metrics.max_weight(attn),
        "distance": metrics.mean_distance(attn), "duplicate": metrics.duplicate_token_score(attn, ids),
        "induction": metrics.induction_score(attn, ids),
        "sink": metrics.sink_importance(attn, causal=result.causal).amax(-1),
    }
    return {name: value.to(torch.float64) for name, value in values.items()}


def _alternating(ours, base, runs: int) -> tuple[list[float], list[float]]:
    ours()
    base()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(runs):
        for fn, out in ((ours, times[0]), (base, times[1])):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for n_heads, n, causal in ((12, 512, False), (12, 2048, True)):
        result, attn = _layer(n_heads, n, causal)
        ids, sep = heads.token_ids(result), heads.sep_keys(result)

        def ours(attn=attn, result=result, ids=ids, sep=sep):
            return layer_row_statistics(attn, token_ids=ids, tokens=result.tokens, sep=sep,
                                        causal=result.causal).statistics()

        def base(attn=attn, result=result):
            return {name: value[0] for name, value in _dense(result, attn[None]).items()}

        got, expected = ours(), base()
        for name in expected:
            assert torch.allclose(got[name], expected[name], rtol=1e-6, atol=1e-9), f"{name} disagrees"
        t_ours, t_base = _alternating(ours, base, args.runs)
        kind = "causal" if causal else "bidirectional"
        report(f"one layer's head statistics, [{n_heads}, {n}, {n}] {kind}", "row_statistics (blocks of 256 rows)",
               t_ours, "metrics functions (whole layer)", t_base, goal="<= 1.0x")


if __name__ == "__main__":
    main()
