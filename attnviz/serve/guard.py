"""Who may talk to ``attnviz serve``: the host names it answers to, and no writes from other sites.

Two attacks reach a server on 127.0.0.1 from a web page the user merely visits:

* **DNS rebinding**: ``evil.example`` first resolves to the attacker, then to 127.0.0.1, and the
  page reads the answers as same-origin. The browser still sends ``Host: evil.example``, so the
  server answers only to the names it was started for: IP literals (a rebinding attack needs a
  name), ``localhost``, the listening host, and any name the user allowed explicitly.
* **Cross-site requests**: a no-cors POST or an ``<img>`` pointing at ``/api/…`` cannot read the
  answer, but it makes the server compute one. The API refuses requests that the browser marks as
  coming from another site (``Sec-Fetch-Site``), or whose ``Origin`` is not the server itself.

Both checks live in one ASGI middleware, so no route can forget them.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from typing import Any

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def host_name(header: str) -> str:
    """``'[::1]:8000'`` → ``'::1'``; ``'Example.org:80'`` → ``'example.org'``; ``'x.org.'`` → ``'x.org'``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    if header.count(":") == 1:
        header = header.rsplit(":", 1)[0]
    return header.rstrip(".")


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def allowed_names(listen_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a server listening on ``listen_host`` answers to, besides IP literals."""
    names = set(LOOPBACK_NAMES) | {host_name(n) for n in extra if n.strip()}
    listen = host_name(listen_host)
    if listen and not is_ip_literal(listen):
        names.add(listen)
    return frozenset(names)


def host_allowed(header: str | None, names: frozenset[str]) -> bool:
    if not header:
        return False
    name = host_name(header)
    return is_ip_literal(name) or name in names


def same_origin(origin: str, host_header: str) -> bool:
    """Whether an ``Origin`` header (``http://127.0.0.1:8000``) names the server the request came to."""
    if origin == "null":  # a sandboxed frame or a file: page; never this server's own page
        return False
    _, _, rest = origin.partition("://")
    return bool(rest) and rest.rstrip("/").lower() == host_header.strip().lower()


class Guard:
    """ASGI middleware: 421 for a host name the server was not started for, 403 for a request to the
    API from another site. Everything else passes to ``app`` untouched."""

    state: Any  # the app's state (turns, cache), set by whoever builds the guard, for whoever holds it

    def __init__(self, app: Any, names: frozenset[str]) -> None:
        self.app, self.names = app, names

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        if not host_allowed(host, self.names):
            return await _refuse(send, 421, f"this server does not answer to the host name {host_name(host)!r}; "
                                            "open it at the address it printed when it started")
        if scope.get("path", "").startswith("/api/"):
            site = headers.get("sec-fetch-site", "")
            origin = headers.get("origin")
            if site == "cross-site" or (origin is not None and not same_origin(origin, host)):
                return await _refuse(send, 403, "requests from another site are refused; "
                                                "call the API from this server's page or from a script")
        await self.app(scope, receive, send)


async def _refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
