"""Whisper's languages as its word timings need them: those written without spaces between words."""

from __future__ import annotations

NO_SPACES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
"""Languages written without spaces between words (openai-whisper's ``Tokenizer.split_to_word_tokens``): their words
are split where the tokens decode to whole characters, and their text is tokenized with no space before it."""
