"""The types the sources hand upward, defined where the sources are: what a walkthrough
(:mod:`attnviz.explain`) needs from a model (:class:`ExplainInputs`) and what norm-based mixing
(:mod:`attnviz.attribution.mixing`) runs on (:class:`MixingParts`). The methods above import them; a
source never imports a method (docs/development.md, the floor plan)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

    from ..attention import MultiHeadAttention
    from ..config import Reference


@dataclass
class PositionSteps:
    """How X was made from the tokens (transformer configs, layer 0): embedding + position, then LayerNorm.

    ``summed = embedding + position`` row by row; the attention's input X is ``LayerNorm(summed)``
    (a pre-LayerNorm block normalises before attending). For a later layer, ``summed`` is the residual
    stream after the layers below and ``embedding``/``position`` are None.
    """

    embedding: Tensor | None  # [T, d], the rows of the embedding table for the tokens
    position: Tensor | None  # [T, d], the positional encoding of positions 0 … T − 1
    summed: Tensor  # [T, d], what enters the block
    kind: str  # "sinusoidal", "none", or "residual" (a layer above 0)
    layer: int = 0  # the layer whose input this is
    layer_norm: bool = True  # X = LayerNorm(summed) (with the block's own weight and bias)


@dataclass
class ExplainInputs:
    """What a walkthrough needs: the attention's input X, its module, labels and masking.

    ``context`` makes it cross-attention: Q comes from X, K and V from the context (an encoder's
    states), whose rows ``context_tokens`` label. ``padding`` marks key positions (of the context
    when there is one, else of X) that are padding: True = padding, never attended to.
    ``rotary`` is RoPE's ``(cos, sin)`` for the positions of X (LLaMA-family models), applied to
    Q and K after the projections. ``positions`` shows how X was made (transformer configs).
    """

    x: Tensor  # [T, d_in]
    attention: MultiHeadAttention
    tokens: list[str]
    causal: bool
    title: str
    reference: Reference | None = None
    context: Tensor | None = None  # [S, d_context]
    context_tokens: list[str] | None = None
    padding: list[bool] | None = None  # one per key position, True = padding
    rotary: tuple[Tensor, Tensor] | None = None  # ([T, d_k], [T, d_k])
    positions: PositionSteps | None = None
    model_kind: str = "config"  # "config" (a .toml) or "model" (a real checkpoint's layer)


@dataclass
class MixingParts:
    """What one layer's attention block is made of, for one text (Kobayashi et al. 2021; the decomposition
    is :mod:`attnviz.attribution.mixing`'s docstring)."""

    layer: int  # the model's number for it
    attentions: Tensor  # [H, T, T]
    transformed: Tensor  # [H, T, d]  f^h(x_j), W_O^h (and b_V) included
    residual: Tensor  # [T, d]  the stream added back, x_i
    bias_o: Tensor | None  # [d]
    post_norm: tuple[Tensor, Tensor, float] | None  # (γ, β, ε) of the LayerNorm after the residual; None: pre-LN
    layer_output: Tensor | None = None  # [T, d] the block's real output (post-LN: after that LN), for checks
