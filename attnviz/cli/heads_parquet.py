"""``attnviz heads --file TEXTS --format parquet --out DIR``: one row per text × layer × head, as an export.

The statistics of each text are kept apart (not averaged) and written by the export pipeline with
``--formats parquet``, so the folder gets what an export gives: ``heads.parquet``, ``texts.parquet``,
a manifest, and a rerun that resumes where an interrupted one stopped.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..errors import UsageError
from .common import note, say

ALONE = "--format parquet writes one row per text × layer × head of --file's texts"

if TYPE_CHECKING:  # pragma: no cover
    from ..api import Reading
    from ..export.settings import ExportSettings
    from .options import ModelOptions


def refuse_options(*, text: str | None, probe: Any, out: Path | None, given: dict[str, bool]) -> None:
    """What --format parquet cannot do, said before any work."""
    if out is None:
        raise UsageError("--format parquet needs --out DIR, the folder for heads.parquet and texts.parquet")
    if text is not None or probe is not None:
        raise UsageError(f"{ALONE}; put the text in a file (one per line) and give --file, or use --format json")
    for flag, is_given in given.items():
        if is_given:
            raise UsageError(f"{flag} does not go with --format parquet: {ALONE}, every head of every layer asked "
                             "for; filter and sort the table when you read it")


def parquet_settings(options: ModelOptions, *, truncate: bool, layer: int | None, column: str | None,
                     reading: Reading, batch_size: int, field: str | None = None,
                     input_format: str | None = None) -> ExportSettings:
    """The export settings of ``heads --format parquet``: the statistics table alone, from the command's
    options, checked as export checks its own."""
    from ..export import build_settings

    return build_settings(None, {
        "model": options.model, "engine": options.engine, "revision": options.revision, "device": options.device,
        "causal": options.causal, "trust_remote_code": options.trust_remote_code, "truncate": truncate,
        "layers": None if layer is None else str(layer), "column": column, "hide_special": reading.hide_special,
        "renormalize": reading.renormalize, "words": reading.words, "batch_size": batch_size,
        "formats": "parquet", "quiet": True, **({"field": field} if field else {}),
        **({"input_format": input_format} if input_format else {}),
        **({"dtype": options.dtype} if options.dtype else {})})  # the model's precision, as the other commands


def write_parquet(file: Path, out: Path, settings: ExportSettings, *, verbose: bool, quiet: bool = False,
                  partial: bool = False) -> None:
    """Run the export of ``file`` with ``settings`` (:func:`parquet_settings`) into ``out`` and say what it wrote
    (``quiet``: a command that writes the tables for its own use says nothing of them; ``partial``: texts that
    failed are a warning and the others go on, unless every text failed)."""
    from ..export import run_export
    from ..export.table import HEADS_TABLE, TEXTS_TABLE

    _refuse_another_export(out, settings.fingerprint())
    said = (lambda source: note(source.describe())) if verbose else None
    summary = run_export(str(file), out, settings, on_source=said)
    if summary.failed:
        from ..errors import in_cli_terms
        from .common import FLAGS

        first = "; ".join(f"text {i}: {in_cli_terms(message, FLAGS)}" for i, message in summary.failed[:3])
        if partial and len(summary.failed) < summary.items:
            sys.stderr.write(f"attnviz: warning: {len(summary.failed)} of {summary.items} texts failed and are left "
                             f"out: {first}\n")
            return
        where = "" if quiet else f"; see {summary.manifest}"
        sys.stderr.write(f"attnviz: error: {len(summary.failed)} of {summary.items} texts failed (left out of the "
                         f"tables{where}): {first}\n")
        raise typer.Exit(1)
    if not quiet:
        say(f"{summary.items} texts ({summary.exported} now, {summary.skipped} already done): "
                   f"{out / HEADS_TABLE} and {out / TEXTS_TABLE}")


def _refuse_another_export(out: Path, fingerprint: str) -> None:
    """A folder holding an export made with other settings: this run would remove its files as stale.
    Manifests are read as an export reads them: never through a link, a FIFO or past their size limit."""
    from ..export.manifest import read_entries

    for manifest in sorted(out.glob("manifest*.jsonl")) if out.is_dir() else []:
        for entry in read_entries(manifest).values():
            if entry.get("settings") != fingerprint:
                raise UsageError(f"{out} holds another export ({manifest.name}); --format parquet would replace its "
                                 "files. Give a new folder to --out")
