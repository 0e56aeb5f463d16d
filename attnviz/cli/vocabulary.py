"""The options of every command, read from the Typer app: one row per option name, with its meaning, its
choices, its default and the commands that take it. docs/commands.md holds this table as generated
(``python -m attnviz.cli.vocabulary`` prints it), and ``tests/test_vocabulary.py`` fails when the app and
the table part, or when one name has two choice sets or two defaults: an option that shows something else by
default has a name of its own (``view --page``, ``explain --walk-layer``, ``compare-heads --top-pairs``).

A default of ``None`` is "not given": no file, no filter, no limit (export: from ``--config``, else
:class:`attnviz.export.settings.ExportSettings`'s own default, which the table shows), never a value the
command puts in its place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# What each option shared by several commands means, in one line. An option of one command is described by
# the first sentence of its help.
MEANINGS = {
    "--model": "the model: a Hugging Face folder, a hub id, a .toml config or model organism, or a saved result (.npz)",
    "--engine": "what runs a trained model: attnviz's attention on the weights (native), transformers with "
                "attnviz's attention function (fused), transformers' eager attention (hf), or the first that runs",
    "--dtype": "the model's precision on the transformers engines (weights computed in float32 either way)",
    "--revision": "the hub branch, tag or commit of --model",
    "--device": "where the model runs",
    "--device-map": "'auto' spreads a model too large for one device",
    "--trust-remote-code": "let a hub model run its own Python code",
    "--audio": "a sound clip (WAV, FLAC, OGG or MP3) heard by --model: a Whisper's cross-attention over the clip's "
               "time, or a speech encoder's (wav2vec2, HuBERT, WavLM) self-attention over its frames",
    "--verbose": "say which engine ran, on which device",
    "--text-file": "read the one text from a file (- reads standard input)",
    "--layer": "which layer: a number from 0, 'all' (export: a list such as 0,2,4-6)",
    "--head": "the head drawn: a number from 0, 'all', or 'mean' of the heads (export: a list of heads drawn one "
              "by one)",
    "--only-head": "show only this head (a number from 0); every head without it (generate: their mean)",
    "--pair": "a second sentence: a sentence pair, its boundary marked",
    "--target": "encoder-decoder models: the decoder's input text",
    "--kind": "encoder-decoder models: which attention (encoder, decoder or cross)",
    "--causal": "config models: force a causal mask on or off",
    "--hide-special": "drop [CLS], [SEP], BOS and other special tokens",
    "--renormalize": "with --hide-special: rescale each row to sum to 1",
    "--words": "join word pieces into words",
    "--truncate": "cut a text longer than the model's maximum instead of failing",
    "--cmap": "the colormap of pictures",
    "--width": "the terminal width to fit",
    "--out": "a file to write, its kind from its extension, repeatable (one run, several files); without it the "
             "command prints (export: the folder it fills, required; atlas: its one page; organism: the folder of its "
             "checkpoint)",
    "--format": "what is printed on stdout: a table, or json, csv (parquet: tables written with --out)",
    "--top": "show only the first N heads (heads: after --sort; atlas: of each ranking)",
    "--seed": "the seed of what is random, so a run can be repeated",
    "--sort": "the order of the rows",
    "--column": "CSV or Parquet: the column holding the texts",
    "--field": "JSONL: the field holding the text",
    "--vs": "a second text to compare with: how each head changes",
    "--vs-model": "a second model to compare with: how each head changes",
    "--similar-to": "with a sentence encoder: the text whose similarity is the output differentiated",
    "--importance": "each head's importance (Michel et al. 2019)",
    "--ablate": "with --importance: each head's ablation too (zero or mean)",
    "--values": "write each value into its cell",
    "--fit": "wider than the terminal: max-pool it, or split it into pages",
    "--force": "run even past the estimated cost limit",
    "--quiet": "print no progress",
    "--jobs": "how many workers at once: export's drawing processes; with --backend ray, Ray actors, each holding "
              "its own model (export's items, needle's cells)",
    "--backend": "where the work runs: local (this process and its workers) or ray (a Ray cluster's actors)",
}


@dataclass
class Row:
    name: str
    short: set[str] = field(default_factory=set)
    meaning: str = ""
    choices: set[tuple[str, ...]] = field(default_factory=set)
    defaults: dict[str, str] = field(default_factory=dict)  # command → default as shown
    commands: list[str] = field(default_factory=list)


def _shown(value: Any) -> str:
    """A default as a user types it: ``on``/``off``, ``1/1``, a list comma-separated; none (``""``: not given) for
    None and an empty list."""
    value = getattr(value, "value", value)
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}/{value[1]}"  # a K/N pair (export --shard)
    if isinstance(value, (list, tuple)):
        return ",".join(_shown(v) for v in value)
    return str(value)


def _export_default(name: str) -> Any:
    from ..export.settings import ExportSettings

    key = {"--layer": "layers", "--head": "heads"}.get(name, name.lstrip("-").replace("-", "_"))
    return getattr(ExportSettings(), key, None)


def rows(app: Any) -> dict[str, Row]:
    """Every visible option of every command of ``app``, by long name."""
    import typer.main

    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)  # an app of several commands
    commands = group.commands
    found: dict[str, Row] = {}
    for command_name in sorted(commands):
        for param in commands[command_name].params:
            if getattr(param, "hidden", False) or param.param_type_name != "option":
                continue
            names = [o for o in param.opts if o.startswith("--")]
            if not names:
                continue
            row = found.setdefault(names[0], Row(names[0]))
            row.short |= {o for o in param.opts if not o.startswith("--")}
            row.commands.append(command_name)
            choices = getattr(getattr(param, "type", None), "choices", None) or _enum_choices(param)
            if choices:
                row.choices.add(tuple(str(getattr(c, "value", c)) for c in choices))
            default = param.default
            if command_name == "export" and default is None:
                default = _export_default(names[0])
            row.defaults[command_name] = _shown(default)
            if not row.meaning:
                row.meaning = MEANINGS.get(names[0]) or _first_sentence(getattr(param, "help", None) or "")  # an Option's
    return found


def _enum_choices(param: Any) -> tuple[str, ...] | None:
    import enum
    import typing

    annotation = getattr(param, "type_descriptor", None) or getattr(param, "_bare_type", None)
    kind = getattr(annotation, "annotation", annotation)
    for candidate in (kind, *typing.get_args(kind)):
        if isinstance(candidate, type) and issubclass(candidate, enum.Enum):
            return tuple(str(member.value) for member in candidate)
    return None


ABBREVIATIONS = ("e.g", "i.e", "et al", "etc", "vs", "cf", "approx")
"""Words whose full stop ends no sentence (``e.g.``, ``Kobayashi et al. 2020``): a meaning is never cut there."""


def _first_sentence(text: str) -> str:
    """The help's first sentence: up to the first full stop after a word (a closing bracket) that is not one of
    :data:`ABBREVIATIONS`, nor inside brackets (a parenthesis may hold a citation or an example)."""
    text = " ".join(text.split())
    for cut in re.finditer(r"(?<=[a-z)\]])\.\s", text):
        before = text[: cut.start()]
        if before.lower().endswith(ABBREVIATIONS) or before.count("(") > before.count(")"):
            continue
        return before.rstrip(".")
    return text.rstrip(".")


def markdown(found: dict[str, Row]) -> str:
    """The table as docs/commands.md holds it."""
    lines = ["| option | meaning | choices | default | commands |", "|---|---|---|---|---|"]
    every = sorted({c for row in found.values() for c in row.commands})
    for name in sorted(found, key=lambda n: (-len(found[n].commands), n)):
        row = found[name]
        options = ", ".join(f"`{o}`" for o in [name, *sorted(row.short)])
        choices = " / ".join("\\|".join(c) for c in sorted(row.choices))
        values = set(row.defaults.values())
        if len(values) == 1:
            default = next(iter(values)) or "—"
        else:
            default = "; ".join(f"{c}: {d or '—'}" for c, d in row.defaults.items())
        missing = [c for c in every if c not in row.commands]
        listed = ("every command" if not missing else f"every command but {', '.join(missing)}"
                  if len(missing) <= 2 else ", ".join(row.commands))
        meaning = row.meaning.replace("|", "\\|")
        lines.append(f"| {options} | {meaning} | {choices} | {default.replace('|', '/')} | {listed} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    from . import app

    print(markdown(rows(app)))
