"""The ``attnviz`` command: a thin Typer shell over the Python API.

Each command lives in its own module and imports torch, transformers or matplotlib only inside
its body, so ``attnviz --help``, completion and argument errors stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import typer

if TYPE_CHECKING:  # pragma: no cover
    from click import ClickException

from . import (
    align,
    align_heads,
    atlas,
    compare_heads,
    explain,
    export,
    generate,
    heads,
    heatmap,
    kv,
    needle,
    organism,
    patterns,
    rollout,
    serve,
    tui,
    view,
)

app = typer.Typer(
    name="attnviz",
    help="See what every attention head of a transformer does, in the terminal or as image files.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("heatmap")(heatmap.heatmap)
app.command("explain")(explain.explain)
app.command("heads")(heads.heads)
app.command("compare-heads")(compare_heads.compare_heads)
app.command("rollout")(rollout.rollout)
app.command("export")(export.export)
app.command("view")(view.view)
app.command("serve")(serve.serve)
app.command("tui")(tui.tui)
app.command("atlas")(atlas.atlas)
app.command("generate")(generate.generate)
app.command("needle")(needle.needle)
app.command("kv")(kv.kv)
app.command("patterns")(patterns.patterns)
app.command("organism")(organism.organism)
app.command("align")(align.align)
app.command("align-heads")(align_heads.align_heads)


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"attnviz {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
    ),
) -> None:
    """attnviz: attention heatmaps, head summaries and step-by-step explanations."""
    from .common import LIVE_HELP

    live = {**LIVE_HELP.get("*", {}), **LIVE_HELP.get(ctx.invoked_subcommand or "", {})}
    if live:  # before the command's own --help: a help made from a registry, plugins loaded (their warnings said)
        command = ctx.command.get_command(ctx, ctx.invoked_subcommand or "") if hasattr(ctx.command, "get_command") \
            else None
        import warnings

        from .common import said_warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for param in getattr(command, "params", []):
                if param.name in live:
                    param.help = live[param.name]()
        said_warnings(caught)


def plain_message(exc: ClickException) -> str:
    """click's message without the machinery showing through: ``Invalid value for '--cmap': Value error,
    'foo' is not one of 'viridis', 'magma', 'coolwarm'.`` → ``--cmap: 'foo' is not one of viridis,
    magma, coolwarm``."""
    import re

    text = exc.format_message()
    text = re.sub(r"^Invalid value for '([^']+)': ", r"\1: ", text)
    text = text.replace("Value error, ", "")
    text = re.sub(r"is not one of ((?:'[^']*'(?:, )?)+)\.?$",
                  lambda m: "is not one of " + ", ".join(re.findall(r"'([^']*)'", m.group(1))), text)
    return text.rstrip(".")


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: usage errors, too, become one line on stderr (exit 2)."""
    import sys

    from ..plugins import tolerate_broken_metadata
    from . import common
    from .common import fail

    tolerate_broken_metadata()  # another tool's broken metadata must not stop torch's import, nor attnviz

    # typer from 0.24 carries its own copy of click: its ClickException, found by name, is click's to mypy
    click_error = cast("type[ClickException]",
                       next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"))
    try:
        code = app(args=argv, prog_name="attnviz", standalone_mode=False)
    except click_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `attnviz`: the help is the answer
            sys.stdout.write(exc.format_message() + "\n")
            raise SystemExit(0) from None
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path if ctx is not None else "attnviz"
        hint = ""
        param = getattr(exc, "param", None)
        if type(exc).__name__ == "MissingParameter" and getattr(param, "name", None) == "model":
            hint = ("; a causal model: sample_configs/organism_needle.toml (a model organism, offline), a folder, or "
                    "a hub id such as gpt2")
        raise SystemExit(fail(f"{plain_message(exc)}{hint} (see {command} --help)", exc.exit_code).exit_code) from None
    except typer.Abort:
        raise SystemExit(fail("aborted", 1).exit_code) from None
    if code == 130 and not common.REPORTED:  # Ctrl-C that typer turned into exit 130 before a command ran
        fail("interrupted", 130)
    raise SystemExit(code if isinstance(code, int) else 0)
