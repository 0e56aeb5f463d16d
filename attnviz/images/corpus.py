"""A corpus of texts with pictures (``atlas``): each row's text as every corpus is read (a text file, JSONL's
field, CSV's or Parquet's column), and its pictures from the row's ``image`` field or column: one path, or several
separated by ``|``, relative to the corpus file's folder and inside it: a path that leaves it (``../``, an absolute
path, a link pointing out) is refused by its row, in the same words whether or not the file it names exists, unless
``allow_outside`` (a corpus from elsewhere must not read, draw and name files it was not given). Or the same pictures for every text (``--image``): one
picture asked many questions, where its visual sinks show (patches drawn to whatever is asked)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

IMAGE_FIELD = "image"


@dataclass(frozen=True)
class PictureRow:
    text: str
    pictures: tuple[Path, ...]


def picture_rows(source: str | Path, *, field: str | None = None, column: str | None = None,
                 input_format: str | None = None, pictures: list[Path] | None = None,
                 allow_outside: bool = False) -> list[PictureRow]:
    """The rows of ``source`` with their pictures (see the module): ``pictures`` for every row where given, else
    the rows' own ``image`` field or column (every row needs one), each resolved inside the corpus's folder (or
    anywhere, ``allow_outside``)."""
    from ..inputs import corpus_kind, read_corpus, read_texts

    if pictures:
        return [PictureRow(text, tuple(pictures)) for text in read_corpus(source, field=field, column=column,
                                                                          input_format=input_format)]
    kind = corpus_kind(field, column, input_format)
    suffix = Path(str(source)).suffix.lower()
    if kind == "lines" or (kind == "auto" and suffix not in (".jsonl", ".csv", ".parquet")):
        raise InputError(f"{source} is a file of lines: give the picture its texts are asked of (as [[image]]), or "
                         f"a JSONL, CSV or Parquet corpus with an {IMAGE_FIELD!r} field or column")
    # Both read row by row, blank cells kept: a row's text and picture stay together
    texts = read_texts(source, field=field or "text", column=column or "text", kind=kind, keep_blank=True)
    named = read_texts(source, field=IMAGE_FIELD, column=IMAGE_FIELD, kind=kind, keep_blank=True)
    folder = Path(str(source)).parent
    inside = folder.resolve()
    rows = []
    for number, (text, value) in enumerate(zip(texts, named, strict=True), start=1):
        paths = tuple(_inside(source, number, inside, part.strip(), allow_outside) for part in value.split("|")
                      if part.strip())
        if not text.strip() and not paths:
            continue  # a blank row
        if not paths:
            raise InputError(f"{source} row {number}: its {IMAGE_FIELD!r} names no picture; give every row its picture")
        if not text.strip():
            raise InputError(f"{source} row {number}: a picture without a text; give every row its text")
        rows.append(PictureRow(text, paths))
    if not rows:
        raise InputError(f"{source} has no texts")
    return rows


def _inside(source: str | Path, number: int, folder: Path, written: str, allow_outside: bool) -> Path:
    """Row ``number``'s picture ``written``, resolved in the corpus's ``folder`` (:func:`attnviz.fileio.corpus_path`)."""
    from ..fileio import corpus_path

    return corpus_path(source, number, folder, written, what="picture", allow_outside=allow_outside,
                       allow_option="allow_outside_pictures")
