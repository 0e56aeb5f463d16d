"""What the atlas page carries beside the corpus's numbers (:mod:`attnviz.export.atlas_data`), computed by
running the model: each cited text's attention in the heads that cite it, and every head's joint
query-key embedding (:mod:`attnviz.analysis.qk_embedding`). Both are bytes in base64, within a budget."""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..result import AttentionResult
    from ..sources.base import Source

SIDE = 40  # a cited text's attention is drawn at most this many cells a side (max-pooled beyond)
BATCH = 16
ATTENTION_BUDGET = 6_000_000  # bytes of cited texts' attention a page may carry (base64 adds a third)


def attach_attention(doc: dict[str, Any], sources: Sequence[Source], layers: list[int], n_heads: int, *,
                     budget: int = ATTENTION_BUDGET) -> None:
    """Add to an atlas ``doc`` each cited text's attention in the heads that cite it, run by each of ``sources``
    (one model, or a checkpoint diff's two): ``doc["attention"][text index] = {"tokens", "pool", "side",
    "heads": {"L,H": [base64 bytes per source]}}``, each head's matrix max-pooled to at most :data:`SIDE` a
    side (fewer where every drawing at that size would pass ``budget`` bytes: a model of many heads cites many
    texts) and scaled to the largest weight of that head in any of the sources (0–255: one scale to compare)."""
    from ..errors import UsageError

    cites: dict[int, set[tuple[int, int]]] = {}
    for head in doc["heads"]:
        for texts in head["top_texts"].values():
            for index in texts:
                cites.setdefault(int(index), set()).add((head["layer"], head["head"]))
    position = {layer: i for i, layer in enumerate(layers)}
    drawings = len(sources) * sum(len(heads) for heads in cites.values())
    side = max(8, min(SIDE, math.isqrt(budget // max(1, drawings))))  # one byte a cell
    attention: dict[str, object] = {}
    # in order of length, so each padded batch holds texts of about one length
    cited = sorted(((index, heads) for index, heads in cites.items() if str(index) in doc["texts"]),
                   key=lambda item: (len(doc["texts"][str(item[0])]), item[0]))
    for start in range(0, len(cited), BATCH):  # a padded batch per model: per-call costs shared
        chunk = cited[start:start + BATCH]
        texts = [doc["texts"][str(index)] for index, _ in chunk]
        runs = [source.extract_batch(texts, truncate=True) for source in sources]
        for (index, heads), *results in zip(chunk, *runs, strict=True):
            for result in results:
                if tuple(result.attentions.shape[:2]) != (len(layers), n_heads):
                    raise UsageError(f"the export has {len(layers)} layers × {n_heads} heads but {result.model_name} "
                                     f"has {tuple(result.attentions.shape[:2])}: give the model the export was made with")
            attention[str(index)] = _drawn(results, heads, position, side)
    doc["attention"] = attention


def _drawn(results: Sequence[AttentionResult], heads: set[tuple[int, int]], position: dict[int, int],
           side: int = SIDE) -> dict[str, object]:
    """One text's heads in each model's result, max-pooled to at most ``side`` a side, on one scale."""
    import torch

    n = results[0].attentions.shape[-1]
    pool = max(1, math.ceil(n / side))
    drawn: dict[str, list[str]] = {}
    for layer, head in sorted(heads):
        matrices = [result.attentions[position[layer], head].float() for result in results]
        if pool > 1:
            matrices = [torch.nn.functional.max_pool2d(m[None], pool, ceil_mode=True)[0] for m in matrices]
        top = max(float(m.max()) for m in matrices) or 1.0
        drawn[f"{layer},{head}"] = [base64.b64encode((m / top * 255).round().clamp(0, 255).to(torch.uint8)
                                                     .numpy().tobytes()).decode("ascii") for m in matrices]
    return {"tokens": list(results[0].tokens), "pool": pool, "side": math.ceil(n / pool), "heads": drawn}


EMBED_BUDGET = 6_000_000  # bytes of embedding coordinates a page may carry (one byte each; base64 adds a third)


def attach_embedding(doc: dict[str, Any], source: Source, texts: dict[int, str], *, max_tokens: int = 10_000,
                     seed: int = 0, budget: int = EMBED_BUDGET) -> None:
    """Add to an atlas ``doc`` every head's joint query-key embedding over up to ``max_tokens`` tokens of
    ``texts`` (fewer where ``budget`` bytes would not hold them for every head): ``doc["embedding"] =
    {"tokens", "text", "position", "n_texts", "requested", "heads": {"L,H": {"points": base64 [2, N, 2] uint8,
    "box": [x0, y0, span], "explained": [2]}}}``; the texts the tokens come from join ``doc["texts"]``."""
    from ..analysis.qk_embedding import qk_embedding, quantised, tokens_for_budget

    wanted = {(h["layer"], h["head"]) for h in doc["heads"]}
    embedding = qk_embedding(source, texts, max_tokens=tokens_for_budget(len(wanted), budget, max_tokens), seed=seed)
    drawn: dict[str, object] = {}
    for i, layer in enumerate(embedding.layers):
        for head in range(embedding.n_heads):
            if (layer, head) not in wanted:
                continue
            cells, box = quantised(embedding, i, head)
            drawn[f"{layer},{head}"] = {"points": base64.b64encode(cells).decode("ascii"),
                                        "box": [round(v, 6) for v in box],
                                        "explained": [round(float(v), 4) for v in embedding.explained[i, head]]}
    shown = doc["texts"]
    for index in set(embedding.text_index):
        shown[str(index)] = texts[index]
    doc["embedding"] = {"tokens": embedding.tokens, "text": embedding.text_index, "position": embedding.positions,
                        "n_texts": embedding.n_texts, "requested": max_tokens, "seed": seed, "heads": drawn}
