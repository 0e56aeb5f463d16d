"""What ``attnviz serve --audio`` answers: a clip heard by a Whisper, both fixed at its start
(:class:`attnviz.views.sound_page.Sounds`), each transcript sent teacher-forced over it (an empty one: the model's own
greedy transcript).

* ``/``: the sound page of ``attnviz view --audio`` (:mod:`attnviz.render.sound_page`) for the model's own transcript,
  with a box for a transcript; the clip's sound and spectrogram are in it, once.
* ``/api/page``: the page's data for a transcript (:meth:`~attnviz.views.sound_page.SoundPage.data`), less the clip's
  sound and spectrogram (:data:`~attnviz.views.sound_page.CLIP_PARTS`), which the page holds already.
* ``/api/attention``: the decoder's cross-attention over the clip's positions at full resolution
  (:meth:`~attnviz.views.sound_page.SoundPage.attention`), or 413 past ``limit`` weights.

:func:`attnviz.serve.create_app` calls these, in its turns, as it calls a text's page; the requests' checks are its."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .replies import Reply


def _json(document: Any) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class SoundAnswers:
    """The three answers of a server of ``sounds`` (see the module), drawn in ``cmap``."""

    sounds: Any
    cmap: str
    limit: int
    endpoint: str = "/api/page"

    def home(self, checkpoint: Any) -> str:
        """The home page: the model's own transcript, the box empty."""
        from ..render.sound_page import sound_html

        document = self.sounds.page(None, cmap=self.cmap).data()
        document["live"] = {"endpoint": self.endpoint, "text": ""}
        return sound_html(document)

    def page(self, values: dict[str, Any], checkpoint: Any) -> str:
        return _json(self.sounds.page(values["text"], cmap=self.cmap).data(clip=False))

    def attention(self, values: dict[str, Any], checkpoint: Any) -> str:
        page = self.sounds.page(values["text"], cmap=self.cmap)
        count = int(page.heat.size)
        if count > self.limit:
            raise Reply(413, f"the answer would hold {count:,} weights, over this server's {self.limit:,}; send a "
                             "shorter transcript, or ask /api/page, which sends them quantised")
        return _json(page.attention())
