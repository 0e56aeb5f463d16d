"""Fonts for image labels: fall back to an installed font that has the glyphs, or say which are missing.

matplotlib draws a missing glyph as an empty box without complaint; learners type Chinese, so
attnviz picks a chain of fonts that covers the labels (matplotlib ≥ 3.6 falls back along the
``font.family`` list glyph by glyph) and reports every character that no installed font has.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable

from ..labels import JOINERS, printable

# Tried first, in order, when the default font lacks a character; any other installed font follows.
_PREFERRED = (
    "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK TC", "Noto Sans CJK KR",
    "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Source Han Sans SC", "Droid Sans Fallback",
    "AR PL UMing CN", "Noto Sans Hebrew", "Noto Sans Arabic", "Noto Emoji", "Symbola",
)
# Bitmap colour-emoji fonts matplotlib cannot draw, and placeholder fonts that would hide a gap.
_UNUSABLE = ("Color Emoji", "Apple Color", "Segoe UI Emoji", "Last Resort")

DEFAULT_FAMILY = "DejaVu Sans"


def clean_label(label: str) -> str:
    """A token label as images draw it: printable, without the joiners, selectors and skin tones that
    matplotlib (which does no emoji shaping) would draw as separate boxes."""
    return printable("".join(ch for ch in label if ch not in JOINERS))


@functools.cache
def _charmap(path: str) -> frozenset[int]:
    from matplotlib import font_manager

    try:
        return frozenset(font_manager.get_font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return frozenset()


def _installed() -> list[tuple[str, str]]:
    """(family, file) of usable installed fonts, preferred ones first."""
    from matplotlib import font_manager

    seen: dict[str, str] = {}
    for entry in font_manager.fontManager.ttflist:
        if any(bad in entry.name for bad in _UNUSABLE) or entry.name in seen:
            continue
        seen[entry.name] = entry.fname
    order = {name: i for i, name in enumerate(_PREFERRED)}
    return sorted(seen.items(), key=lambda item: (order.get(item[0], len(order)), item[0]))


def font_chain(texts: Iterable[str]) -> tuple[list[str], list[str]]:
    """Font families that together cover ``texts``, and the characters none of them has.

    Returns ``(families, missing)``: ``families`` starts with matplotlib's default font and adds
    fallbacks only as needed; ``missing`` lists uncovered characters in order of appearance.
    """
    needed: dict[str, None] = {}
    for text in texts:
        for ch in clean_label(text):
            if not ch.isspace() and unicodedata.category(ch) not in ("Mn", "Me", "Cf"):
                needed[ch] = None
    if all(" " < ch <= "~" for ch in needed):
        return [DEFAULT_FAMILY], []  # matplotlib's own font has all of printable ASCII: no font files to read
    families, missing = _cover(needed)
    if missing and _rescan_fonts():  # a font installed after matplotlib listed the system's fonts
        families, missing = _cover(needed)
    return families, missing


def _cover(needed: Iterable[str]) -> tuple[list[str], list[str]]:
    fonts = dict(_installed())
    families = [DEFAULT_FAMILY]
    missing = [ch for ch in needed if ord(ch) not in _charmap(fonts.get(DEFAULT_FAMILY, ""))]
    for family, path in fonts.items():
        if not missing:
            break
        charmap = _charmap(path)
        if any(ord(ch) in charmap for ch in missing):
            families.append(family)
            missing = [ch for ch in missing if ord(ch) not in charmap]
    return families, missing


@functools.cache
def _rescan_fonts() -> bool:
    """List the system's fonts again, once per process, and rewrite matplotlib's cache of them.

    matplotlib lists the fonts once and keeps the list in its cache folder until its own version
    changes, so a CJK font installed later (``apt-get install fonts-wqy-microhei``) would stay
    invisible. Returns whether the list changed. The manager is updated in place: matplotlib's
    text rendering holds a reference to it."""
    from matplotlib import font_manager

    manager = font_manager.fontManager
    before = {entry.fname for entry in manager.ttflist}
    fresh = font_manager.FontManager()
    if {entry.fname for entry in fresh.ttflist} == before:
        return False
    vars(manager).update(vars(fresh))
    manager._findfont_cached.cache_clear()  # type: ignore[attr-defined]  # matplotlib's stub omits this private lru_cache
    try:
        from pathlib import Path

        import matplotlib

        font_manager.json_dump(manager, Path(matplotlib.get_cachedir(), f"fontlist-v{font_manager.FontManager.__version__}.json"))
    except (OSError, AttributeError):
        pass  # a read-only cache folder: the next process scans again
    return True


def font_files(families: Iterable[str]) -> list[str]:
    """The font file of each family of a :func:`font_chain`, in order (the default family is the
    DejaVu Sans matplotlib ships; the others as the system lists them)."""
    from pathlib import Path

    import matplotlib

    files = []
    installed: dict[str, str] | None = None
    for family in families:
        if family == DEFAULT_FAMILY:
            files.append(str(Path(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSans.ttf")))
            continue
        if installed is None:
            installed = dict(_installed())
        if family in installed:
            files.append(installed[family])
    return files


def font_covering(files: list[str]) -> functools.partial[int]:
    """For each character, the index into ``files`` of the first font that has it (0 when none does)."""
    maps = [_charmap(path) for path in files] if len(files) > 1 else []
    return functools.partial(_first_font, tuple(maps))


def _first_font(maps: tuple[frozenset[int], ...], ch: str) -> int:
    for i, charmap in enumerate(maps):
        if ord(ch) in charmap:
            return i
    return 0
