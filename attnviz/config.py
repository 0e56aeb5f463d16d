"""Config models: TOML files read with tomllib into frozen dataclasses, checked on load.

Two kinds exist, chosen by ``[model] type``:

- ``"transformer"``: a small seeded transformer (see ``sample_configs/tiny.toml``);
- ``"matrices"``: a single attention layer whose input X and weights are written out in the
  file (see ``sample_configs/seed_example.toml``), for following a computation by hand.

Matrices in the file use the row-vector convention of the tutorials: ``Q = X · W_Q``, so W_Q is
``[d_in, d_out]``. Nothing in a config is evaluated; it is data only.
"""

from __future__ import annotations

import difflib
import math
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

Matrix = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class TransformerConfig:
    """A pre-LayerNorm transformer with seeded random weights and a word-level tokenizer."""

    name: str = "tiny"
    n_layers: int = 2
    n_heads: int = 4
    d_model: int = 32
    d_ff: int = 64
    n_kv_heads: int | None = None
    vocab_size: int = 4096
    max_positions: int = 512
    seed: int = 0
    positions: str = "sinusoidal"  # "sinusoidal" | "none"
    causal: bool = False
    bias: bool = True
    init_scale: float = 1.0
    vocab: tuple[str, ...] = ()  # the words it can generate (causal only): its head is the tied embedding
    eos: str | None = None  # the word that ends generation, one of ``vocab``


@dataclass(frozen=True)
class Reference:
    """Numbers a tutorial printed for the same computation, to show a learner where it differs.

    They are never used to compute anything; ``attnviz explain`` compares them with its own.
    """

    source: str
    q: Matrix | None = None
    k: Matrix | None = None
    v: Matrix | None = None
    scale: float | None = None
    weights: tuple[Matrix, ...] = ()  # per head, from head 0; may cover fewer heads than the model
    output: Matrix | None = None


@dataclass(frozen=True)
class MatrixConfig:
    """One attention layer with X and the weights given explicitly (row-vector convention)."""

    name: str
    x: Matrix
    w_q: Matrix
    w_k: Matrix
    w_v: Matrix
    n_heads: int
    tokens: tuple[str, ...]
    w_o: Matrix | None = None
    b_q: tuple[float, ...] | None = None
    b_k: tuple[float, ...] | None = None
    b_v: tuple[float, ...] | None = None
    b_o: tuple[float, ...] | None = None
    causal: bool = False
    reference: Reference | None = None

    @property
    def d_qk(self) -> int:
        return len(self.w_q[0])

    @property
    def d_v(self) -> int:
        return len(self.w_v[0])


ModelConfig = TransformerConfig | MatrixConfig

_POSITIONS = ("sinusoidal", "none")
_MODEL_TYPES = ("transformer", "matrices")


def load_config(path: str | Path) -> ModelConfig:
    """Read and check a TOML model config; raise :class:`ConfigError` naming the key and the fix."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give the path of a .toml model config")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; check the path") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; a model config must be a UTF-8 TOML file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}); fix the syntax at that line") from None
    return parse_config(data, source=str(path))


def parse_config(data: dict[str, Any], *, source: str = "config") -> ModelConfig:
    """Build a checked config from parsed TOML data (``source`` names it in error messages)."""
    _check_keys(data, {"model", "input", "weights", "reference"}, source, "top level")
    model = data.get("model")
    if not isinstance(model, dict):
        raise ConfigError(f"{source}: missing [model] table; add one with type = \"transformer\" or \"matrices\"")
    kind = model.get("type", "transformer")
    if kind not in _MODEL_TYPES:
        raise ConfigError(f"{source}: [model] type = {kind!r} is unknown; use one of {', '.join(_MODEL_TYPES)}")
    if kind == "transformer":
        for extra in ("input", "weights", "reference"):
            if extra in data:
                raise ConfigError(f"{source}: [{extra}] belongs to type = \"matrices\"; remove it or change the type")
        return _parse_transformer(model, source)
    cfg = _parse_matrices(model, data.get("input", {}), data.get("weights", {}), source)
    if "reference" in data:
        cfg = replace(cfg, reference=_parse_reference(data["reference"], source))
    return cfg


def _check_keys(table: dict[str, Any], allowed: set[str], source: str, where: str) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(sorted(allowed))}"
            raise ConfigError(f"{source}: unknown key {key!r} in {where}; {hint}")


def _typed(table: dict[str, Any], key: str, kind: type, source: str, where: str) -> Any:
    value = table[key]
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise ConfigError(f"{source}: {where} {key} = {value!r} must be {kind.__name__}")
    return value


def _parse_transformer(model: dict[str, Any], source: str) -> TransformerConfig:
    spec = {f.name: f for f in fields(TransformerConfig)}
    _check_keys(model, set(spec) | {"type"}, source, "[model]")
    kinds = {"name": str, "positions": str, "causal": bool, "bias": bool, "init_scale": float, "vocab": list,
             "eos": str}
    values: dict[str, Any] = {}
    for key in spec:
        if key in model:
            values[key] = _typed(model, key, kinds.get(key, int), source, "[model]")
    if "vocab" in values:
        values["vocab"] = _vocabulary(values["vocab"], source)
    cfg = TransformerConfig(**values)
    if cfg.vocab and not cfg.causal:
        raise ConfigError(f"{source}: [model] vocab is for generating, which needs causal = true; add it or "
                          "remove vocab")
    if cfg.eos is not None and cfg.eos not in cfg.vocab:
        raise ConfigError(f"{source}: [model] eos = {cfg.eos!r} is not in vocab; add it to vocab or remove eos")
    for key in ("n_layers", "n_heads", "d_model", "d_ff", "vocab_size", "max_positions"):
        if getattr(cfg, key) < 1:
            raise ConfigError(f"{source}: [model] {key} = {getattr(cfg, key)} must be at least 1")
    _check_size(cfg, source)
    if cfg.d_model % cfg.n_heads:
        raise ConfigError(
            f"{source}: [model] n_heads = {cfg.n_heads} does not divide d_model = {cfg.d_model}; "
            f"choose n_heads among {_divisors(cfg.d_model)}"
        )
    if cfg.n_kv_heads is not None and (cfg.n_kv_heads < 1 or cfg.n_heads % cfg.n_kv_heads):
        raise ConfigError(
            f"{source}: [model] n_kv_heads = {cfg.n_kv_heads} must divide n_heads = {cfg.n_heads}; "
            f"choose among {_divisors(cfg.n_heads)}"
        )
    if cfg.positions not in _POSITIONS:
        raise ConfigError(f"{source}: [model] positions = {cfg.positions!r}; use one of {', '.join(_POSITIONS)}")
    if not (math.isfinite(cfg.init_scale) and cfg.init_scale > 0):
        raise ConfigError(f"{source}: [model] init_scale = {cfg.init_scale} must be a positive number")
    return cfg


def _vocabulary(words: list[Any], source: str) -> tuple[str, ...]:
    """The words a causal config model generates from: distinct strings, each one token of its tokenizer."""
    from .limits import MAX_INDEX
    from .sources.words import word_tokens

    if not words or len(words) > MAX_INDEX:
        raise ConfigError(f"{source}: [model] vocab must list between 1 and {MAX_INDEX:,} words")
    for word in words:
        if not isinstance(word, str) or word_tokens(word) != [word]:
            raise ConfigError(f"{source}: [model] vocab entry {word!r} is not one token (a word, one CJK character "
                              "or one symbol); split it into several entries")
    if len(set(words)) != len(words):
        twice = next(w for w in words if words.count(w) > 1)
        raise ConfigError(f"{source}: [model] vocab lists {twice!r} twice; list each word once")
    return tuple(words)


def _check_size(cfg: TransformerConfig, source: str) -> None:
    """Refuse a config whose weights (float32) or positions could not fit, before building anything."""
    from .limits import MAX_POSITIONS, check_memory

    if cfg.max_positions > MAX_POSITIONS:
        raise ConfigError(f"{source}: [model] max_positions = {cfg.max_positions:,} is more than the "
                          f"{MAX_POSITIONS:,} positions attnviz allows")
    d, layers = cfg.d_model, cfg.n_layers
    per_layer = 4 * d * d + 2 * d * cfg.d_ff + 9 * d + cfg.d_ff
    params = layers * per_layer + (cfg.vocab_size + cfg.max_positions) * d
    check_memory(4 * params, f"{source}: a model of {layers:,} layers with d_model = {d:,}")


def _divisors(n: int, shown: int = 12) -> str:
    """Some divisors of ``n`` (the smallest ``shown``), found up to √n; never slow, whatever ``n`` is."""
    found: set[int] = set()
    d = 1
    while d * d <= n and d <= 1 << 16:
        if n % d == 0:
            found.update((d, n // d))
        d += 1
    ordered = sorted(found)
    return ", ".join(map(str, ordered[:shown])) + (", …" if len(ordered) > shown else "")


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


def _parse_matrices(model: dict[str, Any], inp: Any, weights: Any, source: str) -> MatrixConfig:
    _check_keys(model, {"type", "name", "n_heads", "causal"}, source, "[model]")
    if not isinstance(inp, dict) or "x" not in inp:
        raise ConfigError(f"{source}: type = \"matrices\" needs [input] x = [[...], ...], one row per token")
    if not isinstance(weights, dict):
        raise ConfigError(f"{source}: [weights] must be a table")
    _check_keys(inp, {"x", "tokens"}, source, "[input]")
    _check_keys(weights, {"w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"}, source, "[weights]")
    for key in ("w_q", "w_k", "w_v"):
        if key not in weights:
            raise ConfigError(f"{source}: [weights] {key} is missing; give it as a [d_in, d_out] matrix")
    x = _matrix(inp["x"], "[input] x", source)
    mats = {k: _matrix(weights[k], f"[weights] {k}", source) for k in ("w_q", "w_k", "w_v", "w_o") if k in weights}
    d_in = len(x[0])
    for key in ("w_q", "w_k", "w_v"):
        if len(mats[key]) != d_in:
            raise ConfigError(
                f"{source}: [weights] {key} has {len(mats[key])} rows but X has {d_in} columns; "
                f"{key} must be [{d_in}, d_out] because Q = X · W_Q"
            )
    d_qk, d_v = len(mats["w_q"][0]), len(mats["w_v"][0])
    if len(mats["w_k"][0]) != d_qk:
        raise ConfigError(f"{source}: [weights] w_k has {len(mats['w_k'][0])} columns but w_q has {d_qk}; they must match")
    if d_v != d_qk:
        raise ConfigError(f"{source}: [weights] w_v has {d_v} columns but w_q has {d_qk}; give them the same width")
    n_heads = _typed(model, "n_heads", int, source, "[model]") if "n_heads" in model else 1
    for width, what in ((d_qk, "w_q/w_k"), (d_v, "w_v")):
        if n_heads < 1 or width % n_heads:
            raise ConfigError(
                f"{source}: [model] n_heads = {n_heads} does not divide the {width} columns of {what}; "
                f"choose n_heads among {_divisors(width)}"
            )
    if "w_o" in mats and len(mats["w_o"]) != d_v:
        raise ConfigError(f"{source}: [weights] w_o has {len(mats['w_o'])} rows but w_v has {d_v} columns; w_o must be [{d_v}, d_out]")
    widths = {"b_q": d_qk, "b_k": d_qk, "b_v": d_v, "b_o": len(mats["w_o"][0]) if "w_o" in mats else None}
    biases = {}
    for key, width in widths.items():
        if key in weights:
            if width is None:
                raise ConfigError(f"{source}: [weights] b_o is given without w_o; add w_o or remove b_o")
            biases[key] = _vector(weights[key], f"[weights] {key}", source)
            if len(biases[key]) != width:
                raise ConfigError(f"{source}: [weights] {key} has {len(biases[key])} numbers; it needs {width}")
    tokens = inp.get("tokens", [f"x{i + 1}" for i in range(len(x))])
    if not isinstance(tokens, list) or len(tokens) != len(x) or not all(isinstance(t, str) for t in tokens):
        raise ConfigError(f"{source}: [input] tokens must be {len(x)} strings, one label per row of x")
    name = _typed(model, "name", str, source, "[model]") if "name" in model else Path(source).stem
    causal = _typed(model, "causal", bool, source, "[model]") if "causal" in model else False
    return MatrixConfig(name=name, x=x, n_heads=n_heads, tokens=tuple(tokens), causal=causal, **mats, **biases)


def _parse_reference(table: Any, source: str) -> Reference:
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [reference] must be a table")
    _check_keys(table, {"source", "q", "k", "v", "scale", "weights", "output"}, source, "[reference]")
    mats = {k: _matrix(table[k], f"[reference] {k}", source) for k in ("q", "k", "v", "output") if k in table}
    weights = table.get("weights", [])
    if not isinstance(weights, list):
        raise ConfigError(f"{source}: [reference] weights must be a list of matrices, one per head")
    scale = _typed(table, "scale", float, source, "[reference]") if "scale" in table else None
    return Reference(
        source=_typed(table, "source", str, source, "[reference]") if "source" in table else "reference",
        scale=scale,
        weights=tuple(_matrix(w, f"[reference] weights[{h}]", source) for h, w in enumerate(weights)),
        **mats,
    )
