"""A set of alignment heads in the three forms people load, written and read back:

- transformers: ``generation_config.alignment_heads``, a list of ``[layer, head]`` pairs
  (``WhisperGenerationMixin._extract_token_timestamps`` reads it; :func:`generation_config_heads`).
- openai-whisper: ``_ALIGNMENT_HEADS`` in ``whisper/__init__.py`` (release 20250625), a ``layers × heads`` boolean
  array, its bytes gzipped, then base85 (``Whisper.set_alignment_heads`` reads it:
  ``np.frombuffer(gzip.decompress(base64.b85decode(dump)), dtype=bool).reshape(n_text_layer, n_text_head)``;
  :func:`openai_mask`, :func:`from_openai_mask`). Written with a gzip time of 0, so the same heads give the same
  text; openai's own masks carry a time, so they are read back, not matched byte for byte.
- whisper.cpp: custom heads have no text form on its command line (``--dtw`` takes a preset's name); a program
  passes them through ``whisper_context_params`` (``include/whisper.h`` at ggml-org/whisper.cpp 233fe1fc9:
  ``dtw_aheads_preset = WHISPER_AHEADS_CUSTOM`` and ``dtw_aheads = {n_heads, heads}``, each head a ``whisper_ahead
  {n_text_layer, n_head}``), written as its own presets are in ``src/whisper.cpp`` (``static const whisper_ahead
  g_aheads_tiny[] = { {2, 2}, {3, 0}, ... };``). :func:`whisper_cpp_heads` writes that C++ and
  :func:`from_whisper_cpp` reads the array back.

Heads are ``(layer, head)`` pairs counted from 0 in every form."""

from __future__ import annotations

import base64
import gzip
import re
import zlib
from collections.abc import Sequence

import numpy as np

from ..errors import UsageError

Head = tuple[int, int]


def generation_config_heads(heads: Sequence[Sequence[int]]) -> list[list[int]]:
    """``heads`` as transformers' ``alignment_heads``: ``[[layer, head], ...]``, in the order given."""
    return [[int(layer), int(head)] for layer, head in heads]


def openai_mask(heads: Sequence[Sequence[int]], layers: int, per_layer: int) -> str:
    """``heads`` as openai-whisper's mask of a decoder of ``layers`` × ``per_layer`` heads (see the module)."""
    mask = np.zeros((layers, per_layer), dtype=bool)
    for layer, head in heads:
        if not (0 <= layer < layers and 0 <= head < per_layer):
            raise UsageError(f"layer {layer}, head {head} is outside a decoder of {layers} layers × {per_layer} heads")
        mask[layer, head] = True
    return base64.b85encode(gzip.compress(mask.tobytes(), mtime=0)).decode("ascii")


def from_openai_mask(text: str | bytes, layers: int, per_layer: int) -> list[Head]:
    """The heads of openai-whisper's mask ``text`` for a decoder of ``layers`` × ``per_layer`` heads, by layer then
    head; a mask that is not base85 of gzip, or not of that many heads, is one line (decompressed at most one byte
    past its size: a gzip bomb stops there)."""
    size = layers * per_layer
    try:
        packed = base64.b85decode(text)
        unpack = zlib.decompressobj(wbits=31)  # gzip's header and trailer
        raw = unpack.decompress(packed, size + 1)
    except (ValueError, zlib.error) as exc:
        raise UsageError(f"the alignment-heads mask is not base85 of gzip, as openai-whisper writes it ({exc})") from None
    if len(raw) != size:
        held = f"more than {size}" if len(raw) > size else str(len(raw))
        raise UsageError(f"the alignment-heads mask holds {held} heads, not the {layers} × {per_layer} = {size} of "
                         "this decoder; it is another model's")
    if any(b > 1 for b in raw):
        raise UsageError("the alignment-heads mask holds values other than true and false; it is not openai-whisper's")
    mask = np.frombuffer(raw, dtype=bool).reshape(layers, per_layer)
    return [(int(layer), int(head)) for layer, head in zip(*np.nonzero(mask), strict=True)]


def whisper_cpp_heads(heads: Sequence[Sequence[int]], name: str = "g_aheads_custom") -> str:
    """``heads`` as the C++ that hands them to whisper.cpp (see the module): the array, and the context parameters
    that use it."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise UsageError(f"{name!r} is not a C identifier")
    pairs = ", ".join(f"{{{int(layer)}, {int(head)}}}" for layer, head in heads)
    return (f"static const whisper_ahead {name}[] = {{ {pairs} }};\n"
            "cparams.dtw_token_timestamps = true;\n"
            "cparams.dtw_aheads_preset = WHISPER_AHEADS_CUSTOM;\n"
            f"cparams.dtw_aheads = {{ {len(heads)}, {name} }};\n")


_ARRAY = re.compile(r"whisper_ahead\s+[A-Za-z_][A-Za-z0-9_]*\s*\[\s*\]\s*=\s*\{(?P<body>[^;]*)\}\s*;")
_PAIR = re.compile(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}")


def from_whisper_cpp(text: str) -> list[Head]:
    """The heads of the first ``whisper_ahead NAME[] = { {layer, head}, ... };`` in ``text``, in its order."""
    found = _ARRAY.search(text)
    if found is None:
        raise UsageError("no whisper_ahead array (static const whisper_ahead NAME[] = { {layer, head}, ... };) found")
    body = found.group("body")
    pairs = [(int(a), int(b)) for a, b in _PAIR.findall(body)]
    if not pairs or _PAIR.sub("", body).strip(" ,\n\t") != "":
        raise UsageError("the whisper_ahead array holds something other than {layer, head} pairs")
    return pairs
