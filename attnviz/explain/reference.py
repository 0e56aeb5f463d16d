"""Where a tutorial's printed numbers (a config's ``[reference]``) differ from the computation.

Every number said to be right is computed here or in :mod:`attnviz.explain`; the reference's numbers
are only ever compared, never used as results. Each difference is a key and its parameters, so it
can be told in any language (:mod:`attnviz.explain.text`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..config import Reference
from . import Walkthrough, format_number, row_label, softmax_steps

_TOLERANCE = 0.011  # a tutorial's rounding to two decimals is not a difference


@dataclass(frozen=True)
class Difference:
    """One thing the reference gets wrong: ``key`` names the kind, ``params`` hold the numbers."""

    key: str
    params: dict[str, Any] = field(default_factory=dict)

    def text(self, lang: str = "en") -> str:
        from .text import difference_text

        return difference_text(self, lang)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "params": self.params, "text": self.text("en")}


def fmt_row(row: Any) -> str:
    return "[" + ", ".join(format_number(float(v)) for v in row) + "]"


def compare_reference(walk: Walkthrough, ref: Reference) -> list[Difference]:
    """Every difference between ``ref`` and ``walk``, in the order the steps come."""
    found: list[Difference] = []
    found += _shape_claim(walk, ref)
    for name, theirs, ours in (("q", ref.q, walk.q), ("k", ref.k, walk.k), ("v", ref.v, walk.v)):
        found += _rows(name, theirs, ours, walk)
    found += _scale(walk, ref)
    for h, theirs in enumerate(getattr(ref, "scores", ()) or ()):
        if h < walk.n_heads:
            found += _rows("scores", theirs, walk.heads[h].scores, walk, head=h)
    found += _softmax_claim(ref)
    for h, theirs in enumerate(ref.weights):
        if h < walk.n_heads:
            found += _rows("weights", theirs, walk.heads[h].weights, walk, head=h)
    found += _their_weighted_sums(walk, ref)
    found += _rows("output", ref.output, walk.output, walk)
    if walk.w_o is None and walk.n_heads > 1 and ref.output is not None:  # its final output is the concatenation
        found.append(Difference("no_w_o", {"n_heads": walk.n_heads}))
    found += _mask_convention(walk, ref)
    found += _q_side(walk, ref)
    return found


def _rows(name: str, theirs: Any, ours: Tensor, walk: Walkthrough, head: int | None = None) -> list[Difference]:
    if theirs is None:
        return []
    theirs_t = torch.tensor(theirs, dtype=torch.float64)
    extra = {} if head is None else {"head": head}
    if theirs_t.shape != ours.shape:
        return [Difference("shape", {"name": name, **extra, "theirs": list(theirs_t.shape), "ours": list(ours.shape)})]
    found = []
    labels = walk.key_tokens if name in ("k", "v") else walk.tokens
    prefix = "c" if name in ("k", "v") and walk.cross else "x"
    for i in range(ours.shape[0]):
        if not torch.allclose(theirs_t[i], ours[i], atol=_TOLERANCE, rtol=0):
            found.append(Difference(f"{name}_row", {**extra, "row": row_label(i, labels[i], prefix),
                                                    "theirs": fmt_row(theirs_t[i]), "ours": fmt_row(ours[i])}))
    return found


def _shape_claim(walk: Walkthrough, ref: Reference) -> list[Difference]:
    claimed = getattr(ref, "x_shape", None)
    rows, cols = walk.x.shape
    if claimed is None or tuple(claimed) == (rows, cols):
        return []
    return [Difference("x_shape", {"rows": rows, "cols": cols, "claimed": f"{claimed[0]}×{claimed[1]}"})]


def _scale(walk: Walkthrough, ref: Reference) -> list[Difference]:
    if ref.scale is None or math.isclose(ref.scale, walk.scale, rel_tol=1e-3):
        return []
    divisor = 1.0 / ref.scale
    n_keys = len(walk.key_tokens)
    return [Difference("scale", {
        "theirs": format_number(ref.scale), "divisor": format_number(divisor), "d_k": walk.d_k,
        "ours": format_number(walk.scale), "n_keys": n_keys,
        "is_sqrt_len": math.isclose(divisor, math.sqrt(n_keys), rel_tol=1e-3),
        "is_64": math.isclose(divisor, 64.0, rel_tol=1e-9),
    })]


def _softmax_claim(ref: Reference) -> list[Difference]:
    """The tutorial's own softmax of one row, redone from its own scores: e^s, the sum, the division."""
    claim = getattr(ref, "softmax", None)
    if claim is None or claim.scores is None:
        return []
    s = torch.tensor(claim.scores, dtype=torch.float64)
    found = []
    where = {"head": claim.head, "row": f"x{claim.row + 1}"}
    true_exp = torch.exp(s)
    if claim.exp is not None:
        for j, (theirs, ours) in enumerate(zip(claim.exp, true_exp.tolist(), strict=False)):
            if not math.isclose(theirs, ours, rel_tol=5e-3):
                found.append(Difference("exp", {**where, "col": j + 1, "s": format_number(float(s[j])),
                                                "theirs": f"{theirs:,.0f}", "ours": f"{ours:.4g}"}))
        own_sum = sum(claim.exp)
        if claim.sum is not None and not math.isclose(own_sum, claim.sum, rel_tol=1e-9):
            found.append(Difference("exp_sum_own", {**where, "theirs": f"{claim.sum:,.0f}", "ours": f"{own_sum:,.0f}"}))
        if claim.sum is not None and not math.isclose(float(true_exp.sum()), claim.sum, rel_tol=5e-3):
            found.append(Difference("exp_sum_true", {**where, "theirs": f"{claim.sum:,.0f}",
                                                     "ours": f"{float(true_exp.sum()):.4g}"}))
        if claim.sum and claim.weights is not None:
            divided = [e / claim.sum for e in claim.exp]
            # It prints three decimals: anything further off than their rounding is an error.
            if not all(math.isclose(a, b, abs_tol=6e-4) for a, b in zip(divided, claim.weights, strict=False)):
                found.append(Difference("softmax_division", {**where, "theirs": fmt_row(claim.weights),
                                                             "ours": fmt_row(divided)}))
    if claim.weights is not None:
        ours = torch.softmax(s, dim=-1)
        if not torch.allclose(ours, torch.tensor(claim.weights, dtype=torch.float64), atol=_TOLERANCE, rtol=0):
            found.append(Difference("softmax_own", {**where, "scores": fmt_row(s), "theirs": fmt_row(claim.weights),
                                                    "ours": fmt_row(ours)}))
    return found


def _their_weighted_sums(walk: Walkthrough, ref: Reference) -> list[Difference]:
    """Each head's output redone from the tutorial's own weights and V: its arithmetic, not ours."""
    if ref.v is None or ref.output is None or not ref.weights:
        return []
    v, out = torch.tensor(ref.v, dtype=torch.float64), torch.tensor(ref.output, dtype=torch.float64)
    found = []
    d = v.shape[1] // walk.n_heads if v.shape[1] % walk.n_heads == 0 else None
    for h, weights in enumerate(ref.weights):
        w = torch.tensor(weights, dtype=torch.float64)
        if d is None or h >= walk.n_heads or w.shape[1] != v.shape[0] or out.shape[0] != w.shape[0]:
            continue
        col = h * d  # the head's first column (one-column heads are the tutorials' case)
        for i in range(w.shape[0]):
            value = float(w[i] @ v[:, col])
            if not math.isclose(value, float(out[i, col]), abs_tol=_TOLERANCE):
                terms = " + ".join(f"{format_number(float(a))}·{format_number(float(b))}" for a, b in zip(w[i], v[:, col], strict=True))
                found.append(Difference("weighted_sum", {"head": h, "row": row_label(i, walk.tokens[i]),
                                                         "terms": terms, "ours": format_number(value),
                                                         "theirs": format_number(float(out[i, col]))}))
    return found


def _mask_convention(walk: Walkthrough, ref: Reference) -> list[Difference]:
    """A mask whose True means "masked", read as attnviz and torch read it (True = may attend)."""
    if getattr(ref, "mask_true_means", None) != "masked" or walk.mask is None:
        return []
    head = walk.heads[walk.shown_heads[0]]
    weights = softmax_steps(head.scores, ~walk.mask)[4]
    rows = []
    for i in range(weights.shape[0]):
        seen = [row_label(j, walk.key_tokens[j], "c" if walk.cross else "x")
                for j in range(weights.shape[1]) if bool((~walk.mask)[i, j])]
        rows.append({"row": row_label(i, walk.tokens[i]), "keys": seen, "weights": fmt_row(weights[i]),
                     "empty": not seen})
    return [Difference("mask_inverted", {"head": head.index, "rows": rows})]


def _q_side(walk: Walkthrough, ref: Reference) -> list[Difference]:
    """Q from the context and K, V from X, as one tutorial says: the output's rows follow the context."""
    if getattr(ref, "q_from", None) != "context" or walk.context is None:
        return []
    t, s = walk.x.shape[0], walk.context.shape[0]
    params: dict[str, Any] = {"t": t, "s": s, "ours": [t, walk.output.shape[1]]}
    if walk.context.shape[1] != walk.w_q.shape[0] or walk.x.shape[1] != walk.w_k.shape[0]:
        params.update(fits=False, d_x=walk.x.shape[1], d_c=walk.context.shape[1])
    else:
        q = walk.context @ walk.w_q
        k = walk.x @ walk.w_k
        scores = (q[:, : walk.d_k] @ k[:, : walk.d_k].T) * walk.scale
        params.update(fits=True, theirs=[s, walk.output.shape[1]], weights_shape=list(scores.shape))
    return [Difference("q_from_context", params)]
