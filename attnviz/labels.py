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
    terminal shows) as ``<U+202E>``. The joiners, variation selectors and skin tones of
    :data:`JOINERS` stay (they only shape their neighbours, inside emoji and some scripts)."""
    return "".join(_escaped(ch) for ch in label) or "∅"


def safe_text(text: str, *, newlines: bool = False) -> str:
    """``text`` (a title, a model or file name) for the terminal: as :func:`printable` writes it,
    except that spaces stay spaces, and line breaks stay too when ``newlines`` is true.

    Nothing in the result drives the terminal or reorders what it shows; it is idempotent, so
    text escaped upstream (token labels) may pass through it again."""
    if text.isprintable():  # no control, format, separator other than the space, or surrogate character
        return text
    return "".join(ch if ch == " " or (newlines and ch == "\n") else _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    if ch in _VISIBLE:
        return _VISIBLE[ch]
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)
    if 0x80 <= code < 0xA0:
        return "�"
    if ch not in JOINERS and (is_invisible(ch) or ch in "\u2028\u2029"):  # line and paragraph separators break lines
        return f"<U+{code:04X}>"
    return ch


def is_unsafe(ch: str) -> bool:
    """A character no terminal, log or JSON reader should be given raw: a C0 or C1 control (ESC starts
    a terminal sequence, OSC 52 writes the clipboard), DEL, a format character (bidi overrides reorder
    what is shown), a line or paragraph separator (U+2028 ends a JavaScript line) or a lone surrogate."""
    import unicodedata

    code = ord(ch)
    return code < 0x20 or 0x7F <= code < 0xA0 or unicodedata.category(ch) in ("Cf", "Cs", "Zl", "Zp")


def json_text(value: object, *, indent: int | None = None) -> str:
    """``value`` as JSON (UTF-8 text kept readable, NaN refused) in which every :func:`is_unsafe`
    character inside a string is written as ``\\uXXXX``: the document means the same, and printing it
    drives no terminal. The joiners of :data:`JOINERS` stay (they shape emoji)."""
    import json

    text = json.dumps(value, ensure_ascii=False, allow_nan=False, indent=indent)
    if text.isprintable():
        return text
    return "".join(f"\\u{ord(ch):04x}" if ch not in "\n " and ch not in JOINERS and is_unsafe(ch) else ch
                   for ch in text)


def is_invisible(ch: str) -> bool:
    """A format character (Unicode category Cf: bidi embeddings, overrides and isolates, marks,
    zero-width characters) or a lone surrogate: nothing a terminal should be given raw."""
    import unicodedata

    return unicodedata.category(ch) in ("Cf", "Cs")


def head_name(layer: int, head: int) -> str:
    """The one spelling of a head's name: ``L3H7`` is head 7 of layer 3 (in titles, legends, tables
    and export file names alike; the page's scripts spell it the same way, with their ``headName``)."""
    return f"L{layer}H{head}"
