"""The page of a Whisper model hearing a clip (``attnviz view --audio``), offline and self-contained: inline script,
style and data, the clip itself a ``data:`` URL (the page's policy lets media come from its own data only; no request
leaves it). It draws what it is given, the document of :meth:`attnviz.views.sound_page.SoundPage.data`: the clip's
log-mel spectrogram with a seconds axis, the transcript's words under it at their times, the cross-attention of the
word hovered or focused along time (the alignment heads' mean, or any layer × head chosen), every token's, and the
alignment heads' normalised weights with the DTW path the timings come from; a word clicked (or Enter) plays."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .html import standalone_page, write_page

INTRO = ("What a Whisper model hears and where it looks. Top: the clip as the model hears it (its log-mel "
         "spectrogram: time left to right, pitch bottom to top, loud dark) and the words of its transcript placed at "
         "the times the model's alignment heads give them. Hover a word (or Tab to it) to see where the decoder looks "
         "along the clip as it writes that word; click it (or press Enter) to hear it. Below: every token's "
         "cross-attention, and the alignment path, the route through tokens × time that the word times come from.")


def _row(gutter: str, plot: str, bar: str = "", *, cls: str = "row") -> str:
    return f"<div class=\"{cls}\"><div class=\"gutter\">{gutter}</div>{plot}<div class=\"barcol\">{bar}</div></div>"


LIVE = ("<form class=\"live\" id=\"live\"><label for=\"live-text\">the transcript to teacher-force</label> "
        "<input type=\"text\" id=\"live-text\" autocomplete=\"off\" spellcheck=\"false\" "
        "placeholder=\"empty: the model's own transcript\"> <button type=\"submit\" id=\"live-submit\">hear it"
        "</button> <span id=\"live-status\" aria-live=\"polite\"></span></form>\n")
"""A server's box (``attnviz serve --audio``: the document's ``live``): a transcript sent to ``live.endpoint``, whose
answer (the page's data for it, the clip's parts left out) the page draws in place."""


def sound_html(document: dict[str, Any]) -> str:
    """The page's HTML (see the module); every text of ``document`` (a transcript, a file name) is data its script
    writes as text, never markup. A document with ``live`` (``{"endpoint", "text"}``: a page ``attnviz serve
    --audio`` serves) has the box of :data:`LIVE`, and its script may fetch from the server that served it."""
    axis = _row("", "<div class=\"plot axis\" aria-hidden=\"true\"></div>", cls="row axisrow")
    live = bool(document.get("live"))
    body = (
        (LIVE if live else "") +
        "<div class=\"controls\"><label for=\"heads\">cross-attention of</label> <select id=\"heads\"></select> "
        "<button type=\"button\" id=\"playall\">▶ play the whole clip</button> "
        "<audio id=\"clip\" controls preload=\"auto\"></audio>"
        "<span id=\"status\" aria-live=\"polite\"></span></div>\n"
        "<ul class=\"notes\" id=\"notes\"></ul>\n<main>\n"
        "<section aria-labelledby=\"hearh\"><h2 id=\"hearh\">What the model hears, and when each word is said</h2>"
        + _row("<span class=\"axistitle\">mel bins<br>(pitch ↑)</span>",
               "<div class=\"plot\" id=\"specbox\"><img id=\"spectrogram\" alt=\"the clip's log-mel spectrogram\">"
               "<div class=\"playhead\"></div></div>",
               "<div class=\"colourbar\" id=\"specbar\"></div>")
        + _row("<span class=\"axistitle\">words<br>(hover, click)</span>",
               "<div class=\"plot words\" id=\"words\" role=\"group\" aria-label=\"the transcript's words, at their "
               "times\"><div class=\"playhead\"></div></div>")
        + axis + "</section>\n"
        "<section aria-labelledby=\"heattitle\"><h2 id=\"heattitle\">Where the decoder looks as it writes a word</h2>"
        "<p class=\"note\" id=\"heatnote\" aria-live=\"polite\"></p>"
        + _row("<div class=\"labels\" id=\"heatlabels\"></div>",
               "<div class=\"plot\"><canvas id=\"heat\" aria-label=\"the chosen word's cross-attention along the "
               "clip\"></canvas><div class=\"playhead\"></div></div>",
               "<div class=\"colourbar\" id=\"heatbar\"></div>")
        + axis + "</section>\n"
        "<section aria-labelledby=\"tokensh\"><h2 id=\"tokensh\">Every token's cross-attention along the clip</h2>"
        "<p class=\"note\">A row per token, the step that writes it; the chosen word's rows outlined. Same heads and "
        "colours as above.</p>"
        + _row("<div class=\"labels\" id=\"tokenlabels\"></div>",
               "<div class=\"plot\"><canvas id=\"tokens\" aria-label=\"each token's cross-attention along the "
               "clip\"></canvas><div class=\"playhead\"></div></div>",
               "<div class=\"colourbar\" id=\"tokensbar\"></div>")
        + axis + "<p class=\"tip\" id=\"tokenstip\" aria-live=\"polite\"></p></section>\n"
        "<section aria-labelledby=\"pathh\"><h2 id=\"pathh\">The alignment path: where the word times come from</h2>"
        "<p class=\"note\" id=\"pathnote\"></p>"
        + _row("<div class=\"labels\" id=\"pathlabels\"></div>",
               "<div class=\"plot\"><canvas id=\"alignment\" aria-label=\"the alignment heads' normalised weights, "
               "tokens by time, with the alignment path\"></canvas></div>",
               "<div class=\"colourbar\" id=\"pathbar\"></div>")
        + axis + "<p class=\"tip\" id=\"pathtip\" aria-live=\"polite\"></p></section>\n</main>"
    )
    return standalone_page(title=document["title"], intro=INTRO, body=body, document=document, data_id="sound-data",
                           scripts=("names.js", "tiles.js", "sound.js"), style="sound.css", media=True,
                           connect="'self'" if live else "'none'")


def render_sound_page(document: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the page to ``path`` (atomically)."""
    from .output import check_output_path

    return write_page(sound_html(document), check_output_path(path))
