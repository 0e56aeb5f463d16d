"""Redraw the README's three pictures with the installed attnviz: ``python docs/make_images.py``.

Needs chromium and playwright (the test extra) for the page's screenshot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TEXT = "The cat sat on the mat because it was tired."
HERE = Path(__file__).resolve().parent / "images"


def attnviz(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "attnviz", *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **(env or {})})
    return done.stdout


def main() -> None:
    from playwright.sync_api import sync_playwright
    from rich.console import Console
    from rich.terminal_theme import MONOKAI
    from rich.text import Text

    HERE.mkdir(exist_ok=True)
    ansi = attnviz("heatmap", TEXT, "--layer", "0", "--head", "5", "--width", "90",
                   env={"FORCE_COLOR": "1", "COLORTERM": "truecolor", "COLUMNS": "90"})
    with open(os.devnull, "w") as nowhere:  # recorded, not shown
        console = Console(record=True, width=70, force_terminal=True, color_system="truecolor", file=nowhere)
        console.print(Text.from_ansi(ansi), end="")
    console.save_svg(str(HERE / "terminal.svg"), title=f'attnviz heatmap "{TEXT}" --layer 0 --head 5', theme=MONOKAI)
    attnviz("heatmap", TEXT, "--layer", "0", "--head", "all", "--out", str(HERE / "heatmap.png"))
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "page.html"
        attnviz("view", TEXT, "--layer", "0", "--head", "5", "--page", str(page))
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            tab = browser.new_page(viewport={"width": 900, "height": 420})
            tab.goto(page.as_uri())
            tab.wait_for_timeout(1500)
            tab.screenshot(path=str(HERE / "page.png"))
            browser.close()
    print(f"wrote {HERE}/terminal.svg, heatmap.png, page.png")


if __name__ == "__main__":
    main()
