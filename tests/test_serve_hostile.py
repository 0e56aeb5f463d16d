"""attnviz serve against hostile clients (issue 26): host names, cross-site requests, oversized
bodies and answers, a busy model, bad text, and the address it listens on."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest
from conftest import TINY

from attnviz import api

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from attnviz.serve import MAX_BODY_BYTES, create_app, listen

LOCAL = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def tiny():
    return api.load(TINY)


@pytest.fixture(scope="module")
def client(tiny):
    return TestClient(create_app(tiny, allowed_hosts=("proxy.example",)), base_url=LOCAL)


def test_only_the_host_names_it_was_started_for(client):
    """DNS rebinding sends the attacker's name in Host: refused; IP literals, localhost and allowed names pass."""
    ask = lambda host: client.get("/api/attention", params={"text": "the cat"}, headers={"host": host})  # noqa: E731
    for bad in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example", "localhost.evil.example"):
        reply = ask(bad)
        assert reply.status_code == 421 and "host name" in reply.json()["error"], bad
    assert client.get("/", headers={"host": "evil.example"}).status_code == 421  # the page too
    for good in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "10.1.2.3:8000", "proxy.example", "LOCALHOST"):
        assert ask(good).status_code == 200, good


def test_cross_site_requests_are_refused(client):
    text = {"text": "the cat"}
    assert client.post("/api/attention", json=text, headers={"origin": "http://evil.example"}).status_code == 403
    assert client.post("/api/attention", json=text, headers={"origin": "null"}).status_code == 403
    assert client.get("/api/attention", params=text, headers={"sec-fetch-site": "cross-site"}).status_code == 403
    # A form or a no-cors fetch can only send text/plain, a form encoding or multipart: never JSON.
    plain = client.post("/api/page", content=json.dumps(text), headers={"content-type": "text/plain"})
    assert plain.status_code == 415 and "application/json" in plain.json()["error"]
    own = client.post("/api/attention", json=text, headers={"origin": LOCAL, "sec-fetch-site": "same-origin"})
    assert own.status_code == 200  # the server's own page


def test_bad_fields_are_named_and_errors_are_json(client):
    unknown = client.get("/api/attention", params={"text": "the cat", "layer": "2"})
    assert unknown.status_code == 422 and "'layer'" in unknown.json()["error"] and "truncate" in unknown.json()["error"]
    for route in ("/api/attention", "/api/page"):  # a lone surrogate: 422 for a config model too (was a 500)
        for field in ("text", "target", "pair"):
            body = json.dumps({"text": "the cat", field: "a \ud800 b"} if field != "text" else {"text": "a \ud800"})
            reply = client.post(route, content=body, headers={"content-type": "application/json"})
            assert reply.status_code == 422 and "surrogate" in reply.json()["error"], (route, field, reply.text)
    missing = client.get("/nothing")
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/json" and missing.json()["error"]
    wrong = client.delete("/api/attention")
    assert wrong.status_code == 405 and wrong.json()["error"].startswith("DELETE")


def test_truncate_is_a_field_the_server_takes():
    """The 422 for a text too long for the model names a field the server accepts, and that field works."""
    client = TestClient(create_app(api.load()), base_url=LOCAL)
    long = "word " * 600
    refused = client.get("/api/attention", params={"text": long})
    assert refused.status_code == 422 and '"truncate": true' in refused.json()["error"], refused.json()
    cut = client.post("/api/attention", json={"text": long, "truncate": True})
    assert cut.status_code == 413  # cut to 512 tokens: over the answer's weight cap, and said so, not computed blindly
    assert "/api/page" in cut.json()["error"]
    page = client.post("/api/page", json={"text": long, "truncate": True})
    assert page.status_code == 200 and len(page.json()["kinds"]["self"]["rows"]) == 512
    assert client.get("/api/page", params={"text": "a b", "truncate": "maybe"}).status_code == 400


@pytest.fixture(scope="module")
def slow_server(tiny):
    """A real uvicorn server on a free port whose model waits for ``release`` while ``inside`` is set."""
    import uvicorn

    inside, release = threading.Event(), threading.Event()
    real = tiny.extract

    class Slow:
        capabilities, name = tiny.capabilities, tiny.name

        def __getattr__(self, name):
            return getattr(tiny, name)

        def extract(self, text, **kwargs):
            if text == "slow":
                inside.set()
                release.wait(30)
            return real(text, **kwargs)

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(Slow()), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield url, sock.getsockname()[1], inside, release
    release.set()
    server.should_exit = True
    thread.join(10)
    sock.close()


def test_the_server_answers_while_the_model_computes(slow_server):
    url, _, inside, release = slow_server
    answers: list[int] = []
    waiting = threading.Thread(target=lambda: answers.append(
        urllib.request.urlopen(url + "/api/attention?text=slow", timeout=30).status))
    waiting.start()
    assert inside.wait(20)
    try:
        page = urllib.request.urlopen(url + "/", timeout=5)  # answered while the forward pass is held
        assert page.status == 200 and page.read().startswith(b"<!DOCTYPE html>")
        assert not answers  # the slow request was still being computed
    finally:
        release.set()
    waiting.join(30)
    assert answers == [200]


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        try:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
                if b"\r\n\r\n" in data:
                    break
        except (ConnectionResetError, TimeoutError):
            pass
        return data


def test_a_huge_body_is_refused_before_it_is_read(slow_server):
    _, port, _, _ = slow_server
    head = (b"POST /api/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000000\r\n\r\n")
    # Only the headers and a few bytes are sent: a server that waited for the declared gigabyte would
    # answer nothing before the client's socket timed out.
    assert _raw(port, head + b'{"text": "').startswith(b"HTTP/1.1 413")
    chunk = b"x" * 8192
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(MAX_BODY_BYTES // 8192 + 2))
    head = (b"POST /api/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    assert _raw(port, head + chunked).startswith(b"HTTP/1.1 413")


def test_listening_says_the_real_port_and_a_taken_port_is_one_line(run_cli, monkeypatch):
    import uvicorn

    sock = listen("127.0.0.1", 0)
    try:
        assert sock.getsockname()[1] != 0
        r = run_cli("serve", "--model", TINY, "--port", str(sock.getsockname()[1]))
        assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("attnviz: error: cannot listen on 127.0.0.1:") and "in use" in r.stderr
    finally:
        sock.close()
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)  # listen, print, stop at once
    r = run_cli("serve", "--model", TINY, "--port", "0")
    assert r.exit_code == 0, r.stderr
    port = int(r.stdout.split("http://127.0.0.1:")[1].split("/")[0])
    assert port > 0
    r = run_cli("serve", "--model", TINY, "--host", "no-such-host.invalid")
    assert r.exit_code == 1 and "cannot listen" in r.stderr and r.stderr.count("\n") == 1
