"""``attnviz view --audio`` (issue 61 item 2, the page) on the sound organism, whose alignment head L1H0 reads, as it
writes the i-th word, the positions of its declared time: the page's numbers are the library's (each head's rows
``whisper_attention``'s cross-attention, the words' times ``align``'s, the path the DTW path over the matrix it draws),
its clip decodes to the clip's samples at the model's rate, it names no URL and holds no markup of a transcript's,
every refusal is one line, and in chromium a hovered word changes the heat shown and a clicked one plays from its
start, with no request leaving the page and no console error."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("soundfile")

from audio_models import CLIP, ORGANISM, one_error_line

from attnviz.audio.organism_spec import read_sound_spec
from attnviz.render.pyramid import decode_tile

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = "猫 が </script><img src=x onerror=alert(1)> 座った"
"""A teacher-forced transcript of CJK words and markup: the page shows it as text, never as elements."""
NAME = "<b onmouseover=alert(2)>clip.flac"
"""A clip's file name that is markup."""


@pytest.fixture(scope="module")
def shown():
    from attnviz.views.sound_page import sound_page

    return sound_page(CLIP, ORGANISM)


@pytest.fixture(scope="module")
def data(shown):
    return shown.data()


@pytest.fixture(scope="module")
def result():
    from attnviz.audio.whisper import whisper_attention

    return whisper_attention(CLIP, ORGANISM)


def test_each_heads_rows_are_whisper_attentions_cross_attention(shown, data, result):
    start = int(result.metadata["prompt_length"]) - 1  # the row that writes the first text token
    kept = int(result.metadata["audio_positions"])
    cross = result.cross_attentions[:, :, start:-1, :kept].numpy()
    assert shown.heat.shape == cross.shape and np.array_equal(shown.heat, cross)
    assert data["heat"]["pool"] == 1 and data["heat"]["cols"] == kept == data["positions"]
    rows = len(data["tokens"])
    for layer in range(data["layers"]):
        for head in range(data["heads"]):
            stored = decode_tile(data["heat"]["values"][layer][head], "f16", (rows, kept))
            np.testing.assert_allclose(stored, cross[layer, head], rtol=1e-3, atol=1e-7)
            assert data["heat"]["vmax"][layer][head] == pytest.approx(float(cross[layer, head].max()))
    # What a word shows first: the alignment heads' (the checkpoint's: L1H0) mean, at full resolution.
    assert data["alignmentHeads"] == [[1, 0]]
    mean = decode_tile(data["alignmentMean"]["values"], "f16", (rows, kept))
    np.testing.assert_allclose(mean, cross[1, 0], rtol=1e-3, atol=1e-7)
    # Row k writes the k-th text token, then end of text: the tokens whisper_attention reads after the prompt's.
    assert data["tokens"] == list(result.target_tokens[start + 1 :])
    assert data["initial"] == {"layer": None, "head": None}


def test_the_words_times_and_path_are_aligns(shown, data):
    from attnviz.audio.dtw import dtw
    from attnviz.audio.timing import align

    found = align(CLIP, ORGANISM)
    words = [(w["text"], w["start"], w["end"], w["probability"]) for w in data["words"]]
    assert words == [(w.word, w.start, w.end, w.probability) for w in found.words]
    spec = read_sound_spec(ORGANISM)  # the planted times, to the frame
    assert [(w["text"].strip(), w["start"], w["end"]) for w in data["words"]] == \
        list(zip(spec.tokens, spec.times[:-1], spec.times[1:], strict=True))
    a = data["alignment"]
    assert a["pathRows"] == found.rows.tolist() and a["pathColumns"] == found.columns.tolist()
    # The matrix drawn is the one the path runs over: its DTW is the path.
    matrix = decode_tile(a["values"], "f16", (a["rows"], a["cols"]))
    np.testing.assert_allclose(matrix, shown.matrix, rtol=1e-3, atol=1e-3)
    rows, columns = dtw(-shown.matrix.astype(np.float64))
    assert rows.tolist() == a["pathRows"] and columns.tolist() == a["pathColumns"]
    assert (a["low"], a["high"]) == (pytest.approx(float(shown.matrix.min())), pytest.approx(float(shown.matrix.max())))
    # Each word's rows hold its tokens, in order, covering every text token.
    assert [w["rows"] for w in data["words"]] == [[k, k + 1] for k in range(len(found.words))]
    assert data["words"][-1]["rows"][1] == len(data["tokens"]) - 1


def test_the_embedded_audio_decodes_to_the_clip_at_the_models_rate(data):
    import soundfile

    from attnviz.audio.read import read_audio

    prefix = "data:audio/wav;base64,"
    assert data["audio"]["src"].startswith(prefix)
    samples, rate = soundfile.read(io.BytesIO(base64.b64decode(data["audio"]["src"][len(prefix) :])), dtype="float32")
    info = soundfile.info(io.BytesIO(base64.b64decode(data["audio"]["src"][len(prefix) :])))
    assert (info.format, info.subtype, info.channels) == ("WAV", "PCM_16", 1)
    clip = read_audio(CLIP, rate=16_000)
    assert rate == data["rate"] == 16_000 and samples.shape == clip.shape
    np.testing.assert_allclose(samples, np.clip(clip, -1, 1), atol=1 / 32768 + 1e-6)
    assert data["duration"] == pytest.approx(len(clip) / 16_000)
    assert data["spectrogram"]["src"].startswith("data:image/png;base64,iVBORw0KGgo")


def test_a_head_over_the_budget_is_max_pooled_along_time(shown, monkeypatch):
    from attnviz.views import sound_page as module

    layers, heads, rows, positions = shown.heat.shape
    monkeypatch.setattr(module, "HEAT_CELLS", layers * heads * rows * -(-positions // 3))  # a third of the cells
    data = shown.data()
    factor, cols = data["heat"]["pool"], data["heat"]["cols"]
    assert factor == 3 and cols == -(-positions // 3) and layers * heads * rows * cols <= module.HEAT_CELLS
    stored = decode_tile(data["heat"]["values"][1][0], "f16", (rows, cols))
    expected = [shown.heat[1, 0][:, j * 3 : (j + 1) * 3].max(axis=1) for j in range(cols)]
    np.testing.assert_allclose(stored, np.stack(expected, axis=1), rtol=1e-3, atol=1e-7)
    assert any("strongest of its 3 positions" in note for note in data["notes"])
    mean = decode_tile(data["alignmentMean"]["values"], "f16", (rows, positions))  # never pooled
    np.testing.assert_allclose(mean, shown.heat[1, 0], rtol=1e-3, atol=1e-7)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """The page of :data:`HOSTILE` teacher-forced, over a copy of the clip whose name is markup."""
    from attnviz.views.sound_page import sound_page

    folder = tmp_path_factory.mktemp("hostile")
    clip = folder / NAME
    shutil.copy(CLIP, clip)
    page = sound_page(clip, ORGANISM, HOSTILE)
    return page, page.write(folder / "hostile.html")


def test_the_page_names_no_url_and_holds_no_markup_of_its_data(shown, hostile, tmp_path):
    _, path = hostile
    for text in (shown.write(tmp_path / "sound.html").read_text(encoding="utf-8"), path.read_text(encoding="utf-8")):
        assert not re.search(r"(?i)\b(https?|ftp|wss?|file):|[\s\"'(]//[a-z0-9-]+\.[a-z0-9.-]+/", text)
        assert not re.search(r"(?i)<(script|img|audio|link|iframe)[^>]*\ssrc=", text)  # nothing fetched by markup
        assert "default-src 'none'" in text and "media-src data:" in text and "connect-src 'none'" in text
        assert "<img src=x" not in text and "<b onmouseover" not in text and text.count("</script>") == 2
    # Its data is still the page's: the transcript and the file name come back whole from the JSON.
    html = path.read_text(encoding="utf-8")
    payload = re.search(r'<script type="application/json" id="sound-data">(.*?)</script>', html, re.DOTALL).group(1)
    data = json.loads(payload)
    assert data["clip"] == NAME and data["transcript"].strip() == HOSTILE
    assert [w["text"].strip() for w in data["words"]][:2] == ["猫", "が"] and data["words"][-1]["text"].strip() == "座った"
    assert "猫 (2/4)" in data["tokens"]  # a byte of a character labelled by its word, not U+FFFD


def test_the_command_writes_the_page_opened_on_the_head_asked(run_cli, tmp_path):
    out = tmp_path / "sound.html"
    r = run_cli("view", "--audio", CLIP, "--model", ORGANISM, "--page", str(out), "--layer", "1", "--head", "2")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == f"wrote {out}"
    html = out.read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="sound-data">(.*?)</script>', html, re.DOTALL).group(1))
    assert data["initial"] == {"layer": 1, "head": 2} and data["model"] == "whisper-organism"
    assert "<title>attnviz · whisper-organism hearing organism_whisper.flac</title>" in html


@pytest.mark.parametrize(("args", "words"), [
    (["--show", "matrix"], ["--show", "--audio"]),
    (["--no-stats"], ["--stats/--no-stats"]),
    (["--kind", "cross"], ["--kind", "--audio"]),
    (["--target", "x"], ["--target", "--audio"]),
    (["--hide-special"], ["--hide-special"]),
    (["--image", str(ROOT / "examples" / "house.png")], ["--image", "--audio"]),
    (["--engine", "native"], ["--engine"]),
    (["--head", "1"], ["--head", "--layer"]),
    (["--layer", "7"], ["layer", "7"]),
    (["--layer", "1", "--head", "9"], ["9"]),
    (["--head", "mean"], ["--head", "number"]),
])
def test_refusals_are_one_line(run_cli, tmp_path, args, words):
    r = run_cli("view", "--audio", CLIP, "--model", ORGANISM, "--page", str(tmp_path / "x.html"), *args)
    one_error_line(r, *words)
    assert not (tmp_path / "x.html").exists()


def test_no_model_and_a_model_that_is_not_a_whisper_are_refused(run_cli, tmp_path):
    one_error_line(run_cli("view", "--audio", CLIP, "--page", str(tmp_path / "x.html")), "--audio needs --model")
    one_error_line(run_cli("view", "--audio", CLIP, "--model", str(ROOT / "sample_configs" / "tiny.toml"), "--page",
                           str(tmp_path / "x.html")), "not a Whisper")


def test_the_page_never_replaces_the_clip_or_the_models_files(run_cli, tmp_path):
    clip = tmp_path / "clip.html"  # a FLAC named .html, so --page can name it
    shutil.copy(CLIP, clip)
    before = clip.read_bytes()
    one_error_line(run_cli("view", "--audio", str(clip), "--model", ORGANISM, "--page", str(clip)),
                   "one of this command's inputs")
    one_error_line(run_cli("view", "--audio", str(clip), "--model", ORGANISM, "--page", f"{tmp_path}/./clip.html"),
                   "one of this command's inputs")  # another spelling of the same file
    assert clip.read_bytes() == before
    model = tmp_path / "model.html"  # the organism's description, named .html
    shutil.copy(ORGANISM, model)
    one_error_line(run_cli("view", "--audio", CLIP, "--model", str(model), "--page", str(model)),
                   "one of this command's inputs")
    folder = tmp_path / "whisper"
    folder.mkdir()
    (folder / "page.html").write_text("mine", encoding="utf-8")
    one_error_line(run_cli("view", "--audio", CLIP, "--model", str(folder), "--page", str(folder / "page.html")),
                   "inside", "a model's files")
    assert (folder / "page.html").read_text(encoding="utf-8") == "mine"


@pytest.mark.slow
def test_in_chromium_a_hovered_word_shows_its_heat_and_a_clicked_one_plays_from_its_start(browser, shown, hostile,
                                                                                            tmp_path):
    from conftest import open_offline

    path = shown.write(tmp_path / "sound.html")
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, path, requests, errors, ready="body[data-drawn]")
    words = shown.data()["words"]
    assert page.locator("button.word").all_inner_texts() == [w["text"].strip() for w in words]
    assert page.get_attribute("#heat", "data-word") == "0"
    before = page.evaluate("document.querySelector('#heat').toDataURL()")
    # Hover the third word: the heat shows its row, its title names it.
    page.hover("button.word[data-word='2']")
    page.wait_for_selector("#heat[data-word='2']")
    assert page.evaluate("document.querySelector('#heat').toDataURL()") != before
    assert "\u201csat\u201d" in page.inner_text("#heattitle") and "0.60\u20130.90 s" in page.inner_text("#heatnote")
    assert page.locator("#tokenlabels .chosen").all_inner_texts() == ["sat"]
    # Its heat is strongest inside its time: the brightest pixel column lies between its start and end.
    peak = page.evaluate("""() => {
        const c = document.querySelector('#heat'), ctx = c.getContext('2d');
        const row = ctx.getImageData(0, Math.floor(c.height / 2), c.width, 1).data;
        let best = -1, at = 0;
        for (let i = 0; i < c.width; i++) { const v = row[4 * i] + row[4 * i + 1]; if (v > best) { best = v; at = i; } }
        return at / c.width * window.attnvizSound.data.duration; }""")
    assert 0.6 <= peak <= 0.9
    # Click it: the clip plays from its start, and stops by its end.
    page.click("button.word[data-word='2']")
    start = page.evaluate("window.attnvizSound.audio.currentTime")
    assert words[2]["start"] - 1e-3 <= start <= words[2]["end"] + 0.05
    assert float(page.get_attribute("#clip", "data-start")) == pytest.approx(words[2]["start"])
    # Keyboard: focus a word (its heat), Enter plays it.
    page.focus("button.word[data-word='4']")
    page.wait_for_selector("#heat[data-word='4']")
    page.keyboard.press("Enter")
    assert float(page.get_attribute("#clip", "data-start")) == pytest.approx(words[4]["start"])
    assert words[4]["start"] - 1e-3 <= page.evaluate("window.attnvizSound.audio.currentTime") <= words[4]["end"] + 0.05
    # Another head: the heat is redrawn from its weights (L1H1 reads the first 0.2 s from every token).
    page.select_option("#heads", "1,1")
    page.wait_for_selector("#heat[data-choice='1,1']")
    assert "Head L1H1 looks hardest at 0.00 s" in page.inner_text("#heatnote")
    assert [r for r in requests if not r.startswith("data:")] == [path.as_uri()] and errors == []
    page.close()
    # The hostile page in the same browser: its words are text (CJK shown), no element made of the transcript.
    _, hostile_path = hostile
    requests.clear()
    page = open_offline(browser, hostile_path, requests, errors, ready="body[data-drawn]")
    assert page.locator("button.word").all_inner_texts()[:2] == ["猫", "が"]
    assert page.locator("img").count() == 1 and page.evaluate("typeof window.alerted") == "undefined"
    assert [r for r in requests if not r.startswith("data:")] == [hostile_path.as_uri()] and errors == []
    page.close()
