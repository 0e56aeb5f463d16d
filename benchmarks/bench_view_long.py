"""``attnviz view`` of one long text (issue 29): time, peak memory, the page's size, and how long the page
takes to open in Chromium, against the code before issue 29 measured in the same run.

The model is the issue's: a LLaMA config (4 layers, 8 query heads over 2 key/value heads, d=256, RoPE,
random weights saved locally) with a word-level tokenizer (one word, one token). Each side runs the
user's command in a fresh process under an address-space limit (``RLIMIT_AS``: 4 GiB for attnviz, 20 GiB
for the baseline, so that its failure is a clean error); peak RSS is read from the kernel. The baseline
is ``--baseline-ref`` (default: the last commit before issue 29) checked out with ``git worktree`` and
run with the same Python; it takes the text as an argument (it had no ``--text-file``).

The page is opened in Debian's Chromium (Playwright, ``executable_path``): the time from navigation to
its first view drawn, the longest main-thread task (``PerformanceObserver`` ``longtask``) while it opens
and while the model view draws.

Goals (issue 29): 8,192 tokens ≤ 60 s within 4 GiB, a page ≤ 25 MB opening in ≤ 3 s; 32,768 tokens
≤ 240 s within 4 GiB and a page ≤ 40 MB.

Run: python benchmarks/bench_view_long.py [--length 8192] [--skip-baseline] [--baseline-ref REF]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_long import WORDS
from bench_long_context import build, measure

BEFORE_ISSUE_29 = "ab0baf6"


def open_in_chromium(page: Path) -> dict[str, float]:
    """Seconds from navigation to the first view drawn; the longest task (ms) then and in the model view."""
    from playwright.sync_api import sync_playwright

    observe = ("window.__long = 0; new PerformanceObserver((list) => { for (const e of list.getEntries()) "
               "window.__long = Math.max(window.__long, e.duration); }).observe({type: 'longtask', buffered: true});")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1400, "height": 1000})
        tab.add_init_script(observe)
        start = time.perf_counter()
        tab.goto(page.as_uri(), timeout=120_000)
        tab.wait_for_function("() => document.querySelector('main section.active [data-drawn]')", timeout=120_000)
        opened = time.perf_counter() - start
        longest_open = tab.evaluate("window.__long")
        tab.evaluate("window.__long = 0")
        tab.click("nav.tabs button[data-view=model]")
        heads = tab.evaluate("window.attnviz.data.kinds.self.layers.length * window.attnviz.data.kinds.self.heads")
        tab.wait_for_function(f"() => document.querySelectorAll('#modelgrid canvas[data-drawn]').length === {heads}",
                              timeout=120_000)
        longest_model = tab.evaluate("window.__long")
        browser.close()
    return {"open_s": opened, "longest_open_ms": longest_open, "longest_model_ms": longest_model}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--limit-gib", type=float, default=4.0, help="attnviz's address-space ceiling (default 4)")
    parser.add_argument("--skip-baseline", action="store_true", help="do not run the code before issue 29")
    parser.add_argument("--baseline-ref", default=BEFORE_ISSUE_29, help="the git commit to compare with")
    parser.add_argument("--skip-browser", action="store_true", help="do not open the page in Chromium")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "PYTHONWARNINGS": "ignore"}
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        folder, text = Path(tmp) / "llama8", Path(tmp) / "long.txt"
        build(folder, args.length, heads=8)
        words = " ".join(f"w{i % WORDS}" for i in range(args.length))
        text.write_text(words + "\n", encoding="utf-8")
        page = Path(tmp) / "page.html"
        ours = measure(int(args.limit_gib * 2**30), [sys.executable, "-m", "attnviz", "view", "--text-file", str(text),
                                                     "--model", str(folder), "--page", str(page)], env)
        size = page.stat().st_size if page.exists() else 0
        browser = open_in_chromium(page) if size and not args.skip_browser else None
        base, base_size = None, 0
        if not args.skip_baseline and len(words) < 120_000:  # an argument longer than the kernel's limit fails
            tree = Path(tmp) / "before"
            subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), args.baseline_ref],
                           check=True, capture_output=True)
            try:
                old = Path(tmp) / "before.html"
                base = measure(20 * 2**30, [sys.executable, "-m", "attnviz", "view", words, "--model", str(folder),
                                            "--out", str(old)], {**env, "PYTHONPATH": str(tree)})  # its name then
                base_size = old.stat().st_size if old.exists() else 0
            finally:
                subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], check=False)
    print(f"== attnviz view of one text of {args.length:,} tokens, LLaMA config (4 layers, 8 heads over 2 KV heads, d=256)")
    state = "ok" if ours["rc"] == 0 else f"FAILED ({ours['error']})"
    print(f"   now                 {ours['seconds']:7.1f} s   peak {ours['peak_mib']:6.0f} MiB   page {size / 1e6:6.1f} MB   {state}")
    if base is not None:
        state = "ok" if base["rc"] == 0 else f"FAILED ({base['error']})"
        print(f"   before ({args.baseline_ref})      {base['seconds']:7.1f} s   peak {base['peak_mib']:6.0f} MiB   "
              f"page {base_size / 1e6:6.1f} MB   {state}")
        if base["rc"] == 0 and ours["rc"] == 0:
            print(f"   ratio now/before     time {ours['seconds'] / base['seconds']:.2f}×   "
                  f"memory {ours['peak_mib'] / base['peak_mib']:.2f}×   page {size / max(1, base_size):.2f}×")
    if browser is not None:
        print(f"   page in Chromium: first view drawn {browser['open_s']:.2f} s after navigation; longest main-thread "
              f"task {browser['longest_open_ms']:.0f} ms opening, {browser['longest_model_ms']:.0f} ms in the model view")


if __name__ == "__main__":
    main()
