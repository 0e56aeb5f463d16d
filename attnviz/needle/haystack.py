"""The prompts of a needle-in-a-haystack grid: a haystack cut to a length in tokens, the needle put in at a
depth, at a sentence boundary, and the question after it, in the model's chat template where it has one.

After gkamradt's LLMTest_NeedleInAHaystack (and Wu et al.'s copy of it): the haystack's tokens are cut so
the whole prompt is exactly the length asked; the needle goes in at ``depth`` × the context's tokens, moved
back to the end of the sentence before (a token ending in ``.``, ``!``, ``?`` or ``。``); depth 1 puts it
last. The prompt is assembled in token ids, so the needle's span is known exactly, never searched for.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from ..defaults import NEEDLE, QUESTION  # noqa: F401  (declared once, for the library and the command)
from ..errors import InputError, UsageError
from ..sources.stepping import Codec

CHUNK_CHARS = 1 << 16  # characters of a given haystack tokenized at a time (a piece, cut at a space)
PLAIN_TEMPLATE = ("", "\n\nBased on the content above, answer the question.\nQuestion: {question}\nAnswer:")
SENTENCE_ENDS = (".", "!", "?", "。", "！", "？")

_SUBJECTS = ["The old clockmaker", "A tired sailor", "The village baker", "Our neighbour", "The young painter",
             "A quiet librarian", "The river pilot", "Her grandfather", "The station master", "A travelling musician",
             "The apprentice", "The lighthouse keeper", "A shepherd from the hills", "The schoolteacher",
             "The gardener", "A merchant from the coast"]
_VERBS = ["carried", "mended", "painted", "counted", "sold", "found", "measured", "described", "borrowed",
          "repaired", "wrapped", "sorted", "polished", "remembered", "copied", "weighed"]
_OBJECTS = ["a basket of apples", "the broken lantern", "three wooden chairs", "an old map of the valley",
            "a bundle of letters", "the blue umbrella", "a jar of honey", "the church bells", "a pair of boots",
            "the ledger of the mill", "a box of buttons", "the fishing nets", "a copper kettle", "the winter coats"]
_PLACES = ["near the harbour", "behind the market", "in the attic", "by the north gate", "under the bridge",
           "at the edge of the forest", "in the square", "beside the well", "on the hill road", "in the workshop"]
_TIMES = ["before dawn", "after the storm", "on a grey morning", "late in the evening", "during the fair",
          "in the first week of spring", "while the others slept", "at noon", "on market day", "after supper"]
_CLAUSES = ["and nobody asked why", "as the bells rang", "because the work had to be done",
            "although the road was long", "while the rain kept falling", "and then went home",
            "as the wind turned cold", "before anyone noticed"]


def prose(sentences: int, seed: int = 0) -> str:
    """``sentences`` sentences of plain, meaningless-but-grammatical English prose, the same for the same
    seed on every machine: attnviz's own haystack, so a needle run needs no download."""
    rng = random.Random(seed)
    out = []
    for n in range(sentences):
        parts = [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS), rng.choice(_PLACES),
                 rng.choice(_TIMES)]
        if rng.random() < 0.4:
            parts.append(rng.choice(_CLAUSES))
        out.append(" ".join(parts) + ".")
        if n % 6 == 5:
            out.append("\n\n")
    return " ".join(out).replace(" \n\n ", "\n\n")


def haystack_chars(lengths: list[int] | None) -> int:
    """The characters of a haystack the longest prompt can use: no token covers more than
    :data:`attnviz.limits.CHARS_PER_POSITION` characters, and never more than :data:`attnviz.limits.MAX_TEXT_CHARS`
    (``lengths`` None: decided later from the model, so the cap)."""
    from ..limits import CHARS_PER_POSITION, MAX_TEXT_CHARS

    return MAX_TEXT_CHARS if not lengths else min(MAX_TEXT_CHARS, max(lengths) * CHARS_PER_POSITION)


def read_haystack(path: str | Path, *, field: str | None = None, column: str | None = None,
                  input_format: str | None = None, max_chars: int | None = None) -> str:
    """A haystack from a file: a ``.txt`` file (or standard input) read only as far as ``max_chars`` characters
    (:func:`haystack_chars`: what the longest prompt can use; the rest is never read), any other file of texts attnviz
    reads (JSONL, CSV, Parquet) as its texts joined by blank lines up to ``max_chars``."""
    from ..inputs import corpus_kind, example_file, read_corpus, read_text_prefix
    from ..limits import MAX_TEXT_CHARS

    limit = MAX_TEXT_CHARS if max_chars is None else max_chars
    kind = corpus_kind(field, column, input_format)
    if kind in ("auto", "lines") and (Path(path).suffix.lower() in (".txt", ".md", "") or str(path) == "-"):
        text, _ = read_text_prefix(example_file(path) if str(path) != "-" else path, limit, "haystack")
    else:
        texts, total = [], 0
        for piece in read_corpus(path, field=field, column=column, input_format=input_format):
            texts.append(piece[: limit - total])
            total += len(texts[-1]) + 2
            if total >= limit:
                break
        text = "\n\n".join(texts)
    if not text.strip():
        raise InputError(f"the haystack {path} holds no text")
    return text


@dataclass(frozen=True)
class Prompt:
    """One cell's prompt: its ids, where the needle lies in them (``start`` … ``end`` − 1), and the cell."""

    length: int
    depth: float
    ids: list[int]
    start: int
    end: int

    @property
    def needle(self) -> list[int]:
        return self.ids[self.start : self.end]


class PromptBuilder:
    """Builds every cell's prompt from one tokenized haystack (see the module's docs)."""

    def __init__(self, codec: Codec, *, haystack: str | None, needle: str, question: str, seed: int = 0) -> None:
        if not needle.strip():
            raise UsageError("the needle is empty; give the sentence to hide (or leave [[needle]] out)")
        if not question.strip():
            raise UsageError("the question is empty; give the question whose answer is the needle")
        self.codec = codec
        self.needle_text = needle.strip()
        self.needle_ids = _strip_space(codec, codec.encode(" " + self.needle_text))
        if not self.needle_ids:
            raise InputError("the needle gives no tokens")
        self.question = question.strip()
        if codec.chat is not None:
            before, after = codec.chat
            self.prefix = codec.encode(before)
            self.suffix = codec.encode("\n\n" + self.question + after)
        else:
            self.prefix = list(codec.start)
            self.suffix = codec.encode(PLAIN_TEMPLATE[1].format(question=self.question))
        self.haystack_text = haystack
        self.seed = seed
        self._tokens: list[int] = []
        self._ends: set[int] | None = None
        self._read_to = 0  # characters of the given haystack tokenized so far (in this round)

    @property
    def fixed(self) -> int:
        """Tokens every prompt holds besides the haystack: template, needle, question."""
        return len(self.prefix) + len(self.needle_ids) + len(self.suffix)

    def _haystack(self, count: int) -> list[int]:
        """At least ``count`` haystack tokens (a file repeated as often as needed, or attnviz's prose). A given
        haystack is tokenized a piece at a time (:data:`CHUNK_CHARS`, cut at a space) and only as far as needed: a
        long file costs the tokenizer what the longest prompt holds, not its whole length."""
        while len(self._tokens) < count:
            if self.haystack_text is not None:
                piece = self._next_piece()
            else:
                piece = self.codec.encode(" " + prose(max(50, (count - len(self._tokens)) // 12 + 50),
                                                       seed=self.seed + len(self._tokens)))
            self._tokens.extend(piece)
            self._ends = None
        return self._tokens[:count]

    def _next_piece(self) -> list[int]:
        """The next piece of the given haystack in tokens; after its end, it starts again from its beginning."""
        text = self.haystack_text or ""
        start = self._read_to if self._read_to < len(text) else 0
        stop = min(len(text), start + CHUNK_CHARS)
        if stop < len(text):
            space = text.rfind(" ", start + CHUNK_CHARS // 2, stop)
            stop = space if space > start else stop
        self._read_to = stop
        piece = self.codec.encode((" " if self._tokens and not text[start:stop][:1].isspace() else "")
                                  + text[start:stop])
        if not piece and (stop >= len(text) and start == 0):
            raise InputError("the haystack gives no tokens")
        return piece

    def _sentence_ends(self) -> set[int]:
        """Positions in the haystack after which a sentence has ended."""
        if self._ends is None:
            labels: dict[int, bool] = {}
            ends = set()
            for n, i in enumerate(self._tokens):
                if i not in labels:
                    labels[i] = self.codec.decode([i]).rstrip().endswith(SENTENCE_ENDS)
                if labels[i]:
                    ends.add(n + 1)
            self._ends = ends
        return self._ends

    def build(self, length: int, depth: float) -> Prompt:
        """The prompt of ``length`` tokens with the needle at ``depth`` (0: first, 1: last)."""
        if not 0.0 <= depth <= 1.0:
            raise UsageError(f"[[depths]]: {depth:g} is not a fraction from 0 to 1")
        room = length - self.fixed
        if room < 1:
            raise UsageError(f"[[lengths]]: {length} tokens cannot hold the needle, the question and the template "
                             f"({self.fixed} tokens); give lengths above {self.fixed}")
        context = self._haystack(room)
        at = round(room * depth)
        if 0 < at < room:
            ends = self._sentence_ends()
            at = max((e for e in ends if e <= at), default=0)
        ids = self.prefix + context[:at] + self.needle_ids + context[at:] + self.suffix
        start = len(self.prefix) + at
        return Prompt(length, depth, ids, start, start + len(self.needle_ids))


def _strip_space(codec: Codec, ids: list[int]) -> list[int]:
    """``ids`` without a first token that is only a space (a SentencePiece ``▁`` before the text)."""
    return ids[1:] if len(ids) > 1 and not codec.decode(ids[:1]).strip() else ids
