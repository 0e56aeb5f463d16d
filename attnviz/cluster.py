"""Ray, for the commands that spread work over a cluster (export's blocks, a needle grid's cells): the module
or how to install it, a cluster joined or started, and an actor's own exception out of Ray's wrappers."""

from __future__ import annotations

import logging
import os
from typing import Any

from .errors import AttnvizError, UsageError


def ray_module() -> Any:
    """The ray module, or a message saying how to get it (the optional extra ``ray``)."""
    try:
        import ray
    except ImportError:
        raise UsageError("[[backend=ray]] needs Ray, which is not installed: pip install 'attnviz[ray]'") from None
    return ray


def start_ray(ray: Any, address: str | None) -> bool:
    """Join the cluster at ``address``, or start a local one with this machine's CPUs, unless Ray already
    runs here; True when this call started it (the caller shuts it down)."""
    if ray.is_initialized():
        return False
    from .quiet import stderr_silenced

    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")  # no C++ warnings on a user's stderr
    try:
        with stderr_silenced():  # Ray's C++ logging writes to file descriptor 2 as it starts
            ray.init(address=address, num_cpus=None if address else os.cpu_count(), include_dashboard=False,
                     log_to_driver=False, logging_level=logging.ERROR, configure_logging=True)
    except (ConnectionError, ValueError) as exc:
        raise UsageError(f"cannot reach the Ray cluster at [[ray_address={address}]]: {exc}") from None
    except Exception as exc:  # Ray itself could not start (no shared memory, a broken install, …)
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise AttnvizError(f"Ray could not start ({type(exc).__name__}: {first}); run without [[backend=ray]], "
                           "or check Ray's logs under /tmp/ray") from None
    return True


def original_error(exc: BaseException) -> BaseException:
    """The exception an actor raised, out of Ray's wrappers (``RayTaskError.cause``)."""
    seen = 0
    while (cause := getattr(exc, "cause", None)) is not None and seen < 5:
        exc, seen = cause, seen + 1
    return exc
