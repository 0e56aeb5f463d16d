"""What every command shares: error mapping, warnings, consoles."""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from ..errors import AttnvizError, AttnvizWarning

F = TypeVar("F", bound=Callable[..., Any])

DEBUG_ENV = "ATTNVIZ_DEBUG"
# The library's names for options, as the commands spell them (a command may override: export's --layers).
FLAGS = {"layers": "--layer", "heads": "--head", "head": "--head", "layer": "--layer", "pair": "--pair",
         "target": "--target", "truncate": "--truncate"}


def fail(message: str, code: int) -> typer.Exit:
    sys.stderr.write(f"attnviz: error: {message}\n")
    sys.stderr.flush()
    return typer.Exit(code)


def cli_command(func: F | None = None, *, flags: dict[str, str] | None = None) -> Any:
    """Run a command body: named errors become one line on stderr and an exit code, never a traceback.

    attnviz's own warnings (e.g. missing glyphs) print as ``attnviz: warning: …`` lines; other
    libraries' warnings are silenced unless ``ATTNVIZ_DEBUG=1``. So is the traceback of a bug,
    which otherwise shows as one line asking for a report.
    """

    if func is None:  # used as @cli_command(flags={...})
        return functools.partial(cli_command, flags=flags)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = os.environ.get(DEBUG_ENV) == "1"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                return func(*args, **kwargs)
            except AttnvizError as exc:
                raise fail(exc.for_cli({**FLAGS, **(flags or {})}), exc.exit_code) from None
            except KeyboardInterrupt:
                raise fail("interrupted", 130) from None
            except (typer.Exit, typer.Abort, SystemExit):
                raise
            except Exception as exc:  # a bug: say so in one line, keep the traceback for ATTNVIZ_DEBUG
                if debug:
                    raise
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                raise fail(
                    f"internal error ({type(exc).__name__}: {first}); rerun with {DEBUG_ENV}=1 for the "
                    "traceback and report it",
                    1,
                ) from None
            finally:
                for w in caught:
                    if issubclass(w.category, AttnvizWarning):
                        sys.stderr.write(f"attnviz: warning: {w.message}\n")
                    elif debug:
                        sys.stderr.write(f"warning ({w.category.__name__}): {w.message}\n")

    return wrapper  # type: ignore[return-value]


def stdout_console(width: int | None = None):
    """A rich console on stdout; ``width`` overrides the terminal's (useful when piping)."""
    from rich.console import Console

    return Console(width=width, highlight=False, soft_wrap=False)


def show_view(view, out, *, values: bool, fit: str, width: int | None) -> None:
    """The one line that chooses a renderer: an image file when ``out`` is given, else the terminal."""
    if out is not None:
        from ..fileio import check_output_path
        from ..render.registry import for_path

        typer.echo(f"wrote {for_path(check_output_path(out)).render(view, out, values=values)}")
    else:
        from ..render.terminal import render_terminal

        render_terminal(view, stdout_console(width), values=values, fit=fit)
