"""Tokens a person can read, from a ``tokenizers`` encoding or, failing that, from the raw pieces.

A label is the piece of the input text the token covers (found through the tokenizer's offsets),
so byte-level ``Ġ``, SentencePiece ``▁`` and BERT's lowercasing all disappear by themselves:

- a piece that continues a word is marked ``##`` (BERT's convention, for every tokenizer);
- a token that is only whitespace shows it: ``␣`` for a space, ``⏎`` for a newline, ``⇥`` for a tab;
- special tokens ([CLS], [SEP], ``<s>``, BOS, …) keep their names and are flagged;
- text the vocabulary has no token for, which the tokenizer maps to its unknown token, shows
  both: ``[UNK:🍕]`` (the token the model saw, and the text it stands for).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import InputError, ModelNotFoundError
from ..labels import CONTINUATION, printable
from ..quiet import stderr_silenced

T = TypeVar("T")

UNKNOWN = "[UNK:{}]"  # the label of text the tokenizer replaced by its unknown token


@dataclass
class TokenInfo:
    """One encoded input: ids and what to show for them."""

    ids: list[int]
    labels: list[str]
    special: list[bool]
    word_ids: list[int]  # −1 for special tokens; pieces of one word share an id
    segment_ids: list[int]  # 0 for the text, 1 for the pair (--pair)


def label_from_piece(piece: str) -> str:
    """A label from a raw piece alone (no offsets): strip ``Ġ``/``▁``, keep ``##``, show ``Ċ`` as ``⏎``."""
    if piece.startswith(CONTINUATION) and len(piece) > 2:
        return piece
    text = piece.replace("Ċ", "\n").replace("ĉ", "\t")
    stripped = text.lstrip("Ġ▁")
    if not stripped:
        return printable(" " * len(text))
    return printable(stripped) if stripped.strip() == "" else stripped.strip()


_UNK_IDS: dict[int, tuple[Any, int | None]] = {}  # id(tokenizer) → (tokenizer, its unknown id), for Unigram models


def unknown_token_id(tokenizer: Any) -> int | None:
    """The id a ``tokenizers.Tokenizer`` gives text its vocabulary lacks (``[UNK]``, ``<unk>``); None
    when it has none (byte-level BPE never needs one)."""
    model = getattr(tokenizer, "model", None)
    token = getattr(model, "unk_token", None)
    if token is not None:
        return tokenizer.token_to_id(token)
    if type(model).__name__ != "Unigram":
        return None
    # A Unigram model (T5, ALBERT, XLM-R) names its unknown token only in its serialised form.
    cached = _UNK_IDS.get(id(tokenizer))
    if cached is None or cached[0] is not tokenizer:
        import json

        unk = json.loads(tokenizer.to_str()).get("model", {}).get("unk_id")
        cached = _UNK_IDS[id(tokenizer)] = (tokenizer, None if unk is None else int(unk))
    return cached[1]


def unknown_label(label: str, unk_token: str | None = None) -> str:
    """``[UNK:🍕]`` for text that became the unknown token; a literal ``[UNK]`` in the text stays as it is."""
    return label if label in ("", unk_token) else UNKNOWN.format(label)


def token_info(encoding: Any, texts: tuple[str, str | None], special_ids: frozenset[int] = frozenset(),
               unk_id: int | None = None) -> TokenInfo:
    """Labels, flags and word ids from a ``tokenizers.Encoding`` of ``texts`` (text, optional pair).

    A piece continues the previous word only when the tokenizer puts both in one word and the
    piece starts exactly where the previous one ended, with no space or ``▁``/``Ġ`` before it.
    Tokenizers without a pre-tokenizer (older LLaMA/Mistral files) call the whole text one
    "word"; the offsets still tell the words apart. Ids in ``special_ids`` (special tokens typed
    into the text, such as a literal ``[SEP]``) are flagged as special too. A token ``unk_id``
    (the unknown token) is labelled ``[UNK:text]``, the text it replaced.
    """
    labels: list[str] = []
    word_ids: list[int] = []
    special: list[bool] = []
    prev: tuple[int, int | None, int] | None = None  # (sequence, tokenizer word, end offset) of a word piece
    word = -1
    space_before = False
    # Each of an Encoding's properties builds its whole list when read: read each once (at 32,768
    # tokens, reading them per token took seconds).
    seq_ids, special_mask, tokenizer_words = encoding.sequence_ids, encoding.special_tokens_mask, encoding.word_ids
    pieces = zip(encoding.ids, encoding.tokens, encoding.offsets, strict=True)
    for i, (tid, piece, (start, end)) in enumerate(pieces):
        seq = seq_ids[i]
        if special_mask[i] or seq is None or tid in special_ids:
            labels.append(printable(piece))
            word_ids.append(-1)
            special.append(True)
            prev = None
            space_before = False
            continue
        source = texts[seq] or ""
        surface = source[start:end] if end > start else ""
        continues = (
            prev is not None
            and prev[:2] == (seq, tokenizer_words[i])
            and start == prev[2]
            and bool(surface.strip())
            and not surface[:1].isspace()
            and not piece.startswith(("▁", "Ġ"))
        )
        if not continues and not space_before:
            word += 1
        space_before = not surface.strip() and bool(surface)  # a lone space belongs to the word after it
        if not surface:
            label = label_from_piece(piece)
        elif surface.strip():
            label = CONTINUATION + surface.strip() if continues else surface.strip()
        else:
            label = surface
        if tid == unk_id and unk_id is not None:
            label = unknown_label(label, piece)
        labels.append(printable(label))
        word_ids.append(word)
        special.append(False)
        # A piece that is or ends in whitespace ends a word: what follows starts a new one.
        ends_word = not surface.strip() or surface[-1:].isspace() or piece.endswith(("▁", "Ġ"))
        prev = None if ends_word else (seq, tokenizer_words[i], end)
    segment = [s if s is not None else (1 if i and seq_ids[i - 1] == 1 else 0) for i, s in enumerate(seq_ids)]
    return TokenInfo(ids=list(encoding.ids), labels=labels, special=special, word_ids=word_ids, segment_ids=segment)


def encode(
    tokenizer: Any,
    text: str,
    pair: str | None = None,
    *,
    max_length: int | None = None,
    truncate: bool = False,
    model_name: str = "the model",
    special_ids: frozenset[int] = frozenset(),
    what: str = "text",
) -> TokenInfo:
    """Encode with a ``tokenizers.Tokenizer``; a text over ``max_length`` tokens is an error unless ``truncate``.
    ``what`` names the text in errors (``[[target]]``: an encoder-decoder's target, bounded as a text is)."""
    if not text or not text.strip():
        raise InputError(f"the {what} is empty; give a sentence, e.g. \"The cat sat on the mat.\"")
    if pair is not None and not pair.strip():
        raise InputError("[[pair]] is empty; give a second sentence or leave [[pair]] out")
    for name, value in ((what, text), ("[[pair]]", pair)):
        if value is not None:
            _check_unicode(value, name)
    text = bound_characters(text, max_length, truncate, model_name, what=what)
    if pair is not None:
        pair = bound_characters(pair, max_length, truncate, model_name, what="[[pair]]")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    encoding = guarded(lambda: tokenizer.encode(text, pair), model_name)
    if max_length is not None and len(encoding.ids) > max_length:
        if not truncate:
            check_length(len(encoding.ids), max_length, model_name, what=what)
        tokenizer.enable_truncation(max_length)
        try:
            encoding = guarded(lambda: tokenizer.encode(text, pair), model_name)
        finally:
            tokenizer.no_truncation()
    if not encoding.ids:
        raise InputError("the tokenizer produced no tokens for this text; give a sentence")
    return token_info(encoding, (text, pair), special_ids, unknown_token_id(tokenizer))


def check_length(count: int, max_length: int | None, model_name: str, *, what: str = "text",
                 fix: str = "shorten it, or pass [[truncate=True]] to cut it") -> None:
    """Refuse a ``what`` of ``count`` tokens where ``model_name`` takes at most ``max_length`` positions (None: no
    limit), in the one line every command gives (a vision-language model's prompt too: ``fix`` says what to do)."""
    if max_length is not None and count > max_length:
        raise InputError(f"the {what} is {count} tokens long but {model_name} takes at most {max_length}; {fix}")


def bound_characters(text: str, max_positions: int | None, truncate: bool, model_name: str,
                     what: str = "text") -> str:
    """``text``, cut (``truncate``) or refused when it is longer than any text ``model_name`` can take
    (:func:`attnviz.limits.text_char_limit`), before a tokenizer spends memory on it. The cut lies
    far past the last token that is kept, so the tokens kept are those of the whole text."""
    from ..limits import text_char_limit

    limit = text_char_limit(max_positions)
    if len(text) <= limit:
        return text
    if truncate:
        return text[:limit]
    positions = f"at most {max_positions} tokens" if max_positions else "no text this long"
    raise InputError(f"the {what} is {len(text):,} characters long but {model_name} takes {positions} "
                     f"(at most {limit:,} characters are read); shorten it, or pass [[truncate=True]] to cut it")


def _check_unicode(text: str, what: str) -> None:
    """A text that is not valid Unicode (a lone surrogate: bytes that were not UTF-8) is named, not tokenized."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"the {what} is not valid UTF-8 (character {exc.start + 1} stands for a byte "
                         f"{text[exc.start]!a} that is not text); give UTF-8 text") from None


def guarded(call: Callable[[], T], model_name: str, doing: str = "on this text") -> T:
    """Run the tokenizers library: a panic in its Rust code (``PanicException``, a BaseException
    that ``except Exception`` misses, e.g. from a catastrophic regex in ``tokenizer.json``) becomes
    a named error of one line. Rust prints its panic (and, with RUST_BACKTRACE, a stack) straight
    to file descriptor 2, so that is pointed at /dev/null for the call."""
    try:
        with stderr_silenced():
            return call()
    except (KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError):
        raise
    except BaseException as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise ModelNotFoundError(f"the tokenizer of {model_name} failed {doing} ({type(exc).__name__}: "
                                 f"{first}); its tokenizer.json may be broken, re-download the model") from None



