"""Shared by the benchmarks: time commands several times and print medians side by side with their ratio."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable

PY = sys.executable


def offline_env() -> dict[str, str]:
    """The environment the benchmarks run commands in: offline (the embedded model; nothing downloaded) and
    without transformers' notices."""
    import os

    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}


def time_command(args: list[str], runs: int, env: dict[str, str] | None = None) -> list[float]:
    """Wall-clock seconds of ``runs`` executions of a command (output discarded; failure stops the benchmark)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - start)
    return times


def time_call(fn: Callable[[], object], runs: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def report(title: str, ours_name: str, ours: list[float], base_name: str, base: list[float], *,
           goal: str, unit: str = "s", higher_is_better: bool = False) -> float:
    """Print both medians and ``ours / baseline`` (or its inverse for throughput); return that ratio."""
    mo, mb = statistics.median(ours), statistics.median(base)
    ratio = (mb / mo) if higher_is_better else (mo / mb)
    print(f"== {title}")
    print(f"   {ours_name:<44} median {mo:9.3f} {unit}  (n={len(ours)}, min {min(ours):.3f}, max {max(ours):.3f})")
    print(f"   {base_name:<44} median {mb:9.3f} {unit}  (n={len(base)}, min {min(base):.3f}, max {max(base):.3f})")
    label = "speed-up (baseline / ours)" if higher_is_better else "ratio (ours / baseline)"
    print(f"   {label}: {ratio:.2f}x   goal: {goal}")
    return ratio
