"""A sound organism's description (issue 61 item 5): a tiny Whisper whose cross-attention heads are written by hand,
read from a TOML and checked. ``[model]`` says what it says and when; each ``[[head]]`` plants one head::

    [model]
    type = "organism"
    family = "whisper"
    name = "whisper-organism"
    language = "en"                          # its prompt's language; zh, ja, th, lo, my, yue: one token a character
    text = "the cat sat on the mat"          # what it transcribes, one token a word (a character for zh, ...)
    times = [0.0, 0.3, 0.6, 0.9, 1.2, 1.5, 1.8]   # each token's start in seconds, then the last one's end

    [[head]]
    kind = "alignment"                       # reads, for the i-th token, the encoder positions of its time
    layer = 1
    head = 0

    [[head]]
    kind = "first_frames"                    # reads the first `positions` encoder positions, from every token
    layer = 1
    head = 1
    positions = 10

    [[head]]
    kind = "uniform"                         # every position alike (what an unplanted head does too)
    layer = 1
    head = 2

Optional in ``[model]``: ``layers`` (the decoder's, 2), ``heads`` (per layer, 4), ``mels`` (80, or 128 as large-v3),
``seed`` (0). Times are 0.02-s encoder positions apart at least :data:`MIN_TOKEN_SECONDS`, increasing, inside the
30-s window; a clip is read up to its own length, so one longer than the last end gives every token its declared
time. At most :data:`MAX_TOKENS` tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, toml_table

KINDS = ("alignment", "first_frames", "uniform")
MAX_TOKENS = 28
"""Tokens an organism's text may have: each takes a pair of the residual's 128 numbers for its time and one for its
embedding."""
MIN_TOKEN_SECONDS = 0.1
"""The shortest time a token may be declared (five encoder positions: openai-whisper's median filter of width 7 keeps
a run of four or more)."""
WINDOW_SECONDS = 30.0
MODEL_KEYS = ("type", "family", "name", "language", "text", "times", "layers", "heads", "mels", "seed")
HEAD_KEYS = {"alignment": ("kind", "layer", "head"), "first_frames": ("kind", "layer", "head", "positions"),
             "uniform": ("kind", "layer", "head")}
HEAD = toml_table("head")


@dataclass(frozen=True)
class SoundHead:
    kind: str
    layer: int
    head: int
    positions: int = 0


@dataclass(frozen=True)
class SoundSpec:
    """A sound organism's description, checked (see the module)."""

    name: str
    language: str
    tokens: tuple[str, ...]
    times: tuple[float, ...]
    heads: tuple[SoundHead, ...]
    layers: int = 2
    per_layer: int = 4
    mels: int = 80
    seed: int = 0

    @property
    def text(self) -> str:
        from .languages import NO_SPACES

        return ("" if self.language in NO_SPACES else " ").join(self.tokens)

    def as_data(self) -> dict[str, Any]:
        """Everything the build depends on, for its fingerprint."""
        return {"name": self.name, "language": self.language, "tokens": list(self.tokens), "times": list(self.times),
                "heads": [vars(h) for h in self.heads], "layers": self.layers, "heads_per_layer": self.per_layer,
                "mels": self.mels, "seed": self.seed}


def is_sound_organism(path: str | Path) -> bool:
    """Whether ``path`` is a sound organism's TOML (``[model] type = "organism"``, ``family = "whisper"``), read no
    further than its ``[model]`` table (``sample_configs/NAME.toml`` found where attnviz is installed, from any
    folder); a file that cannot be read is not one here."""
    from ..sources.places import sample_config

    path = sample_config(path)
    if path.suffix.lower() != ".toml" or not path.is_file():
        return False
    try:
        model = _read(path).get("model")
    except ConfigError:
        return False
    return isinstance(model, dict) and model.get("type") == "organism" and model.get("family") == "whisper"


def read_sound_spec(path: str | Path) -> SoundSpec:
    """The sound organism described at ``path``, every value checked (one line naming the key and what to write)."""
    from ..sources.places import sample_config

    path = sample_config(path)
    data = _read(path)
    unknown = sorted(set(data) - {"model", "head"})
    if unknown:
        raise ConfigError(f"{path}: unknown table {unknown[0]!r}; a sound organism has a [model] table and {HEAD} "
                          "tables")
    model = data.get("model")
    if not isinstance(model, dict) or model.get("type") != "organism" or model.get("family") != "whisper":
        raise ConfigError(f'{path}: a sound organism\'s [model] says type = "organism" and family = "whisper"')
    where = f"{path} [model]"
    _known(model, MODEL_KEYS, where)
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    from .languages import NO_SPACES

    language = _text(model, "language", where)
    if language not in LANGUAGES:
        raise ConfigError(f"{where}: language = {language!r} is not one of Whisper's; write a code such as en or zh")
    text = _text(model, "text", where)
    tokens = tuple(text) if language in NO_SPACES else tuple(text.split())
    tokens = tuple(t for t in tokens if not t.isspace())
    if not 1 <= len(tokens) <= MAX_TOKENS:
        raise ConfigError(f"{where}: text has {len(tokens)} tokens; an organism says 1 to {MAX_TOKENS}")
    times = model.get("times")
    if not isinstance(times, list) or not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in times):
        raise ConfigError(f"{where}: times is a list of seconds, each token's start then the last one's end")
    if len(times) != len(tokens) + 1:
        raise ConfigError(f"{where}: times has {len(times)} values for {len(tokens)} tokens; give {len(tokens) + 1} "
                          "(each token's start, then the last one's end)")
    if not all(math.isfinite(t) for t in times) or times[0] < 0 or times[-1] > WINDOW_SECONDS:
        raise ConfigError(f"{where}: times lie inside the {WINDOW_SECONDS:g}-s window, from 0")
    short = [k for k in range(len(tokens)) if times[k + 1] - times[k] < MIN_TOKEN_SECONDS - 1e-9]
    if short:
        raise ConfigError(f"{where}: token {short[0]} ({tokens[short[0]]!r}) lasts "
                          f"{times[short[0] + 1] - times[short[0]]:.3f} s; each lasts {MIN_TOKEN_SECONDS} s or more, "
                          "the times increasing")
    layers = _whole(model, "layers", 2, 1, 8, where)
    per_layer = _whole(model, "heads", 4, 1, 8, where)
    mels = _whole(model, "mels", 80, 80, 128, where)
    if mels not in (80, 128):
        raise ConfigError(f"{where}: mels = {mels}; Whisper reads 80 mel bins, or 128 (large-v3)")
    heads = _heads(data.get("head", []), layers, per_layer, path)
    name = _text(model, "name", where) if "name" in model else path.stem
    return SoundSpec(name, language, tokens, tuple(float(t) for t in times), heads, layers, per_layer, mels,
                     _whole(model, "seed", 0, 0, 2**31 - 1, where))


def _read(path: Path) -> dict[str, Any]:
    from ..config import read_toml

    return read_toml(path, "a sound organism")


def _known(table: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    import difflib

    unknown = sorted(set(table) - set(keys))
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(keys), n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(keys)}"
        raise ConfigError(f"{where}: unknown key {unknown[0][:64]!r}; {hint}")


def _text(table: dict[str, Any], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value.strip() or len(value) > 2_000:
        raise ConfigError(f"{where}: {key} is a text of 1 to 2,000 characters")
    return value.strip()


def _whole(table: dict[str, Any], key: str, default: int, low: int, high: int, where: str) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: {key} = {value!r}; write a whole number from {low} to {high}")
    return value


def _heads(tables: Any, layers: int, per_layer: int, path: Path) -> tuple[SoundHead, ...]:
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{path}: each {HEAD} is a table of kind, layer and head")
    found: list[SoundHead] = []
    for k, table in enumerate(tables):
        where = f"{path} {HEAD} {k + 1}"
        kind = table.get("kind")
        if kind not in KINDS:
            raise ConfigError(f"{where}: kind = {kind!r}; the kinds are {', '.join(KINDS)}")
        _known(table, HEAD_KEYS[kind], where)
        layer = _whole(table, "layer", -1, 0, layers - 1, where)
        head = _whole(table, "head", -1, 0, per_layer - 1, where)
        if any((h.layer, h.head) == (layer, head) for h in found):
            raise ConfigError(f"{where}: layer {layer}, head {head} is planted twice")
        positions = _whole(table, "positions", 10, 1, 1500, where) if kind == "first_frames" else 0
        found.append(SoundHead(kind, layer, head, positions))
    if not any(h.kind == "alignment" for h in found):
        raise ConfigError(f"{path}: plant at least one {HEAD} of kind = \"alignment\"; it is what an organism times "
                          "its words with")
    return tuple(found)
