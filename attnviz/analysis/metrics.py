"""Head statistics: pure functions from attentions ``[layers, heads, q, k]`` to ``[layers, heads]``.

Rows are queries and sum to 1. Two families of definitions sit side by side, named apart:

- Clark et al. 2019, "What Does BERT Look At? An Analysis of BERT's Attention": averages over
  queries of the weight a head gives to a kind of key (``self_score``, ``previous_token_mean``,
  ``next_token_score``, ``cls_attention``, ``sep_attention``, ``punctuation_attention``), the
  entropy of its distributions, and the Jensen–Shannon distance between heads.
- TransformerLens ``head_detector.detect_head`` with ``error_measure="mul"``: the share of all
  attention mass that falls on a detection pattern P, ``sum(A⊙P) / sum(A)``
  (``previous_token_score``, ``duplicate_token_score``, ``induction_score``).

So ``previous_token_mean`` is Clark's average weight on the previous token (summed over the
rows and divided by the n rows, as his code does), and ``previous_token_score`` is
TransformerLens's share of mass on it. With no exclusions they coincide, because each of the n
rows sums to 1 (sum(A) = n); ``exclude_bos`` and ``exclude_current_token`` make the second
differ. ``attnviz heads`` shows the one number once, as ``prev_score``; likewise ``cls_attention``
is ``first_token_score`` whenever a text starts with [CLS] or BOS, so the table has ``first`` only.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from .weights import HeadFusion, read_attention  # noqa: F401  (both named here too, as before)

ENTROPY_SMOOTHING = 0.0001  # Clark et al.: 0.9999·A + 0.0001/n before the entropy
DISTANCE_SMOOTHING = 0.001  # Clark et al.: 0.999·A + 0.001/n before the JS divergence


def _check(attn: Tensor) -> Tensor:
    if attn.dim() != 4:
        raise ValueError(f"attentions must be [layers, heads, q, k], got shape {tuple(attn.shape)}")
    return attn.to(torch.float64)


_ROWS = 256  # query rows per block: long inputs are reduced a block at a time, one head at a time


# A block of one head's rows: (block [rows, width], first row, width) → [rows] float64.
RowReducer = Callable[[Tensor, int, int], Tensor]


def _by_rows(a: Tensor, reduce: RowReducer, zeros: Callable[[int], Tensor | float] | None = None) -> Tensor:
    """Per query row, ``[L, H, q]`` float64: ``reduce`` applied to blocks of rows of one head at a
    time, so temporaries stay small (and contiguous) however long the input.

    Where every column right of a block is exactly 0 for all its rows (causal attention's upper
    triangle; checked, not assumed), ``reduce`` sees only the columns left of it, and
    ``zeros(count)`` adds what the ``count`` zero columns contribute per row (default nothing):
    a causal head costs about half the work of a bidirectional one.
    """
    layers, heads, q, k = a.shape
    flat = a.reshape(layers * heads, q, k)
    out = torch.empty(layers * heads, q, dtype=torch.float64)
    for h in range(flat.shape[0]):
        for r0 in range(0, q, _ROWS):
            r1 = min(q, r0 + _ROWS)
            block = flat[h, r0:r1]
            width = r1 if r1 < k and not bool(block[:, r1:].any()) else k
            value = reduce(block[:, :width], r0, width)
            if width < k and zeros is not None:
                value = value + zeros(k - width)
            out[h, r0:r1] = value
    return out.reshape(layers, heads, q)


def _buffer(a: Tensor) -> Tensor:
    """Scratch space for one block, reused by every block (a fresh one each time costs page faults)."""
    return torch.empty(min(_ROWS, a.shape[-2]) * a.shape[-1], dtype=a.dtype)


def row_entropy(attn: Tensor) -> Tensor:
    """Each query row's entropy in nats, ``[layers, heads, q]`` float64, after Clark et al.'s smoothing
    ``0.9999·A + 0.0001/n`` (the rows that :func:`entropy` and :func:`entropy_normalized` average)."""
    a = read_attention(attn)
    n = a.shape[-1]
    alpha, beta = 1 - ENTROPY_SMOOTHING, ENTROPY_SMOOTHING / n
    buffer = _buffer(a)
    # A zero weight smoothed is beta: each such column adds entr(beta) = -beta·ln(beta).
    per_zero = float(torch.special.entr(torch.tensor(beta, dtype=a.dtype)))

    def rows(block: Tensor, r0: int, width: int) -> Tensor:
        p = buffer[: block.numel()].view(block.shape)
        torch.mul(block, alpha, out=p)
        p.add_(beta)
        torch.special.entr(p, out=p)
        return p.sum(-1).double()

    return _by_rows(a, rows, lambda count: count * per_zero)


# --- Clark et al. 2019 -----------------------------------------------------------------------


def entropy(attn: Tensor) -> Tensor:
    """Mean entropy of the query rows, in nats (Clark et al. 2019, section 3.3).

    Each row is smoothed first, ``0.9999·A + 0.0001/n`` (n keys), so log 0 never occurs. A head
    that spreads evenly over n keys scores ln n; one that looks at a single key scores about 0.
    """
    return row_entropy(attn).mean(-1)


def entropy_normalized(attn: Tensor, *, causal: bool = False, rows: Tensor | None = None) -> Tensor:
    """Each row's smoothed entropy divided by ln of the keys it can see, averaged: 1 is uniform, 0 one key.

    Without ``causal`` every row sees all n keys, so this is :func:`entropy` / ln n. With
    ``causal`` row i sees i + 1 keys, so a decoder head that spreads evenly scores 1 as well
    (dividing by ln n would cap it far below 1). Rows that see one key have no spread to
    measure and are left out; 0 when no row sees two keys.
    """
    a = read_attention(attn)
    n = a.shape[-1]
    visible = torch.arange(1, a.shape[-2] + 1, dtype=torch.float64).clamp(max=n) if causal else torch.full((a.shape[-2],), float(n), dtype=torch.float64)
    keep = visible > 1
    if not keep.any():
        return torch.zeros(a.shape[:2], dtype=torch.float64)
    rows = row_entropy(a) if rows is None else rows  # (L, H, q); given when already computed
    return (rows[..., keep] / visible[keep].log()).mean(-1)


def self_score(attn: Tensor) -> Tensor:
    """Mean weight a query gives to itself, ``mean_i A[i, i]`` (Clark et al. 2019)."""
    a = read_attention(attn)
    return a.diagonal(dim1=-2, dim2=-1).sum(-1).double() / min(a.shape[-2:])


def previous_token_mean(attn: Tensor) -> Tensor:
    """Weight on the token before, ``Σ_{i≥1} A[i, i−1] / n`` over the n query rows (Clark et al. 2019, as in their code).

    Row 0, which has no previous token, counts as 0. Equal to TransformerLens's
    :func:`previous_token_score` without exclusions (rows sum to 1), different with them.
    """
    a = read_attention(attn)
    return a.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1).double() / a.shape[-2]


def next_token_score(attn: Tensor) -> Tensor:
    """Weight on the token after, ``Σ_{i<n−1} A[i, i+1] / n`` over the n query rows (Clark et al. 2019)."""
    a = read_attention(attn)
    return a.diagonal(offset=1, dim1=-2, dim2=-1).sum(-1).double() / a.shape[-2]


def attention_to(attn: Tensor, keys: Sequence[bool]) -> Tensor:
    """Mean over queries of the total weight on the chosen keys, ``mean_i Σ_{j∈keys} A[i, j]``."""
    a = read_attention(attn)
    flags = torch.tensor(list(keys), dtype=torch.bool)
    if flags.numel() != a.shape[-1]:
        raise ValueError(f"{flags.numel()} key flags for {a.shape[-1]} keys")
    chosen = a.index_select(-1, flags.nonzero().flatten())  # (L, H, q, |keys|): only those columns
    return chosen.sum(-1).double().mean(-1)


def is_punctuation(token: str) -> bool:
    """A token made only of punctuation characters (Unicode category P*), ## pieces included.

    Clark et al. count "." and ","; attnviz counts every punctuation mark, so "。", "!" and
    "、" count too (the learners this tool serves write Chinese).
    """
    text = token.removeprefix("##")
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


def cls_attention(attn: Tensor, tokens: Sequence[str]) -> Tensor:
    """Mean weight on [CLS] tokens (Clark et al. 2019, figure 2)."""
    return attention_to(attn, [t == "[CLS]" for t in tokens])


def sep_attention(attn: Tensor, tokens: Sequence[str]) -> Tensor:
    """Mean weight on [SEP] tokens (Clark et al. 2019, figure 2)."""
    return attention_to(attn, [t == "[SEP]" for t in tokens])


def punctuation_attention(attn: Tensor, tokens: Sequence[str]) -> Tensor:
    """Mean weight on punctuation tokens (Clark et al. 2019, figure 2; every mark, see :func:`is_punctuation`)."""
    return attention_to(attn, [is_punctuation(t) for t in tokens])


# --- further statistics ----------------------------------------------------------------------


def max_weight(attn: Tensor) -> Tensor:
    """Mean over queries of the largest weight in the row: how sharply a head focuses (1 = one key)."""
    return read_attention(attn).amax(-1).to(torch.float64).mean(-1)


def mean_distance(attn: Tensor) -> Tensor:
    """Expected distance |i − j| between a query and the keys it attends to, averaged over queries."""
    a = read_attention(attn)
    q, k = a.shape[-2:]
    dist = (torch.arange(q, dtype=a.dtype)[:, None] - torch.arange(k, dtype=a.dtype)[None, :]).abs()
    buffer = _buffer(a)

    def rows(block: Tensor, r0: int, width: int) -> Tensor:
        weighted = buffer[: block.numel()].view(block.shape)
        torch.mul(block, dist[r0 : r0 + block.shape[0], :width], out=weighted)
        return weighted.sum(-1).double()

    return _by_rows(a, rows).mean(-1)


def first_token_score(attn: Tensor) -> Tensor:
    """Mean weight on the first token, ``mean_i A[i, 0]``: attention sinks (Xiao et al. 2023) and [CLS]/BOS heads."""
    return read_attention(attn)[..., 0].to(torch.float64).mean(-1)


from .statistics import SINK_THRESHOLD  # noqa: E402 (ε of Gu et al. 2024, defined with the sink statistic)


def sink_importance(attn: Tensor, *, causal: bool = False) -> Tensor:
    """Each key's importance in each head, ``[L, H, k]`` float64, as Gu et al. 2024 ("When Attention
    Sink Emerges", arXiv 2410.10781) define it: the mean of column k over the rows that can see it,
    α_k = (1/(T − k)) Σ_{t ≥ k} A[t, k] (0-based) in a causal model, the mean over every row otherwise.
    A head has a sink at k when α_k > :data:`SINK_THRESHOLD` (Xiao et al. 2023, StreamingLLM)."""
    a = read_attention(attn)
    q, k = a.shape[-2:]
    return a.sum(-2, dtype=torch.float64) / rows_seeing(q, k, causal=causal)  # a causal upper triangle is zero


def rows_seeing(n_queries: int, n_keys: int, *, causal: bool) -> Tensor | float:
    """How many query rows can see each key: ``n − k`` for key k in a causal model (queries and keys
    aligned, at least 1), every row otherwise. The divisor of :func:`sink_importance`'s α_k."""
    if not causal:
        return float(n_queries)
    return (n_queries - torch.arange(n_keys, dtype=torch.float64)).clamp_min(1)


def sink_positions(importance: Tensor, threshold: float = SINK_THRESHOLD) -> list[int]:
    """The keys of one head's ``[k]`` importance that are sinks (α_k > ``threshold``)."""
    return [int(i) for i in torch.nonzero(importance > threshold).flatten()]


# --- TransformerLens detect_head, error_measure="mul" ------------------------------------------


def previous_token_pattern(n: int) -> Tensor:
    """P[i, j] = 1 where j = i − 1 (TransformerLens ``get_previous_token_head_detection_pattern``)."""
    p = torch.zeros(n, n, dtype=torch.float64)
    p[1:, :-1] = torch.eye(n - 1, dtype=torch.float64)
    return p


def duplicate_token_pattern(token_ids: Sequence[int]) -> Tensor:
    """P[i, j] = 1 where j < i and token j is token i (``get_duplicate_token_head_detection_pattern``)."""
    ids = torch.tensor(list(token_ids))
    return (ids[:, None] == ids[None, :]).to(torch.float64).tril(-1)


def induction_pattern(token_ids: Sequence[int]) -> Tensor:
    """P[i, j+1] = 1 where j < i and token j is token i: look at what followed the earlier copy.

    TransformerLens ``get_induction_head_detection_pattern``: the duplicate pattern shifted one
    column right, its first column zero, then lower-triangular.
    """
    dup = duplicate_token_pattern(token_ids)
    shifted = torch.zeros_like(dup)
    shifted[:, 1:] = dup[:, :-1]
    return shifted.tril()


def pattern_score(attn: Tensor, pattern: Tensor, *, exclude_bos: bool = False, exclude_current_token: bool = False) -> Tensor:
    """``sum(A⊙P) / sum(A)`` per head, TransformerLens ``detect_head`` with ``error_measure="mul"``.

    ``exclude_bos`` zeroes attention to the first token, ``exclude_current_token`` the diagonal,
    in both the numerator and the denominator, as TransformerLens does.
    """
    a = read_attention(attn)
    q, k = a.shape[-2:]
    if pattern.shape != (q, k):
        raise ValueError(f"the pattern is {tuple(pattern.shape)} but the attentions are {q}x{k}")
    # Only the pattern's nonzero cells are read (a few per row in text), not a product of two full matrices.
    rows, cols = pattern.nonzero(as_tuple=True)
    keep = torch.ones_like(rows, dtype=torch.bool)
    if exclude_bos:
        keep &= cols != 0
    if exclude_current_token:
        keep &= rows != cols
    rows, cols = rows[keep], cols[keep]
    weights = pattern[rows, cols].to(torch.float64)
    hits = (a[..., rows, cols].to(torch.float64) * weights).sum(-1)
    total = a.sum(-1).double().sum(-1)
    diagonal = a.diagonal(dim1=-2, dim2=-1)
    if exclude_bos:
        total = total - a[..., 0].sum(-1).double()
    if exclude_current_token:
        total = total - diagonal.sum(-1).double()
    if exclude_bos and exclude_current_token:
        total = total + a[..., 0, 0].to(torch.float64)  # subtracted twice above
    return torch.where(total > 0, hits / total.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(total))


def previous_token_score(attn: Tensor, *, exclude_bos: bool = False, exclude_current_token: bool = False) -> Tensor:
    """Share of attention on the previous token, TransformerLens-style (see :func:`pattern_score`)."""
    return pattern_score(attn, previous_token_pattern(attn.shape[-1]), exclude_bos=exclude_bos,
                         exclude_current_token=exclude_current_token)


def duplicate_token_score(
    attn: Tensor, token_ids: Sequence[int], *, exclude_bos: bool = False, exclude_current_token: bool = False
) -> Tensor:
    """Share of attention on earlier copies of the same token, TransformerLens-style."""
    return pattern_score(attn, duplicate_token_pattern(token_ids), exclude_bos=exclude_bos,
                         exclude_current_token=exclude_current_token)


def induction_score(
    attn: Tensor, token_ids: Sequence[int], *, exclude_bos: bool = False, exclude_current_token: bool = False
) -> Tensor:
    """Share of attention on the token after an earlier copy of the current one (Olsson et al. 2022)."""
    return pattern_score(attn, induction_pattern(token_ids), exclude_bos=exclude_bos,
                         exclude_current_token=exclude_current_token)


# --- between heads, and across layers --------------------------------------------------------


def _smoothed(a: Tensor) -> Tensor:
    return (1 - DISTANCE_SMOOTHING) * a + DISTANCE_SMOOTHING / a.shape[-1]


def _js_rows(x: Tensor, y: Tensor) -> Tensor:
    """Jensen–Shannon divergence of matching rows of x and y (broadcast), summed over rows."""
    m = (x + y) / 2
    js = 0.5 * (x * (x / m).log()).sum(-1) + 0.5 * (y * (y / m).log()).sum(-1)
    return js.sum(-1)


def head_distance(attn: Tensor | Sequence[Tensor]) -> Tensor:
    """Jensen–Shannon distance between every pair of heads, ``[L·H, L·H]`` (Clark et al. 2019, section 6).

    Rows are smoothed, ``0.999·A + 0.001/n`` (n tokens); the JS divergence of two heads'
    distributions is taken for each query row and summed over rows. Given several texts'
    attentions (a list), the sums add up over the texts. Head (l, h) is index ``l·H + h``.

    Computed as ``JS(x, y) = H(m) − (H(x) + H(y))/2`` with ``m = (x + y)/2`` (H the entropy), each
    head's row entropies once and each pair once; columns where every head's weight is 0 (a causal
    upper triangle) hold the same smoothed value in every head, so they add nothing and are
    skipped. Elementwise work runs in the input's precision (float32 attentions: about 1e-6 per
    row; float64: equal to the direct definition to rounding) and sums accumulate in float64.
    """
    items = [attn] if isinstance(attn, Tensor) else list(attn)
    if not items:
        raise ValueError("head_distance needs at least one attention tensor")
    total: Tensor | None = None
    for item in items:
        a = read_attention(item)
        layers, heads, q, k = a.shape
        dist = _pairwise_js(a.reshape(layers * heads, q, k))
        total = dist if total is None else total + dist
    assert total is not None  # items is not empty
    return total


def _pairwise_js(a: Tensor, rows_per_block: int = 64) -> Tensor:
    """``[N, N]`` float64: Σ over rows of JS(head i's row, head j's row) for ``a`` ``[N, q, k]``."""
    n, q, k = a.shape
    beta = DISTANCE_SMOOTHING / k
    # Per row, the columns that matter: up to the last one where any head attends at all.
    nonzero = (a != 0).any(0)  # (q, k)
    widths = torch.where(nonzero.any(-1), k - nonzero.flip(-1).int().argmax(-1), torch.ones(q, dtype=torch.long))
    order = torch.argsort(widths)
    dist = torch.zeros(n, n, dtype=torch.float64)
    for start in range(0, q, rows_per_block):
        rows = order[start : start + rows_per_block]
        width = int(widths[rows].max())
        p = (1 - DISTANCE_SMOOTHING) * a[:, rows, :width] + beta  # (N, r, w)
        own = torch.special.entr(p).sum(-1).double().sum(-1)  # (N,): H summed over these rows
        for i in range(n - 1):
            m = (p[i : i + 1] + p[i + 1 :]) / 2  # (N-i-1, r, w)
            mixed = torch.special.entr(m).sum(-1).double().sum(-1)
            dist[i, i + 1 :] += mixed - (own[i] + own[i + 1 :]) / 2
    dist = dist + dist.T
    return dist.clamp_min(0.0)


def paired_head_distance(attn_a: Tensor, attn_b: Tensor) -> Tensor:
    """``[layers, heads]``: the distance of :func:`head_distance` between head (l, h) of a and of b.

    For the same heads on two inputs of equal length, or two models of one shape on one input.
    """
    a, b = _check(attn_a), _check(attn_b)
    if a.shape != b.shape:
        raise ValueError(f"paired_head_distance needs equal shapes, got {tuple(a.shape)} and {tuple(b.shape)}")
    return _js_rows(_smoothed(a), _smoothed(b))


def norm_attention(attn: Tensor, value_norms: Tensor) -> Tensor:
    """Norm-based attention ``‖α_ij f(x_j)‖ = α_ij ‖f(x_j)‖``, ``[layers, heads, q, k]`` (Kobayashi et al. 2020).

    ``f(x) = (x W_V + b_V) W_O^h`` is what head h passes on from token j; ``value_norms``
    ``[layers, heads, k]`` holds ‖f(x_j)‖ (the native engine and config models provide it).
    Because α_ij ≥ 0 the norm of the product is the product of the norms.
    """
    a = _check(attn)
    if value_norms.shape != a.shape[:2] + a.shape[-1:]:
        raise ValueError(f"value_norms must be [layers, heads, k] = {tuple(a.shape[:2] + a.shape[-1:])}")
    return a * value_norms.to(torch.float64)[:, :, None, :]
