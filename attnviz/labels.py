"""Making token labels safe and visible: one place for the characters that need care.

Labels come from user text, so they may hold whitespace, control characters (a raw ESC would
drive the terminal) and zero-width code points that only shape their neighbours.
"""

from __future__ import annotations

# Code points that attach to the previous character: variation selectors, joiners, skin tones.
CONTINUATION = "##"  # marks a word piece that continues the word before it (BERT's convention, for every tokenizer)

JOINERS = "\ufe0e\ufe0f\u200d\u200c" + "".join(map(chr, range(0x1F3FB, 0x1F400)))
_VISIBLE = {" ": "␣", "\n": "⏎", "\r": "␍", "\t": "⇥", "\u3000": "␣", "\x7f": "␡"}


def printable(label: str) -> str:
    """Whitespace shown as ``␣ ⏎ ⇥``, other control characters as their Unicode pictures (``␛``),
    and invisible format characters (bidi overrides such as U+202E, which would reorder what the
    terminal shows) as ``<U+202E>``. Joiners inside emoji sequences stay (they only shape them)."""
    out = []
    for ch in label:
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif ord(ch) < 0x20:
            out.append(chr(0x2400 + ord(ch)))
        elif 0x80 <= ord(ch) < 0xA0:
            out.append("�")
        elif is_invisible(ch) and ch not in JOINERS:
            out.append(f"<U+{ord(ch):04X}>")
        else:
            out.append(ch)
    return "".join(out) or "∅"


def is_invisible(ch: str) -> bool:
    """A format character (Unicode category Cf: bidi embeddings, overrides and isolates, marks,
    zero-width characters) or a lone surrogate: nothing a terminal should be given raw."""
    import unicodedata

    return unicodedata.category(ch) in ("Cf", "Cs")
