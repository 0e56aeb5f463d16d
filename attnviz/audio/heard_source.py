"""A Whisper hearing one clip as a source (``attnviz tui --audio``, and :func:`attnviz.api.load` with ``audio``): the
clip fixed, each text given teacher-forced (:func:`attnviz.audio.whisper.whisper_attention`), and no text its own
greedy transcript; its result holds the encoder's self-attention over the clip's positions, the decoder's over the
transcript and the cross-attention between them (``kind`` ``encoder``, ``decoder``, ``cross``), drawn as any
encoder-decoder result is. The window's padding after the clip is left out (:func:`clip_only`), as ``heatmap
--audio`` leaves it out: each weight is the model's, and a row's weights on the padding are not shown."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..sources.base import ExtractOptions
from ..sources.saved import SavedSource
from .whisper import clip_only


class HeardSource(SavedSource):
    """The clip ``audio`` heard by ``loaded`` (a :class:`~attnviz.audio.model.WhisperModel`): a saved result whose
    text is the transcript, given or the model's own (the last two texts heard are kept)."""

    engine = "heard"
    own_text = True  # with no text, it reads the model's own transcript

    def __init__(self, audio: str | os.PathLike[str], loaded: Any) -> None:
        from .whisper import whisper_attention

        self.audio, self.loaded = Path(audio), loaded
        first = clip_only(whisper_attention(self.audio, loaded))
        super().__init__(first, self.audio)
        self.name = loaded.name
        self.transcript = str(first.metadata.get("transcript", "")).strip()
        self._kept: dict[str | None, Any] = {None: first, self.transcript: first}

    def describe(self) -> str:
        return f"{self.loaded.name} hearing {self.audio.name} (transformers' eager attention)"

    def _one(self, text: str | None, options: ExtractOptions) -> Any:
        from .whisper import whisper_attention

        key = (text or "").strip() or None
        if key not in self._kept:
            heard = clip_only(whisper_attention(self.audio, self.loaded, text=key))
            self._kept = {None: self._kept[None], self.transcript: self._kept[None], key: heard}
        self.result = self._kept[key]
        return super()._one(None, options)

