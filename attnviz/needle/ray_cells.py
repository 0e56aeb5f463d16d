"""A needle grid's cells on a Ray cluster: one model per actor, each cell sent to the next free actor.

Cells are independent (each its own prompt, prefill and answer), so the grid spreads as export's blocks do
(:mod:`attnviz.export.ray_backend`): a local cluster with this machine's CPUs, started and shut down here,
or the cluster at ``address``. Each actor builds the prompts with the same builder and runs the same
:func:`attnviz.needle.run_cell`, so every run equals a local one; the driver puts them back in grid order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..cluster import check_reachable, ray_module, spread, start_actors, start_ray
from .picture import RunPicture
from .result import NeedleRun


class NeedleActor:
    """One model, loaded once, answering cells (made a Ray actor by :func:`run_on_ray`)."""

    def __init__(self, spec: dict[str, Any], threads: int) -> None:
        import torch

        from .haystack import PromptBuilder
        from .model import load_stepper

        torch.set_num_threads(max(1, threads))
        self.spec = spec
        self.stepper, self.codec = load_stepper(spec["model"], **spec["load"])
        self.builder = PromptBuilder(self.codec, haystack=spec["haystack"], needle=spec["needle"],
                                     question=spec["question"], seed=spec["seed"])

    def ready(self) -> tuple[str, str]:
        """The model's name and the engine that runs it here."""
        return self.stepper.name, self.stepper.engine

    def run(self, length: int, depth: float) -> tuple[NeedleRun, RunPicture | None]:
        from .cells import run_cell

        prompt = self.builder.build(length, depth)
        picture = RunPicture(len(prompt.ids), prompt.start, prompt.end) if self.spec["pictures"] else None
        run = run_cell(self.stepper, self.codec, prompt, needle=self.builder.needle_text,
                       max_new_tokens=self.spec["max_new_tokens"], picture=picture)
        return run, picture


def run_on_ray(spec: dict[str, Any], cells: list[tuple[int, float]], *, jobs: int, address: str | None,
               done: Callable[[NeedleRun, RunPicture | None], None],
               ) -> tuple[list[NeedleRun], list[RunPicture | None], str, str]:
    """Every cell's run and picture, in the order of ``cells``, the model's name and its engine;
    ``done(run, picture)`` as each comes back (in any order)."""
    check_reachable(address)  # an address nobody answers at is one line, not Ray's retries for minutes (no Ray needed)
    ray = ray_module()
    started = start_ray(ray, address)
    try:
        actors = start_actors(ray, NeedleActor, (spec,), jobs=jobs, tasks=len(cells), address=address)
        name, engine = ray.get(actors[0].ready.remote())
        runs: list[NeedleRun | None] = [None] * len(cells)
        pictures: list[RunPicture | None] = [None] * len(cells)

        def answered(index: int, value: tuple[NeedleRun, RunPicture | None]) -> None:
            runs[index], pictures[index] = value
            done(*value)

        spread(ray, actors, list(cells), "run", answered,
               lambda index: f"the cell of length {cells[index][0]} and depth {cells[index][1]:g}")
        return [run for run in runs if run is not None], pictures, str(name), str(engine)
    finally:
        if started:
            ray.shutdown()
