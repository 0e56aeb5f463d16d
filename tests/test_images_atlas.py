"""atlas with pictures (issue 53): each head's share on the picture and the visual sinks across questions, checked
against the same sums written out on transformers' own eager attention, from the API and the command; a corpus's
image column; the refusals, one line each."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from picture_models import transformers_reference

QUESTIONS = ["what is in the picture ?", "is a cat in the picture ?", "what is the dog in ?"]


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> list[Path]:
    from PIL import Image

    folder = tmp_path_factory.mktemp("pictures")
    paths = []
    for n in range(2):
        paths.append(folder / f"p{n}.png")
        Image.fromarray((np.random.RandomState(n).rand(48, 64, 3) * 255).astype(np.uint8)).save(paths[-1])
    return paths


def _expected(folder: Path, rows: list[tuple[str, Path]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per head the mean share on the picture, and per grid place its mean share of the mass on patches times
    the number of patches, from transformers' eager attention (LLaVA's image token id is 3)."""
    shares, places = [], []
    for text, picture in rows:
        inputs, reference = transformers_reference(folder, f"<image> {text}", picture)
        ids = inputs["input_ids"][0].tolist()
        image = [i for i, t in enumerate(ids) if t == 3]
        after = list(range(image[-1] + 1, len(ids)))
        chosen = reference.double()[:, :, after]  # [L, H, q, T]
        shares.append(chosen[..., image].sum(-1).mean(-1))  # [L, H]
        patches = chosen[..., image]
        places.append((patches / patches.sum(-1, keepdim=True)).mean((0, 1, 2)))  # [16]
    return torch.stack(shares).mean(0), torch.stack(places)


def test_the_picture_atlas_equals_the_sums_written_out_on_transformers_attention(llava, pictures):
    from attnviz.images.atlas import picture_atlas
    from attnviz.images.corpus import PictureRow
    from attnviz.images.vlm import load_vlm

    rows = [PictureRow(q, (pictures[0],)) for q in QUESTIONS]
    atlas = picture_atlas(rows, load_vlm(str(llava)))
    share, places = _expected(llava, [(q, pictures[0]) for q in QUESTIONS])
    assert atlas.texts == 3 and atlas.grid == (4, 4) and len(atlas.heads) == 2 * 4
    for head in atlas.heads:
        assert head["image_share"] == pytest.approx(float(share[head["layer"], head["head"]]), abs=1e-5)
        assert 0 < head["patch_entropy"] <= 1 and head["sink_agreement"] in (0.333333, 0.666667, 1.0)
    weight = places.mean(0) * 16
    tops = places.argmax(-1)
    assert [s["weight"] for s in atlas.sinks] == sorted((s["weight"] for s in atlas.sinks), reverse=True)
    for sink in atlas.sinks:
        index = sink["row"] * 4 + sink["col"]
        assert sink["weight"] == pytest.approx(float(weight[index]), abs=1e-5)
        assert sink["texts"] == pytest.approx(float((tops == index).double().mean()), abs=1e-9)
    assert sum(s["texts"] for s in atlas.sinks) == pytest.approx(1.0)
    assert sum(s["weight"] for s in atlas.sinks) == pytest.approx(16.0, abs=1e-4)  # shares of the mass sum to 1


def test_the_command_reads_a_corpus_with_its_image_column_and_refuses_in_one_line(run_cli, llava, pictures,
                                                                                 tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    for picture in pictures:  # the pictures beside the corpus: its paths are relative to its folder
        (tmp_path / picture.name).write_bytes(picture.read_bytes())
    corpus.write_text("\n".join(json.dumps({"text": q, "image": pictures[n % 2].name})
                                for n, q in enumerate(QUESTIONS)) + "\n")
    shown = run_cli("atlas", str(corpus), "--model", str(llava), "--format", "json")
    assert shown.exit_code == 0, shown.stderr
    document = json.loads(shown.stdout)
    share, _ = _expected(llava, [(q, pictures[n % 2]) for n, q in enumerate(QUESTIONS)])
    head = next(h for h in document["heads"] if h["layer"] == 1 and h["head"] == 3)
    assert head["image_share"] == pytest.approx(float(share[1, 3]), abs=1e-5)
    questions = tmp_path / "questions.txt"
    questions.write_text("\n".join(QUESTIONS) + "\n")
    table = run_cli("atlas", str(questions), "--image", str(pictures[0]), "--model", str(llava), "--top", "3")
    assert table.exit_code == 0 and "visual sinks" in table.stdout and "of texts" in table.stdout, table.stderr
    parquet = tmp_path / "heads.csv"
    written = run_cli("atlas", str(questions), "--image", str(pictures[0]), "--model", str(llava), "--out",
                      str(parquet))
    assert written.exit_code == 0 and parquet.read_text().startswith("layer,head,image_share"), written.stderr
    page = tmp_path / "atlas.html"
    paged = run_cli("atlas", str(questions), "--image", str(pictures[0]), "--model", str(llava), "--out", str(page))
    assert paged.exit_code == 0, paged.stderr
    text = page.read_text(encoding="utf-8")  # the sinks over the picture, then the ranked sinks and the heads
    assert "Visual sinks" in text and "data:image/png;base64," in text and "<td>r" in text and "<th>sink</th>" in text
    assert "<script" not in text.split("</title>")[1]  # nothing runs, nothing is fetched
    for args, message in [
        (("atlas", str(questions), "--model", str(llava)), "file of lines"),
        (("atlas", str(questions), "--image", str(pictures[0]), "--model", str(llava), "--vs-model", str(llava)),
         "--vs-model"),
        (("atlas", str(questions), "--image", str(tmp_path / "missing.png"), "--model", str(llava)), "missing.png"),
        (("atlas", str(questions), "--image", str(pictures[0]), "--model", str(llava), "--out",
          str(tmp_path / "a.txt")), ".json"),
    ]:
        refused = run_cli(*args)
        assert refused.exit_code != 0 and message in refused.stderr, (args, refused.stderr)
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr


def test_a_corpus_keeps_each_rows_text_and_picture_together(tmp_path):
    """A CSV row with a picture and no text (or a text and no picture) is refused by its number, not read out of
    step; blank rows are skipped; several pictures are split on |, relative to the corpus."""
    from attnviz.errors import InputError
    from attnviz.images.corpus import picture_rows

    good = tmp_path / "good.csv"
    good.write_text("text,image\nwhat is,a.png\n,\na dog,b.png|c.png\n")
    rows = picture_rows(good)
    assert [(r.text, [p.name for p in r.pictures]) for r in rows] == [("what is", ["a.png"]),
                                                                      ("a dog", ["b.png", "c.png"])]
    assert rows[0].pictures[0] == tmp_path / "a.png"
    skewed = tmp_path / "skewed.csv"
    skewed.write_text("text,image\nwhat is,a.png\n,b.jpg\na dog,\n")
    with pytest.raises(InputError, match="row 2: a picture without a text"):
        picture_rows(skewed)
    missing = tmp_path / "missing.csv"
    missing.write_text("text,image\nwhat is,a.png\na dog,\n")
    with pytest.raises(InputError, match="row 2: its 'image' names no picture"):
        picture_rows(missing)
