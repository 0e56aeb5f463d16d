"""A needle's haystack is read and tokenized only as far as the longest prompt needs (issue 50, D.12): a file of tens
of megabytes, a JSONL line or CSV cell of megabytes, and an endless standard input cost what the prompt holds."""

from __future__ import annotations

import io
import json

import pytest

from attnviz.needle.haystack import CHUNK_CHARS, PromptBuilder, haystack_chars, read_haystack
from attnviz.sources.stepping import Codec

SENTENCE = "The miller carried a sack of flour to the bakery before dawn. "


class WordCodec:
    """Words as tokens (an id per distinct word), counting the characters the tokenizer is handed."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.encoded = 0

    def encode(self, text: str) -> list[int]:
        self.encoded += len(text)
        return [self.vocab.setdefault(word, len(self.vocab)) for word in text.split()]

    def codec(self) -> Codec:
        words = {}

        def decode(ids: list[int]) -> str:
            if not words or len(words) != len(self.vocab):
                words.update({i: w for w, i in self.vocab.items()})
            return " ".join(words[i] for i in ids)

        return Codec(encode=self.encode, decode=decode, label=str, start=[], chat=None, eos=[])


def test_a_long_haystack_is_tokenized_only_as_far_as_the_prompt_needs():
    counting = WordCodec()
    haystack = SENTENCE * 400_000  # 25 MB of text
    prompt = PromptBuilder(counting.codec(), haystack=haystack, needle="The code is 42.",
                           question="What is the code?").build(300, 0.5)
    assert len(prompt.ids) == 300
    assert counting.encoded < 3 * CHUNK_CHARS  # not the 25 MB the old builder handed the tokenizer


def test_a_short_haystack_gives_the_prompt_it_gave_before():
    """A haystack shorter than a piece is tokenized whole and repeated with a space, as before."""
    counting = WordCodec()
    codec = counting.codec()
    builder = PromptBuilder(codec, haystack=SENTENCE.strip() * 3, needle="The code is 42.", question="Which code?")
    prompt = builder.build(200, 0.0)
    words = codec.encode(" " + SENTENCE.strip() * 3)
    room = 200 - builder.fixed
    expected = (words * (room // len(words) + 2))[:room]
    assert prompt.ids[prompt.end : prompt.end + room] == expected


def test_a_haystack_file_is_read_only_as_far_as_the_longest_prompt_needs(tmp_path):
    big = tmp_path / "big.txt"
    big.write_text(SENTENCE * 500_000, encoding="utf-8")  # 31 MB: past the 16 MiB a text file may be
    text = read_haystack(big, max_chars=haystack_chars([1000]))
    assert len(text) == 1000 * 256 and SENTENCE.startswith(text[:20])


def test_standard_input_is_read_only_as_far_as_needed(monkeypatch):
    class Endless(io.RawIOBase):
        """``yes``: standard input that never ends, counting what is read of it."""

        read_bytes = 0

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            chunk = (SENTENCE.encode() * (len(buffer) // len(SENTENCE) + 1))[: len(buffer)]
            buffer[: len(chunk)] = chunk
            Endless.read_bytes += len(chunk)
            return len(chunk)

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(Endless())))
    text = read_haystack("-", max_chars=haystack_chars([500]))
    assert len(text) == 500 * 256
    assert Endless.read_bytes < 4 * 500 * 256 + 64 * 1024  # never the whole gigabyte the old reader took


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_a_huge_record_is_cut_to_what_the_prompt_can_use(tmp_path, kind):
    cell = SENTENCE * 100_000  # 6 MB in one JSONL line or one CSV cell
    path = tmp_path / f"haystack.{kind}"
    if kind == "jsonl":
        path.write_text(json.dumps({"text": cell}) + "\n" + json.dumps({"text": "second"}) + "\n", encoding="utf-8")
    else:
        path.write_text("text\n\"" + cell + "\"\nsecond\n", encoding="utf-8")
    text = read_haystack(path, max_chars=haystack_chars([100]))
    assert len(text) <= 100 * 256 and text.startswith(SENTENCE)


@pytest.mark.slow
def test_the_command_runs_on_a_haystack_file_of_tens_of_megabytes(run_cli, tiny_hf, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text(SENTENCE * 500_000, encoding="utf-8")
    result = run_cli("needle", "--model", tiny_hf["gpt2_long"], "--haystack", str(big), "--lengths", "200", "--depths",
                     "0.5", "-n", "2", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["lengths"] == [200]
