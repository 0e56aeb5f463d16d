"""One text reader for every command (issue 11, point 8): heads --file and export read a file alike."""

from __future__ import annotations

import json

from conftest import TINY

from attnviz.export.items import read_items
from attnviz.inputs import read_lines, read_texts


def test_heads_file_and_export_read_the_same_texts(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_bytes("\ufeffhello world\r\n\r\n  spaced text  \r\nlast line".encode())
    texts = ["hello world", "  spaced text  ", "last line"]
    assert read_lines(path) == texts
    assert [item.text for item in read_items(str(path))] == texts
    assert read_texts(path) == texts


def test_a_byte_order_mark_is_not_part_of_a_heads_text(run_cli, tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffhello world and more words here\n".encode())
    # A config model's word tokenizer keeps every character (MiniLM's normalizer would drop the mark itself).
    r = run_cli("heads", "--file", str(path), "--format", "json", "--model", TINY)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["n_texts"] == 1 and doc["tokens"][0] == "hello"
