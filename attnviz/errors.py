"""Named errors. The message of each is the text a user reads, so it says what went wrong and
what to do about it. The CLI prints it as one line on stderr and exits with ``exit_code``.

The library speaks in its own terms: an option is written in a message as a marker,
``[[layers=99]]``, ``[[truncate=True]]`` or ``[[pair]]``, which a Python user reads as
``layers=99``, ``truncate=True`` and ``pair`` (``str(error)``, ``error.message``), and the command
line as its flag, ``--layer 99``, ``--truncate`` and ``--pair`` (:meth:`AttnvizError.for_cli`, with
each command's names for its flags).

A TOML table named in a message (an organism's ``[[head]]``) is written ``toml_table("head")``, a marker no
translation takes for an option: every reader sees ``[[head]]``, none a flag.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_OPTION = re.compile(r"\[\[([a-z_0-9]+)(?:=([^\]]*))?\]\]")
_TABLE = re.compile(r"\[\[toml:([A-Za-z_0-9.-]+)\]\]")


def toml_table(name: str) -> str:
    """A TOML array of tables named in a message: ``toml_table("head")`` reads ``[[head]]`` in every terms (the API's,
    the command line's, a request's), never an option's flag."""
    return f"[[toml:{name}]]"


def _tables(text: str) -> str:
    return _TABLE.sub(r"[[\1]]", text)


def in_api_terms(text: str) -> str:
    """``[[layers=99]]`` → ``layers=99``; ``[[truncate=True]]`` → ``truncate=True``; ``[[pair]]`` → ``pair``."""
    return _tables(_OPTION.sub(lambda m: m.group(1) if m.group(2) is None else f"{m.group(1)}={m.group(2)}", text))


def in_cli_terms(text: str, flags: Mapping[str, str] | None = None) -> str:
    """``[[layers=99]]`` → ``--layers 99`` (or the command's own flag for ``layers``, from ``flags``);
    ``[[truncate=True]]`` and ``[[truncate]]`` → ``--truncate``."""
    flags = flags or {}

    def flag(m: re.Match[str]) -> str:
        name = flags.get(m.group(1), "--" + m.group(1).replace("_", "-"))
        if m.group(2) == "False" and name.startswith("--"):
            return "--no-" + name[2:]  # [[grid=False]] → --no-grid
        return name if m.group(2) in (None, "True") else f"{name} {m.group(2)}"

    return _tables(_OPTION.sub(flag, text))


def in_request_terms(text: str) -> str:
    """For ``attnviz serve``'s JSON answers: ``[[truncate=True]]`` → ``"truncate": true`` (a field the
    server takes); any other option in its API terms."""
    def field(m: re.Match[str]) -> str:
        if m.group(2) in ("True", "False"):
            return f'"{m.group(1)}": {m.group(2).lower()}'
        return m.group(1) if m.group(2) is None else f"{m.group(1)}={m.group(2)}"

    return _tables(_OPTION.sub(field, text))


class AttnvizError(Exception):
    """Base class of every error attnviz reports to a user."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        self.template = message
        self.message = in_api_terms(message)
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    def for_cli(self, flags: Mapping[str, str] | None = None) -> str:
        """The message with options written as command-line flags (``flags``: a command's names)."""
        return in_cli_terms(self.template, flags)


class UsageError(AttnvizError):
    """A command-line value that cannot be used (a bad layer, head or option combination)."""

    exit_code = 2


class InputError(AttnvizError):
    """Input text or an input file that attnviz cannot work with."""


class ConfigError(AttnvizError):
    """A TOML model or batch config that is malformed or inconsistent."""


class ModelNotFoundError(AttnvizError):
    """A ``--model`` value that names nothing attnviz can load."""


class RenderError(AttnvizError):
    """An output file that cannot be written (unknown extension, unwritable path, full disk)."""


class UnknownFormatError(RenderError):
    """An output name whose extension no renderer writes: a bad option value (exit code 2)."""

    exit_code = 2


class ServeError(AttnvizError):
    """The server cannot start: its address is taken, not this machine's, or not allowed."""


class ResultFileError(AttnvizError):
    """A saved ``.npz`` result that is missing, truncated or not written by attnviz."""


class NumericalError(AttnvizError):
    """A model that computed NaN or infinite attention (its scores overflowed): refused where it arises."""


class ResourceError(AttnvizError):
    """Something that would take more memory, time or bytes than a named limit allows
    (:mod:`attnviz.limits`): refused before it is built, with the override to use."""


class PluginError(AttnvizError):
    """A record a plugin (or a user's code) registered that cannot be used: its function cannot be imported, or what
    it returned is not what its registry asks for (a shape, a type, a finite value). Named as that record's fault."""


class AttnvizWarning(UserWarning):
    """A problem worth telling the user that does not stop the command."""
