"""Our own attention, in torch: pure functions first, then the module built from them.

Scaled dot-product attention follows Vaswani et al. 2017, "Attention Is All You Need":
``softmax(Q Kᵀ / √d_k + mask) V``. Unlike fused kernels (torch's SDPA, FlashAttention) every
function here returns the attention weights, because an inspector exists to look at them.

Shapes are written where they change: B batch, H heads, T sequence, d head width.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, NamedTuple

import torch
from torch import Tensor, nn

if TYPE_CHECKING:  # pragma: no cover
    from .attention_rows import AttentionRows, RowMask

__all__ = [
    "AttentionOutput",
    "MultiHeadAttention",
    "apply_rotary",
    "causal_mask",
    "combine_masks",
    "decoding_mask",
    "head_value_norms",
    "merge_heads",
    "padding_mask",
    "repeat_kv",
    "rotary_tables",
    "scaled_dot_product_attention",
    "sliding_window_mask",
    "split_heads",
]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def causal_mask(t_q: int, t_k: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
    """Boolean ``[t_q, t_k]`` mask, True where query i may attend to key j, i.e. j ≤ i.

    The diagonal is aligned at the top left, as in ``torch.nn.functional.scaled_dot_product_attention``
    with ``is_causal=True``.

    Warning: True means "may attend", as in torch's ``scaled_dot_product_attention``. A mask where
    True means "masked" (seed 000's ``torch.triu(ones, diagonal=1).bool()``, any mask written for
    ``masked_fill(mask, -inf)``) must be inverted first (``~mask``); passed as it is, every query
    attends only to the positions it meant to hide, e.g. only to the future.
    """
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril()


def sliding_window_mask(t: int, window: int, *, device: torch.device | str | None = None) -> Tensor:
    """Boolean ``[t, t]``: causal, and query i sees only the last ``window`` keys (i − j < window), as in Mistral."""
    i = torch.arange(t, device=device)[:, None]
    j = torch.arange(t, device=device)[None, :]
    return (j <= i) & (i - j < window)


def decoding_mask(start: int, t_q: int, *, window: int | None = None,
                  device: torch.device | str | None = None) -> Tensor:
    """Boolean ``[t_q, start + t_q]`` for queries at positions ``start … start + t_q − 1`` over every key
    so far (a key/value cache of ``start`` tokens, then the new ones): query i sees key j when
    j ≤ start + i, and with a ``window`` only when start + i − j < window (Mistral's sliding window).
    With ``start = 0`` it is :func:`causal_mask` (or :func:`sliding_window_mask`)."""
    i = torch.arange(start, start + t_q, device=device)[:, None]
    j = torch.arange(start + t_q, device=device)[None, :]
    allowed = j <= i
    return allowed if window is None else allowed & (i - j < window)


def padding_mask(attention_mask: Tensor) -> Tensor:
    """Key-padding mask ``[B, 1, 1, T]`` from a tokenizer's ``attention_mask`` ``[B, T]`` (1 = real token).

    It broadcasts against per-head scores ``[B, H, Tq, Tk]``: padded keys receive no attention.
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be [batch, tokens], got shape {tuple(attention_mask.shape)}")
    return attention_mask.bool()[:, None, None, :]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of boolean masks that broadcast together; ``None`` entries are skipped."""
    combined: Tensor | None = None
    for mask in masks:
        if mask is None:
            continue
        mask = mask.bool()
        combined = mask if combined is None else combined & mask
    return combined


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention output and weights: ``softmax(q kᵀ · scale + mask) v`` (Vaswani et al. 2017).

    Args:
        q: queries ``[..., Tq, d]``.
        k: keys ``[..., Tk, d]``.
        v: values ``[..., Tk, dv]``.
        mask: boolean, broadcastable to ``[..., Tq, Tk]``; **True means "may attend"**, as in torch.
        causal: also forbid attending to later keys (see :func:`causal_mask`).
        scale: multiplies the scores; defaults to ``1/√d``. The dot product of two vectors with
            independent unit-variance components has variance d, so the default keeps the
            logits at unit variance and the softmax out of saturation.

    Returns:
        ``(output [..., Tq, dv], weights [..., Tq, Tk])``. A query row that may attend to nothing
        gets weights of all 0 and an output of 0, never NaN.

    Warning: True means "may attend", as in torch's ``scaled_dot_product_attention``. A mask where
    True means "masked" (seed 000's ``torch.triu(ones, diagonal=1).bool()``, any mask written for
    ``masked_fill(mask, -inf)``) must be inverted first (``~mask``); passed as it is, every query
    attends only to the positions it meant to hide, e.g. only to the future.
    """
    weights = attention_weights(attention_scores(q, k, scale=scale), mask=mask, causal=causal)
    return weights.to(v.dtype) @ v, weights


def attention_scores(q: Tensor, k: Tensor, *, scale: float | None = None) -> Tensor:
    """Pre-softmax scores ``q kᵀ · scale`` ``[..., Tq, Tk]``; ``scale`` defaults to ``1/√d``."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # Scaling the queries first touches T·d numbers instead of T·T (the same value up to rounding).
    return (q * scale) @ k.transpose(-2, -1)


def attention_weights(
    scores: Tensor, *, mask: Tensor | None = None, causal: bool = False, inplace: bool = False
) -> Tensor:
    """Row-wise softmax of scores ``[..., Tq, Tk]`` under a boolean mask (True = may attend).

    Half-precision scores are normalised in float32, as transformers' eager attention does, and
    cast back. Rows with no allowed key become all zeros; real NaNs in the scores still show.
    ``inplace`` overwrites ``scores`` with the weights (same numbers; no second ``[Tq, Tk]``
    buffer, and about 3x faster for long inputs): for callers that do not keep the scores.

    Warning: True means "may attend", as in torch's ``scaled_dot_product_attention``. A mask where
    True means "masked" (seed 000's ``torch.triu(ones, diagonal=1).bool()``, any mask written for
    ``masked_fill(mask, -inf)``) must be inverted first (``~mask``); passed as it is, every query
    attends only to the positions it meant to hide, e.g. only to the future.
    """
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError("mask must be boolean, True where a query may attend to a key")
    if causal:
        mask = combine_masks(mask, causal_mask(scores.shape[-2], scores.shape[-1], device=scores.device))
    low = scores.dtype in _LOW_PRECISION
    work = scores.float() if low else scores
    if torch.is_grad_enabled() and scores.requires_grad:  # a gradient run: no out= (autograd cannot differentiate it)
        return _recorded_weights(work, mask).to(scores.dtype)
    inplace = inplace or low  # a float32 copy of half-precision scores is ours to overwrite
    if mask is None:
        weights = torch.softmax(work, dim=-1, out=work) if inplace else torch.softmax(work, dim=-1)
        return weights.to(scores.dtype)
    # The mask stays at its broadcast shape ([B, 1, Tq, Tk] for all heads): cheap to test and invert.
    has_key = mask.any(dim=-1, keepdim=True)  # [..., Tq, 1]
    work = work.masked_fill_(~mask, float("-inf")) if inplace else work.masked_fill(~mask, float("-inf"))
    if bool(has_key.all()):
        return torch.softmax(work, dim=-1, out=work).to(scores.dtype)
    # A fully masked row is filled with 0 (not -inf) so softmax stays finite, then zeroed.
    work.masked_fill_(~has_key, 0.0)
    weights = torch.softmax(work, dim=-1, out=work).masked_fill_(~has_key, 0.0)
    return weights.to(scores.dtype)


def _recorded_weights(work: Tensor, mask: Tensor | None) -> Tensor:
    """:func:`attention_weights` out of place, for autograd (gradients with respect to the weights,
    :mod:`attnviz.sources.gradients`): the same numbers, rows with no allowed key all 0."""
    if mask is None:
        return torch.softmax(work, dim=-1)
    has_key = mask.any(dim=-1, keepdim=True)  # [..., Tq, 1]
    weights = torch.softmax(work.masked_fill(~mask, float("-inf")).masked_fill(~has_key, 0.0), dim=-1)
    return weights if bool(has_key.all()) else weights.masked_fill(~has_key, 0.0)


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """``[B, T, H·d]`` → ``[B, H, T, d]``: head h takes columns ``h·d … (h+1)·d − 1``."""
    b, t, width = x.shape
    if width % n_heads:
        raise ValueError(f"width {width} is not divisible by {n_heads} heads")
    return x.view(b, t, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``[B, H, T, d]`` → ``[B, T, H·d]``, the concatenation of the heads' outputs."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Grouped-query attention: ``[B, H_kv, T, d]`` → ``[B, H_kv·n_rep, T, d]``.

    Query head h reads key/value head ``h // n_rep``, as in transformers' ``repeat_kv``.
    """
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def rotary_tables(positions: Tensor, dim: int, theta: float = 10000.0) -> tuple[Tensor, Tensor]:
    """RoPE ``(cos, sin)``, each ``[T, dim]``, for integer ``positions`` ``[T]`` (Su et al. 2021).

    Frequencies ``θ^(−2i/dim)`` are laid out twice (``cat(f, f)``), pairing dimension i with
    i + dim/2, the layout of the LLaMA family in transformers.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device=positions.device).float() / dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]  # (T, dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, dim)
    return emb.cos(), emb.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` ``[..., T, dim]`` by RoPE tables ``[T, dim]``: ``x·cos + rotate_half(x)·sin``."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def head_value_norms(values: Tensor, o_weight: Tensor | None) -> Tensor:
    """‖f(x_j)‖ per head and key, ``[B, H, Tk]``, with ``f(x) = (x W_V + b_V) W_O^h`` (Kobayashi et al. 2020).

    ``values`` are the heads' value vectors ``[B, H, Tk, d]``; ``o_weight`` is W_O as ``nn.Linear``
    stores it, ``[d_out, H·d]``; head h's slice is its columns ``h·d … (h+1)·d − 1``. Without W_O
    the norm of the value vector itself is returned.
    """
    if o_weight is None:
        return values.norm(dim=-1)
    _b, h, _t, d = values.shape
    w_o = o_weight.view(o_weight.shape[0], h, d).permute(1, 2, 0)  # (H, d, d_out)
    return torch.einsum("bhtd,hde->bhte", values, w_o.to(values.dtype)).norm(dim=-1)


class AttentionOutput(NamedTuple):
    """What :class:`MultiHeadAttention` returns."""

    output: Tensor  # [B, Tq, d_out]
    weights: Tensor | None  # [B, H, Tq, Tk], per head (None with need_weights=False)
    scores: Tensor | None  # [B, H, Tq, Tk], pre-softmax, scaled, before masking (None unless kept)
    values: Tensor  # [B, H, Tk, d], each head's value vectors (shared ones repeated under GQA)
    queries: Tensor | None = None  # [B, H, Tq, d], each head's query vectors (after RoPE)
    keys: Tensor | None = None  # [B, H, Tk, d], each head's key vectors (after RoPE; repeated under GQA)
    rows: AttentionRows | None = None  # the weights as blocks of rows on demand (need_weights="rows")


class MultiHeadAttention(nn.Module):
    """Multi-head attention with per-head weights, for self- and cross-attention.

    Projections use ``nn.Linear`` (weight ``[out, in]``, so ``Q = x Wᵀ + b``). ``n_kv_heads``
    below ``n_heads`` gives grouped-query attention; ``d_context`` is the width of the sequence
    attended to in cross-attention; ``d_out`` the width after W_O (default ``d_model``).
    ``d_value`` is each head's value width, d_v (default ``d_head``, the query/key width d_k): V is
    then ``n_kv_heads · d_value`` wide and W_O reads ``n_heads · d_value`` columns.
    ``out_proj=False`` leaves out W_O and returns
    the concatenated heads, as in seed 002's worked example.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        d_head: int | None = None,
        n_kv_heads: int | None = None,
        d_context: int | None = None,
        d_out: int | None = None,
        bias: bool = True,
        out_proj: bool = True,
        d_value: int | None = None,
    ) -> None:
        super().__init__()
        if d_head is None:
            if d_model % n_heads:
                raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
            d_head = d_model // n_heads
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads {n_heads} is not divisible by n_kv_heads {n_kv_heads}")
        d_context = d_model if d_context is None else d_context
        d_value = d_head if d_value is None else d_value
        self.n_heads, self.n_kv_heads, self.d_head, self.d_value = n_heads, n_kv_heads, d_head, d_value
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)
        self.k_proj = nn.Linear(d_context, n_kv_heads * d_head, bias=bias)
        self.v_proj = nn.Linear(d_context, n_kv_heads * d_value, bias=bias)
        d_out = d_model if d_out is None else d_out
        self.o_proj = nn.Linear(n_heads * d_value, d_out, bias=bias) if out_proj else None

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        mask: Tensor | RowMask | None = None,
        causal: bool = False,
        rotary: tuple[Tensor, Tensor] | None = None,
        scale: float | None = None,
        need_weights: bool | Literal["rows"] = True,
        keep_scores: bool = True,
        past: tuple[Tensor, Tensor] | None = None,
    ) -> AttentionOutput:
        """Attend from ``x`` ``[B, Tq, d_model]`` to ``context`` ``[B, Tk, d_context]`` (default: ``x``).

        ``mask`` is boolean, broadcastable to ``[B, H, Tq, Tk]``, True = may attend; combine a
        :func:`padding_mask` and a :func:`causal_mask` with :func:`combine_masks`. ``rotary`` is a
        ``(cos, sin)`` pair from :func:`rotary_tables`, applied to queries and keys (RoPE).

        ``need_weights=False`` computes only the output, with torch's fused kernel: the
        ``[Tq, Tk]`` matrices are never built (``weights`` and ``scores`` are None). That is how a
        layer nobody asked to see costs no attention-matrix memory. ``keep_scores=False`` drops
        the pre-softmax scores as soon as the weights exist. ``need_weights="rows"`` computes the
        output the same way and returns the weights as :class:`attnviz.attention_rows.AttentionRows`
        (``rows``), blocks of query rows made on demand: how inputs too long for one ``[H, T, T]`` are read.
        ``mask`` may be a :class:`attnviz.attention_rows.RowMask`, a mask described rather than built.

        ``past`` is a key/value cache for incremental decoding: the ``(keys, values)`` an earlier call
        returned (``[B, H, T_past, d]``, after RoPE, repeated under GQA). The new keys and values are
        appended to them, so ``x`` holds only the new tokens (``rotary`` and ``mask`` then describe
        the new queries' positions, see :func:`decoding_mask`); the returned ``keys`` and ``values``
        are the whole cache for the next call.

        Warning: True means "may attend", as in torch's ``scaled_dot_product_attention``. A mask where
        True means "masked" (seed 000's ``torch.triu(ones, diagonal=1).bool()``, any mask written for
        ``masked_fill(mask, -inf)``) must be inverted first (``~mask``); passed as it is, every query
        attends only to the positions it meant to hide, e.g. only to the future.
        """
        context = x if context is None else context
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, H, Tq, d)
        k = split_heads(self.k_proj(context), self.n_kv_heads)  # (B, H_kv, Tk, d)
        v = split_heads(self.v_proj(context), self.n_kv_heads)  # (B, H_kv, Tk, d)
        n_rep = self.n_heads // self.n_kv_heads
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H, Tk, d)
        if past is not None:
            k, v = torch.cat((past[0], k), dim=-2), torch.cat((past[1], v), dim=-2)  # (B, H, T_past + Tk, d)
        scores: Tensor | None
        weights: Tensor | None
        rows: AttentionRows | None = None
        if need_weights == "rows" or (not need_weights and not isinstance(mask, Tensor)):
            from .attention_rows import AttentionRows, RowMask, blocked_attention

            if isinstance(mask, Tensor):
                raise ValueError('need_weights="rows" takes a RowMask (a mask described, not built), not a tensor')
            described = mask
            if causal:
                described = RowMask(q.shape[-2], k.shape[-2], None if described is None else described.padding, 0,
                                    None if described is None else described.window, q.device)
            heads = blocked_attention(q, k, v, described, scale=scale)  # (B, H, Tq, d)
            rows = AttentionRows(q, k, described, scale) if need_weights == "rows" else None
            scores = weights = None
        elif need_weights:
            if mask is not None and not isinstance(mask, Tensor):
                mask = mask.dense()
            scores = attention_scores(q, k, scale=scale)  # (B, H, Tq, Tk)
            # Scores nobody keeps become the weights in place: one [Tq, Tk] buffer per head, not three.
            weights = attention_weights(scores, mask=mask, causal=causal, inplace=not keep_scores)
            heads = weights.to(v.dtype) @ v  # (B, H, Tq, d)
            if not keep_scores:
                scores = None
        else:
            allowed = combine_masks(mask, causal_mask(q.shape[-2], k.shape[-2], device=q.device) if causal else None)
            heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
            scores = weights = None
        out = merge_heads(heads)  # (B, Tq, H·d)
        if self.o_proj is not None:
            out = self.o_proj(out)  # (B, Tq, d_out)
        return AttentionOutput(out, weights, scores, v, q, k, rows)
