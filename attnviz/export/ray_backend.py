"""Export on a Ray cluster: one model per actor, each block of texts sent to the next free actor.

Actors rather than Ray Data: an export's unit is a block of its plan (:func:`attnviz.export.items.plan`,
texts of similar lengths, computed together), so that every number equals a local run's, a
shard's and a resume's; Ray Data would form batches of its own. An actor loads the model once and
runs whole blocks through the same code as a local export (``run_block``), drawing the block's
images itself; the driver keeps the journal and the manifest, writes the Parquet parts and tables,
records a failing text and goes on, and feeds the progress bar as each block comes back.

Actors write an item's files (npz, JSON, images) into ``--out`` themselves, so on a cluster of
several machines ``--out`` must be a folder every node sees (NFS, a parallel file system).
"""

from __future__ import annotations

import os
import warnings
from collections import deque
from pathlib import Path
from typing import Any

from ..cluster import check_reachable, original_error, ray_module, start_ray
from ..errors import AttnvizError, AttnvizWarning, UsageError
from .items import Item
from .manifest import Journal, file_sizes
from .settings import ExportSettings


class ExportActor:
    """One model, loaded once; runs blocks of texts as a local export does (made a Ray actor by :func:`export_on_ray`)."""

    def __init__(self, settings: ExportSettings, out_dir: str, threads: int) -> None:
        import torch

        from ..sources.resolve import load_source

        torch.set_num_threads(max(1, threads))
        self.settings, self.out_dir = settings, Path(out_dir)
        self.source = load_source(settings.model, engine=settings.engine, revision=settings.revision,
                                  device=settings.device, trust_remote_code=settings.trust_remote_code,
                                  causal=settings.causal, dtype=settings.dtype)

    def describe(self) -> str:
        return f"{self.source.describe()} (a Ray actor on {os.uname().nodename}, pid {os.getpid()})"

    def run(self, batch: list[Item], done: list[bool]) -> Any:
        """One block: its outcomes and Parquet rows, its images drawn here (none left to draw)."""
        from .blocks import run_block
        from .workers import render_tasks

        block = run_block(self.source, batch, self.out_dir, self.settings, done)
        for number, (item, outcome) in enumerate(block.outcomes):
            if isinstance(outcome, str) or not outcome[2]:
                continue
            files, stats, tasks = outcome
            try:
                render_tasks([(view, str(path)) for view, path in tasks], self.settings.style)
            except AttnvizError as exc:
                block.outcomes[number] = (item, exc.template)
                continue
            except Exception as exc:  # a renderer broke: this item fails, the run goes on
                block.outcomes[number] = (item, f"rendering failed ({type(exc).__name__}: {exc})")
                continue
            block.outcomes[number] = (item, (files, stats, []))
        return block


def export_on_ray(todo: list[list[Item]], out_dir: Path, settings: ExportSettings, journal: Journal, summary: Any,
                  on_item: Any, on_source: Any = None) -> None:
    """Run the ``todo`` blocks on Ray: a local cluster with this machine's CPUs (started here and shut
    down after), or the cluster at ``settings.ray_address``; ``settings.jobs`` actors, one model each."""
    from .blocks import fail_item, record_parts

    ray = ray_module()
    _check_reachable(settings.ray_address)
    started = start_ray(ray, settings.ray_address)
    try:
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        count = max(1, min(settings.jobs, len(todo), cpus))  # an actor the cluster cannot place would never start
        if settings.jobs > cpus:
            warnings.warn(f"[[jobs={settings.jobs}]] is more than the Ray cluster's {cpus} CPUs: at most {cpus} "
                          "actors run (one that the cluster cannot place would never start)", AttnvizWarning,
                          stacklevel=2)
        threads = max(1, cpus // count) if not settings.ray_address else 1
        gpus = ray.cluster_resources().get("GPU", 0) / count if settings.device.startswith("cuda") else 0
        if settings.device.startswith("cuda") and not gpus:
            raise UsageError("[[device=cuda]] on Ray needs GPUs in the cluster; this one has none")
        # Ray hides GPUs from an actor that asks for none: each asks for its share.
        remote = ray.remote(num_cpus=min(threads, cpus), num_gpus=min(1.0, gpus))(ExportActor)
        actors = [remote.remote(settings, str(out_dir.resolve()), threads) for _ in range(count)]
        try:
            described = ray.get(actors[0].describe.remote())
        except Exception as exc:  # the model did not load in the actor: the same error as a local run
            cause = original_error(exc)
            if isinstance(cause, AttnvizError):
                raise cause from None
            raise UsageError(f"the Ray actors could not start: {type(cause).__name__}: {cause}") from None
        if on_source is not None:
            on_source(_Described(described))
        _schedule(ray, actors, deque(todo), out_dir, journal, summary, on_item, record_parts, fail_item)
    finally:
        if started:
            ray.shutdown()


REPLY_SECONDS = 3.0
"""How long a Ray address has to accept a connection and answer HTTP/2's preface before it is refused."""


def _check_reachable(address: str | None) -> None:
    """A ``host:port`` that refuses a connection, or is not a Ray head node, is one line now
    (:func:`attnviz.cluster.check_reachable`, given this module's :data:`REPLY_SECONDS`)."""
    check_reachable(address, REPLY_SECONDS)


class _Described:
    """What ``on_source`` is told of the actors' source (``describe()``, as a local source says it)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def describe(self) -> str:
        return self.text


def _schedule(ray: Any, actors: list[Any], queue: deque[list[Item]], out_dir: Path, journal: Journal, summary: Any,
              on_item: Any, record_parts: Any, fail: Any) -> None:
    """Hand each block to the next free actor and settle blocks as they come back, in any order."""
    idle = list(actors)
    running: dict[Any, tuple[Any, list[Item]]] = {}  # a Ray object ref -> the actor and the block it runs
    while queue or running:
        while idle and queue:
            actor, batch = idle.pop(), queue.popleft()
            running[actor.run.remote(batch, [journal.finished(item) for item in batch])] = (actor, batch)
        if not running:
            raise AttnvizError("every Ray actor died; see the Ray logs, then rerun the same command to resume")
        ready, _ = ray.wait(list(running), num_returns=1)
        actor, batch = running.pop(ready[0])
        try:
            block = ray.get(ready[0])
        except Exception as exc:
            cause = original_error(exc)
            if isinstance(cause, UsageError):
                raise cause from None  # wrong for every item alike (a bad --layers, say)
            for item in batch:  # an actor died or broke: this block's texts fail, the run goes on
                if not journal.finished(item):
                    fail(journal, summary, item, f"the Ray actor failed ({type(cause).__name__}: {cause})", on_item)
            if isinstance(exc, ray.exceptions.RayActorError):
                continue  # the actor is gone: the others carry on
            idle.append(actor)
            continue
        idle.append(actor)
        for item, outcome in record_parts(out_dir, block, journal):
            if isinstance(outcome, str):
                fail(journal, summary, item, outcome, on_item)
                continue
            files, stats, _ = outcome
            journal.record(journal.entry(item, files=files, sizes=file_sizes(out_dir, files), stats=stats, status="ok"),
                           sync=False)
            summary.exported += 1
            on_item()
        journal.sync()  # once a block
