"""The functions of attention, in torch: masks, scores, weights, head reshaping, rotary positions.

Scaled dot-product attention follows Vaswani et al. 2017, "Attention Is All You Need":
``softmax(Q Kᵀ / √d_k + mask) V``. Unlike fused kernels (torch's SDPA, FlashAttention) every
function here returns the attention weights, because an inspector exists to look at them.
:mod:`attnviz.attention` builds its module from them (and names them all again, as before), and
:mod:`attnviz.attention.rows` its row blocks.

Shapes are written where they change: B batch, H heads, T sequence, d head width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

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
    the norm of the value vector itself is returned. Without autograd a head at a time, ``[B, Tk, d_out]`` at once
    rather than every head's (a 2,048-token GPT-2 layer's ``[1, 12, 2048, 768]`` was 75 MB of fresh pages: 64 ms
    against 31 ms, the same numbers).
    """
    if o_weight is None:
        return values.norm(dim=-1)
    _b, h, _t, d = values.shape
    w_o = o_weight.view(o_weight.shape[0], h, d).permute(1, 2, 0).to(values.dtype)  # (H, d, d_out)
    if torch.is_grad_enabled() and (values.requires_grad or w_o.requires_grad):
        return torch.einsum("bhtd,hde->bhte", values, w_o).norm(dim=-1)
    norms = values.new_empty(values.shape[:-1])
    for head in range(h):
        norms[:, head] = (values[:, head] @ w_o[head]).norm(dim=-1)
    return norms
