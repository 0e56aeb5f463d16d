"""Config models: TOML files read with tomllib into frozen dataclasses, checked on load.

Two kinds exist, chosen by ``[model] type``:

- ``"transformer"``: a small seeded transformer (see ``sample_configs/tiny.toml``);
- ``"matrices"``: a single attention layer whose input X and weights are written out in the
  file (see ``sample_configs/seed_example.toml``), for following a computation by hand. It may be
  cross-attention (``[input] context``, the encoder's states: Q from X, K and V from the context,
  see ``sample_configs/cross_attention.toml``), mask padding (``[input] padding``, one true/false
  per key position) and causal positions, and give V another width than Q and K (d_v ≠ d_k).
  Its ``[reference]`` holds what a tutorial printed, for ``attnviz explain`` to compare. Every key
  of the format is described in :mod:`attnviz.config.matrices`, which reads it.

Matrices in the file use the row-vector convention of the tutorials: ``Q = X · W_Q``, so W_Q is
``[d_in, d_out]``. Nothing in a config is evaluated; it is data only.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .types import (  # noqa: F401  (Matrix, Reference and SoftmaxClaim are named here too, as before)
    Matrix,
    MatrixConfig,
    Reference,
    SoftmaxClaim,
    check_keys,
    divisors,
    typed,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

@dataclass(frozen=True)
class TransformerConfig:
    """A pre-LayerNorm transformer with seeded random weights and a word-level tokenizer.

    ``decoder_layers = 0`` (the default) is an encoder only: ``n_layers`` blocks, bidirectional
    unless ``causal``. ``decoder_layers >= 1`` makes an encoder-decoder (T5-style, see
    :mod:`attnviz.sources.own_seq2seq`): ``n_layers`` bidirectional encoder blocks over the source,
    then ``decoder_layers`` decoder blocks over a target text, each with causal self-attention and
    cross-attention whose queries come from the decoder and keys/values from the encoder's final,
    LayerNorm'd output.
    """

    name: str = "tiny"
    n_layers: int = 2
    decoder_layers: int = 0  # 0: encoder only; >= 1: an encoder-decoder with this many decoder blocks
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


ModelConfig = TransformerConfig | MatrixConfig

_POSITIONS = ("sinusoidal", "none")
_MODEL_TYPES = ("transformer", "matrices")

MAX_SEED = 2**63 - 1
"""The largest seed torch's random generator takes."""


def read_toml(path: Path, what: str) -> dict:
    """A TOML file read as untrusted input: a regular file of at most 64 MiB (a FIFO or ``/dev/zero``
    is refused before it is read), UTF-8, not nested past the parser's depth. Every failure is a
    :class:`ConfigError` of one line."""
    from ..errors import ResourceError
    from ..limits import read_small

    try:
        text = read_small(path, what=what).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; check the path") from None
    except ResourceError as exc:
        raise ConfigError(exc.template) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; {what} must be a UTF-8 TOML file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}); fix the syntax at that line") from None
    except RecursionError:
        raise ConfigError(f"{path} nests tables or arrays too deeply to be {what}; flatten it") from None


def load_config(path: str | Path) -> ModelConfig:
    """Read and check a TOML model config; raise :class:`ConfigError` naming the key and the fix."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give the path of a .toml model config")
    data = read_toml(path, "a model config")
    return parse_config(data, source=str(path))


def parse_config(data: dict[str, Any], *, source: str = "config") -> ModelConfig:
    """Build a checked config from parsed TOML data (``source`` names it in error messages)."""
    check_keys(data, {"model", "input", "weights", "reference"}, source, "top level")
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
    from .matrices import parse_matrices  # the matrices format is read in a module of its own

    return parse_matrices(model, data.get("input", {}), data.get("weights", {}), data.get("reference"), source)


def _parse_transformer(model: dict[str, Any], source: str) -> TransformerConfig:
    spec = {f.name: f for f in fields(TransformerConfig)}
    check_keys(model, set(spec) | {"type"}, source, "[model]")
    kinds = {"name": str, "positions": str, "causal": bool, "bias": bool, "init_scale": float, "vocab": list,
             "eos": str}
    values: dict[str, Any] = {}
    for key in spec:
        if key in model:
            values[key] = typed(model, key, kinds.get(key, int), source, "[model]")
    if "vocab" in values:
        values["vocab"] = _vocabulary(values["vocab"], source)
    cfg = TransformerConfig(**values)
    if cfg.decoder_layers < 0:
        raise ConfigError(f"{source}: [model] decoder_layers = {cfg.decoder_layers} must be 0 (an encoder only) or "
                          "more (an encoder-decoder)")
    if cfg.decoder_layers and cfg.causal:
        raise ConfigError(f"{source}: [model] causal = true does not go with decoder_layers: an encoder-decoder's "
                          "encoder reads the whole source and its decoder is always causal; remove causal (or set "
                          "decoder_layers = 0 for a causal model)")
    if cfg.decoder_layers and cfg.vocab:
        raise ConfigError(f"{source}: [model] vocab does not go with decoder_layers: an encoder-decoder config "
                          "model shows its attention over a target text you give, it does not generate; remove "
                          "vocab (and eos), or set decoder_layers = 0 and causal = true to generate")
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
            f"choose n_heads among {divisors(cfg.d_model)}"
        )
    if cfg.n_kv_heads is not None and (cfg.n_kv_heads < 1 or cfg.n_heads % cfg.n_kv_heads):
        raise ConfigError(
            f"{source}: [model] n_kv_heads = {cfg.n_kv_heads} must divide n_heads = {cfg.n_heads}; "
            f"choose among {divisors(cfg.n_heads)}"
        )
    if cfg.positions not in _POSITIONS:
        raise ConfigError(f"{source}: [model] positions = {cfg.positions!r}; use one of {', '.join(_POSITIONS)}")
    if not (math.isfinite(cfg.init_scale) and cfg.init_scale > 0):
        raise ConfigError(f"{source}: [model] init_scale = {cfg.init_scale} must be a positive number")
    if not 0 <= cfg.seed <= MAX_SEED:
        raise ConfigError(f"{source}: [model] seed = {cfg.seed} must be a whole number from 0 to {MAX_SEED:,} "
                          "(2⁶³ − 1, what torch's generator takes)")
    return cfg


def _vocabulary(words: list[Any], source: str) -> tuple[str, ...]:
    """The words a causal config model generates from: distinct strings, each one token of its tokenizer."""
    from ..limits import MAX_INDEX
    from ..sources.words import word_tokens

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
    from ..limits import MAX_POSITIONS, check_memory

    if cfg.max_positions > MAX_POSITIONS:
        raise ConfigError(f"{source}: [model] max_positions = {cfg.max_positions:,} is more than the "
                          f"{MAX_POSITIONS:,} positions attnviz allows")
    d, layers = cfg.d_model, cfg.n_layers
    per_layer = 4 * d * d + 2 * d * cfg.d_ff + 9 * d + cfg.d_ff
    params = layers * per_layer + (cfg.vocab_size + cfg.max_positions) * d
    what = f"{layers:,} layers"
    if cfg.decoder_layers:  # each decoder block adds cross-attention (4 d² + 4 d) and its LayerNorm (2 d)
        params += cfg.decoder_layers * (per_layer + 4 * d * d + 6 * d) + 2 * d  # + the encoder's final LayerNorm
        what = f"{layers:,} encoder and {cfg.decoder_layers:,} decoder layers"
    check_memory(4 * params, f"{source}: a model of {what} with d_model = {d:,}")
