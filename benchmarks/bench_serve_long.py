"""``attnviz serve`` on one long text (issue 29, item 5): the page built for the text, tile latencies at
every zoom, and the server's memory.

The model is the issue's: a LLaMA config (4 layers, 8 query heads over 2 key/value heads, d=256, RoPE,
random weights saved locally) with a word-level tokenizer (one word, one token), and the same text as
``bench_view_long.py``. The server is the user's command (``python -m attnviz serve --model FOLDER``) in
its own process on a free port. The benchmark POSTs the text to ``/api/page`` as the page's script does
(the time it takes is building the page), then asks ``/api/tile`` for tiles of 3 (layer, head) pairs
at every level, one on the diagonal and one far below it (the first keys seen by the last queries). The
first request of each tile is *cold*; the same tiles asked again are *warm* (decoded from the pooled
tiles the server kept, or a computed tile from its cache); then tiles never asked before, at the leaves
and at the coarsest level the server does not keep, are computed on demand from the layer's queries and
keys (a warm server, a cold tile: the slowest a user zooming in meets). Each answer's
``X-Tile-Rows``/``X-Tile-Cols`` are checked against the level's shape, its bytes against them, and its
values are weights (finite, in [0, 1]). The server's peak memory is its ``VmHWM`` (``/proc``), after
every request, with any child processes' added.

Goals (issue 29): 32,768 tokens: server memory ≤ 2 GiB, a warm tile ≤ 100 ms.

Run: python benchmarks/bench_serve_long.py [--length 32768] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _common import PY
from bench_long import WORDS
from bench_long_context import build
from bench_serve import free_port, wait_until_up

MEMORY_GOAL_MIB = 2 * 1024
WARM_GOAL_MS = 100.0
PAGE_TIMEOUT_S = 1800.0
"""How long the page of the text may take (300–380 s for 32,768 tokens on a 2-core machine)."""


@dataclass(frozen=True)
class Tile:
    layer: int
    head: int
    level: int
    x: int
    y: int

    def query(self, page: str) -> str:
        return f"page={page}&layer={self.layer}&head={self.head}&level={self.level}&x={self.x}&y={self.y}"


@dataclass(frozen=True)
class Answer:
    ms: float
    exact: bool


class Server:
    """``attnviz serve`` in its own process, its log in a file; stopped on exit whatever happened."""

    def __init__(self, folder: Path, log: Path, env: dict[str, str]) -> None:
        self.port, self.log = free_port(), log
        self.base = f"http://127.0.0.1:{self.port}"
        with log.open("w") as sink:
            self.proc = subprocess.Popen([PY, "-m", "attnviz", "serve", "--model", str(folder), "--port",
                                          str(self.port)], env=env, stdout=sink, stderr=subprocess.STDOUT)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, lines: int = 10) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def memory_mib(self) -> tuple[float, float, int]:
        """Peak (``VmHWM``) and current (``VmRSS``) resident memory of the server and its children, MiB,
        and how many children it has."""
        pids = [self.proc.pid]
        for pid in pids:  # grows as children are found
            for task in Path(f"/proc/{pid}/task").glob("*/children"):
                pids += [int(child) for child in task.read_text().split()]
        peak = rss = 0.0
        for pid in pids:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
            peak += int(fields["VmHWM"].split()[0]) / 1024
            rss += int(fields["VmRSS"].split()[0]) / 1024
        return peak, rss, len(pids) - 1


def post_page(base: str, text: str) -> tuple[dict[str, Any], float, int]:
    """The page's data for ``text`` as the page's script asks for it; seconds; bytes of the answer."""
    request = urllib.request.Request(f"{base}/api/page", data=json.dumps({"text": text}).encode("utf-8"),
                                     headers={"Content-Type": "application/json"}, method="POST")
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=PAGE_TIMEOUT_S) as reply:
        body = reply.read()
    return json.loads(body), time.perf_counter() - start, len(body)


class Tiles:
    """Asks a page's ``/api/tile`` and checks each answer (its failures collected in ``problems``)."""

    def __init__(self, base: str, page: dict[str, Any]) -> None:
        self.base, self.endpoint, self.page = base, page["tiles"]["endpoint"], page["tiles"]["page"]
        self.levels = page["kinds"][page["tiles"]["kind"]]["levels"]
        self.problems: list[str] = []

    def count(self, level: int) -> tuple[int, int]:
        """Tiles across (x) and down (y) at ``level``."""
        shape = self.levels[level]
        return -(-shape["cols"] // 256), -(-shape["rows"] // 256)

    def ask(self, tile: Tile) -> Answer:
        url = f"{self.base}{self.endpoint}?{tile.query(self.page)}"
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=300) as reply:
                body, headers = reply.read(), reply.headers
        except urllib.error.HTTPError as exc:
            self.problems.append(f"{tile}: HTTP {exc.code} {exc.read()[:200]!r}")
            return Answer(float("nan"), False)
        ms = (time.perf_counter() - start) * 1000
        shape = self.levels[tile.level]
        expected = (min(256, shape["rows"] - tile.y * 256), min(256, shape["cols"] - tile.x * 256))
        got = (int(headers["X-Tile-Rows"]), int(headers["X-Tile-Cols"]))
        values = np.frombuffer(body, "<f4")
        if got != expected or values.size != got[0] * got[1]:
            self.problems.append(f"{tile}: {got} and {values.size} values, expected {expected}")
        elif not (np.isfinite(values).all() and values.min(initial=0) >= 0 and values.max(initial=0) <= 1 + 1e-4):
            self.problems.append(f"{tile}: values outside [0, 1] ({values.min()}, {values.max()})")
        return Answer(ms, headers["X-Tile-Exact"] == "1")


def tile_set(tiles: Tiles, layer: int, head: int) -> list[Tile]:
    """At every level, a tile on the diagonal (the middle one) and one far below it (the last queries,
    the first keys); the coarsest level is one tile."""
    chosen = []
    for level in range(len(tiles.levels)):
        across, down = tiles.count(level)
        chosen += [Tile(layer, head, level, across // 2, down // 2), Tile(layer, head, level, 0, down - 1)]
    return list(dict.fromkeys(chosen))


def new_tiles(tiles: Tiles, pairs: list[tuple[int, int]], level: int, count: int, causal: bool,
              asked: set[Tile]) -> list[Tile]:
    """``count`` tiles of ``level`` per pair never asked before, drawn at random (on or below the diagonal
    of a causal model: above it every weight is masked, and the server answers zeros without computing)."""
    across, down = tiles.count(level)
    places = [(x, y) for y in range(down) for x in range(min(across, y + 1) if causal else across)]
    draw = random.Random(level)
    out: list[Tile] = []
    for layer, head in pairs:
        unasked = [t for t in (Tile(layer, head, level, x, y) for x, y in places) if t not in asked]
        out += draw.sample(unasked, min(count, len(unasked)))
    return out


def row(name: str, answers: list[Answer]) -> str:
    ms = [a.ms for a in answers]
    how = {True: "computed", False: "decoded from kept tiles"}
    kinds = " and ".join(how[e] for e in sorted({a.exact for a in answers}, reverse=True))
    return f"   {name:<44} {len(ms):4d}  {statistics.median(ms):9.1f}  {max(ms):9.1f}   {kinds}"


def within(value: float, goal: float) -> str:
    return "within" if value <= goal else "NOT within"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=32768, help="tokens of the text (default 32768)")
    parser.add_argument("--runs", type=int, default=5, help="warm passes over the tiles, and tiles computed on "
                                                            "demand per (layer, head) and level (default 5)")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "PYTHONWARNINGS": "ignore"}
    text = " ".join(f"w{i % WORDS}" for i in range(args.length))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "llama8"
        build(folder, args.length, heads=8)
        with Server(folder, Path(tmp) / "serve.log", env) as server:
            try:
                start = time.perf_counter()
                wait_until_up(f"{server.base}/", server.proc)
                up = time.perf_counter() - start
                page, page_s, page_bytes = post_page(server.base, text)
                tiles = Tiles(server.base, page)
                entry = page["kinds"][page["tiles"]["kind"]]
                layers, heads, leaf = entry["layers"], entry["heads"], len(tiles.levels) - 1
                pairs = list(dict.fromkeys([(layers[0], 0), (layers[len(layers) // 2], heads // 2),
                                            (layers[-1], heads - 1)]))
                chosen = [t for layer, head in pairs for t in tile_set(tiles, layer, head)]
                cold = {t: tiles.ask(t) for t in chosen}
                warm = [(t, tiles.ask(t)) for _ in range(args.runs) for t in chosen]
                computed = min(t.level for t, a in cold.items() if a.exact)  # the coarsest level not kept
                fresh = {level: [tiles.ask(t) for t in new_tiles(tiles, pairs, level, args.runs, entry["causal"],
                                                                  set(chosen))]
                         for level in dict.fromkeys([computed, leaf])}
                peak, rss, children = server.memory_mib()
            except (OSError, KeyError, ValueError) as exc:
                sys.exit(f"the server failed: {type(exc).__name__}: {exc}\n{server.log_tail()}")
            if server.proc.poll() is not None:
                sys.exit(f"the server exited ({server.proc.returncode})\n{server.log_tail()}")
    print(f"== attnviz serve, one text of {args.length:,} tokens, LLaMA config (4 layers, {heads} heads over 2 KV "
          f"heads, d=256)")
    print(f"   server up (model loaded, home page built)  {up:7.1f} s")
    print(f"   POST /api/page (the page for the text)     {page_s:7.1f} s   answer {page_bytes / 1e6:.1f} MB; levels 0 "
          f"to {leaf}, the page holds 0 to {entry['included'] - 1}, the server keeps 0 to {computed - 1}")
    print(f"   {f'tiles of {len(pairs)} (layer, head) pairs, ms':<44} {'n':>4}  {'median':>9}  {'max':>9}")
    for level in range(leaf + 1):
        factor = tiles.levels[level]["factor"]
        print(row(f"cold, level {level} ({factor}×{factor} tokens a cell)", [a for t, a in cold.items()
                                                                           if t.level == level]))
    kept = [a for t, a in warm if t.level < computed]
    again = [a for t, a in warm if t.level >= computed]
    print(row("warm: kept levels, asked again", kept))
    if again:
        print(row("warm: computed tiles, asked again", again))
    for level, answers in fresh.items():
        print(row(f"warm: level {level}, tiles never asked", answers))
    print(f"   server memory: peak (VmHWM) {peak:,.0f} MiB, now (VmRSS) {rss:,.0f} MiB"
          + (f", {children} child processes included" if children else ""))
    repeated = statistics.median(a.ms for _, a in warm)
    slowest = max(statistics.median(a.ms for a in answers) for answers in fresh.values())
    print(f"   goals: memory {peak / MEMORY_GOAL_MIB:.2f}× of 2 GiB ({within(peak, MEMORY_GOAL_MIB)}); warm tile: "
          f"asked again {repeated / WARM_GOAL_MS:.2f}× of {WARM_GOAL_MS:g} ms ({within(repeated, WARM_GOAL_MS)}), "
          f"never asked {slowest / WARM_GOAL_MS:.2f}× ({within(slowest, WARM_GOAL_MS)}; medians, the slowest level)")
    if tiles.problems:
        sys.exit("wrong answers:\n   " + "\n   ".join(tiles.problems[:20]))


if __name__ == "__main__":
    main()
