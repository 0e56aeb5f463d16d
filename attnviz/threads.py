"""Thread pools sized to the machine, set before torch or a BLAS library starts them.

torch's OpenMP pool, MKL's and OpenBLAS's each start as many threads as they think the machine
has, and OpenMP's threads spin between parallel regions. On two cores shared with other work,
`attnviz atlas` on 40 sentences took 4–12 s instead of 2.1–2.5 s: a thread that spins holds a
core the next region's other thread waits for. So, before any of them starts:

* each pool gets at most the cores this process may use (its CPU affinity, and a cgroup's CPU
  quota where one is set), or what ``ATTNVIZ_THREADS`` says, or ``OMP_NUM_THREADS`` where the
  user set it;
* on a small machine (``SMALL_MACHINE`` cores or fewer) or a busy one (a load average of half its
  cores or more), OpenMP's threads sleep between regions instead of spinning
  (``OMP_WAIT_POLICY=PASSIVE``, ``KMP_BLOCKTIME=0``), unless the user chose otherwise. On a quiet
  16-core machine sleeping made MiniLM's forward of short texts 1.7× slower (16 threads; 1.1× with
  2), and under contention spinning made it 2.7× slower (2 threads on 2 busy cores).

Only environment variables are set here, and nothing is imported: ``attnviz --help`` still starts
without torch. Where torch is already loaded (the Python API in a notebook), :func:`configure`
sizes its pool with ``torch.set_num_threads`` instead.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import MutableMapping

POOLS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
IDLE = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}  # OpenMP threads sleep between regions
SMALL_MACHINE = 4  # cores: here one other busy process takes a large share of them


def _quota(root: str = "/sys/fs/cgroup") -> int | None:
    """CPUs a cgroup's quota allows (rounded up), or None without a quota."""
    try:
        with open(f"{root}/cpu.max", encoding="ascii") as file:  # cgroup v2: "max 100000" or "200000 100000"
            quota, period = file.read().split()[:2]
        if quota == "max":
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        with open(f"{root}/cpu/cpu.cfs_quota_us", encoding="ascii") as file:
            quota_us = int(file.read())
        with open(f"{root}/cpu/cpu.cfs_period_us", encoding="ascii") as file:
            period_us = int(file.read())
        return max(1, math.ceil(quota_us / period_us)) if quota_us > 0 and period_us > 0 else None
    except (OSError, ValueError):
        return None


def available_cores() -> int:
    """The cores this process may use: its CPU affinity where the system has one, else the CPU count,
    and no more than a cgroup's quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _quota()
    return max(1, min(cores, quota) if quota else cores)


def _count(value: str | None) -> int | None:
    """A positive thread count from a variable's value (OMP_NUM_THREADS may list one per nesting level:
    the first counts), or None."""
    try:
        count = int((value or "").split(",")[0].strip())
    except ValueError:
        return None
    return count if count > 0 else None


def thread_count(environ: MutableMapping[str, str] | None = None) -> int:
    """Threads for each pool: ``ATTNVIZ_THREADS``, else ``OMP_NUM_THREADS``, as set; else the cores
    this process may use."""
    environ = os.environ if environ is None else environ
    for name in ("ATTNVIZ_THREADS", "OMP_NUM_THREADS"):
        count = _count(environ.get(name))
        if count is not None:
            return count
    return available_cores()


def configure(environ: MutableMapping[str, str] | None = None) -> int:
    """Size the thread pools (see the module's note); returns the threads each pool will have.

    ``ATTNVIZ_THREADS`` sets every pool's variable; an ``OMP_NUM_THREADS`` the user set is left to the
    libraries (MKL and OpenBLAS read it too); else, where this process may use fewer cores than the
    machine has, each pool not already set is given that many. On a machine all its own, the
    libraries' defaults (torch: the physical cores) stay."""
    environ = os.environ if environ is None else environ
    count = thread_count(environ)
    forced = _count(environ.get("ATTNVIZ_THREADS")) is not None
    restricted = _count(environ.get("OMP_NUM_THREADS")) is None and count < (os.cpu_count() or count)
    if forced or restricted:
        for name in POOLS:
            if forced or not environ.get(name):
                environ[name] = str(count)
    if sleep_between_regions(count):
        for name, value in IDLE.items():
            environ.setdefault(name, value)
    torch = sys.modules.get("torch")
    if (forced or restricted) and torch is not None and environ is os.environ and torch.get_num_threads() != count:
        torch.set_num_threads(count)  # loaded before us: its pool has started already
    return count


def sleep_between_regions(threads: int) -> bool:
    """Whether OpenMP's ``threads`` should sleep between parallel regions rather than spin: on a small
    machine, or one whose cores are already half busy (the 1-minute load average)."""
    if threads <= 1:
        return False  # no pool to wait in
    cores = available_cores()
    if cores <= SMALL_MACHINE:
        return True
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return False
    return load >= cores / 2
