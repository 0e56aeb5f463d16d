"""The socket the server listens on, bound (and every reason it cannot be, said) before anything is printed."""

from __future__ import annotations

import contextlib
import errno
import socket

from ..errors import ServeError


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` and listening (``port`` 0: any free one), or a
    :class:`ServeError` saying why not, before anything is printed or served."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ServeError(f"cannot listen on {host!r}: it is not an address of this machine ({exc})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # "::" takes IPv4 too
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        reason = {errno.EADDRINUSE: "the port is in use (choose another, or 0 for any free one)",
                  errno.EACCES: "permission denied (ports below 1024 need root)",
                  errno.EADDRNOTAVAIL: "the address is not this machine's"}.get(exc.errno or 0, exc.strerror or str(exc))
        raise ServeError(f"cannot listen on {host}:{port}: {reason}") from None
    return sock
