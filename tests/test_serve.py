"""attnviz serve (issue 13): the JSON contract equals attnviz.extract, bad requests get a 4xx and the
server keeps serving, concurrent requests are safe, the page updates as one types, Ctrl-C stops it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import TINY, chromium_path
from processes import interruptible

import attnviz
from attnviz import api

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from attnviz.serve import MAX_TEXT_BYTES, create_app

TEXTS = ["The cat sat on the mat.", "A dog ran after the cat.", "Birds sing.", "Attention is all you need, they said."]


LOCAL = "http://127.0.0.1:8000"  # TestClient's own default host, "testserver", is a name the server refuses


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(api.load()), base_url=LOCAL)


def test_attention_equals_extract(client):
    for text in TEXTS[:2]:
        reply = client.get("/api/attention", params={"text": text})
        assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
        body = reply.json()
        result = attnviz.extract(text)
        assert body["tokens"] == result.tokens and body["layers"] == list(range(6))
        assert torch.allclose(torch.tensor(body["attentions"]), result.attentions, atol=1e-6)
    pair = client.get("/api/attention", params={"text": "The cat sat.", "pair": "It was tired."}).json()
    assert pair["tokens"] == attnviz.extract("The cat sat.", pair="It was tired.").tokens


def test_bad_requests_get_a_4xx_and_the_server_keeps_serving(client):
    assert client.get("/api/attention").status_code == 400
    big = client.post("/api/attention", json={"text": "a" * (MAX_TEXT_BYTES + 1)})
    assert big.status_code == 413 and f"{MAX_TEXT_BYTES // 1024} kB" in big.json()["error"]
    posted = client.post("/api/attention", json={"text": "The cat sat."})
    assert posted.status_code == 200 and posted.json()["tokens"] == attnviz.extract("The cat sat.").tokens
    as_json = {"content-type": "application/json"}
    assert client.post("/api/attention", content=b"[1, 2]", headers=as_json).status_code == 400
    assert client.post("/api/attention", content=b"[" * 50_000, headers=as_json).status_code == 400  # deep, within the cap
    long = client.get("/api/attention", params={"text": "word " * 600})
    assert long.status_code == 422 and "takes at most 512" in long.json()["error"]
    assert client.get("/api/attention", params={"text": "x", "target": "y"}).status_code == 422
    assert client.get("/api/attention", params={"text": "still here"}).status_code == 200


def test_concurrent_requests_each_get_their_own_answer(client):
    def ask(text: str) -> tuple[str, list]:
        return text, client.get("/api/attention", params={"text": text}).json()["tokens"]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, TEXTS * 4))
    for text, tokens in answers:
        assert tokens == attnviz.extract(text).tokens


def test_the_page_and_its_data(client):
    page = client.get("/")
    assert page.status_code == 200 and "connect-src 'self'" in page.text and '"live":{"endpoint":"/api/page"' in page.text
    data = client.get("/api/page", params={"text": "The cat sat."}).json()
    assert data["kinds"]["self"]["rows"] == attnviz.extract("The cat sat.").tokens and data["stats"]["rows"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(*args: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "attnviz", "serve", "--port", str(port), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen(url + "/api/attention?text=warm", timeout=5).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the server never answered: {proc.communicate()}")


def test_the_page_follows_the_typing_and_ctrl_c_stops_cleanly(request):
    chromium = chromium_path()
    proc, url = _start("--model", TINY)
    try:
        body = json.loads(urllib.request.urlopen(url + "/api/attention?text=the%20cat%20sat").read())
        assert body["tokens"] == attnviz.extract("the cat sat", model=TINY).tokens
        if chromium is None:
            if os.environ.get("CI"):
                pytest.fail("CI needs Debian's chromium for the page tests")
        else:  # the session's one chromium (conftest's browser fixture)
            page = request.getfixturevalue("browser").new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url + "/")
            page.wait_for_selector("#headview[data-drawn]")
            page.fill("#live-text", "dogs chase birds")
            page.wait_for_function("() => window.attnviz.data.kinds.self.rows.join(' ') === 'dogs chase birds'")
            page.wait_for_selector("#headview[data-drawn]")
            page.close()
            assert errors == []
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert out.startswith("attnviz: serving tiny at http://127.0.0.1:")


def test_serve_refuses_what_it_cannot_serve(run_cli):
    r = run_cli("serve", "--model", "sample_configs/seed_example.toml")
    assert r.exit_code == 2 and "fixed input" in r.stderr
    r = run_cli("serve", "--host", " ")
    assert r.exit_code == 2 and "--host is empty" in r.stderr


def test_a_thread_safe_lock_is_held_per_forward_pass():
    """The app runs one forward pass at a time: two threads never interleave inside the model."""
    source = api.load(TINY)
    inside, overlaps = [0], [0]
    real = source.extract
    guard = threading.Lock()

    def counting(*args, **kwargs):
        with guard:
            inside[0] += 1
            overlaps[0] = max(overlaps[0], inside[0])
        try:
            time.sleep(0.01)
            return real(*args, **kwargs)
        finally:
            with guard:
                inside[0] -= 1

    source.extract = counting
    client = TestClient(create_app(source), base_url=LOCAL)
    with ThreadPoolExecutor(6) as pool:
        codes = list(pool.map(lambda t: client.get("/api/attention", params={"text": t}).status_code, TEXTS * 3))
    assert set(codes) == {200} and overlaps[0] == 1
