"""A transcript's tokens grouped into words as openai-whisper groups them (``Tokenizer.split_to_word_tokens``,
``whisper/tokenizer.py``, release 20250625):

- by characters (``split_tokens_on_unicode``): tokens are gathered until what they decode to holds no replacement
  character (U+FFFD, a character cut between tokens) that the whole transcript's text does not also hold at that
  place;
- by spaces (``split_tokens_on_spaces``, every language but those written without spaces): each such group starts a
  new word where it is special (its first id at least end of text's), starts with a space, or is punctuation
  (``string.punctuation``), else it joins the word before;
- for zh, ja, th, lo, my and yue (:data:`~attnviz.audio.languages.NO_SPACES`) each character group is a word.

``decode`` turns ids into text with special tokens written out, as openai-whisper's ``decode_with_timestamps`` does;
for a transformers tokenizer, its backend's ``decode(ids, skip_special_tokens=False)``."""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence

from .languages import NO_SPACES

REPLACEMENT = "\ufffd"

Decode = Callable[[list[int]], str]


def split_words(ids: Sequence[int], decode: Decode, eot: int, language: str | None) -> tuple[list[str], list[list[int]]]:
    """The words of ``ids`` (the transcript's tokens, end of text last as openai-whisper passes them) and each word's
    ids (see the module)."""
    if language in NO_SPACES:
        return split_on_characters(ids, decode)
    return split_on_spaces(ids, decode, eot)


def split_on_characters(ids: Sequence[int], decode: Decode) -> tuple[list[str], list[list[int]]]:
    """openai-whisper's ``split_tokens_on_unicode``: groups of tokens that decode to whole characters."""
    whole = decode(list(ids))
    words: list[str] = []
    groups: list[list[int]] = []
    current: list[int] = []
    offset = 0
    for token in ids:
        current.append(token)
        text = decode(current)
        at = offset + text.index(REPLACEMENT) if REPLACEMENT in text else -1
        if at < 0 or whole[at : at + 1] == REPLACEMENT:
            words.append(text)
            groups.append(current)
            current = []
            offset += len(text)
    return words, groups


def split_on_spaces(ids: Sequence[int], decode: Decode, eot: int) -> tuple[list[str], list[list[int]]]:
    """openai-whisper's ``split_tokens_on_spaces``: character groups joined into words at spaces and punctuation."""
    words: list[str] = []
    groups: list[list[int]] = []
    for text, group in zip(*split_on_characters(ids, decode), strict=True):
        special = group[0] >= eot
        if special or text.startswith(" ") or text.strip() in string.punctuation or not words:
            words.append(text)
            groups.append(list(group))
        else:
            words[-1] += text
            groups[-1].extend(group)
    return words, groups
