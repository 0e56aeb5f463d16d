"""Norm-based mixing with the residual and LayerNorm: one layer's attention block split per token pair.

Kobayashi et al. 2021, "Incorporating Residual and Normalization Layers into Analysis of Masked
Language Models" (EMNLP), extending the per-head ``‖α_ij f(x_j)‖`` of Kobayashi et al. 2020 (see
:func:`attnviz.analysis.metrics.norm_attention`). With ``f^h(x) = (x W_V^h + b_V^h) W_O^h`` (W_O kept, b_V
inside f), the attention block of token i is split into one vector per key j:

- ``Σ_h α^h_ij f^h(x_j)`` (their "Attn-N"), the heads summed through W_O;
- ``z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i`` ("AttnRes-N"), the residual added on the diagonal;
- ``g_i(z_ij)`` ("AttnResLn-N", post-LN models such as BERT), with
  ``g_i(z) = γ ⊙ (z − mean(z)) / √(var(y_i) + ε)`` and ``y_i = Σ_j z_ij + b_O`` the LayerNorm's
  real input. g_i is linear given the row's statistics, so ``LN(y_i) = Σ_j g_i(z_ij) + g_i(b_O) + β``.

The context-mixing ratio of token i is ``‖Σ_{j≠i} v_ij‖ / (‖Σ_{j≠i} v_ij‖ + ‖v_ii‖)`` for the
pieces v of a level: the norm of the *sum* of the other tokens' vectors, as the authors' code
computes it (``BertNormOutput`` in their modified ``modeling_bert.py``), not the sum of their norms.
As there, b_O, g_i(b_O) and β belong to no pair and are left out of every norm and ratio;
:func:`reconstruct` adds them back, so the pieces sum to the block's real output.

Pre-LN models (GPT-2, the LLaMA family, attnviz's own transformer configs) compute
``x_i + Σ_j Σ_h α^h_ij f^h(LN_1(x_j)) + b_O``: LN_1 acts per token before the values, so it is
inside f; the residual is the un-normalised stream x_i; and no LayerNorm follows the sum (the next
norm is the MLP's). There the decomposition stops at attention + residual: no "layernorm" level.
This extends the paper, which analyses post-LN masked language models only.

Departures (the numbers are the paper's; only the way to them differs): the authors build every
pair vector, ``[T, T, d]`` in float32. Here no norm needs them: ``‖Σ_h α^h_ij u^h_j‖²`` is the
quadratic form of α_ij in the per-key Gram matrix of the heads' vectors (see :func:`_norms`), summed
in float64 over blocks of query rows (``chunk_rows``; by default sized to about 64 MiB), and the
ratios need only ``[T, d]`` sums. The vectors themselves (:func:`pair_vectors`, :func:`reconstruct`)
are built in the inputs' precision (float32; float64 for float64 inputs). Every norm and ratio
returned is float64. The ratio is 0 where both norms are 0.
Shapes: H heads, T tokens, d model width.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from ..sources.contracts import MixingParts

MixingLevel = Literal["attention", "residual", "layernorm"]
LEVELS: tuple[MixingLevel, ...] = ("attention", "residual", "layernorm")
_CHUNK_ELEMENTS = 1 << 23  # numbers in one block: [rows, T, H] float64 or [rows, T, d] float32, 32-64 MiB


@dataclass
class LayerMixing:
    """Every level of one layer: ``[T, T]`` norms per (query i, key j) and ``[T]`` ratios per level."""

    layer: int
    attention: Tensor  # [T, T] ‖Σ_h α^h_ij f^h(x_j)‖
    residual: Tensor  # [T, T] ‖z_ij‖
    layernorm: Tensor | None  # [T, T] ‖g_i(z_ij)‖; None for pre-LN models
    ratios: dict[str, Tensor] = field(default_factory=dict)  # level → [T] context-mixing ratio

    @property
    def ratio(self) -> Tensor:
        """The ratio at the deepest level the model has (post-LN: after the LayerNorm; pre-LN: attention + residual)."""
        return self.ratios["layernorm"] if self.layernorm is not None else self.ratios["residual"]


# --- the pure functions on tensors ------------------------------------------------------------------


def layer_norm_attention(attn: Tensor, transformed: Tensor, *, chunk_rows: int | None = None) -> Tensor:
    """``‖Σ_h α^h_ij f^h(x_j)‖`` ``[T, T]`` float64: the heads of one layer summed through W_O
    (Kobayashi et al. 2021, "Attn-N"). ``transformed[h, j]`` is ``f^h(x_j)``."""
    a, f = _check(attn, transformed)
    return _norms(a, f, None, None, ("attention",), chunk_rows)["attention"]


def residual_norm_attention(attn: Tensor, transformed: Tensor, residual: Tensor, *,
                            chunk_rows: int | None = None) -> Tensor:
    """``‖z_ij‖`` ``[T, T]`` float64 with ``z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i`` (Kobayashi et al. 2021,
    "AttnRes-N"): ``residual[i]`` is added to the pair (i, i). b_O is in no pair, as in the paper."""
    a, f = _check(attn, transformed)
    return _norms(a, f, _vector(residual, f, "residual", rows=True), None, ("residual",), chunk_rows)["residual"]


def layernorm_norm_attention(attn: Tensor, transformed: Tensor, residual: Tensor, bias_o: Tensor | None,
                             ln_weight: Tensor, ln_bias: Tensor, eps: float, *, chunk_rows: int | None = None) -> Tensor:
    """``‖g_i(z_ij)‖`` ``[T, T]`` float64 for a post-LN block ``LN(x + attention)`` (Kobayashi et al. 2021,
    "AttnResLn-N"): ``g_i(z) = γ ⊙ (z − mean(z)) / √(var(y_i) + ε)``, the statistics those of the
    LayerNorm's real input ``y_i = Σ_j z_ij + b_O``. β (``ln_bias``) is added once per token, to no
    pair, so no norm depends on it (it is checked for shape; :func:`reconstruct` adds it)."""
    a, f = _check(attn, transformed)
    x = _vector(residual, f, "residual", rows=True)
    post = _post_scale(_sums(a, f)[0], x, f, bias_o, (ln_weight, ln_bias, eps))
    return _norms(a, f, x, post, ("layernorm",), chunk_rows)["layernorm"]


# --- on one layer's parts ------------------------------------------------------------------------


def mixing_ratio(parts: MixingParts, *, level: MixingLevel | None = None) -> Tensor:
    """Context-mixing ratio per token ``[T]`` float64 (Kobayashi et al. 2021):
    ``r_i = ‖Σ_{j≠i} v_ij‖ / (‖Σ_{j≠i} v_ij‖ + ‖v_ii‖)``, the share of token i's output that comes
    from the other tokens. ``level`` picks the pieces v: "attention" (Σ_h α f), "residual" (z_ij)
    or "layernorm" (g_i(z_ij), post-LN only); by default the deepest the model has. No ``[T, T, d]``
    tensor is built: ``Σ_j v_ij`` is the block's output and ``v_ii`` one vector per token."""
    a, f = _check(parts.attentions, parts.transformed)
    x = _vector(parts.residual, f, "residual", rows=True)
    level = _level(parts, level)
    total, own = _sums(a, f)
    post = _post_scale(total, x, f, parts.bias_o, parts.post_norm) if level == "layernorm" else None
    return _ratio(total, own, x, post, level)


def layer_mixing(parts: MixingParts, *, chunk_rows: int | None = None) -> LayerMixing:
    """Every level's ``[T, T]`` norms and ``[T]`` ratios for one layer (Kobayashi et al. 2021)."""
    a, f = _check(parts.attentions, parts.transformed)
    x = _vector(parts.residual, f, "residual", rows=True)
    total, own = _sums(a, f)
    post = None if parts.post_norm is None else _post_scale(total, x, f, parts.bias_o, parts.post_norm)
    levels: tuple[MixingLevel, ...] = LEVELS if post is not None else LEVELS[:2]
    norms = _norms(a, f, x, post, levels, chunk_rows)
    ratios: dict[str, Tensor] = {level: _ratio(total, own, x, post if level == "layernorm" else None, level) for level in levels}
    return LayerMixing(parts.layer, norms["attention"], norms["residual"], norms.get("layernorm"), ratios)


def pair_vectors(parts: MixingParts, *, level: MixingLevel | None = None,
                 rows: tuple[int, int] | None = None) -> Tensor:
    """The pair vectors themselves, ``[rows, T, d]`` float64, for query rows ``rows = (first, end)``
    (default every row: ``[T, T, d]``, for small inputs): ``Σ_h α^h_ij f^h(x_j)``, ``z_ij`` or
    ``g_i(z_ij)`` by ``level`` (default the deepest the model has). Their norms are what the
    ``*_norm_attention`` functions return."""
    a, f = _check(parts.attentions, parts.transformed)
    x = _vector(parts.residual, f, "residual", rows=True)
    level = _level(parts, level)
    r0, r1 = rows if rows is not None else (0, a.shape[-1])
    if not 0 <= r0 < r1 <= a.shape[-1]:
        raise ValueError(f"rows must be (first, end) with 0 ≤ first < end ≤ {a.shape[-1]}, got {rows}")
    post = _post_scale(_sums(a, f)[0], x, f, parts.bias_o, parts.post_norm) if level == "layernorm" else None
    return _pair_block(a, f.transpose(0, 1).contiguous(), x, post, level, r0, r1).double()


def reconstruct(parts: MixingParts, *, chunk_rows: int | None = None) -> Tensor:
    """The block's output ``[T, d]`` float64 rebuilt from the pair vectors (:func:`pair_vectors`, built a
    block of ``chunk_rows`` query rows at a time): post-LN ``Σ_j g_i(z_ij) + g_i(b_O) + β``, pre-LN
    ``Σ_j z_ij + b_O``. It equals ``parts.layer_output`` up to rounding when the decomposition is
    right (the tests' check)."""
    a, f = _check(parts.attentions, parts.transformed)
    x = _vector(parts.residual, f, "residual", rows=True)
    post = None if parts.post_norm is None else _post_scale(_sums(a, f)[0], x, f, parts.bias_o, parts.post_norm)
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    t, by_key = a.shape[-1], f.transpose(0, 1).contiguous()  # (T, H, d), laid out once for every block
    step = _rows_per_block(t, f.shape[-1], chunk_rows)
    for r0 in range(0, t, step):
        block = _pair_block(a, by_key, x, post, "layernorm" if post is not None else "residual", r0, min(t, r0 + step))
        out[r0 : r0 + block.shape[0]] = block.sum(dim=1).double()  # Σ_j v_ij
        del block
    bias = None if parts.bias_o is None else _vector(parts.bias_o, f, "bias_o").double()
    if post is None:
        return out if bias is None else out + bias
    weight, ln_bias, scale = post
    if bias is not None:
        out += weight.double() * (bias - bias.mean()) * scale.double()[:, None]  # g_i(b_O)
    return out + ln_bias.double()


# --- the work ------------------------------------------------------------------------------------

# (γ [d], β [d], 1/√(var(y_i) + ε) [T]) of a post-LN block, in the working precision.
PostScale = tuple[Tensor, Tensor, Tensor]


def _level(parts: MixingParts, level: MixingLevel | None) -> MixingLevel:
    """``level``, checked against the model; by default the deepest it has."""
    level = level or ("layernorm" if parts.post_norm is not None else "residual")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
    if level == "layernorm" and parts.post_norm is None:
        raise ValueError("a pre-LN layer has no LayerNorm after attention + residual; use level='residual'")
    return level


def _check(attn: Tensor, transformed: Tensor) -> tuple[Tensor, Tensor]:
    """Both in the working precision: float64 stays, anything else becomes float32."""
    if attn.dim() != 3 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attentions must be one layer's [heads, T, T], got shape {tuple(attn.shape)}")
    if transformed.dim() != 3 or transformed.shape[:2] != attn.shape[:2]:
        raise ValueError(f"transformed must be [heads, T, d] = [{attn.shape[0]}, {attn.shape[1]}, d], "
                         f"got shape {tuple(transformed.shape)}")
    dtype = torch.float64 if transformed.dtype == torch.float64 else torch.float32
    return attn.to(dtype), transformed.to(dtype)


def _vector(t: Tensor, like: Tensor, name: str, *, rows: bool = False) -> Tensor:
    """``t`` checked to be ``[T, d]`` (``rows``) or ``[d]`` against ``like`` ``[H, T, d]``, in its dtype."""
    shape = like.shape[1:] if rows else like.shape[2:]
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must be {list(shape)}, got shape {tuple(t.shape)}")
    return t.to(like.dtype)


def _sums(a: Tensor, f: Tensor) -> tuple[Tensor, Tensor]:
    """``(Σ_j Σ_h α^h_ij f^h(x_j), Σ_h α^h_ii f^h(x_i))``, each ``[T, d]``: the attention block's output
    without b_O, and its j = i term."""
    total = torch.einsum("hqk,hkd->qd", a, f)
    own = torch.einsum("hq,hqd->qd", torch.diagonal(a, dim1=1, dim2=2), f)
    return total, own


def _post_scale(total: Tensor, x: Tensor, f: Tensor, bias_o: Tensor | None,
                post_norm: tuple[Tensor, Tensor, float] | None) -> PostScale:
    """γ, β and ``1/√(var(y_i) + ε)`` from the LayerNorm's real input ``y = Σ_h α f + x + b_O`` ``[T, d]``
    (``total`` is the first term, from :func:`_sums`)."""
    if post_norm is None:
        raise ValueError("the layernorm level needs post_norm = (weight, bias, eps) of the LayerNorm after the residual")
    weight, bias, eps = post_norm
    y = total + x  # (T, d)
    if bias_o is not None:
        y = y + _vector(bias_o, f, "bias_o")
    var = y.var(dim=-1, unbiased=False)  # LayerNorm's biased variance
    return _vector(weight, f, "ln_weight"), _vector(bias, f, "ln_bias"), torch.rsqrt(var + float(eps))


def _rows_per_block(t: int, d: int, chunk_rows: int | None) -> int:
    if chunk_rows is not None and chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
    return chunk_rows or max(1, _CHUNK_ELEMENTS // max(1, t * d))


def _pair_block(a: Tensor, by_key: Tensor, x: Tensor, post: PostScale | None, level: MixingLevel,
                r0: int, r1: int) -> Tensor:
    """The pair vectors of query rows ``r0 … r1 − 1`` at ``level``, ``[rows, T, d]`` in the working
    precision; ``by_key`` is ``transformed`` laid out ``[T, H, d]`` (one batched product per key)."""
    weights = a[:, r0:r1].permute(2, 1, 0).contiguous()  # (T, rows, H)
    block = torch.bmm(weights, by_key).transpose(0, 1)  # (rows, T, d): Σ_h α^h_ij f^h(x_j)
    if level != "attention":
        block = _add_residual(block, x, r0)
    if level == "layernorm" and post is not None:
        block = _normalise(block, post, r0)
    return block


def _add_residual(block: Tensor, x: Tensor, r0: int) -> Tensor:
    """In place: ``z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i`` for the block's rows ``r0 …``."""
    rows = torch.arange(block.shape[0], device=block.device)
    block[rows, rows + r0] += x[r0 : r0 + block.shape[0]]
    return block


def _normalise(block: Tensor, post: PostScale, r0: int) -> Tensor:
    """In place: ``g_i(z_ij) = γ ⊙ (z_ij − mean(z_ij)) / √(var(y_i) + ε)`` for the block's rows ``r0 …``."""
    weight, _bias, scale = post
    block -= block.mean(dim=-1, keepdim=True)
    return block.mul_(scale[r0 : r0 + block.shape[0], None, None]).mul_(weight)


def _norms(a: Tensor, f: Tensor, x: Tensor | None, post: PostScale | None, levels: tuple[MixingLevel, ...],
           chunk_rows: int | None) -> dict[str, Tensor]:
    """``[T, T]`` float64 norms at each of ``levels`` (``x`` is needed below "attention", ``post`` for
    "layernorm"), without building the pair vectors.

    ``‖Σ_h α^h_ij u^h_j‖² = α_ijᵀ G_j α_ij`` with the per-key Gram matrix ``G_j[h, g] = ⟨u^h_j, u^g_j⟩``
    ``[H, H]``: u = f for the first two levels; for the third, ``g_i(z) = s_i γ ⊙ (z − mean(z))``
    is ``s_i`` times a map that does not depend on i, so u is f centred and scaled by γ. The
    residual adds ``2 Σ_h α^h_ii ⟨u^h_i, x̃_i⟩ + ‖x̃_i‖²`` on the diagonal (x̃: x through the same map).
    That costs ``T·H²·d + T²·H²`` instead of ``T²·H·d``, and ``[rows, T, H]`` of memory instead of
    ``[rows, T, d]``; the quadratic forms are summed in float64, so cancellation between heads costs
    no precision worth speaking of."""
    t = a.shape[-1]
    out: dict[str, Tensor] = {level: torch.zeros(t, t, dtype=torch.float64, device=a.device) for level in levels}
    plain = [level for level in levels if level != "layernorm"]
    if plain:
        gram, extra = _gram(a, f, x if "residual" in plain else None, None)
        for r0, sq in _quadratic(a, gram, chunk_rows):
            rows, width = sq.shape
            if "attention" in out:
                out["attention"][r0 : r0 + rows, :width] = sq.clamp_min(0).sqrt()
            if extra is not None:
                _add_diagonal(sq, extra, r0)
                out["residual"][r0 : r0 + rows, :width] = sq.clamp_min(0).sqrt()
    if "layernorm" in out:
        if x is None or post is None:  # pragma: no cover - the public functions always pass both
            raise ValueError("the layernorm level needs the residual and the LayerNorm")
        weight, _bias, scale = post
        gram, extra = _gram(a, f, x, weight)
        assert extra is not None  # _gram's diagonal term, given x
        for r0, sq in _quadratic(a, gram, chunk_rows):
            rows, width = sq.shape
            _add_diagonal(sq, extra, r0)
            out["layernorm"][r0 : r0 + rows, :width] = sq.clamp_min(0).sqrt() * scale[r0 : r0 + rows, None].double()
    return out


def _gram(a: Tensor, f: Tensor, x: Tensor | None, weight: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """``G`` ``[T, H, H]`` float64 of the mapped vectors u (f, or ``γ ⊙ (f − mean f)`` with ``weight``),
    and with ``x`` the residual's diagonal term ``[T]``: ``2 Σ_h α^h_ii ⟨u^h_i, x̃_i⟩ + ‖x̃_i‖²``."""
    h, t, d = f.shape
    step = max(1, _CHUNK_ELEMENTS // max(1, h * d))
    gram = torch.empty(t, h, h, dtype=torch.float64, device=f.device)
    extra = None if x is None else torch.empty(t, dtype=torch.float64, device=f.device)
    own = torch.diagonal(a, dim1=1, dim2=2).T  # (T, H): α^h_ii
    for k0 in range(0, t, step):
        k1 = min(t, k0 + step)
        u = _mapped(f[:, k0:k1].double(), weight).transpose(0, 1).contiguous()  # (keys, H, d)
        gram[k0:k1] = u @ u.transpose(1, 2)
        if x is not None and extra is not None:
            xm = _mapped(x[k0:k1].double(), weight)  # (keys, d)
            cross = (u @ xm[:, :, None])[..., 0]  # (keys, H): ⟨u^h_i, x̃_i⟩
            extra[k0:k1] = 2 * (own[k0:k1].double() * cross).sum(-1) + (xm * xm).sum(-1)
    return gram, extra


def _mapped(v: Tensor, weight: Tensor | None) -> Tensor:
    return v if weight is None else (v - v.mean(dim=-1, keepdim=True)) * weight.double()


def _quadratic(a: Tensor, gram: Tensor, chunk_rows: int | None) -> Iterator[tuple[int, Tensor]]:
    """``(first row, α_ijᵀ G_j α_ij [rows, width])`` float64, a block of query rows at a time; keys
    right of a block that all its rows give weight exactly 0 (causal attention) are left out."""
    h, t, _t = a.shape
    step = _rows_per_block(t, h, chunk_rows)
    for r0 in range(0, t, step):
        r1 = min(t, r0 + step)
        width = r1 if r1 < t and not bool(a[:, r0:r1, r1:].any()) else t
        weights = a[:, r0:r1, :width].double().permute(2, 1, 0).contiguous()  # (width, rows, H); bmm wants it dense
        yield r0, (torch.bmm(weights, gram[:width]) * weights).sum(-1).T  # (rows, width)


def _add_diagonal(sq: Tensor, extra: Tensor, r0: int) -> None:
    rows = torch.arange(sq.shape[0], device=sq.device)
    sq[rows, rows + r0] += extra[r0 : r0 + sq.shape[0]]


def _ratio(total: Tensor, own: Tensor, x: Tensor, post: PostScale | None, level: MixingLevel) -> Tensor:
    """``[T]`` from the block's sum over keys and its j = i term (:func:`_sums`), at ``level``."""
    if level != "attention":
        total, own = total + x, own + x
    mixing = total - own  # Σ_{j≠i} v_ij
    if post is not None:
        weight, _bias, scale = post

        def g(v: Tensor) -> Tensor:  # g_i is linear: g_i(Σ_{j≠i} z_ij) = Σ_{j≠i} g_i(z_ij)
            return (v - v.mean(dim=-1, keepdim=True)) * scale[:, None] * weight

        mixing, own = g(mixing), g(own)
    m, p = mixing.norm(dim=-1).double(), own.norm(dim=-1).double()
    total_norm = m + p
    return torch.where(total_norm > 0, m / total_norm.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(m))
