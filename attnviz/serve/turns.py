"""Who runs the model of ``attnviz serve`` now: one request at a time, in turns.

One request holds the model at a time (a forward pass and the row blocks read from it never
interleave with another's arithmetic: one computation at a time on the machine's cores). Requests
wait in order of arrival. A request's work calls :meth:`Turns.checkpoint` between blocks of rows
(the page's row blocks, a tile's), and there:

* a request whose client has gone (:meth:`Turns.cancel`, from the event loop when the connection
  closes) stops: :class:`Cancelled` is raised, and the model goes to the next request. A request
  whose client goes while it waits never runs.
* a request that has held the model for :data:`TURN_SECONDS` and read :data:`TURN_BLOCKS` blocks
  since it took it has used its turn, and is *long*: it hands the model to the requests waiting and
  takes its place behind them. Only one long request goes on at a
  time (the long lane); another one waits, holding nothing, until the first has finished. So a short
  request waits behind at most a turn of the one long request, never behind the whole of one, let
  alone of several.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

TURN_BLOCKS = 8
"""Blocks of rows (each about 50 million weights at most) in a turn, at least."""

TURN_SECONDS = 0.25
"""Seconds of a turn, at least: a short text's request (a sentence on MiniLM: 10 ms; on a model of 32
layers, 32 blocks of a few rows) ends within its first turn, so it is never long."""


class Cancelled(Exception):
    """The client of a request has gone: its work stops at the next checkpoint (never shown to anyone)."""


class Ticket:
    """One request's place with the model."""

    __slots__ = ("blocks", "cancelled", "long", "since", "taken")

    def __init__(self) -> None:
        self.blocks = 0  # row blocks read so far
        self.since = 0  # ... when its turn began
        self.taken = 0.0  # when its turn began (time.monotonic)
        self.cancelled = False
        self.long = False  # it has used a whole turn: it needs the long lane to go on


class Turns:
    """The model, taken in turns (see the module)."""

    def __init__(self, turn_blocks: int = TURN_BLOCKS, turn_seconds: float = TURN_SECONDS) -> None:
        self.turn_blocks, self.turn_seconds = max(1, int(turn_blocks)), max(0.0, float(turn_seconds))
        self._cond = threading.Condition()
        self._queue: deque[Ticket] = deque()  # waiting for the model, in order of arrival
        self._holder: Ticket | None = None
        self._lane: Ticket | None = None  # the one long request allowed to go on
        # Counters, for the tests and anyone curious: requests cancelled, handovers to waiting requests.
        self.cancelled = 0
        self.handovers = 0
        self.blocks = 0

    @property
    def waiting(self) -> int:
        """Requests waiting for the model now."""
        with self._cond:
            return len(self._queue)

    @property
    def busy(self) -> bool:
        """Whether a request holds the model now."""
        with self._cond:
            return self._holder is not None

    def cancel(self, ticket: Ticket) -> None:
        """``ticket``'s client has gone (any thread): it stops at its next checkpoint, or leaves the queue."""
        with self._cond:
            if not ticket.cancelled:
                ticket.cancelled = True
                self.cancelled += 1
            self._cond.notify_all()

    @contextmanager
    def turn(self, ticket: Ticket) -> Iterator[None]:
        """Hold the model for ``ticket`` (waiting for it in order), until the block ends."""
        with self._cond:
            self._wait_for_model(ticket)
        try:
            yield
        finally:
            with self._cond:
                if self._holder is ticket:
                    self._holder = None
                if self._lane is ticket:
                    self._lane = None
                self._cond.notify_all()

    def checkpoint(self, ticket: Ticket) -> None:
        """Between two blocks of rows, on the thread holding the model for ``ticket``: stop if its client
        has gone; after a whole turn, hand the model to the requests waiting (see the module)."""
        if ticket.cancelled:
            raise Cancelled
        ticket.blocks += 1
        self.blocks += 1
        if ticket.blocks - ticket.since < self.turn_blocks or time.monotonic() - ticket.taken < self.turn_seconds:
            return
        with self._cond:
            ticket.long = True
            if self._lane is None:
                self._lane = ticket
            if self._lane is ticket and not any(self._may_take(t) for t in self._queue):
                ticket.since, ticket.taken = ticket.blocks, time.monotonic()  # nobody else could take it: another turn
                return
            self.handovers += 1
            self._holder = None
            self._cond.notify_all()
            self._wait_for_model(ticket)

    def _may_take(self, ticket: Ticket) -> bool:
        return not ticket.long or self._lane in (None, ticket)

    def _wait_for_model(self, ticket: Ticket) -> None:
        """(Under the condition.) Queue ``ticket`` and wait until it is the first waiting request that may take
        the model, and the model is free; then take it. :class:`Cancelled` if its client goes meanwhile."""
        self._queue.append(ticket)
        try:
            while not (self._holder is None and next((t for t in self._queue if self._may_take(t)), None) is ticket):
                if ticket.cancelled:
                    raise Cancelled
                self._cond.wait()
        finally:
            self._queue.remove(ticket)
            self._cond.notify_all()
        if ticket.cancelled:  # its turn came as it was cancelled: it does not start
            raise Cancelled
        self._holder = ticket
        if ticket.long:
            self._lane = ticket
        ticket.since, ticket.taken = ticket.blocks, time.monotonic()
