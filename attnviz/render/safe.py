"""The last line of terminal safety: what a renderer lays out is escaped where it is made (token
labels, titles); this escapes what reaches a console another way, segment by segment, so no
string attnviz did not write itself (a path, a model name, a token) drives the terminal."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rich.segment import Segment

from ..labels import safe_text


def escaped_segments(segments: Iterable[Segment]) -> Iterator[Segment]:
    """``segments`` with control, format (bidi) and separator characters in their text escaped as
    :func:`attnviz.labels.safe_text` writes them; control segments (rich's own cursor moves) pass."""
    for segment in segments:
        if segment.control or segment.text.isprintable():
            yield segment
        else:
            yield Segment(safe_text(segment.text, newlines=True), segment.style, segment.control)
