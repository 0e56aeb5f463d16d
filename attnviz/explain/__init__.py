"""One attention computation, step by step, with every intermediate number (for learners).

The steps are those of the tutorials (seed 002) and of Vaswani et al. 2017: X and the weights;
Q, K, V; the split into heads; QKᵀ; the scaling; the mask; softmax worked out (e^(s − max), the
row sums, the division); weights · V; the concatenation; W_O. Everything is computed here in float64
from the module's own weights. Cross-attention takes Q from X and K, V from the context. When the
config carries a ``[reference]`` (numbers a tutorial printed), :mod:`attnviz.explain.reference`
compares each one with ours and lists the differences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..attention import apply_rotary, causal_mask, merge_heads, repeat_kv, split_heads
from ..errors import UsageError
from ..sources.contracts import ExplainInputs, PositionSteps

WHY_SCALE = (
    "Why 1/√d_k: if the components of a query and a key are independent with mean 0 and variance 1, "
    "their dot product over d_k components has variance d_k. Dividing by √d_k brings the scores back "
    "to variance 1, so the softmax does not saturate into a one-hot vector with vanishing gradients "
    "(Vaswani et al. 2017, section 3.2.1). It depends on the head width d_k, not on the sequence length."
)
SCALES = ("sqrt-dk", "sqrt-len", "none")


@dataclass(frozen=True)
class Scale:
    """What the scores are multiplied by: ``value``; ``rule`` is how it was chosen
    (``sqrt-dk`` = 1/√d_k, the standard; ``sqrt-len`` = 1/√(number of keys), as seed 002 does;
    ``none`` = 1; ``divide`` = 1/``divisor``, e.g. 64 as seed 000 suggests)."""

    value: float
    rule: str
    divisor: float  # the scores are divided by this number

    @property
    def standard(self) -> bool:
        return self.rule == "sqrt-dk"


def choose_scale(spec: str | float | None, d_k: int, n_keys: int) -> Scale:
    """Read ``--scale``: ``sqrt-dk`` (default), ``sqrt-len``, ``none``, or a positive number to divide by."""
    if spec is None or spec == "sqrt-dk":
        return Scale(1.0 / math.sqrt(d_k), "sqrt-dk", math.sqrt(d_k))
    if spec == "sqrt-len":
        return Scale(1.0 / math.sqrt(n_keys), "sqrt-len", math.sqrt(n_keys))
    if spec == "none":
        return Scale(1.0, "none", 1.0)
    try:
        divisor = float(spec)
    except (TypeError, ValueError):
        raise UsageError(f"[[scale={spec}]] is not a scale; use {', '.join(SCALES)} or a positive number to "
                         "divide the scores by, e.g. 64") from None
    if not (math.isfinite(divisor) and divisor > 0):
        raise UsageError(f"[[scale={spec}]] must be a positive number (the scores are divided by it)")
    return Scale(1.0 / divisor, "divide", divisor)


@dataclass
class HeadSteps:
    """The computation of one head; all matrices are float64.

    ``masked_scores`` has −∞ where the mask forbids; ``exp`` is e^(s − row max) over the allowed
    keys (0 elsewhere); ``row_sums`` their sums; ``weights = exp / row_sums`` (a row with no allowed
    key has sum 0 and weights of all 0: it attends to nothing).
    """

    index: int
    kv_index: int
    q: Tensor  # [Tq, d_k]
    k: Tensor  # [Tk, d_k]
    v: Tensor  # [Tk, d_v]
    raw_scores: Tensor  # [Tq, Tk], Q Kᵀ
    scores: Tensor  # [Tq, Tk], Q Kᵀ · scale, before the mask
    masked_scores: Tensor  # [Tq, Tk], −∞ where the mask forbids
    row_max: Tensor  # [Tq], the largest allowed score of each row (−∞ for a row with none)
    exp: Tensor  # [Tq, Tk], e^(score − row max), 0 where masked
    row_sums: Tensor  # [Tq]
    weights: Tensor  # [Tq, Tk]
    output: Tensor  # [Tq, d_v], weights · V
    w_q: Tensor  # [d_in, d_k]: this head's columns of W_Q
    w_k: Tensor  # [d_context, d_k]
    w_v: Tensor  # [d_context, d_v]


@dataclass
class Walkthrough:
    """Every step of one multi-head attention computation."""

    title: str
    tokens: list[str]  # the query rows (X)
    key_tokens: list[str]  # the key rows (X again, or the context)
    x: Tensor
    context: Tensor | None
    w_q: Tensor
    w_k: Tensor
    w_v: Tensor
    biases: dict[str, Tensor]
    q: Tensor
    k: Tensor
    v: Tensor
    n_heads: int
    n_kv_heads: int
    d_k: int
    d_v: int
    scale: float
    scale_rule: Scale
    causal: bool
    padding: list[bool] | None
    mask: Tensor | None  # [Tq, Tk] bool, True = may attend; None when nothing is masked
    heads: list[HeadSteps]
    concat: Tensor
    w_o: Tensor | None
    output: Tensor
    shown_heads: list[int]
    rotary: bool = False
    positions: PositionSteps | None = None
    model_kind: str = "config"
    differences: list[Any] = field(default_factory=list)  # explain_reference.Difference
    reference_source: str | None = None
    reference_off: str | None = None  # why the reference check did not run (the setup differs)

    @property
    def cross(self) -> bool:
        return self.context is not None

    @property
    def empty_rows(self) -> list[int]:
        """Query rows that may attend to no key (every key masked): their weights and output are 0."""
        return [] if self.mask is None else [i for i in range(self.mask.shape[0]) if not bool(self.mask[i].any())]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with every number in full: ``heads`` (the shown ones, each with its slices of
        W_Q/W_K/W_V, q, k, v, scores, the softmax steps, weights, output) and the final ``output``."""
        full = self.model_kind == "config"  # a real model's full W matrices are the checkpoint's business
        data: dict[str, Any] = {
            "title": self.title,
            "tokens": self.tokens,
            "key_tokens": self.key_tokens,
            "cross": self.cross,
            "x": _lists(self.x),
            "context": None if self.context is None else _lists(self.context),
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "d_k": self.d_k,
            "d_v": self.d_v,
            "scale": self.scale,
            "scale_rule": self.scale_rule.rule,
            "scale_divisor": self.scale_rule.divisor,
            "why_scale": WHY_SCALE,
            "rotary": self.rotary,
            "causal": self.causal,
            "padding": self.padding,
            "mask": None if self.mask is None else self.mask.tolist(),
            "empty_rows": self.empty_rows,
            "heads": [_head_dict(self.heads[h]) for h in self.shown_heads],
            "concat": _lists(self.concat),
            "output": _lists(self.output),
        }
        if full:
            data.update({"w_q": _lists(self.w_q), "w_k": _lists(self.w_k), "w_v": _lists(self.w_v),
                         "q": _lists(self.q), "k": _lists(self.k), "v": _lists(self.v),
                         "w_o": None if self.w_o is None else _lists(self.w_o),
                         "biases": {k: _lists(b) for k, b in self.biases.items()}})
        if self.positions is not None:
            p = self.positions
            data["positions"] = {"kind": p.kind, "embedding": None if p.embedding is None else _lists(p.embedding),
                                 "position": None if p.position is None else _lists(p.position),
                                 "summed": _lists(p.summed)}
        data["reference"] = None if not self.reference_source else {
            "source": self.reference_source, "checked": self.reference_off is None, "why_not": self.reference_off,
            "differences": [d.to_dict() for d in self.differences]}
        return data


def _head_dict(h: HeadSteps) -> dict[str, Any]:
    def rows(t: Tensor) -> Any:  # −∞ is not JSON: masked entries become null
        return [[None if math.isinf(v) and v < 0 else v for v in row] for row in _lists(t)]

    return {
        "head": h.index, "kv_head": h.kv_index,
        "w_q": _lists(h.w_q), "w_k": _lists(h.w_k), "w_v": _lists(h.w_v),
        "q": _lists(h.q), "k": _lists(h.k), "v": _lists(h.v),
        "raw_scores": _lists(h.raw_scores), "scores": _lists(h.scores),
        "masked_scores": rows(h.masked_scores),
        "row_max": [None if math.isinf(v) else v for v in _lists(h.row_max)],
        "exp": _lists(h.exp), "row_sums": _lists(h.row_sums),
        "weights": _lists(h.weights), "output": _lists(h.output),
    }


def _lists(t: Tensor) -> Any:
    return t.detach().to(torch.float64).tolist()


def softmax_steps(scores: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The softmax of each row worked out: (masked scores, row max, e^(s − max), row sums, weights).

    Subtracting the row's maximum changes nothing mathematically (it cancels in the division) but
    keeps e^s from overflowing: e^710 is already infinite in float64.
    """
    masked = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
    row_max = masked.max(dim=-1).values
    safe_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    exp = torch.exp(masked - safe_max[:, None])  # e^(−∞) = 0 for masked keys
    sums = exp.sum(dim=-1)
    weights = torch.where(sums[:, None] > 0, exp / sums.clamp_min(torch.finfo(exp.dtype).tiny)[:, None],
                          torch.zeros_like(exp))
    return masked, row_max, exp, sums, weights


def build_mask(t_q: int, t_k: int, *, causal: bool, padding: list[bool] | None) -> Tensor | None:
    """``[Tq, Tk]`` bool, True = may attend: causal (key j ≤ query i) and not padding; None if neither."""
    mask = causal_mask(t_q, t_k) if causal else None
    if padding is not None and any(padding):
        keep = ~torch.tensor(padding, dtype=torch.bool)[None, :].expand(t_q, t_k)
        mask = keep if mask is None else mask & keep
    return mask


def _weight_and_bias(linear: torch.nn.Linear) -> tuple[Tensor, Tensor | None]:
    w = linear.weight.detach().to(torch.float64).T  # [in, out]: the tutorials' X · W convention
    b = None if linear.bias is None else linear.bias.detach().to(torch.float64)
    return w, b


def walkthrough(inputs: ExplainInputs, *, scale: str | float | None = None, head: int | None = None) -> Walkthrough:
    """Compute every step of ``inputs.attention`` on ``inputs.x`` (and ``inputs.context``) in float64.

    ``scale`` is ``--scale`` (see :func:`choose_scale`); ``head`` keeps one head in what is shown
    (every head is still computed: the concatenation and W_O need them all).
    """
    mha = inputs.attention
    x = inputs.x.detach().to(torch.float64)  # (T, d_in)
    ctx = None if inputs.context is None else inputs.context.detach().to(torch.float64)
    source = x if ctx is None else ctx
    t_q, t_k = x.shape[0], source.shape[0]
    if head is not None:
        from ..layer_range import check_head

        check_head(head, owner="this layer", count=mha.n_heads)
    (w_q, b_q), (w_k, b_k), (w_v, b_v) = (_weight_and_bias(p) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    q = x @ w_q + (0 if b_q is None else b_q)
    k = source @ w_k + (0 if b_k is None else b_k)
    v = source @ w_v + (0 if b_v is None else b_v)
    d_k, n_rep = mha.d_head, mha.n_heads // mha.n_kv_heads
    d_v = v.shape[1] // mha.n_kv_heads
    chosen = choose_scale(scale, d_k, t_k)
    mask = build_mask(t_q, t_k, causal=inputs.causal, padding=inputs.padding)
    qh = split_heads(q[None], mha.n_heads)[0]  # (H, Tq, d_k)
    kh = split_heads(k[None], mha.n_kv_heads)[0]  # (H_kv, Tk, d_k)
    if inputs.rotary is not None:
        cos, sin = (t.to(torch.float64) for t in inputs.rotary)
        qh, kh = apply_rotary(qh, cos, sin), apply_rotary(kh, cos, sin)
    kh = repeat_kv(kh[None], n_rep)[0]  # (H, Tk, d_k)
    vh = repeat_kv(split_heads(v[None], mha.n_kv_heads), n_rep)[0]  # (H, Tk, d_v)
    heads = []
    for h in range(mha.n_heads):
        kv = h // n_rep
        raw = qh[h] @ kh[h].T
        scores = raw * chosen.value
        masked, row_max, exp, sums, weights = softmax_steps(scores, mask)
        heads.append(HeadSteps(
            h, kv, qh[h], kh[h], vh[h], raw, scores, masked, row_max, exp, sums, weights, weights @ vh[h],
            w_q[:, h * d_k:(h + 1) * d_k], w_k[:, kv * d_k:(kv + 1) * d_k], w_v[:, kv * d_v:(kv + 1) * d_v],
        ))
    concat = merge_heads(torch.stack([h.output for h in heads])[None])[0]  # (Tq, H·d_v)
    w_o, b_o = _weight_and_bias(mha.o_proj) if mha.o_proj is not None else (None, None)
    output = concat if w_o is None else concat @ w_o + (0 if b_o is None else b_o)
    biases = {n: b for n, b in (("b_q", b_q), ("b_k", b_k), ("b_v", b_v), ("b_o", b_o)) if b is not None}
    return Walkthrough(
        title=inputs.title, tokens=inputs.tokens,
        key_tokens=list(inputs.context_tokens or []) if ctx is not None else inputs.tokens,
        x=x, context=ctx, w_q=w_q, w_k=w_k, w_v=w_v, biases=biases, q=q, k=k, v=v,
        n_heads=mha.n_heads, n_kv_heads=mha.n_kv_heads, d_k=d_k, d_v=d_v, scale=chosen.value, scale_rule=chosen,
        causal=inputs.causal, padding=inputs.padding, mask=mask, heads=heads, concat=concat, w_o=w_o,
        output=output, shown_heads=list(range(mha.n_heads)) if head is None else [head],
        rotary=inputs.rotary is not None, positions=inputs.positions, model_kind=inputs.model_kind,
    )


def format_number(v: float) -> str:
    """Short but honest: 4 decimals where they matter, scientific for the tiny weights softmax gives."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else ("−∞" if v < 0 else str(v))
    if 1e-3 <= abs(v) < 1e6:
        text = f"{v:.4f}".rstrip("0").rstrip(".")
        return text if text not in ("-0", "") else "0"
    return f"{v:.3g}"


def row_label(i: int, token: str, prefix: str = "x") -> str:
    """A row as the tutorials number them: x1, x2, … (c1, c2, … for the context), then the token if it says more."""
    name = f"{prefix}{i + 1}"
    return name if token in (name, "") else f"{name} {token}"
