"""Shared by the benchmarks: time commands several times and print medians side by side with their ratio."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

PY = sys.executable
# Every command runs from an empty folder: `python -m attnviz` puts its working folder first on sys.path, so run from
# the repository it would import this checkout's attnviz even where PYTHONPATH names another (`--before CHECKOUT`).
NEUTRAL = tempfile.mkdtemp(prefix="attnviz-bench-")


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
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=NEUTRAL)
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


# Runs argv[2:] under RLIMIT_AS argv[1] bytes; prints its seconds, exit code, peak RSS and last stderr line as JSON.
_LIMITED = r"""
import json, resource, subprocess, sys, time
limit = int(sys.argv[1])
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
start = time.perf_counter()
done = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=cap)
print(json.dumps({"seconds": time.perf_counter() - start, "rc": done.returncode,
                  "peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "error": done.stderr.strip().splitlines()[-1][:300] if done.stderr.strip() else ""}))
"""


def peak_mib(args: list[str], env: dict[str, str] | None = None, limit_gib: float = 64.0) -> float:
    """A command's peak resident memory (MiB), in a fresh process (its exit must be 0)."""
    import json

    out = subprocess.run([PY, "-c", _LIMITED, str(int(limit_gib * 2**30)), *args], capture_output=True, text=True,
                         env=env, cwd=NEUTRAL)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got["rc"]:
        raise SystemExit(f"{' '.join(args[:4])} … failed: {got['error']}")
    return float(got["peak_mib"])


def report_limited(title: str, args: list[str], limit_gib: float, env: dict[str, str] | None = None) -> bool:
    """Run a command under an address-space limit of ``limit_gib`` GiB; print its time, exit and peak RSS; return
    whether it finished within the limit."""
    import json

    out = subprocess.run([PY, "-c", _LIMITED, str(int(limit_gib * 2**30)), *args], capture_output=True, text=True,
                         env=env, cwd=NEUTRAL)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    met = got["rc"] == 0 and got["peak_mib"] <= limit_gib * 1024
    print(f"== {title} under RLIMIT_AS {limit_gib:g} GiB")
    print(f"   exit {got['rc']}, {got['seconds']:.1f} s, peak RSS {got['peak_mib']:.0f} MiB"
          + (f"  ({got['error']})" if got["rc"] else ""))
    print(f"   {'met' if met else 'NOT met'}")
    return met
