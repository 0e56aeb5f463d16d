"""The ``type = "matrices"`` format: one attention layer written out by hand, checked on load.

The tables and keys (see ``sample_configs/seed_example.toml`` and ``sample_configs/cross_attention.toml``):

- ``[model]``: ``type = "matrices"``, ``name``, ``n_heads`` (default 1), ``causal`` (default false).
- ``[input]``: ``x``, one row per token, the queries' side (and the keys' too in self-attention);
  ``tokens``, their labels (default x1, x2, …). Cross-attention adds ``context``, the encoder's
  states, one row per source token: Q then comes from ``x``, K and V from ``context``;
  ``context_tokens`` label its rows (default c1, c2, …). ``padding = [false, true, …]`` marks key
  positions that are padding, never attended to: the rows of ``context`` when there is one, else of ``x``.
- ``[weights]``: ``w_q`` is ``[d_x, d_k]``, ``w_k`` ``[d_kv, d_k]`` and ``w_v`` ``[d_kv, d_v]``, where
  d_x is the width of ``x`` and d_kv that of ``context`` (of ``x`` without one); d_v may differ from
  d_k, and ``n_heads`` must divide both. ``w_o`` (optional) is ``[d_v, d_out]``; biases ``b_q``,
  ``b_k`` (d_k numbers), ``b_v`` (d_v) and ``b_o`` (d_out, with ``w_o`` only).
- ``[reference]``: what a tutorial printed for the same computation (:class:`~attnviz.config.Reference`),
  compared by ``attnviz explain``, never computed with.

Every mistake is a :class:`~attnviz.errors.ConfigError` naming the key and the fix.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .types import Matrix, MatrixConfig, Reference, SoftmaxClaim, check_keys, divisors, typed

_INPUT_KEYS = {"x", "tokens", "context", "context_tokens", "padding"}
_WEIGHT_KEYS = {"w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"}
_REFERENCE_KEYS = {"source", "q", "k", "v", "scale", "weights", "output", "x_shape", "scores", "softmax",
                   "mask_true_means", "q_from"}
_SOFTMAX_KEYS = {"head", "row", "scores", "exp", "sum", "weights"}
_MASK_MEANINGS = ("masked", "attend")
_Q_SOURCES = ("x", "context")


def _matrix(value: Any, key: str, source: str) -> Matrix:
    if not isinstance(value, list) or not value or not all(isinstance(row, list) for row in value):
        raise ConfigError(f"{source}: {key} must be a non-empty list of rows, e.g. [[1, 2], [3, 4]]")
    width = len(value[0])
    rows = []
    for i, row in enumerate(value):
        if len(row) != width or width == 0:
            raise ConfigError(f"{source}: {key} row {i} has {len(row)} numbers but row 0 has {width}; make every row the same length")
        rows.append(_vector(row, f"{key} row {i}", source))
    return tuple(rows)


def _vector(value: Any, key: str, source: str) -> tuple[float, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{source}: {key} must be a non-empty list of numbers")
    out = []
    for x in value:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise ConfigError(f"{source}: {key} contains {x!r}; only numbers are allowed")
        if not math.isfinite(x):
            raise ConfigError(f"{source}: {key} contains {x}; every weight must be a finite number")
        out.append(float(x))
    return tuple(out)


def parse_matrices(model: dict[str, Any], inp: Any, weights: Any, reference: Any, source: str) -> MatrixConfig:
    """A checked :class:`MatrixConfig` from the ``[model]``, ``[input]``, ``[weights]`` and (None when
    absent) ``[reference]`` tables."""
    cfg = _parse_layer(model, inp, weights, source)
    if reference is not None:
        parsed = _parse_reference(reference, source)
        cfg = replace(cfg, reference=parsed)
        _check_reference(cfg, parsed, source)
    return cfg


def _parse_layer(model: dict[str, Any], inp: Any, weights: Any, source: str) -> MatrixConfig:
    check_keys(model, {"type", "name", "n_heads", "causal"}, source, "[model]")
    if not isinstance(inp, dict) or "x" not in inp:
        raise ConfigError(f"{source}: type = \"matrices\" needs [input] x = [[...], ...], one row per token")
    if not isinstance(weights, dict):
        raise ConfigError(f"{source}: [weights] must be a table")
    check_keys(inp, _INPUT_KEYS, source, "[input]")
    check_keys(weights, _WEIGHT_KEYS, source, "[weights]")
    for key in ("w_q", "w_k", "w_v"):
        if key not in weights:
            raise ConfigError(f"{source}: [weights] {key} is missing; give it as a [d_in, d_out] matrix")
    x = _matrix(inp["x"], "[input] x", source)
    context = _matrix(inp["context"], "[input] context", source) if "context" in inp else None
    mats = {k: _matrix(weights[k], f"[weights] {k}", source) for k in ("w_q", "w_k", "w_v", "w_o") if k in weights}
    _check_rows(mats, len(x[0]), None if context is None else len(context[0]), source)
    d_qk, d_v = len(mats["w_q"][0]), len(mats["w_v"][0])
    if len(mats["w_k"][0]) != d_qk:
        raise ConfigError(f"{source}: [weights] w_k has {len(mats['w_k'][0])} columns but w_q has {d_qk}; they must match")
    n_heads = typed(model, "n_heads", int, source, "[model]") if "n_heads" in model else 1
    for width, what in ((d_qk, "w_q/w_k"), (d_v, "w_v")):
        if n_heads < 1 or width % n_heads:
            raise ConfigError(
                f"{source}: [model] n_heads = {n_heads} does not divide the {width} columns of {what}; "
                f"choose n_heads among {divisors(width)}"
            )
    if "w_o" in mats and len(mats["w_o"]) != d_v:
        raise ConfigError(f"{source}: [weights] w_o has {len(mats['w_o'])} rows but w_v has {d_v} columns; w_o must be [{d_v}, d_out]")
    biases = _biases(weights, d_qk, d_v, len(mats["w_o"][0]) if "w_o" in mats else None, source)
    tokens = _labels(inp, "tokens", len(x), "x", source)
    context_tokens = None
    if context is not None:
        context_tokens = _labels(inp, "context_tokens", len(context), "context", source)
    elif "context_tokens" in inp:
        raise ConfigError(f"{source}: [input] context_tokens label the rows of context, which is missing; add "
                          "[input] context = [[...], ...] (the encoder's states) or remove context_tokens")
    name = typed(model, "name", str, source, "[model]") if "name" in model else Path(source).stem
    causal = typed(model, "causal", bool, source, "[model]") if "causal" in model else False
    if causal and context is not None:
        raise ConfigError(f"{source}: [model] causal = true does not go with [input] context: cross-attention (x's "
                          "queries over the encoder's context) is never causal, only a decoder's self-attention is; "
                          "remove causal, or remove context for masked self-attention")
    padding = _padding(inp, len(x) if context is None else len(context), context is not None, source)
    keys = len(x) if context is None else len(context)
    from ..limits import check_memory

    # explain keeps six float64 [heads, queries, keys] steps (scores to weights): sized before anything runs
    check_memory(6 * 8 * n_heads * len(x) * keys, f"{source}: attention over {len(x):,} × {keys:,} tokens "
                 f"in {n_heads} heads")
    return MatrixConfig(name=name, x=x, n_heads=n_heads, tokens=tokens, causal=causal, context=context,
                        context_tokens=context_tokens, padding=padding, w_q=mats["w_q"], w_k=mats["w_k"],
                        w_v=mats["w_v"], w_o=mats.get("w_o"), b_q=biases.get("b_q"), b_k=biases.get("b_k"),
                        b_v=biases.get("b_v"), b_o=biases.get("b_o"))


def _check_rows(mats: dict[str, Matrix], d_x: int, d_context: int | None, source: str) -> None:
    """W_Q reads x; W_K and W_V read the context in cross-attention, x in self-attention."""
    for key, letter in (("w_q", "Q"), ("w_k", "K"), ("w_v", "V")):
        rows = len(mats[key])
        if key == "w_q" or d_context is None:
            if rows != d_x:
                raise ConfigError(f"{source}: [weights] {key} has {rows} rows but X has {d_x} columns; "
                                  f"{key} must be [{d_x}, d_out] because {letter} = X · W_{letter}")
        elif rows != d_context:
            raise ConfigError(f"{source}: [weights] {key} has {rows} rows but context has {d_context} columns; "
                              f"{key} must be [{d_context}, d_out] because {letter} = context · W_{letter} "
                              "(cross-attention: K and V come from the context, only Q from X)")


def _biases(weights: dict[str, Any], d_qk: int, d_v: int, d_out: int | None, source: str) -> dict[str, tuple[float, ...]]:
    biases: dict[str, tuple[float, ...]] = {}
    for key, width in (("b_q", d_qk), ("b_k", d_qk), ("b_v", d_v), ("b_o", d_out)):
        if key in weights:
            if width is None:
                raise ConfigError(f"{source}: [weights] b_o is given without w_o; add w_o or remove b_o")
            biases[key] = _vector(weights[key], f"[weights] {key}", source)
            if len(biases[key]) != width:
                raise ConfigError(f"{source}: [weights] {key} has {len(biases[key])} numbers; it needs {width}")
    return biases


def _labels(inp: dict[str, Any], key: str, n: int, rows_of: str, source: str) -> tuple[str, ...]:
    """``tokens`` (x1, x2, … by default) or ``context_tokens`` (c1, c2, …): one string per row."""
    labels = inp.get(key, [f"{rows_of[0]}{i + 1}" for i in range(n)])
    if not isinstance(labels, list) or len(labels) != n or not all(isinstance(t, str) for t in labels):
        raise ConfigError(f"{source}: [input] {key} must be {n} strings, one label per row of {rows_of}")
    return tuple(labels)


def _padding(inp: dict[str, Any], n_keys: int, cross: bool, source: str) -> tuple[bool, ...] | None:
    if "padding" not in inp:
        return None
    padding, rows_of = inp["padding"], "context" if cross else "x"
    if not isinstance(padding, list) or not all(isinstance(p, bool) for p in padding):
        raise ConfigError(f"{source}: [input] padding must be a list of true/false, one per row of {rows_of} "
                          "(true = padding), e.g. [false, false, true]")
    if len(padding) != n_keys:
        raise ConfigError(f"{source}: [input] padding has {len(padding)} entries but {rows_of} has {n_keys} rows "
                          f"(the key positions); give one true/false per row of {rows_of}")
    if all(padding):
        raise ConfigError(f"{source}: [input] padding marks every row of {rows_of} as padding, so no key is left "
                          "to attend to; set at least one to false")
    return tuple(padding)


def _parse_reference(table: Any, source: str) -> Reference:
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [reference] must be a table")
    check_keys(table, _REFERENCE_KEYS, source, "[reference]")
    mats = {k: _matrix(table[k], f"[reference] {k}", source) for k in ("q", "k", "v", "output") if k in table}
    per_head: dict[str, tuple[Matrix, ...]] = {}
    for key in ("weights", "scores"):
        matrices = table.get(key, [])
        if not isinstance(matrices, list):
            raise ConfigError(f"{source}: [reference] {key} must be a list of matrices, one per head from head 0")
        per_head[key] = tuple(_matrix(m, f"[reference] {key}[{h}]", source) for h, m in enumerate(matrices))
    scale = typed(table, "scale", float, source, "[reference]") if "scale" in table else None
    words: dict[str, str | None] = {}
    for key, allowed in (("mask_true_means", _MASK_MEANINGS), ("q_from", _Q_SOURCES)):
        if key in table and table[key] not in allowed:
            raise ConfigError(f"{source}: [reference] {key} = {table[key]!r}; use one of "
                              f"{', '.join(repr(a) for a in allowed)}")
        words[key] = table.get(key)
    return Reference(
        source=typed(table, "source", str, source, "[reference]") if "source" in table else "reference",
        scale=scale,
        x_shape=_x_shape(table["x_shape"], source) if "x_shape" in table else None,
        softmax=_softmax_claim(table["softmax"], source) if "softmax" in table else None,
        weights=per_head["weights"],
        scores=per_head["scores"],
        mask_true_means=words["mask_true_means"],
        q_from=words["q_from"],
        q=mats.get("q"),
        k=mats.get("k"),
        v=mats.get("v"),
        output=mats.get("output"),
    )


def _x_shape(value: Any, source: str) -> tuple[int, int]:
    ok = isinstance(value, list) and len(value) == 2 and all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                                                             for n in value)
    if not ok:
        raise ConfigError(f"{source}: [reference] x_shape = {value!r} must be two positive whole numbers, the rows "
                          "and columns the tutorial states for X, e.g. [4, 3]")
    return value[0], value[1]


def _softmax_claim(table: Any, source: str) -> SoftmaxClaim:
    where = "[reference.softmax]"
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [reference] softmax must be a table, [reference.softmax], with the row's "
                          "scores, exp, sum and weights")
    check_keys(table, _SOFTMAX_KEYS, source, where)
    values: dict[str, Any] = {}
    for key in ("head", "row"):
        if key in table:
            values[key] = typed(table, key, int, source, where)
            if values[key] < 0:
                raise ConfigError(f"{source}: {where} {key} = {values[key]} must be 0 or more (counted from 0)")
    lists = {k: _vector(table[k], f"{where} {k}", source) for k in ("scores", "exp", "weights") if k in table}
    lengths = {len(v) for v in lists.values()}
    if len(lengths) > 1:
        shown = ", ".join(f"{k} has {len(v)}" for k, v in lists.items())
        raise ConfigError(f"{source}: {where} {shown} numbers; give each one number per key of the row")
    if "sum" in table:
        values["sum"] = typed(table, "sum", float, source, where)
        if not math.isfinite(values["sum"]):
            raise ConfigError(f"{source}: {where} sum = {values['sum']} must be a finite number")
    return SoftmaxClaim(head=values.get("head", 0), row=values.get("row", 0), sum=values.get("sum"),
                        scores=lists.get("scores"), exp=lists.get("exp"), weights=lists.get("weights"))


def _check_reference(cfg: MatrixConfig, ref: Reference, source: str) -> None:
    """What the reference says must be about this layer: a softmax row and head it has, a mask and a
    context it has."""
    claim = ref.softmax
    if claim is not None and claim.head >= cfg.n_heads:
        raise ConfigError(f"{source}: [reference.softmax] head = {claim.head}, but the layer has heads 0 to "
                          f"{cfg.n_heads - 1} (n_heads = {cfg.n_heads}); heads are counted from 0")
    if claim is not None and claim.row >= len(cfg.x):
        raise ConfigError(f"{source}: [reference.softmax] row = {claim.row}, but x has rows 0 to {len(cfg.x) - 1}; "
                          "rows are counted from 0 (row = 0 is x1)")
    if ref.q_from is not None and cfg.context is None:
        raise ConfigError(f"{source}: [reference] q_from says where cross-attention's Q comes from, but there is no "
                          "[input] context; add the context or remove q_from")
    if ref.mask_true_means is not None and not cfg.causal and cfg.padding is None:
        raise ConfigError(f"{source}: [reference] mask_true_means describes a mask, but this layer has none; add "
                          "causal = true or [input] padding, or remove mask_true_means")
