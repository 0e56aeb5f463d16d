"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"): each
layer's heads fused, the residual added, and the layers chained. Re-exported by :mod:`attnviz.analysis.metrics`;
:mod:`attnviz.attribution.flow` builds attention flow on the same ``Â``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import Tensor

from ..analysis.weights import HeadFusion, read_attention


def fuse_heads(layer: Tensor, head_fusion: HeadFusion = "mean") -> Tensor:
    """One layer's heads ``[heads, q, k]`` fused into one ``[q, k]`` float64 matrix: their mean, max or min."""
    if layer.dim() != 3:
        raise ValueError(f"a layer must be [heads, q, k], got shape {tuple(layer.shape)}")
    if head_fusion == "mean":
        return layer.sum(0).double() / layer.shape[0]
    if head_fusion == "max":
        return layer.amax(0).double()
    if head_fusion == "min":
        return layer.amin(0).double()
    raise ValueError(f"head_fusion {head_fusion!r} must be mean, max or min")


def rollout_steps(layers: Iterable[Tensor], *, head_fusion: HeadFusion = "mean") -> Iterator[Tensor]:
    """:func:`rollout` one layer at a time: given each layer's ``[heads, q, k]`` in order (a tensor
    ``[layers, heads, q, k]`` iterates so), or its heads already fused, ``[q, k]``, yields ``R_l``
    ``[q, k]`` after each. Holds one product at a time."""
    current: Tensor | None = None
    eye: Tensor | None = None
    for layer in layers:
        fused = layer.double() if layer.dim() == 2 else fuse_heads(layer, head_fusion)  # [q, k]: fused already
        if fused.shape[-1] != fused.shape[-2]:
            raise ValueError("rollout needs square self-attention")
        if eye is None:
            eye = torch.eye(fused.shape[-1], dtype=torch.float64)
        hat = fused + eye
        hat = hat / hat.sum(-1, keepdim=True)
        del fused, layer  # this layer is fused: let it go before the next is computed
        current = hat if current is None else hat @ current
        yield current


def rollout(attn: Tensor, *, head_fusion: HeadFusion = "mean") -> Tensor:
    """Attention rollout, ``[layers, q, k]`` (Abnar & Zuidema 2020, "Quantifying Attention Flow").

    1. fuse the heads of each layer (mean, max or min);
    2. add the residual connection, ``Â = A + I``, and renormalise each row to sum to 1;
    3. chain the layers, ``R_0 = Â_0`` and ``R_l = Â_l · R_{l−1}``.

    ``R_l[i, j]`` is how much of input token j reaches position i after layer l. See
    :func:`rollout_steps` for the same one layer at a time.
    """

    a = read_attention(attn)
    if a.shape[-1] != a.shape[-2]:
        raise ValueError("rollout needs square self-attention")
    return torch.stack(list(rollout_steps(a, head_fusion=head_fusion)))
