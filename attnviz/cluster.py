"""Ray, for the commands that spread work over a cluster (export's blocks, a needle grid's cells): the module
or how to install it, an address checked before Ray retries against it for minutes, a cluster joined or started
(attnviz's Ctrl-C and SIGTERM kept), and an actor's own exception out of Ray's wrappers."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from .errors import AttnvizError, UsageError


def ray_module() -> Any:
    """The ray module, or a message saying how to get it (the optional extra ``ray``)."""
    try:
        import ray
    except ImportError:
        raise UsageError("[[backend=ray]] needs Ray, which is not installed: pip install ray (or pip install -e '.[ray]' in attnviz's clone)") from None
    return ray


REPLY_SECONDS = 3.0
"""How long a Ray address has to accept a connection and answer HTTP/2's preface before it is refused."""


def check_reachable(address: str | None, reply_seconds: float | None = None) -> None:
    """A ``host:port`` (or ``ray://host:port``) that refuses a TCP connection, or answers but not as a Ray head
    node, or stays silent for ``reply_seconds`` (default :data:`REPLY_SECONDS`), is one line now, not minutes
    of Ray's retries. ``auto`` and None are Ray's own to resolve."""
    if address is None or address == "auto" or ":" not in address:
        return
    import socket

    wait = REPLY_SECONDS if reply_seconds is None else reply_seconds
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=wait) as conn:
            speaks_grpc = _speaks_http2(conn, wait)
    except ValueError:
        raise UsageError(f"[[ray_address={address}]] is not host:port (or auto)") from None
    except OSError as exc:
        raise UsageError(f"cannot reach the Ray cluster at [[ray_address={address}]]: "
                         f"{exc.strerror or exc}; is a Ray head node running there?") from None
    if not speaks_grpc:  # Ray would retry against it for minutes
        raise UsageError(f"[[ray_address={address}]] answers, but not as a Ray head node (its port speaks no "
                         "gRPC); give the address that `ray start` printed for the head node")


def _speaks_http2(conn: Any, timeout: float) -> bool:
    """Whether the server at ``conn`` answers HTTP/2's connection preface with a SETTINGS frame, as
    every gRPC server (Ray's GCS and client server) does; an HTTP/1 server or a silent one does not."""
    conn.settimeout(timeout)
    try:
        conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        header = b""
        while len(header) < 9:
            chunk = conn.recv(9 - len(header))
            if not chunk:
                return False
            header += chunk
    except OSError:  # a timeout: nothing answered
        return False
    return header[3] == 0x04  # the frame's type: SETTINGS


def start_ray(ray: Any, address: str | None) -> bool:
    """Join the cluster at ``address``, or start a local one with this machine's CPUs, unless Ray already
    runs here; True when this call started it (the caller shuts it down).

    ``ray.init`` puts its own SIGTERM handler in place (``sys.exit(15)``: no line, then Ray's shutdown, which
    took 24 s): attnviz's is put back, and a SIGTERM that came while Ray started is handed to it (one line,
    exit 143)."""
    if ray.is_initialized():
        return False
    import contextlib
    import signal
    import threading

    from .quiet import stderr_silenced

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")  # no C++ warnings on a user's stderr
    if not address:
        _stop_with_process(ray)
    try:
        with stderr_silenced():  # Ray's C++ logging writes to file descriptor 2 as it starts
            ray.init(address=address, num_cpus=None if address else os.cpu_count(), include_dashboard=False,
                     log_to_driver=False, logging_level=logging.ERROR, configure_logging=True)
    except SystemExit as exc:  # Ray's SIGTERM handler, while Ray started
        if not main or exc.code != signal.SIGTERM:
            raise
        _restore(before)
        if not address:  # what of the local cluster had started stops with this process
            with contextlib.suppress(Exception):
                ray.shutdown()
        os.kill(os.getpid(), signal.SIGTERM)  # attnviz's own handler says it (or the default ends the process)
        raise
    except (ConnectionError, ValueError) as exc:
        raise UsageError(f"cannot reach the Ray cluster at [[ray_address={address}]]: {exc}") from None
    except Exception as exc:  # Ray itself could not start (no shared memory, a broken install, …)
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise AttnvizError(f"Ray could not start ({type(exc).__name__}: {first}); run without [[backend=ray]], "
                           "or check Ray's logs under /tmp/ray") from None
    finally:
        if main:
            _restore(before)
    return True


_WATCHED: list[Any] = []  # the ray module, once this process has started a local cluster


def _stop_with_process(ray: Any) -> None:
    """A SIGTERM ends attnviz at once (:mod:`attnviz.interrupts`): the local cluster this process started (its
    raylet, its GCS and their agents) stops with it, as ``ray.shutdown()`` would stop it, instead of lingering."""
    if not _WATCHED:
        from .interrupts import always_on_stop

        always_on_stop(_stop_local_cluster)
        _WATCHED.append(ray)


def _stop_local_cluster() -> None:
    """The processes of the local cluster still running, stopped (each a SIGTERM, so the raylet takes its
    workers and agents with it; a second later a SIGKILL). Nothing when Ray was shut down already."""
    ray = _WATCHED[0] if _WATCHED else None
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    if node is not None:  # None once ray.shutdown() has stopped it
        node.kill_all_processes(check_alive=False, allow_graceful=True)


def _restore(handler: Any) -> None:
    """SIGTERM's handler as it was before Ray set its own (None: one set outside Python, left as it is)."""
    import signal

    if handler is not None:
        signal.signal(signal.SIGTERM, handler)


def original_error(exc: BaseException) -> BaseException:
    """The exception an actor raised, out of Ray's wrappers (``RayTaskError.cause``)."""
    seen = 0
    while (cause := getattr(exc, "cause", None)) is not None and seen < 5:
        exc, seen = cause, seen + 1
    return exc


def start_actors(ray: Any, actor: type, args: tuple[Any, ...], *, jobs: int, tasks: int,
                 address: str | None) -> list[Any]:
    """``jobs`` actors of the class ``actor`` (at most one a task and one a CPU of the cluster), each made with
    ``*args`` and the threads it may use, each answering ``ready()`` once its model is loaded: the actors, after the
    first answer (the model did not load in an actor: the same error as a local run, one line)."""
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    count = max(1, min(jobs, tasks, cpus))
    threads = max(1, cpus // count) if not address else 1
    remote = ray.remote(num_cpus=min(threads, cpus))(actor)
    actors = [remote.remote(*args, threads) for _ in range(count)]
    try:
        ray.get([one.ready.remote() for one in actors])
    except Exception as exc:
        cause = original_error(exc)
        if isinstance(cause, AttnvizError):
            raise cause from None
        raise UsageError(f"the Ray actors could not start: {type(cause).__name__}: {cause}") from None
    return actors


def spread(ray: Any, actors: list[Any], tasks: list[tuple[Any, ...]], method: str,
           done: Callable[[int, Any], None], failed: Callable[[int], str]) -> None:
    """Each task's arguments handed to ``method`` of the next free actor; ``done(index, value)`` as each answer comes
    back (in any order). An actor's named error is raised as it is; any other is one line, ``failed(index)`` naming
    the task."""
    from collections import deque

    queue = deque(enumerate(tasks))
    idle = list(actors)
    running: dict[Any, tuple[Any, int]] = {}  # a Ray object ref -> the actor and its task's index
    while queue or running:
        while idle and queue:
            one, (index, task) = idle.pop(), queue.popleft()
            running[getattr(one, method).remote(*task)] = (one, index)
        ready, _ = ray.wait(list(running), num_returns=1)
        one, index = running.pop(ready[0])
        try:
            value = ray.get(ready[0])
        except Exception as exc:
            cause = original_error(exc)
            if isinstance(cause, AttnvizError):
                raise cause from None
            raise AttnvizError(f"a Ray actor failed on {failed(index)} ({type(cause).__name__}: {cause})") from None
        idle.append(one)
        done(index, value)


def check_backend(backend: str, ray_address: str | None = None, jobs: int = 1) -> None:
    """The one check of where a command's work runs: ``local`` or ``ray``, an address only with Ray, at least one
    actor."""
    if backend not in ("local", "ray"):
        raise UsageError(f"[[backend={backend}]] is unknown; use local or ray")
    if backend == "local" and ray_address is not None:
        raise UsageError("[[ray_address]] goes with [[backend=ray]]")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UsageError(f"[[jobs={jobs}]] must be at least 1")
