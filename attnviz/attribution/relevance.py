"""Attention weighted by gradients: pure functions from the attentions ``A`` and their gradients
``∂y/∂A`` (both ``[layers, heads, q, k]``, layers in forward order) to tensors.

Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability for Interpreting Bi-Modal and
Encoder-Decoder Transformers" (ICCV), for a self-attention model: each layer's heads are fused by
the gradient-weighted, positive part of their attention, Ā_l = mean_h((∂y/∂A_l ⊙ A_l)⁺) (their
Eq. 5), and a relevance map starting from the identity accumulates them layer by layer,
R ← R + Ā_l · R (Eq. 6; rule 7 for R_sq never arises without a second modality). ``y`` is any
scalar output of the model; :func:`attnviz.sources.gradients.attention_gradients` chooses it.

The gradients are taken elsewhere (they need the model); these functions only combine them.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _pair(attn: Tensor, grads: Tensor) -> tuple[Tensor, Tensor]:
    if attn.dim() != 4:
        raise ValueError(f"attentions must be [layers, heads, q, k], got shape {tuple(attn.shape)}")
    if grads.shape != attn.shape:
        raise ValueError(f"the gradients are {tuple(grads.shape)} but the attentions are {tuple(attn.shape)}")
    if attn.shape[-2] != attn.shape[-1]:
        raise ValueError(f"self-attention is square, got {attn.shape[-2]} queries over {attn.shape[-1]} keys")
    return attn.to(torch.float64), grads.to(torch.float64)


def attention_times_gradient(attn: Tensor, grads: Tensor) -> Tensor:
    """``A ⊙ ∂y/∂A`` per head, ``[layers, heads, q, k]`` float64: signed, and unclamped.

    The first-order estimate of how much each attention weight adds to ``y`` (Chefer et al. 2021
    take its positive part, averaged over heads, in :func:`gradient_rollout`; here every head and
    both signs are kept, so a weight that lowers ``y`` shows as negative)."""
    a, g = _pair(attn, grads)
    return a * g


def gradient_rollout(attn: Tensor, grads: Tensor) -> Tensor:
    """Chefer, Gur & Wolf 2021's relevance ``R`` after each layer, ``[layers, q, k]`` float64.

    ``R_0 = I``; then for each layer l in forward order ``Ā_l = mean_h((∂y/∂A_l ⊙ A_l)⁺)`` (Eq. 5,
    the clamp at 0 before the mean over heads) and ``R ← R + Ā_l · R`` (Eq. 6, the self-attention
    rule); entry l is ``R`` after layer l. Row i of the last entry is how relevant each input token
    is to position i's output; for the next-token logit of a decoder, read the last row, for
    [CLS]-like outputs the first.

    As the paper's Eq. 6 and their public code (``avg_heads`` and ``apply_self_attention_rules`` in
    hila-chefer/Transformer-MM-Explainability) have it, no row is normalised: the identity's 1 on
    the diagonal stays, and the added terms are in units of ``y``'s gradient (normalisation, their
    Eqs. 8–9, belongs to the bi-modal rule 10 only). Unlike Abnar & Zuidema's rollout
    (:func:`attnviz.attribution.rollout.rollout`), rows therefore do not sum to 1.
    """
    a, g = _pair(attn, grads)
    fused = (g * a).clamp(min=0).mean(dim=1)  # (L, q, k): Ā_l
    t = a.shape[-1]
    r = torch.eye(t, dtype=torch.float64)
    out = torch.empty(a.shape[0], t, t, dtype=torch.float64)
    for layer in range(a.shape[0]):
        r = r + fused[layer] @ r
        out[layer] = r
    return out
