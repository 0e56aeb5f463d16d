"""`attnviz serve`: a warm request for a one-sentence text, JSON included, against a plain
standard-library server around `attnviz.extract` (the baseline, in its own process, same JSON).

Both are started once and warmed; each request opens its own connection (as a browser's first
request does). Goal (issue 13): <= 60 ms median, and faster than the baseline.
Run: python benchmarks/bench_serve.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request

from _common import PY, report

TEXT = "The cat sat on the mat because it was tired."

BASELINE = textwrap.dedent('''
    import json, sys, urllib.parse
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import attnviz

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            text = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["text"][0]
            r = attnviz.extract(text)
            body = json.dumps({"model": r.model_name, "tokens": r.tokens, "attentions": r.attentions.tolist()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
''')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited: {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"{url} never answered")


def timed_requests(url: str, runs: int) -> list[float]:
    for _ in range(5):  # warm: the model has run, caches are filled
        urllib.request.urlopen(url).read()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        urllib.request.urlopen(url).read()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    query = "?text=" + urllib.parse.quote(TEXT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    ours_port, base_port = free_port(), free_port()
    servers = [
        subprocess.Popen([PY, "-m", "attnviz", "serve", "--port", str(ours_port)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([PY, "-c", BASELINE, str(base_port)], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL),
    ]
    try:
        ours_url = f"http://127.0.0.1:{ours_port}/api/attention{query}"
        base_url = f"http://127.0.0.1:{base_port}/{query}"
        wait_until_up(ours_url, servers[0])
        wait_until_up(base_url, servers[1])
        ours, base = [], []
        for _ in range(3):  # interleaved rounds: the machine's noise falls on both alike
            ours += timed_requests(ours_url, args.runs // 3)
            base += timed_requests(base_url, args.runs // 3)
        ours_ms, base_ms = [t * 1000 for t in ours], [t * 1000 for t in base]
        report("a warm request for one sentence, JSON included", "attnviz serve /api/attention", ours_ms,
               "standard-library server around attnviz.extract", base_ms, goal="<= 60 ms and < 1x", unit="ms")
        print(f"   p90: ours {statistics.quantiles(ours_ms, n=10)[-1]:.1f} ms, "
              f"baseline {statistics.quantiles(base_ms, n=10)[-1]:.1f} ms")
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
