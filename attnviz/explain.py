"""One attention computation, step by step, with every intermediate number (for learners).

The steps are those of seed 002 and of Vaswani et al. 2017: X and the weights; Q, K, V; the split
into heads; QKᵀ; the scaling by 1/√d_k; the mask; softmax; weights · V; the concatenation; W_O.
Everything is computed here in float64 from the module's own weights; when the config carries a
``[reference]`` (numbers a tutorial printed), each one is compared with ours and differences listed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .attention import (
    attention_scores,
    attention_weights,
    causal_mask,
    merge_heads,
    repeat_kv,
    split_heads,
)
from .config import Reference
from .explain_inputs import ExplainInputs

WHY_SCALE = (
    "Why 1/√d_k: if the components of a query and a key are independent with mean 0 and variance 1, "
    "their dot product over d_k components has variance d_k. Dividing by √d_k brings the scores back "
    "to variance 1, so the softmax does not saturate into a one-hot vector with vanishing gradients "
    "(Vaswani et al. 2017, section 3.2.1). It depends on the head width d_k, not on the sequence length."
)
_TOLERANCE = 0.011  # a tutorial's rounding to two decimals is not a difference


@dataclass
class HeadSteps:
    """The computation of one head; all matrices are float64."""

    index: int
    kv_index: int
    q: Tensor  # [T, d_k]
    k: Tensor  # [T, d_k]
    v: Tensor  # [T, d_k]
    raw_scores: Tensor  # [T, T], Q Kᵀ
    scores: Tensor  # [T, T], Q Kᵀ / √d_k, before the mask
    weights: Tensor  # [T, T], softmax over each row, after the mask
    output: Tensor  # [T, d_k], weights · V


@dataclass
class Walkthrough:
    """Every step of one multi-head attention computation."""

    title: str
    tokens: list[str]
    x: Tensor
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
    scale: float
    mask: Tensor | None  # [T, T] bool, True = may attend; None when nothing is masked
    heads: list[HeadSteps]
    concat: Tensor
    w_o: Tensor | None
    output: Tensor
    differences: list[str] = field(default_factory=list)
    reference_source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``heads`` (each with q, k, v, scores, weights, output) and the final ``output``."""
        return {
            "title": self.title,
            "tokens": self.tokens,
            "x": _lists(self.x),
            "w_q": _lists(self.w_q),
            "w_k": _lists(self.w_k),
            "w_v": _lists(self.w_v),
            "biases": {k: _lists(b) for k, b in self.biases.items()},
            "q": _lists(self.q),
            "k": _lists(self.k),
            "v": _lists(self.v),
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "d_k": self.d_k,
            "scale": self.scale,
            "why_scale": WHY_SCALE,
            "mask": None if self.mask is None else self.mask.tolist(),
            "heads": [
                {
                    "head": h.index,
                    "kv_head": h.kv_index,
                    "q": _lists(h.q),
                    "k": _lists(h.k),
                    "v": _lists(h.v),
                    "raw_scores": _lists(h.raw_scores),
                    "scores": _lists(h.scores),
                    "weights": _lists(h.weights),
                    "output": _lists(h.output),
                }
                for h in self.heads
            ],
            "concat": _lists(self.concat),
            "w_o": None if self.w_o is None else _lists(self.w_o),
            "output": _lists(self.output),
            "reference": {"source": self.reference_source, "differences": self.differences}
            if self.reference_source
            else None,
        }


def _lists(t: Tensor) -> Any:
    return t.detach().to(torch.float64).tolist()


def walkthrough(inputs: ExplainInputs) -> Walkthrough:
    """Compute every step of ``inputs.attention`` on ``inputs.x`` in float64."""
    mha = inputs.attention
    x = inputs.x.detach().to(torch.float64)  # (T, d_in)
    t = x.shape[0]

    def weight_and_bias(linear: torch.nn.Linear) -> tuple[Tensor, Tensor | None]:
        w = linear.weight.detach().to(torch.float64).T  # [in, out]: the tutorials' X · W convention
        b = None if linear.bias is None else linear.bias.detach().to(torch.float64)
        return w, b

    (w_q, b_q), (w_k, b_k), (w_v, b_v) = (weight_and_bias(p) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    q, k, v = (x @ w + (0 if b is None else b) for w, b in ((w_q, b_q), (w_k, b_k), (w_v, b_v)))
    d_k, n_rep = mha.d_head, mha.n_heads // mha.n_kv_heads
    scale = 1.0 / math.sqrt(d_k)
    mask = causal_mask(t) if inputs.causal else None
    qh = split_heads(q[None], mha.n_heads)[0]  # (H, T, d_k)
    kh = repeat_kv(split_heads(k[None], mha.n_kv_heads), n_rep)[0]  # (H, T, d_k)
    vh = repeat_kv(split_heads(v[None], mha.n_kv_heads), n_rep)[0]
    heads = []
    for h in range(mha.n_heads):
        raw = attention_scores(qh[h], kh[h], scale=1.0)
        scores = attention_scores(qh[h], kh[h], scale=scale)
        weights = attention_weights(scores, mask=mask)
        heads.append(HeadSteps(h, h // n_rep, qh[h], kh[h], vh[h], raw, scores, weights, weights @ vh[h]))
    concat = merge_heads(torch.stack([h.output for h in heads])[None])[0]  # (T, H·d_k)
    w_o, b_o = weight_and_bias(mha.o_proj) if mha.o_proj is not None else (None, None)
    output = concat if w_o is None else concat @ w_o + (0 if b_o is None else b_o)
    biases = {n: b for n, b in (("b_q", b_q), ("b_k", b_k), ("b_v", b_v), ("b_o", b_o)) if b is not None}
    walk = Walkthrough(
        title=inputs.title, tokens=inputs.tokens, x=x, w_q=w_q, w_k=w_k, w_v=w_v, biases=biases,
        q=q, k=k, v=v, n_heads=mha.n_heads, n_kv_heads=mha.n_kv_heads, d_k=d_k, scale=scale,
        mask=mask, heads=heads, concat=concat, w_o=w_o, output=output,
    )
    if inputs.reference is not None:
        walk.reference_source = inputs.reference.source
        walk.differences = compare_reference(walk, inputs.reference)
    return walk


def compare_reference(walk: Walkthrough, ref: Reference) -> list[str]:
    """Where a tutorial's printed numbers differ from ours by more than its rounding."""
    found: list[str] = []
    pairs: list[tuple[str, Any, Tensor]] = [("Q", ref.q, walk.q), ("K", ref.k, walk.k), ("V", ref.v, walk.v)]
    pairs += [(f"head {h} weights", w, walk.heads[h].weights) for h, w in enumerate(ref.weights) if h < len(walk.heads)]
    pairs.append(("output", ref.output, walk.output))
    for name, theirs, ours in pairs:
        if theirs is None:
            continue
        theirs_t = torch.tensor(theirs, dtype=torch.float64)
        if theirs_t.shape != ours.shape:
            found.append(f"{name}: the reference is {tuple(theirs_t.shape)}, the computation {tuple(ours.shape)}")
            continue
        for i in range(ours.shape[0]):
            if not torch.allclose(theirs_t[i], ours[i], atol=_TOLERANCE, rtol=0):
                found.append(f"{name} row {i}: reference {_fmt_row(theirs_t[i])}, computed {_fmt_row(ours[i])}")
    if ref.scale is not None and not math.isclose(ref.scale, walk.scale, rel_tol=1e-3):
        implied = 1.0 / ref.scale**2
        found.append(
            f"scale: reference {ref.scale:g} (= 1/√{implied:.3g}), computed 1/√d_k = 1/√{walk.d_k} = {walk.scale:g}"
        )
    return found


def _fmt_row(row: Tensor) -> str:
    return "[" + ", ".join(format_number(float(v)) for v in row) + "]"


def format_number(v: float) -> str:
    """Short but honest: 4 decimals where they matter, scientific for the tiny weights softmax gives."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else str(v)
    if 1e-3 <= abs(v) < 1e6:
        text = f"{v:.4f}".rstrip("0").rstrip(".")
        return text if text not in ("-0", "") else "0"
    return f"{v:.3g}"
