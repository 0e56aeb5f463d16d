"""export with pictures (issue 53): a corpus's image column, each text's files checked against transformers' eager
attention, the Parquet table, resuming (a changed picture is a new item), and the refusals in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from picture_models import transformers_reference

QUESTIONS = ["what is in the picture ?", "is a cat in the picture ?", "what is the dog in ?"]


@pytest.fixture
def corpus(tmp_path) -> Path:
    from PIL import Image

    for n in range(2):
        Image.fromarray((np.random.RandomState(n).rand(48, 64, 3) * 255).astype(np.uint8)).save(tmp_path / f"p{n}.png")
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps({"text": q, "image": f"p{n % 2}.png"}) for n, q in enumerate(QUESTIONS))
                    + "\n")
    return path


def test_an_export_of_pictures_writes_each_texts_files_and_resumes(run_cli, llava, corpus, tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from attnviz.result import AttentionResult

    out = tmp_path / "out"
    done = run_cli("export", str(corpus), "--model", str(llava), "--out", str(out), "--formats",
                   "png,npz,json,parquet", "--quiet")
    assert done.exit_code == 0, done.stderr
    stems = sorted(p.name.removesuffix(".npz") for p in out.glob("*.npz"))
    assert len(stems) == 3 and stems[0].startswith("000000-what-is-in-the-picture")
    for n, stem in enumerate(stems):
        picture = corpus.parent / f"p{n % 2}.png"
        inputs, reference = transformers_reference(llava, f"<image> {QUESTIONS[n]}", picture)
        saved = AttentionResult.load(out / f"{stem}.npz")
        torch.testing.assert_close(saved.attentions, reference, atol=1e-5, rtol=1e-5)
        assert saved.metadata["images"][0]["rows"] == 4
        stats = json.loads((out / f"{stem}.stats.json").read_text())
        image = [i for i, t in enumerate(inputs["input_ids"][0].tolist()) if t == 3]
        after = list(range(image[-1] + 1, reference.shape[-1]))
        head = next(h for h in stats["heads"] if h["layer"] == 1 and h["head"] == 2)
        expected = float(reference[1, 2][after][:, image].sum(-1).double().mean())
        assert head["image_share"] == pytest.approx(expected, abs=1e-5) and stats["pictures"] == [str(picture)]
        assert (out / f"{stem}.L0.png").read_bytes().startswith(b"\x89PNG") and (out / f"{stem}.L1.png").exists()
    table = pq.read_table(out / "pictures.parquet").to_pylist()
    assert len(table) == 3 * 2 * 4 and {row["index"] for row in table} == {0, 1, 2}
    again = run_cli("export", str(corpus), "--model", str(llava), "--out", str(out), "--formats",
                    "png,npz,json,parquet")
    assert again.exit_code == 0 and "0 exported, 3 already done" in again.stdout, again.stdout
    from PIL import Image

    Image.fromarray(np.zeros((48, 64, 3), dtype=np.uint8)).save(corpus.parent / "p1.png")  # text 1's picture
    changed = run_cli("export", str(corpus), "--model", str(llava), "--out", str(out), "--formats",
                      "png,npz,json,parquet")
    assert changed.exit_code == 0 and "1 exported, 2 already done" in changed.stdout, changed.stdout


def test_an_export_of_pictures_refuses_in_one_line(run_cli, llava, corpus, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("a question\n")
    for args, message in [
        (("export", str(corpus), "--model", str(llava), "--out", str(tmp_path / "a"), "--formats", "svg"), "svg"),
        (("export", str(corpus), "--model", str(llava), "--out", str(tmp_path / "b"), "--words"), "words"),
        (("export", str(lines), "--model", str(llava), "--out", str(tmp_path / "c")), "file of lines"),
        (("export", str(lines), "--image", str(tmp_path / "none.png"), "--model", str(llava), "--out",
          str(tmp_path / "d")), "none.png"),
    ]:
        refused = run_cli(*args)
        assert refused.exit_code != 0 and message in refused.stderr, (args, refused.stderr)
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert not (tmp_path / "a").exists()  # refused before anything is written
