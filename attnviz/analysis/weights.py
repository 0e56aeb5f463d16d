"""The attention weights as every analysis reads them: ``[layers, heads, q, k]``, in a precision a
sum can trust. A leaf module: the metrics, rollout and flow all read through it."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

HeadFusion = Literal["mean", "max", "min"]
"""How the heads of a layer are fused into one matrix (rollout, flow, attribution)."""


def read_attention(attn: Tensor) -> Tensor:
    """The attentions as they are (float32 or float64; half precision is widened to float32).

    The per-head statistics read them in place: a row (at most a few thousand keys) is summed in
    the input's precision with torch's cascade summation, and rows are accumulated in float64. So
    a long input ([12, 12, 4096, 4096] is 9.7 GB in float64) is never copied whole into float64,
    and the result agrees with a float64 computation to about 1e-6 relative.
    """
    if attn.dim() != 4:
        raise ValueError(f"attentions must be [layers, heads, q, k], got shape {tuple(attn.shape)}")
    return attn.float() if attn.dtype in (torch.float16, torch.bfloat16) else attn
