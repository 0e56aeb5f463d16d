"""What to export: texts from a text file, JSONL, CSV or stdin, each with a stable index, hash and file stem.

The index is a text's position among the input's texts (blank lines of a text file are skipped),
so it never depends on sharding. A stem is ``{index:06d}-{slug}``: digits, lowercase ASCII
letters and dashes only, so no input can name a path outside the output folder.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

from ..inputs import read_texts

_SLUG_CHARS = 32


@dataclass(frozen=True)
class Item:
    index: int
    text: str

    @property
    def hash(self) -> str:
        """SHA-256 of the text's UTF-8 bytes, first 16 hex digits: a changed text is a new item."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:16]

    @property
    def stem(self) -> str:
        return f"{self.index:06d}-{slug(self.text)}"


def slug(text: str) -> str:
    """Lowercase ASCII words joined by dashes, at most 32 characters; ``text`` when nothing is left."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    words = re.findall(r"[a-z0-9]+", ascii_text)
    out = ""
    for word in words:
        candidate = f"{out}-{word}" if out else word
        if len(candidate) > _SLUG_CHARS:
            break
        out = candidate
    return out or "text"


def read_items(source: str, *, field: str = "text", column: str = "text", kind: str = "auto") -> list[Item]:
    """The texts of ``source`` (see :func:`attnviz.inputs.read_texts`), each with its index among them."""
    return [Item(i, t) for i, t in enumerate(read_texts(source, field=field, column=column, kind=kind))]


def input_fingerprint(items: list[Item]) -> str:
    """One hash of every text and its place: two exports of different inputs never share a run's key,
    while the shards of one input (each reads the whole input) always do."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(f"{item.index}:{item.hash}\n".encode())
    return f"{len(items)}:{digest.hexdigest()[:16]}"


WINDOW = 64  # batches whose texts are grouped by length together: far-apart texts never wait for each other


def plan(items: list[Item], size: int) -> list[list[Item]]:
    """Every batch of ``size`` items, in the order they run: the input is taken ``WINDOW`` batches at a
    time, and each window's texts are sorted by length (stably) before they are cut into batches, so
    a batch pads little (texts of similar lengths) while the run still moves through the input in order.
    The plan depends on the texts and ``size`` alone, so every shard and every resume makes the same one."""
    out: list[list[Item]] = []
    window = size * WINDOW
    for start in range(0, len(items), window):
        chunk = sorted(items[start : start + window], key=lambda item: len(item.text))
        out.extend(chunk[i : i + size] for i in range(0, len(chunk), size))
    return out


def blocks(items: list[Item], size: int, k: int = 1, n: int = 1) -> list[list[Item]]:
    """The batches of shard K of N (from 1): the batches of :func:`plan`, batch b going to shard ``b mod N + 1``.

    A block is always computed together, in the whole run, in any shard and after any resume, so
    an item's numbers never depend on how the work was split or interrupted (padding a batch
    changes float rounding in the last bits). Shards that are to be merged use one batch size.
    """
    return [chunk for b, chunk in enumerate(plan(items, size)) if b % n == k - 1]
