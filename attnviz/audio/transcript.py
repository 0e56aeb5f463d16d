"""What Whisper's decoder reads over a clip: the prompt, then the transcript, then end of text.

The prompt is openai-whisper's ``sot_sequence`` and no-timestamps (``timing.find_alignment``): start of transcript,
then for a multilingual model the language and the task (``<|startoftranscript|><|en|><|transcribe|>
<|notimestamps|>``). The language is the one given, else the one the model hears (openai-whisper's
``detect_language`` and transformers' alike: the logits after start of transcript, every token but the languages'
masked, the largest).

The transcript is the ``text`` given, tokenized as Whisper writes its transcripts (a space before the first word,
for languages written with spaces), or the model's own greedy transcript: the most likely token at each step, with
the model's suppressed tokens (its generation config's ``suppress_tokens`` at every step, ``begin_suppress_tokens``
at the first, as transformers' short-form ``generate`` and openai-whisper's decoding apply them) and nothing else of
the checkpoint's decoding settings (sampling, beams, temperature, penalties: none), until end of text or
``max_new_tokens``. For timings (``text_only``), a special token it writes inside the transcript (a language, a
timestamp) is then dropped, as openai-whisper's ``add_word_timestamps`` keeps only the text tokens (ids below end of
text) it aligns; otherwise the transcript is every token the model wrote, as transformers' ``generate`` returns it. Either way the decoder then reads prompt + transcript + end of text at once, teacher-forced,
as ``find_alignment`` does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InputError, UsageError
from .languages import NO_SPACES
from .model import WhisperModel

TASKS = ("transcribe", "translate")
MAX_TEXT_CHARS_PER_POSITION = 64
"""Characters of a given text per decoder position past which it is refused before it is tokenized (no token
covers 64 characters)."""
MAX_NEW_TOKENS = 224
"""Tokens the greedy transcript may have unless told (half the decoder's 448 positions, openai-whisper's
``sample_len``)."""


@dataclass(frozen=True)
class Transcript:
    """The decoder's input over one clip: ``prompt`` ids, the transcript's ``text_ids``, and the end of text after
    them (:attr:`ids`); the language and task of the prompt; whether the text was given (teacher-forced) or the
    model's own, and whether the model ended it (end of text before ``max_new_tokens``)."""

    prompt: tuple[int, ...]
    text_ids: tuple[int, ...]
    eot: int
    language: str | None
    task: str
    given: bool
    ended: bool

    @property
    def ids(self) -> list[int]:
        return [*self.prompt, *self.text_ids, self.eot]


def prompt_ids(loaded: WhisperModel, language: str | None, task: str) -> list[int]:
    """openai-whisper's start sequence and no-timestamps for ``loaded`` (see the module)."""
    ids = [loaded.special("<|startoftranscript|>")]
    if loaded.multilingual:
        if language is None:
            raise UsageError("a multilingual Whisper's prompt names the language: give [[language]]")
        ids += [_language_id(loaded, language), loaded.special(f"<|{task}|>")]
    return [*ids, loaded.special("<|notimestamps|>")]


def detect_language(loaded: WhisperModel, encoded: Any) -> str:
    """The language ``loaded`` hears in the clip whose encoder output is ``encoded`` ``[1, positions, d_model]``:
    the largest of the language tokens' logits after start of transcript (see the module)."""
    import torch

    if not loaded.languages:
        raise UsageError(f"{loaded.name}'s tokenizer has no language tokens; give [[language]]")
    sot = loaded.special("<|startoftranscript|>")
    with torch.no_grad():
        logits = loaded.network(encoder_outputs=(encoded,), decoder_input_ids=torch.tensor([[sot]], device=encoded.device),
                                use_cache=False).logits[0, -1]
    codes = list(loaded.languages)
    ids = torch.tensor([loaded.languages[c] for c in codes], device=logits.device)
    return codes[int(logits[ids].argmax())]


def transcript(loaded: WhisperModel, encoded: Any, *, text: str | None, language: str | None, task: str,
               max_new_tokens: int = MAX_NEW_TOKENS, text_only: bool = False) -> Transcript:
    """The decoder's input over the clip whose encoder output is ``encoded`` (see the module)."""
    if task not in TASKS:
        raise UsageError(f"[[task={task}]] is not a Whisper task; give transcribe or translate")
    if loaded.multilingual and language is None:
        language = detect_language(loaded, encoded)
    prompt = prompt_ids(loaded, language, task)
    limit = int(loaded.config.max_target_positions)
    if text is not None:
        ids = _text_ids(loaded, text, language)
        if len(prompt) + len(ids) + 1 > limit:
            raise InputError(f"the text is {len(ids):,} tokens long but {loaded.name}'s decoder reads at most "
                             f"{limit - len(prompt) - 1} after its {len(prompt)}-token prompt; give a shorter text "
                             "(the words of one clip of 30 s or less)")
        return Transcript(tuple(prompt), tuple(ids), loaded.eot, language, task, True, True)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise UsageError(f"[[max_new_tokens={max_new_tokens}]]: give a number of tokens of at least 1")
    room = limit - len(prompt) - 1
    ids, ended = greedy(loaded, encoded, prompt, min(max_new_tokens, room))
    if text_only:
        ids = [i for i in ids if i < loaded.eot]
    return Transcript(tuple(prompt), tuple(ids), loaded.eot, language, task, False, ended)


def greedy(loaded: WhisperModel, encoded: Any, prompt: list[int], steps: int) -> tuple[list[int], bool]:
    """The model's greedy continuation of ``prompt`` over ``encoded``, at most ``steps`` tokens, without the end of
    text; and whether it ended (see the module for the suppressed tokens)."""
    import torch

    from ..sources.cache import cache_of, with_cache

    network, eot = loaded.network, loaded.eot
    every = _suppressed(loaded, "suppress_tokens")
    first = _suppressed(loaded, "begin_suppress_tokens")
    found: list[int] = []
    step = torch.tensor([prompt], device=encoded.device)
    cache = None
    with torch.no_grad():
        for k in range(steps):
            out = network(encoder_outputs=(encoded,), decoder_input_ids=step, use_cache=True,
                          **with_cache(network, cache))
            cache = cache_of(out)
            logits = out.logits[0, -1].float()
            banned = every + (first if k == 0 else [])
            if banned:
                logits[banned] = -float("inf")
            token = int(logits.argmax())
            if token == eot:
                return found, True
            found.append(token)
            step = torch.tensor([[token]], device=encoded.device)
    return found, False


def _suppressed(loaded: WhisperModel, name: str) -> list[int]:
    """The ids of the generation config's ``name`` list (else the model config's), those inside the vocabulary."""
    listed = getattr(loaded.network.generation_config, name, None)
    if listed is None:
        listed = getattr(loaded.config, name, None)
    vocabulary = int(loaded.config.vocab_size)
    return sorted({int(i) for i in listed or () if 0 <= int(i) < vocabulary})


def _language_id(loaded: WhisperModel, language: str) -> int:
    """The id of ``<|language|>`` (a code such as ``en``, or a name such as ``english``)."""
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

    code = TO_LANGUAGE_CODE.get(language.lower(), language.lower())
    found = loaded.languages.get(code)
    if found is None:
        raise UsageError(f"[[language={language}]] is not a language {loaded.name} knows; give a code such as en, "
                         "de or zh")
    return found


def _text_ids(loaded: WhisperModel, text: str, language: str | None) -> list[int]:
    """``text`` tokenized as Whisper writes transcripts (see the module); special tokens in it are read as text."""
    if not text.strip():
        raise InputError("the text is empty; give the words spoken in the clip, or none for the model's own")
    limit = MAX_TEXT_CHARS_PER_POSITION * int(loaded.config.max_target_positions)
    if len(text) > limit:  # refused before the tokenizer spends memory on it
        raise InputError(f"the text is {len(text):,} characters long, more than {loaded.name}'s decoder reads "
                         f"({loaded.config.max_target_positions} tokens); give the words of one clip")
    if language not in NO_SPACES and not text[:1].isspace():
        text = " " + text
    ids = loaded.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    return [int(i) for i in ids]
