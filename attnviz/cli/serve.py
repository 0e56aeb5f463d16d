"""``attnviz serve``: the interactive page on a local server, the model kept loaded between requests."""

from __future__ import annotations

import typer

from ..errors import UsageError
from .common import cli_command, stdout_console
from .options import (
    Cmap,
    CmapOpt,
    ModelOptions,
    model_command,
)


@cli_command
@model_command()
def serve(
    options: ModelOptions,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on. 127.0.0.1 (the default) is this "
                             "machine only; 0.0.0.0 or another address opens the server to your network, with no "
                             "password."),
    allow_host: list[str] = typer.Option([], "--allow-host", metavar="NAME", help="A host name the server answers to "
                                         "besides IP addresses and localhost (a reverse proxy's name, say); "
                                         "repeatable. Other names are refused, against DNS rebinding."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to listen on (0: any free one)."),
    cache_size: str = typer.Option("512M", "--cache-size", metavar="SIZE", help="Memory the server keeps between "
                                   "requests at most (pages, their queries and keys, tiles), least recently used "
                                   "dropped first: bytes, or with K, M or G."),
    cmap: Cmap = CmapOpt,
) -> None:
    """Serve the interactive page at http://HOST:PORT/ with the model kept loaded: type a text and every
    view follows. GET /api/attention?text=... answers with the attention of every head as JSON.
    Ctrl-C stops it.

    Example: attnviz serve --port 8000
    """
    from ..serve import cache_bytes, check_available
    from ..serve import serve as run

    check_available()
    if not host.strip():
        raise UsageError("--host is empty; give an address such as 127.0.0.1")
    cache = cache_bytes(cache_size)
    source = options.load()
    if source.capabilities.fixed_input:
        raise UsageError(f"{source.name} has a fixed input (a matrices config or a saved result): there is nothing "
                         "to type; use attnviz view")
    console = stdout_console()

    def ready(where: str, number: int) -> None:
        shown = f"[{where}]" if ":" in where else where
        console.print(f"attnviz: serving {source.name} at http://{shown}:{number}/ (Ctrl-C stops)")

    run(source, host=host, port=port, cmap=cmap.value, allowed_hosts=tuple(allow_host), cache_size=cache,
        on_ready=ready)
