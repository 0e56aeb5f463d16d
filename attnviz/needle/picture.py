"""What the needle page draws of one run, kept as the answer is decoded: each answer token's attention over the
prompt, for every head, max-pooled to at most :data:`BINS` columns (the long-context matrix) and over the answer's
own tokens one column each (a head that reads the answer itself, a previous-token head say), exact in a window
around the needle, and its strongest keys (the one-token view). float16, so a grid of 15 runs of a model with
1,024 heads holds about 20 MB per run until the page chooses the heads it shows."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

BINS = 512  # columns of a run's matrix: the prompt's keys max-pooled
WINDOW = 24  # exact keys kept on each side of the needle
TOP = 5  # strongest keys kept per answer token and head
SHOWN_HEADS = 8  # heads the page keeps (the best ranked), besides the mean of all heads


@dataclass
class RunPicture:
    """One run's answer attention (see the module's docs); ``prompt`` tokens, the needle ``start`` … ``end``."""

    prompt: int
    start: int
    end: int
    width: int = 1  # prompt tokens per pooled column
    pooled: list[Tensor] = field(default_factory=list)  # per step: [layers, heads, bins] float16
    mean: list[Tensor] = field(default_factory=list)  # per step: [bins] float16 (the mean of the heads, pooled)
    window: list[Tensor] = field(default_factory=list)  # per step: [layers, heads, window] float16
    top: list[tuple[Tensor, Tensor]] = field(default_factory=list)  # per step: ([L, H, TOP] weights, positions)
    tail: list[Tensor] = field(default_factory=list)  # per step: [layers, heads, step + 1] over the answer's own keys
    mean_tail: list[Tensor] = field(default_factory=list)  # per step: [step + 1]
    labels: dict[int, str] = field(default_factory=dict)  # the labels of the keys the page names (window, tops)

    def __post_init__(self) -> None:
        self.width = max(1, math.ceil(self.prompt / BINS))

    @property
    def bins(self) -> int:
        return math.ceil(self.prompt / self.width)

    @property
    def window_start(self) -> int:
        return max(0, self.start - WINDOW)

    @property
    def window_end(self) -> int:
        return min(self.prompt, self.end + WINDOW)

    def _pool(self, rows: Tensor) -> Tensor:
        keys = rows[..., : self.prompt]
        padded = torch.nn.functional.pad(keys, (0, self.bins * self.width - self.prompt))
        return padded.reshape(*keys.shape[:-1], self.bins, self.width).amax(-1)

    def add(self, rows: Tensor) -> None:
        """One answer step's rows ``[layers, heads, T]`` (T ≥ the prompt's tokens)."""
        self.pooled.append(self._pool(rows).half())
        mean = rows.mean(dim=(0, 1))
        self.mean.append(self._pool(mean).half())
        self.tail.append(rows[..., self.prompt :].half())
        self.mean_tail.append(mean[self.prompt :].half())
        self.window.append(rows[..., self.window_start : self.window_end].half())
        k = min(TOP, rows.shape[-1])
        values, positions = torch.sort(rows, dim=-1, descending=True, stable=True)
        self.top.append((values[..., :k].half(), positions[..., :k].int()))

    def name_keys(self, ids: list[int], label: Callable[[int], str]) -> None:
        """Label the keys the page shows by name: the window's and every strongest key's (``ids``: every
        token fed, prompt and answer)."""
        wanted = set(range(self.window_start, self.window_end))
        for _, positions in self.top:
            wanted.update(int(p) for p in positions.unique())
        self.labels = {p: label(ids[p]) for p in sorted(wanted) if p < len(ids)}
