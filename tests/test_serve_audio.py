"""``attnviz serve --audio`` (issue 61 item 1) on the sound organism (sample_configs/organism_whisper.toml, whose greedy
transcript is "the cat sat on the mat"): the home page is ``attnviz view --audio``'s page of the model's own transcript
with a box, built once before serving; the data sent for a typed transcript is ``sound_page``'s for it (less the clip's
sound and spectrogram, which the page holds once), an empty text the model's own transcript; ``/api/attention`` the
cross-attention at full resolution, bounded; the server's contract holds (one request computing at a time, every
refusal a 4xx with one ``{"error"}``, a bug one line in the log and a 500, host names and other sites refused); what does
not go with ``--audio`` is one line; and in chromium a transcript typed redraws the words, the clip embedded once."""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("soundfile")
from audio_models import CLIP, ORGANISM
from starlette.testclient import TestClient

from attnviz.serve import MAX_TEXT_BYTES, create_app
from attnviz.views.sound_page import CLIP_PARTS, heard_clip, sound_page

ROOT = Path(__file__).resolve().parent.parent
OWN = ["the", "cat", "sat", "on", "the", "mat"]
"""The organism's greedy transcript, word by word."""
LOCAL = "http://127.0.0.1:8000"  # TestClient's own default host, "testserver", is a name the server refuses


class Watched:
    """The server's clip and Whisper, each page asked for recorded, with how many were computed at once at most; the
    transcript "boom" is a bug (an exception of no kind the server expects)."""

    def __init__(self, sounds) -> None:
        self.sounds, self.asked, self.inside, self.most = sounds, [], 0, 0
        self.lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.sounds.name

    def page(self, text=None, *, cmap="viridis"):
        if text == "boom":
            raise RuntimeError("a bug in the model\nits second line")
        with self.lock:
            self.asked.append(text)
            self.inside += 1
            self.most = max(self.most, self.inside)
        try:
            return self.sounds.page(text, cmap=cmap)
        finally:
            with self.lock:
                self.inside -= 1


@pytest.fixture(scope="module")
def sounds():
    return heard_clip(CLIP, ORGANISM)


@pytest.fixture(scope="module")
def watched(sounds):
    return Watched(sounds)


@pytest.fixture(scope="module")
def app(watched):
    return create_app(None, sounds=watched)


@pytest.fixture(scope="module")
def client(app):
    return TestClient(app, base_url=LOCAL)


def plain(document):
    """A document as JSON reads it back (tuples as lists)."""
    return json.loads(json.dumps(document))


def words(document) -> list[str]:
    return [w["text"].strip() for w in document["words"]]


def test_the_home_page_is_the_sound_page_of_its_own_transcript_with_a_box_built_once(client, watched, sounds):
    first, second = client.get("/"), client.get("/")
    assert first.status_code == 200 and first.text == second.text
    assert watched.asked.count(None) == 1  # built once, at the start: a visit computes nothing
    html = first.text
    assert "connect-src 'self'" in html and "media-src data:" in html
    assert '<input type="text" id="live-text"' in html and 'id="live-submit"' in html
    data = json.loads(re.search(r'id="sound-data">(.*?)</script>', html, re.S).group(1))
    assert data.pop("live") == {"endpoint": "/api/page", "text": ""}
    assert data == plain(sound_page(CLIP, sounds.model).data())  # the clip read once equals the file read
    assert words(data) == OWN and not data["teacherForced"] and data["audio"]["src"].startswith("data:audio/wav")


def test_the_data_for_a_typed_transcript_is_sound_pages_less_the_clip(client, sounds):
    answer = client.post("/api/page", json={"text": "the mat"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    served = answer.json()
    expected = sound_page(CLIP, sounds.model, "the mat").data()
    assert set(CLIP_PARTS) <= set(expected) and not set(CLIP_PARTS) & set(served)
    assert served == plain({k: v for k, v in expected.items() if k not in CLIP_PARTS})
    assert words(served) == ["the", "mat"] and served["teacherForced"]


def test_an_empty_text_gives_the_models_own_transcript(client):
    for reply in (client.get("/api/page", params={"text": ""}), client.post("/api/page", json={"text": "  "})):
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert words(body) == OWN and not body["teacherForced"] and body["transcript"].strip() == " ".join(OWN)


def test_attention_is_the_cross_attention_at_full_resolution_and_bounded(client, sounds):
    from attnviz.serve.replies import Reply
    from attnviz.serve.sounds import SoundAnswers

    body = client.get("/api/attention", params={"text": "The cat"}).json()
    page = sound_page(CLIP, sounds.model, "The cat")
    assert body["tokens"] == page.tokens and body["tokens"][-1] == "<|endoftext|>" and body["teacherForced"]
    assert body["layers"] == [0, 1] and body["heads"] == 4 and body["positions"] == 100
    np.testing.assert_array_equal(np.array(body["cross_attentions"], dtype=np.float32), page.heat)
    with pytest.raises(Reply) as over:  # past the server's bound: 413, pointing at /api/page
        SoundAnswers(sounds, "viridis", limit=1000).attention({"text": "The cat"}, None)
    assert over.value.status == 413 and "/api/page" in over.value.message


def test_bad_requests_get_one_error_and_the_server_keeps_serving(client, capfd):
    tile = {"page": "x", "layer": "0", "head": "0", "level": "0", "x": "0", "y": "0"}
    cases = [
        (client.get("/api/page"), 400, "empty transcript asks for the model's own"),
        (client.post("/api/page", json={"text": "word " * 600}), 422, "decoder reads at most"),
        (client.post("/api/page", json={"text": "a" * (MAX_TEXT_BYTES + 1)}), 413, "kB"),
        (client.post("/api/page", content=b"text=the+mat",
                     headers={"content-type": "application/x-www-form-urlencoded"}), 415, "JSON"),
        (client.get("/api/page", params={"text": "the mat", "pair": "sat"}), 422, "pair"),
        (client.get("/api/attention", params={"text": "the mat", "truncate": "true"}), 422, "truncate"),
        (client.get("/api/page", params={"text": "the mat", "speed": "2"}), 422, "'speed'"),
        (client.post("/api/page", content=b'{"text": "the \\ud800"}', headers={"content-type": "application/json"}),
         422, "lone surrogate"),
        (client.get("/api/tile", params=tile), 404, "keeps no tiles"),
        (client.get("/api/page", params={"text": "the mat"}, headers={"host": "evil.example"}), 421, "host name"),
        (client.get("/api/page", params={"text": "the mat"}, headers={"sec-fetch-site": "cross-site"}), 403, ""),
        (client.get("/api/page", params={"text": "boom"}), 500, "internal error"),
    ]
    for reply, status, said in cases:
        assert reply.status_code == status, (status, reply.text)
        body = reply.json()
        assert list(body) == ["error"] and said in body["error"], (status, body)
    err = capfd.readouterr().err
    assert "Traceback" not in err and err.count("internal error") == 1 and "its second line" not in err, err
    assert client.post("/api/page", json={"text": "sat on"}).status_code == 200  # still serving


def test_one_request_computes_at_a_time_each_its_own_transcript(client, watched):
    texts = ["the cat", "sat on the mat"]
    with ThreadPoolExecutor(len(texts)) as pool:
        answers = list(pool.map(lambda text: client.post("/api/page", json={"text": text}).json(), texts))
    assert [words(a) for a in answers] == [t.split() for t in texts]
    assert watched.most == 1


@pytest.mark.parametrize(("args", "said"), [
    (["--audio", CLIP, "--model", ORGANISM, "--image", CLIP], "--image does not go with --audio"),
    (["--audio", CLIP, "--model", ORGANISM, "--cache-size", "64M"], "--cache-size does not go with --audio"),
    (["--audio", CLIP, "--model", ORGANISM, "--trust-remote-code"], "--trust-remote-code does not go with --audio"),
    (["--audio", CLIP, "--model", str(ROOT / "sample_configs" / "tiny.toml")], "is not a Whisper"),
    (["--audio", str(ROOT / "examples" / "no_such_clip.flac"), "--model", ORGANISM], "no_such_clip.flac"),
    (["--audio", CLIP], "--audio needs --model"),
])
def test_what_does_not_go_with_audio_is_one_line(run_cli, args, said):
    result = run_cli("serve", *args, "--port", "0")
    assert result.exit_code != 0, result.stdout
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("attnviz: error: "), result.stderr
    assert said in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_other_speech_models_are_refused_saying_what_to_use(run_cli, tmp_path):
    """A speech encoder (its page is a fixed result's: view --audio), and an encoder-decoder that is not a Whisper
    (no alignment heads to time its words: heatmap --audio draws its cross-attention)."""
    import test_speech_encoders
    import test_speech_seq2seq

    encoder = str(test_speech_encoders.tiny(tmp_path / "hubert", "hubert"))
    seq2seq = str(test_speech_seq2seq.tiny(tmp_path / "s2t", "speech_to_text"))
    for model, said in ((encoder, f"use attnviz view --audio {CLIP} --model {encoder}"),
                        (seq2seq, f"attnviz heatmap --audio {CLIP} --model {seq2seq}")):
        refused = run_cli("serve", "--audio", CLIP, "--model", model, "--port", "0")
        assert refused.exit_code != 0 and refused.stderr.count("\n") == 1, refused.stderr
        assert said in refused.stderr and "Traceback" not in refused.stderr, refused.stderr


@pytest.mark.slow
def test_in_chromium_a_typed_transcript_redraws_the_words_the_clip_embedded_once(browser, app):
    """The same app on a real port (uvicorn in a thread: no second model): a transcript typed is fetched from
    /api/page and drawn, the clip's sound kept; one the model cannot take says why and keeps the words."""
    import time

    import uvicorn

    from attnviz.serve.process import listen

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    page = None
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        requests: list[str] = []
        errors: list[str] = []
        page.on("request", lambda r: requests.append(r.method + " " + r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "status of 422" not in m.text
                else None)  # (the browser's own line for the refused transcript's answer)
        page.goto(url + "/")
        page.wait_for_selector("body[data-drawn]")
        assert page.locator("button.word").all_inner_texts() == OWN
        sound = page.evaluate("document.getElementById('clip').src")
        page.fill("#live-text", "the mat")
        page.click("#live-submit")
        page.wait_for_function("() => [...document.querySelectorAll('button.word')].map(b => b.textContent).join(' ')"
                               " === 'the mat'")
        page.wait_for_selector("#live[data-loaded]")
        assert page.evaluate("window.attnvizSound.data.teacherForced") is True
        assert page.locator("#tokenlabels div").all_inner_texts()[-1] == "<|endoftext|>"
        assert page.evaluate("document.getElementById('clip').src") == sound  # the clip embedded once, kept
        page.hover("button.word[data-word='1']")
        page.wait_for_selector("#heat[data-word='1']")
        assert "\u201cmat\u201d" in page.inner_text("#heattitle")
        page.fill("#live-text", "word " * 600)
        page.click("#live-submit")
        page.wait_for_function("() => document.getElementById('live-status').textContent.includes('at most')")
        assert page.locator("button.word").all_inner_texts() == ["the", "mat"]
        assert [r for r in requests if not r.split(" ", 1)[1].startswith("data:")] == [
            f"GET {url}/", f"POST {url}/api/page", f"POST {url}/api/page"]
        assert errors == [], errors
    finally:
        if page is not None:
            page.close()
        server.should_exit = True
        thread.join(10)
        sock.close()
