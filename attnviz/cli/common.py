"""What every command shares: error mapping, warnings, consoles."""

from __future__ import annotations

import errno
import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from ..api import is_unsafe, json_text
from ..errors import AttnvizError, AttnvizWarning, in_cli_terms

F = TypeVar("F", bound=Callable[..., Any])

DEBUG_ENV = "ATTNVIZ_DEBUG"
# The library's names for options, as the commands spell them (a command may override: export's --layers).
FLAGS = {"layers": "--layer", "heads": "--head", "head": "--head", "layer": "--layer", "pair": "--pair",
         "target": "--target", "truncate": "--truncate"}


def fail(message: str, code: int) -> typer.Exit:
    """Print the one error line (control characters in it, from a file name say, escaped) and exit."""
    global REPORTED
    sys.stderr.write(f"attnviz: error: {one_line(message)}\n")
    sys.stderr.flush()
    REPORTED = True
    return typer.Exit(code)


REPORTED = False  # whether this process has printed its error line (Ctrl-C: typer may exit 130 silently)


def one_line(text: str) -> str:
    """``text`` with newlines and other control characters (and lone surrogates) written as escapes."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif is_unsafe(ch):  # ESC, C1, bidi overrides, U+2028: nothing a terminal may be given raw
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def say(line: str) -> None:
    """Print one line of a command's own words on stdout, with what it quotes (a path, a model name)
    escaped as :func:`one_line` writes it: a file named with ESC or U+202E drives no terminal."""
    typer.echo(one_line(line))


def note(line: str) -> None:
    """One ``attnviz: …`` line on stderr (a model's description, what was removed), escaped as :func:`say`."""
    sys.stderr.write(f"attnviz: {one_line(line)}\n")


def wrote(path: object, what: str = "") -> None:
    """``wrote PATH`` on stdout, the path escaped (:func:`say`)."""
    say(f"wrote {path}{what}")


def echo_json(value: object) -> None:
    """A JSON document on stdout, every unsafe character in its strings written as ``\\uXXXX``."""
    typer.echo(json_text(value, indent=1))


def given(parameter: str) -> bool:
    """Whether the option of the current command's ``parameter`` was given (on the command line or in the
    environment), not left at its default. False outside a command run (a test calling the function)."""
    import importlib

    try:  # typer from 0.24 carries its own copy of click, with its own current context
        click_globals = importlib.import_module("typer._click.globals")
    except ImportError:
        click_globals = importlib.import_module("click")
    context = click_globals.get_current_context(silent=True)
    source = None if context is None else context.get_parameter_source(parameter)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def renamed(new_value: Any, old_value: Any, old: str, new: str, *, parameter: str | None = None) -> Any:
    """An option's value under its new name, or under the old one, which still works for one release with a
    one-line note on stderr (``--vs`` is ``--similar-to`` where it names the similarity text). ``parameter``:
    the new option's parameter name where it has a default of its own (whether it was given is then asked)."""
    if old_value is None or old_value is False:
        return new_value
    if given(parameter) if parameter is not None else (new_value is not None and new_value is not False):
        from ..errors import UsageError

        raise UsageError(f"give {new} (the new name of {old}), not both")
    sys.stderr.write(f"attnviz: warning: {old} is now {new} here; {old} still works in this release and will then "
                     "be removed\n")
    return old_value


def check_text_arguments(kwargs: dict[str, Any]) -> None:
    """Every text a command was given must be valid UTF-8 (bytes that are not arrive as lone surrogates)."""
    from ..errors import UsageError

    for name, value in kwargs.items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            text = str(item) if isinstance(item, (str, os.PathLike)) else None
            if text is None:
                continue
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                what = "TEXT" if name == "text" else "INPUT" if name == "inputs" else "--" + name.replace("_", "-")
                code = ord(text[exc.start])
                byte = f"0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else one_line(text[exc.start])
                raise UsageError(f"{what} is not valid UTF-8 (character {exc.start + 1} is the byte {byte}); "
                                 "give UTF-8 text") from None


LIVE_HELP: dict[str, dict[str, Callable[[], str]]] = {}
"""Help texts made from a registry, by command and parameter: written again when the command runs (plugins are
loaded by then), so `attnviz kv --help` lists a plugin's policies and settings too. A command module adds its own."""

OUTPUT_PARAMETERS = ("out", "old_out", "page_file", "minference", "duo", "per_text")
"""The parameters that name what a command writes; every other path a command is given is something it reads."""
MODEL_PARAMETERS = ("model", "vs_model")
"""Parameters naming a model, whose folder the command reads whole."""


def refuse_outputs_over_inputs(kwargs: dict[str, Any]) -> None:
    """Before any work: no output of the command may be one of its inputs (:func:`attnviz.fileio.refuse_overwriting_inputs`),
    whichever parameter named it (a picture, a text file, a corpus, a haystack, a saved result given as the model)."""
    from ..api import refuse_overwriting_inputs

    def paths(value: Any) -> list[Any]:
        items = value if isinstance(value, (list, tuple)) else [value]
        return [item for item in items if isinstance(item, (str, os.PathLike))]

    outputs = [path for name in OUTPUT_PARAMETERS for path in paths(kwargs.get(name))]
    if not outputs:
        return
    inputs = [path for name, value in kwargs.items() if name not in OUTPUT_PARAMETERS for path in paths(value)]
    folders = [path for name in MODEL_PARAMETERS for path in paths(kwargs.get(name)) if os.path.isdir(path)]
    refuse_overwriting_inputs(outputs, inputs, folders_read_whole=folders)


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
                check_text_arguments(kwargs)
                refuse_outputs_over_inputs(kwargs)
                return _stopped_by_ctrl_c(func, args, kwargs)
            except AttnvizError as exc:
                raise fail(exc.for_cli({**FLAGS, **(flags or {})}), exc.exit_code) from None
            except KeyboardInterrupt:
                from .. import interrupts

                raise fail("interrupted" + (f"; {interrupts.KEPT}" if interrupts.KEPT else ""), 130) from None
            except (typer.Exit, typer.Abort, SystemExit):
                raise
            except OSError as exc:  # the machine said no (a name too long, a full disk): what, and where
                if debug:
                    raise
                raise fail(environment_error(exc) if exc.errno in ENVIRONMENT_ERRNOS else internal_error(exc), 1) from None
            except Exception as exc:  # a bug: say so in one line, keep the traceback for ATTNVIZ_DEBUG
                if debug:
                    raise
                raise fail(internal_error(exc), 1) from None
            finally:
                said_warnings(caught, {**FLAGS, **(flags or {})})

    return wrapper


def said_warnings(caught: list[Any], flags: dict[str, str] | None = None) -> None:
    """attnviz's own warnings as ``attnviz: warning: …`` lines on stderr; other libraries' only with ATTNVIZ_DEBUG=1."""
    for w in caught:
        if issubclass(w.category, AttnvizWarning):
            said = in_cli_terms(str(w.message), flags or FLAGS)
            sys.stderr.write(f"attnviz: warning: {one_line(said)}\n")
        elif os.environ.get(DEBUG_ENV) == "1":
            sys.stderr.write(f"warning ({w.category.__name__}): {one_line(str(w.message))}\n")


ENVIRONMENT_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                                errno.ELOOP, errno.EMFILE, errno.ENFILE, errno.EIO, errno.ENOTDIR, errno.EISDIR})
"""Errors of the machine, not of attnviz: a file name, a disk, a permission. Said as what and where."""


def environment_error(exc: OSError) -> str:
    where = f" {exc.filename}" if exc.filename else ""
    return f"cannot use{where}: {exc.strerror or exc}; check the name, the free space and the permissions"


def internal_error(exc: BaseException) -> str:
    from ..plugins import NO_PLUGINS_ENV, blame

    first = (str(exc).strip().splitlines() or [""])[0][:200]
    plugin = blame(exc)
    if plugin is not None:  # not attnviz's bug: the plugin's, whose code raised it
        return (f"plugin {plugin} failed ({type(exc).__name__}: {first}); report it to that plugin's authors, or run "
                f"without plugins ({NO_PLUGINS_ENV}=1)")
    return f"internal error ({type(exc).__name__}: {first}); rerun with {DEBUG_ENV}=1 for the traceback and report it"


def _stopped_by_ctrl_c(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a command body; once Ctrl-C has reached the process (``attnviz.interrupts``), the outcome is an
    interruption, whatever a library made of the KeyboardInterrupt (swallowed it, or raised another error)."""
    from ..interrupts import interrupted

    try:
        done = func(*args, **kwargs)
    except (typer.Exit, typer.Abort):  # the command has said what happened (export's Ctrl-C line, say)
        raise
    except Exception:
        if interrupted():
            raise KeyboardInterrupt from None
        raise
    if interrupted():
        raise KeyboardInterrupt
    return done


def stdout_console(width: int | None = None):
    """A rich console on stdout; ``width`` overrides the terminal's (useful when piping).

    It reads no markup or emoji codes, is never narrower than :data:`MIN_WIDTH` (``COLUMNS=5`` in
    the environment, say), and escapes what is left of control and invisible format characters
    in what it prints (see :func:`attnviz.labels.safe_text`): the renderers escape what they lay
    out, this is the last line for any text that reaches the console another way."""
    from rich.console import Console

    from ..render.safe import escaped_segments

    class SafeConsole(Console):
        def render(self, renderable, options=None):
            yield from escaped_segments(super().render(renderable, options))

    def console_of(width: int | None) -> Console:
        return SafeConsole(width=width, highlight=False, soft_wrap=False, markup=False, emoji=False)

    console = console_of(width)
    if console.width < MIN_WIDTH:
        console = console_of(MIN_WIDTH)
    return console


MIN_WIDTH = 20  # the smallest --width (and terminal width) the commands draw at


def show_view(view, out, *, values: bool, fit: str, width: int | None) -> None:
    """The one line that chooses a renderer: a file for each of ``out`` (a path, or a list of them, each its kind
    by extension), else the terminal."""
    outs = [] if out is None else [out] if not isinstance(out, (list, tuple)) else list(out)
    if outs:
        from ..render.output import check_output_path
        from ..render.registry import for_path

        for path in outs:
            wrote(for_path(check_output_path(path)).render(view, path, values=values))
    else:
        from ..render.terminal import render_terminal

        render_terminal(view, stdout_console(width), values=values, fit="page" if fit == "page" else "downsample")
