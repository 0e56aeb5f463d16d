"""``attnviz tui`` (issue 31): how long a key takes to change the screen, with the default model (MiniLM) warm,
against the way without it: one cold ``attnviz heatmap TEXT --layer L --head H`` per look.

The app runs headless under Textual's Pilot at 100×30, as a terminal would show it. Each key is timed from
the press until the screen has been redrawn (``pilot.press`` then ``pilot.pause``): the wall time, which
includes Textual's frame timers and Pilot's waits, and the UI thread's CPU time (``time.thread_time``),
the work a key costs. Pilot's own cost is measured in the same run by pressing a key bound to nothing, and
subtracted from both. A new text is timed from
Enter in the text prompt until the view shows it (the model run on its worker thread, the screen redrawn).
The baseline is ``attnviz heatmap`` in a fresh process, as a user runs it for each layer or head they want.

Views are switched as a person does, after reading the screen for 0.6 s (the app draws the other views
ahead while the user reads); layer and head keys are pressed in a burst.

Goals (issue 31): switching layer, head or view ≤ 50 ms; a new one-sentence text ≤ 150 ms after the first.

Run: python benchmarks/bench_tui.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

TEXT = "The cat sat on the mat."
NEW = ["A dog ran home.", "Birds sing at dawn.", "It rained all day long.", "She reads old books.",
       "The river is cold.", "We walked to the park.", "He plays the piano."]


async def measure(repeat: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    from attnviz.api import load
    from attnviz.tui.app import AttnvizTUI
    from attnviz.tui.explorer import Explorer

    app = AttnvizTUI(Explorer(load()), TEXT)
    names = ("nothing (Pilot's cost)", "layer (→)", "head (↓)", "view, first visit", "view, visited before",
             "a new text")
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    async with app.run_test(size=(100, 30)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()

        async def timed(name: str, *keys: str) -> None:
            start, used = time.perf_counter(), time.thread_time()
            for key in keys:
                await pilot.press(key)
            await pilot.pause()
            times[name].append((time.perf_counter() - start) * 1000)
            cpu[name].append((time.thread_time() - used) * 1000)

        for _ in range(repeat):
            await timed("nothing (Pilot's cost)", "x")
            await timed("layer (→)", "right")
            await timed("head (↓)", "down")
        for digit in "2345":
            await asyncio.sleep(0.6)  # a person reads the screen before the next look (the app draws ahead meanwhile)
            await timed("view, first visit", digit)
            await timed("view, visited before", "1")
            await timed("view, visited before", digit)
        for text in NEW:
            await pilot.press("t")
            await pilot.pause()
            app.screen.query_one("#answer").value = text
            start, used = time.perf_counter(), time.thread_time()
            await pilot.press("enter")
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.explorer.text == text
            times["a new text"].append((time.perf_counter() - start) * 1000)
            cpu["a new text"].append((time.thread_time() - used) * 1000)  # (the model runs on a worker: not here)
    return times, cpu


def cold(repeat: int) -> list[float]:
    runs = []
    for i in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "attnviz", "heatmap", TEXT, "--layer", str(i % 6), "--head", str(i % 12)],
                       check=True, capture_output=True)
        runs.append(time.perf_counter() - start)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    times, cpu = asyncio.run(measure(args.repeat))
    baseline = statistics.median(times["nothing (Pilot's cost)"])
    cpu_baseline = statistics.median(cpu["nothing (Pilot's cost)"])
    commands = cold(max(3, args.repeat // 5))
    command_ms = statistics.median(commands) * 1000
    print(f"== attnviz tui, default model (MiniLM) warm, 100×30; medians; Pilot's own cost ({baseline:.1f} ms wall, "
          f"{cpu_baseline:.1f} ms CPU) subtracted")
    for name, values in times.items():
        if name.startswith("nothing"):
            continue
        ours = statistics.median(values) - baseline
        goal = 150 if name == "a new text" else 50
        work = statistics.median(cpu[name]) - cpu_baseline
        print(f"   {name:22s} {ours:7.1f} ms wall (n={len(values)}; max {max(values) - baseline:.1f}), UI thread's CPU "
              f"{work:5.1f} ms   {'within' if ours <= goal else 'NOT within'} {goal} ms; "
              f"{ours / command_ms:.3f}× a cold command")
    print(f"   baseline: attnviz heatmap TEXT --layer L --head H, a fresh process each: {command_ms:.0f} ms "
          f"(median of {len(commands)})")


if __name__ == "__main__":
    main()
