"""The interactive page of a 500-token text on the default model (6 layers x 12 heads): its size and
its first paint, as `attnviz view TEXT --page page.html` writes it and chromium opens it.

Baselines measured in the same run: the size of the same weights embedded as JSON floats (as
bertviz embeds them), and the time to open the page of a one-sentence text (what the first paint
costs beyond opening any page). Budget (issue 13): under 12 MB and a first paint under 1 s.
Needs Debian's chromium and playwright. Run: python benchmarks/bench_page.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from _common import PY, report, time_command

WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "ran", "around", "gardens", "and", "birds", "sang", "songs", "about", "tired", "travellers", "who", "walked", "far"]


def first_paint(browser, path: Path, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        start = time.perf_counter()
        page.goto(path.as_uri())
        page.wait_for_selector("#headview[data-drawn]")
        times.append(time.perf_counter() - start)
        page.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--words", type=int, default=480, help="words of the long text (about as many tokens)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    import attnviz

    random.seed(0)
    text = " ".join(random.choice(WORDS) for _ in range(args.words))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        long_page, short_page = Path(tmp) / "long.html", Path(tmp) / "short.html"
        write = time_command([PY, "-m", "attnviz", "view", text, "--page", str(long_page)], args.runs, env)
        time_command([PY, "-m", "attnviz", "view", "The cat sat on the mat.", "--page", str(short_page)], 1, env)
        picture = time_command([PY, "-m", "attnviz", "heatmap", text, "--layer", "0", "--out", str(Path(tmp) / "x.png")],
                               args.runs, env)
        result = attnviz.extract(text)
        floats = len(json.dumps(result.attentions.tolist()))
        size = long_page.stat().st_size
        print(f"== page of a {len(result.tokens)}-token text, {result.n_layers} x {result.n_heads} heads")
        print(f"   attnviz view page           {size / 1e6:8.2f} MB")
        print(f"   the weights as JSON floats  {floats / 1e6:8.2f} MB (as bertviz embeds them)")
        print(f"   ratio (ours / JSON floats): {size / floats:.3f}x   budget: < 12 MB")
        report("writing the page (a fresh process)", "attnviz view --page page.html", write,
               "attnviz heatmap --layer 0 --out x.png", picture, goal="about 1x")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            long_paint = first_paint(browser, long_page, args.runs)
            short_paint = first_paint(browser, short_page, args.runs)
            browser.close()
        report("first paint in chromium (navigation to the head view drawn)", f"{len(result.tokens)}-token page",
               long_paint, "one-sentence page", short_paint, goal="< 1 s absolute")


if __name__ == "__main__":
    main()
