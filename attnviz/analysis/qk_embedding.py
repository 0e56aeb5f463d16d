"""A head's queries and keys over a corpus, embedded jointly in two dimensions (after AttentionViz,
Yeh et al. 2023): where a head sends each token's query and where it finds each token's key.

Tokens come from whole texts chosen in a seeded random order until ``max_tokens`` are taken (a corpus
sorted by topic or length is not read from its start alone). Per head, before the projection, queries
and keys are scaled by ``c`` and ``1/c`` so their mean norms are equal, then the keys are moved so their
centroid is the queries' centroid (the definition in docs/design.md; AttentionViz does both). Neither changes
a plain head's attention: ``(c·q)·(k/c) = q·k``, and a vector ``v`` added to every key adds ``q·v`` to every
score of query ``q``, which its softmax cancels. Where a model soft-caps its scores (Gemma 2) or adds a
sink logit no key carries (gpt-oss), the move changes the capped scores or the sink's share, so there the
picture reads the heads' ``q·k`` rather than their exact weights.
Then queries and keys together are projected on their two principal components (PCA: the SVD of the
centred ``[2N, d]`` matrix), each axis's sign chosen so its largest loading is positive.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import UsageError

MAX_TOKENS = 10_000
MAX_EMBED_TOKENS = 100_000
"""The most tokens one embedding takes (``atlas --embed-tokens``): every head's queries and keys of each are kept,
then projected; a page draws each head's points."""
BATCH = 16
CHUNK = 64  # texts read ahead at a time, then run sorted by length


@dataclass
class QKEmbedding:
    """``coords[layer, head]``: ``[2, N, 2]`` float32, the queries' (0) and keys' (1) two PCA coordinates for
    the ``N`` tokens, which are ``tokens[i]`` at ``positions[i]`` of text ``text_index[i]``; ``explained``
    ``[layers, heads, 2]``: the share of the joint variance each axis holds."""

    layers: list[int]
    n_heads: int
    tokens: list[str]
    text_index: list[int]
    positions: list[int]
    coords: np.ndarray  # [layers, heads, 2, N, 2]
    explained: np.ndarray  # [layers, heads, 2]
    n_texts: int  # texts the tokens come from
    seed: int


def normalise(queries: Tensor, keys: Tensor) -> tuple[Tensor, Tensor]:
    """``queries`` and ``keys`` ``[N, d]`` (float64) scaled to equal mean norms, then the keys' centroid moved onto
    the queries': every softmax over keys is what it was (see the module)."""
    q, k = queries.double(), keys.double()
    ratio = (k.norm(dim=1).mean() / q.norm(dim=1).mean().clamp_min(1e-30)).clamp_min(1e-30)
    q, k = q * ratio.sqrt(), k / ratio.sqrt()
    return q, k - k.mean(0) + q.mean(0)


def project(queries: Tensor, keys: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One head's ``queries`` and ``keys`` ``[N, d]`` normalised and projected on their joint two principal
    components (see the module): ``(query coordinates [N, 2], key coordinates [N, 2], explained share [2])``."""
    q, k = normalise(queries, keys)
    both = torch.cat([q, k])
    centred = both - both.mean(0)
    _, singular, vh = torch.linalg.svd(centred, full_matrices=False)
    axes = vh[:2]
    if axes.shape[0] < 2:  # a head of one dimension: a second axis of zeros
        axes = torch.cat([axes, torch.zeros(2 - axes.shape[0], axes.shape[1], dtype=axes.dtype)])
    signs = torch.sign(axes.gather(1, axes.abs().argmax(1, keepdim=True))).squeeze(1)
    axes = axes * torch.where(signs == 0, torch.ones_like(signs), signs)[:, None]
    points = centred @ axes.T
    variance = singular.square()
    total = variance.sum().clamp_min(1e-300)
    explained = torch.zeros(2, dtype=torch.float64)
    explained[: min(2, variance.numel())] = variance[:2] / total
    n = q.shape[0]
    return points[:n].float(), points[n:].float(), explained.float()


def choose_texts(texts: dict[int, str], seed: int = 0) -> list[int]:
    """The texts' indices in a seeded random order (the order tokens are taken in)."""
    order = sorted(texts)
    random.Random(seed).shuffle(order)
    return order


def qk_embedding(source: Any, texts: dict[int, str], *, max_tokens: int = MAX_TOKENS, seed: int = 0,
                 batch_size: int = BATCH, truncate: bool = True) -> QKEmbedding:
    """Run ``source`` on texts (``text index → text``) in a seeded random order until ``max_tokens`` tokens,
    keeping every head's query and key vectors, and embed each head's jointly (see the module)."""
    can = source.capabilities  # a Source (analysis never imports the sources)
    if not (can.queries_keys or can.details):
        raise UsageError(f"the query-key embedding needs each head's queries and keys; {source.name} on the "
                         f"{source.engine} engine does not show them: use the native or fused engine")
    if max_tokens < 2:
        raise UsageError(f"[[max_tokens={max_tokens}]]: embed at least 2 tokens")
    if max_tokens > MAX_EMBED_TOKENS:
        raise UsageError(f"[[max_tokens={max_tokens}]]: embed at most {MAX_EMBED_TOKENS:,} tokens (10000 shows a "
                         "corpus's shape)")
    ask = {"details": True} if not can.queries_keys else {"queries_keys": True}
    order = choose_texts(texts, seed)
    tokens: list[str] = []
    text_index: list[int] = []
    positions: list[int] = []
    kept: dict[int, tuple[list[Tensor], list[Tensor]]] = {}  # layer position → (queries, keys) [H, n, d] float16
    layers: list[int] = []
    taken = start = 0
    while taken < max_tokens and start < len(order):
        # the next texts in the random order, about as many as the tokens still wanted need (at most CHUNK)
        average = len(tokens) / max(1, len(set(text_index))) if tokens else 16
        size = min(CHUNK, max(batch_size, math.ceil((max_tokens - taken) / max(1.0, average)) + 1))
        chunk, start = order[start:start + size], start + size
        runs: dict[int, Any] = {}
        for batch in _by_length(chunk, texts, batch_size):  # like lengths together: little padding
            layers, runs_of_batch = _run(source, [texts[i] for i in batch], truncate, ask)
            if not runs and runs_of_batch and runs_of_batch[0][1]:  # the first batch: the sizes known, check them
                _check_memory(max_tokens, len(layers), *runs_of_batch[0][1][0][0].shape[::2])
            runs.update(zip(batch, runs_of_batch, strict=True))
        for index in chunk:  # the tokens in the random order, the last text cut to what is wanted
            if taken >= max_tokens:
                break
            labels, per_layer = runs[index]
            use = min(len(labels), max_tokens - taken)
            tokens += labels[:use]
            text_index += [index] * use
            positions += list(range(use))
            for position, (queries, keys) in enumerate(per_layer):
                kept.setdefault(position, ([], []))
                kept[position][0].append(queries[:, :use])
                kept[position][1].append(keys[:, :use])
            taken += use
    if taken < 2:
        raise UsageError(f"the texts hold {taken} token{'s' if taken != 1 else ''}; the embedding needs at least 2")
    n_heads = kept[0][0][0].shape[0]
    coords = np.zeros((len(layers), n_heads, 2, taken, 2), dtype=np.float32)
    explained = np.zeros((len(layers), n_heads, 2), dtype=np.float32)
    for position in range(len(layers)):
        queries_list, keys_list = kept.pop(position)
        queries, keys = torch.cat(queries_list, dim=1).float(), torch.cat(keys_list, dim=1).float()
        for head in range(n_heads):
            q, k, share = project(queries[head], keys[head])
            coords[position, head, 0], coords[position, head, 1] = q.numpy(), k.numpy()
            explained[position, head] = share.numpy()
    n_texts = len(set(text_index))
    return QKEmbedding(list(layers), n_heads, tokens, text_index, positions, coords, explained, n_texts, seed)


def _check_memory(tokens: int, layers: int, heads: int, dims: int) -> None:
    """Refuse an embedding whose queries and keys would not fit the memory budget: each layer's kept in float16,
    one layer's in float32 while projected, one head's centred in float64 for its SVD, and the coordinates."""
    from ..limits import check_memory

    kept = tokens * layers * heads * dims * 2 * 2
    projected = tokens * heads * dims * 2 * (4 + 2) + tokens * 2 * dims * 8 * 4
    check_memory(kept + projected + layers * heads * tokens * 2 * 2 * 4,
                 f"the query-key embedding of {tokens:,} tokens ({layers} layers × {heads} heads × {dims} dimensions; "
                 "lower [[max_tokens]])")


def _by_length(chunk: list[int], texts: dict[int, str], batch_size: int) -> list[list[int]]:
    ordered = sorted(chunk, key=lambda i: len(texts[i]))
    return [ordered[i:i + batch_size] for i in range(0, len(ordered), batch_size)]


def _run(source: Any, batch: list[str], truncate: bool, ask: dict[str, bool]
         ) -> tuple[list[int], list[tuple[list[str], list[tuple[Tensor, Tensor]]]]]:
    """One padded batch: the layers' numbers, and per text its tokens and each layer's ``(queries, keys)``
    ``[H, n, d]`` in float16 on the CPU."""
    if "details" in ask:  # a config model: its results carry every layer's queries and keys
        results = source.extract_batch(batch, truncate=truncate, details=True)
        layers = results[0].metadata.get("layers") or list(range(results[0].n_layers))
        return list(layers), [(list(r.tokens), [(q.to(torch.float16), k.to(torch.float16))
                                                for q, k in zip(r.queries, r.keys, strict=True)]) for r in results]
    stream = source.stream_batch(batch, truncate=truncate, **ask)
    runs: list[tuple[list[str], list[tuple[Tensor, Tensor]]]] = [(list(r.tokens), []) for r in stream.results]
    for _, parts in stream:
        for (_, per_layer), part in zip(runs, parts, strict=True):
            if part.queries is None or part.keys is None:  # an engine that handed this layer on whole
                raise UsageError(f"layer {part.layer} came without its queries and keys; use the native or fused engine")
            per_layer.append((part.queries.to(torch.float16).cpu(), part.keys.to(torch.float16).cpu()))
        del parts
    return list(stream.layers), runs


def tokens_for_budget(heads: int, budget: int, requested: int = MAX_TOKENS) -> int:
    """How many tokens a page can embed for ``heads`` heads within ``budget`` bytes (one byte per coordinate,
    four per token and head)."""
    return max(2, min(requested, budget // (4 * max(1, heads))))


def quantised(embedding: QKEmbedding, layer_position: int, head: int) -> tuple[bytes, list[float]]:
    """One head's coordinates as bytes for a page: ``[2 (query, key), N, 2 (x, y)]`` uint8 on one scale for both
    axes (the picture keeps the embedding's distances), and ``[x0, y0, span]`` to map them back."""
    points = embedding.coords[layer_position, head]
    low = points.reshape(-1, 2).min(0)
    span = float(max((points.reshape(-1, 2).max(0) - low).max(), 1e-12))
    cells = np.clip(np.rint((points - low) / span * 255), 0, 255).astype(np.uint8)
    return cells.tobytes(), [float(low[0]), float(low[1]), span]

