"""attnviz serve within bounds (issue 41): a long text never starves a short one and stops when its
client goes; what the server keeps stays under its cache size, and what it evicts is freed; tile
parameters are ASCII whole numbers or a 422 naming them, and no request leaves a traceback."""

from __future__ import annotations

import gc
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import TINY

from attnviz import api

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from attnviz.serve import create_app, listen
from attnviz.serve.cache import ByteCache, size_of
from attnviz.serve.turns import Cancelled, Ticket, Turns

LOCAL = "http://127.0.0.1:8000"
DEADLINE = 30.0


def _until(condition, what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _words(n: int, word: str = "w") -> str:
    return " ".join(f"{word}{i % 50}" for i in range(n))


@pytest.fixture(scope="module")
def tiny():
    return api.load(TINY)


@pytest.fixture(scope="module")
def long_tiny(tmp_path_factory):
    """The tiny model with room for 4,096 tokens: a text of 2,048 reads 8 blocks of rows a layer."""
    config = Path(TINY).read_text().replace("max_positions = 512", "max_positions = 4096")
    assert "max_positions = 4096" in config
    path = tmp_path_factory.mktemp("long") / "long.toml"
    path.write_text(config)
    return api.load(str(path))


class Gate:
    """A model whose page of a text starting "slow" stops before its second layer until ``resume``
    is set, and at its end until ``finish`` is: the test decides when a long request goes on."""

    def __init__(self, source) -> None:
        self._source = source
        self.capabilities, self.name = source.capabilities, source.name
        self.at_layer, self.resume = threading.Event(), threading.Event()
        self.at_end, self.finish = threading.Event(), threading.Event()
        self.slow_streams = 0

    def __getattr__(self, name):
        return getattr(self._source, name)

    def stream_batch(self, texts, *args, **kwargs):
        stream = self._source.stream_batch(texts, *args, **kwargs)
        if not texts[0].startswith("slow"):
            return stream
        self.slow_streams += 1
        return _GatedStream(stream, self)


class _GatedStream:
    def __init__(self, stream, gate: Gate) -> None:
        self._stream, self._gate = stream, gate

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def __iter__(self):
        for position, parts in self._stream:
            if position == 1:
                self._gate.at_layer.set()
                assert self._gate.resume.wait(DEADLINE)
            yield position, parts
        self._gate.at_end.set()
        assert self._gate.finish.wait(DEADLINE)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _server(app) -> Iterator[tuple[str, int, _Records]]:
    """A real uvicorn server of ``app`` on a free port, and what it logs."""
    import uvicorn

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    log = _Records()
    loggers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.error", "starlette")]
    for logger in loggers:
        logger.addHandler(log)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        _until(lambda: server.started, "the server to start")
        port = sock.getsockname()[1]
        yield f"http://127.0.0.1:{port}", port, log
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        for logger in loggers:
            logger.removeHandler(log)


def _no_traceback(log: _Records, err: str) -> None:
    assert not [r.getMessage() for r in log.records if r.exc_info or r.levelno >= logging.ERROR]
    assert "Traceback" not in err and "internal error" not in err, err


def _post(port: int, path: str, body: dict) -> socket.socket:
    """A POST sent on a socket left open (the test closes it: a client that goes away)."""
    data = json.dumps(body).encode()
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data))
    return conn


# --- item 4: tile parameters ---------------------------------------------------------------------------


def test_tile_parameters_are_ascii_numbers_in_range_or_a_422_naming_them(tiny, capfd):
    """``layer=²`` was a 500 with a traceback (``"²".isdigit()``, but ``int("²")`` fails); ``x=١`` read as 1."""
    app = create_app(tiny)
    with _server(app) as (url, port, log):
        page = json.loads(urllib.request.urlopen(url + "/api/page?text=" + "+".join(_words(300).split())).read())
        good = {"page": page["tiles"]["page"], "layer": "0", "head": "0", "level": "0", "x": "0", "y": "0"}
        assert urllib.request.urlopen(url + "/api/tile?" + urllib.parse.urlencode(good)).status == 200
        bad_values = ["²", "١", "１", "٣", "-1", " 1", "1 ", "+1", "1e3", "0x1", "1.0", "", "9" * 12, "¹²"]
        for name in ("layer", "head", "level", "x", "y"):
            for value in bad_values:
                query = urllib.parse.urlencode({**good, name: value})
                with pytest.raises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(url + "/api/tile?" + query)
                error = json.loads(refused.value.read())["error"]
                assert refused.value.code == 422 and error.startswith(f"{name} must be a whole number"), (name, value)
        for name, value in (("layer", "7"), ("head", "4"), ("level", "9"), ("x", "5"), ("y", "5")):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url + "/api/tile?" + urllib.parse.urlencode({**good, name: value}))
            assert refused.value.code == 422 and f"{name}={value}" in json.loads(refused.value.read())["error"]
        # A Content-Length of Unicode digits is refused like any other bad one, not a 500.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall("POST /api/page HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         "Content-Length: ²\r\n\r\n{}".encode("latin-1"))
            assert conn.recv(100).split(b" ")[1] in (b"400", b"413")
        assert urllib.request.urlopen(url + "/api/tile?" + urllib.parse.urlencode(good)).status == 200
    _no_traceback(log, capfd.readouterr().err)


# --- item 3: memory within the cache's bound --------------------------------------------------------------


def test_the_caches_stay_within_their_bytes_and_evicted_pages_are_freed(tiny):
    """Many distinct pages, each with tiles asked for, valid and out of range (each 422 used to keep its page
    alive through its traceback): the cache's own total never passes its bound, and a page it evicted is
    freed at once (reference counting, the cyclic collector off), not when a collection happens by."""
    limit = 20 << 20  # a page of these texts is 3 to 8 MB
    app = create_app(tiny, cache_size=limit)
    cache: ByteCache = app.state.cache
    client = TestClient(app, base_url=LOCAL)
    pages: dict[str, weakref.ref] = {}
    sizes = []
    gc.collect()
    gc.disable()
    try:
        for i in range(12):  # the bound is reached by the fifth page or so
            data = client.post("/api/page", json={"text": _words(260 + 5 * i, word=f"t{i}w")}).json()
            page = data["tiles"]["page"]
            live = cache.get(page)
            pages[page] = weakref.ref(live)
            sizes.append(size_of(live))
            del live
            base = {"page": page, "head": "1", "level": "1"}
            for layer, x, y, code in ((0, 0, 0, 200), (1, 1, 1, 200), (5, 0, 0, 422), (0, 99, 0, 422), (0, 0, 99, 422)):
                reply = client.get("/api/tile", params={**base, "layer": layer, "x": x, "y": y})
                assert reply.status_code == code, reply.text
                assert cache.total <= cache.limit
        kept = [p for p in pages if p in cache]
        evicted = [p for p in pages if p not in cache]
        assert len(kept) >= 2 and evicted and cache.evicted  # bounded by bytes, not "the last two pages"
        assert all(pages[p]() is None for p in evicted), "an evicted page is still alive"
        assert all(pages[p]() is not None for p in kept)
    finally:
        gc.enable()
    # The accounting counts what is kept: a page's layers (2 layers × 4 heads × n² float32 for these texts).
    assert min(sizes) > 2 * 4 * 260 * 260 * 4
    assert cache.total >= sum(size_of(cache.get(p)) for p in kept)
    assert client.get("/api/tile", params={"page": evicted[0], "layer": 0, "head": 0, "level": 0, "x": 0,
                                           "y": 0}).status_code == 404


def test_a_page_too_large_for_the_cache_is_served_without_tiles(tiny):
    app = create_app(tiny, cache_size=2 << 20)
    data = TestClient(app, base_url=LOCAL).post("/api/page", json={"text": _words(500)}).json()
    assert data["tiles"] is None and len(data["kinds"]["self"]["rows"]) == 500
    assert app.state.cache.total <= app.state.cache.limit


def test_the_cache_evicts_least_recently_used_and_what_an_entry_owns():
    import numpy as np

    cache = ByteCache(10_000)
    one, two = np.zeros(1000, np.float32), np.zeros(1000, np.float32)  # 4,000 bytes each
    assert cache.put("a", one) and cache.put("b", two)
    assert cache.put(("a", "tile"), np.zeros(10), owner="a")
    assert not cache.put(("gone", "tile"), np.zeros(10), owner="gone")  # no owner: not kept
    cache.get("a")  # now b is the least recently used
    assert cache.put("c", np.zeros(1000, np.float32))
    assert "b" not in cache and "a" in cache and cache.total <= cache.limit
    cache.put("d", np.zeros(1000, np.float32))
    assert "a" not in cache and ("a", "tile") not in cache  # the tile went with its page
    assert not cache.put("huge", np.zeros(5000, np.float32)) and "huge" not in cache
    view = np.zeros(100_000, np.uint8)[:10]
    assert size_of(view) >= 100_000  # a view keeps its whole buffer


def test_the_cache_size_is_an_option_with_its_default_shown(run_cli):
    r = run_cli("serve", "--help")
    assert "--cache-size" in r.stdout and "512M" in r.stdout
    for bad, said in (("lots", "is not a size"), ("-1G", "is not a size"), ("100K", "too little")):
        r = run_cli("serve", "--cache-size", bad, "--model", TINY)
        assert r.exit_code == 2 and r.stderr.startswith(f"attnviz: error: --cache-size '{bad}' ") and said in r.stderr
        assert r.stderr.count("\n") == 1, r.stderr


# --- item 2: cancelled when the client goes; a short request never starved ----------------------------


def test_a_request_whose_client_disconnects_stops_between_row_blocks(long_tiny, capfd):
    """The client goes while its page is computed: the work stops at the next block of rows (it
    read the first layer's blocks, not the second's), and requests queued behind it whose clients
    went too never run."""
    gate = Gate(long_tiny)
    gate.finish.set()
    app = create_app(gate, turns=Turns(turn_blocks=1000))
    turns: Turns = app.state.turns
    with _server(app) as (url, port, log):
        before = turns.blocks
        first = _post(port, "/api/page", {"text": "slow " + _words(2047)})
        assert gate.at_layer.wait(DEADLINE)
        layer_blocks = turns.blocks - before  # one layer's blocks of rows, read before the second layer
        queued = [_post(port, "/api/page", {"text": "slow " + _words(2047)}) for _ in range(3)]
        _until(lambda: turns.waiting == 3, "three requests waiting for the model")
        for conn in [first, *queued]:
            conn.close()
        _until(lambda: turns.cancelled == 4, "the server to see the four clients go")
        gate.resume.set()
        _until(lambda: not turns.busy and not turns.waiting, "the model to be free")
        assert layer_blocks >= 8 and turns.blocks - before == layer_blocks  # nothing read after the client went
        assert gate.slow_streams == 1  # the three queued never started
        reply = urllib.request.urlopen(url + "/api/page?text=still+here", timeout=DEADLINE)
        assert reply.status == 200
    _no_traceback(log, capfd.readouterr().err)


def test_a_short_request_is_answered_while_a_long_one_computes(long_tiny, capfd):
    """A long page holds the model; a short request arriving meanwhile is answered before the long one
    ends (it waits a turn of the long one's blocks, not the whole of it)."""
    gate = Gate(long_tiny)
    app = create_app(gate, turns=Turns(turn_blocks=4, turn_seconds=0))  # the short one: 2 blocks
    turns: Turns = app.state.turns
    finished: list[str] = []

    def ask(name: str, path: str, body: dict) -> None:
        request = urllib.request.Request(path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        if urllib.request.urlopen(request, timeout=2 * DEADLINE).status == 200:
            finished.append(name)

    with _server(app) as (url, _, log):
        long = threading.Thread(target=ask, args=("long", url + "/api/page", {"text": "slow " + _words(2047)}))
        long.start()
        assert gate.at_layer.wait(DEADLINE)  # the long one holds the model, in the middle of its page
        short = threading.Thread(target=ask, args=("short", url + "/api/page", {"text": "a short one"}))
        short.start()
        _until(lambda: turns.waiting == 1, "the short request to wait for the model")
        gate.resume.set()
        short.join(DEADLINE)
        assert finished == ["short"] and not gate.at_end.is_set()  # answered; the long one has not even ended
        gate.finish.set()
        long.join(DEADLINE)
        assert finished == ["short", "long"] and turns.handovers >= 1
    _no_traceback(log, capfd.readouterr().err)


def test_one_long_request_goes_on_at_a_time():
    """Long requests A and B, a short one S, turns of two blocks. A hands over after its turn; B, not known
    to be long yet, takes a turn, then (long, and A in the long lane) waits for A to end, holding nothing;
    S waited behind a turn of each, never behind the whole of either."""
    turns = Turns(turn_blocks=2, turn_seconds=0)
    order: list[str] = []
    a_holds, go_on = threading.Event(), threading.Event()

    def work(name: str, blocks: int, started: threading.Event | None = None) -> None:
        ticket = Ticket()
        with turns.turn(ticket):
            for i in range(blocks):
                turns.checkpoint(ticket)  # before each block of rows
                if started is not None and i == 0:
                    started.set()
                    assert go_on.wait(DEADLINE)
                order.append(name)

    threads = [threading.Thread(target=work, args=("A", 4, a_holds))]
    threads[0].start()
    assert a_holds.wait(DEADLINE)
    for count, (name, blocks) in enumerate((("B", 4), ("S", 1)), start=1):
        threads.append(threading.Thread(target=work, args=(name, blocks)))
        threads[-1].start()
        _until(lambda count=count: turns.waiting == count, f"{name} to wait")
    go_on.set()
    for thread in threads:
        thread.join(DEADLINE)
    assert order == ["A", "B", "S", "A", "A", "A", "B", "B", "B"]
    assert turns.handovers == 2 and not turns.busy  # A to B, then B (long) to S


def test_a_cancelled_ticket_leaves_the_queue_and_stops_at_its_checkpoint():
    turns = Turns(turn_blocks=100)
    holder, waiter = Ticket(), Ticket()
    outcome: list[str] = []

    def wait() -> None:
        try:
            with turns.turn(waiter):
                outcome.append("ran")
        except Cancelled:
            outcome.append("cancelled")

    with turns.turn(holder):
        thread = threading.Thread(target=wait)
        thread.start()
        _until(lambda: turns.waiting == 1, "the waiter")
        turns.cancel(waiter)
        thread.join(DEADLINE)
        assert outcome == ["cancelled"] and turns.waiting == 0
        turns.cancel(holder)
        with pytest.raises(Cancelled):
            turns.checkpoint(holder)
    assert not turns.busy
