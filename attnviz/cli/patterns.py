"""``attnviz patterns``: which sparse prefill pattern serves each head of one's own prompt, and which heads stream."""

from __future__ import annotations

from pathlib import Path

import typer

from ..api import result_suffixes as suffixes
from ..errors import UsageError
from .common import cli_command, echo_json, note, stdout_console
from .options import (
    Budget,
    CausalModel,
    ModelOptions,
    TextFile,
    Truncate,
    Width,
    model_command,
    parse_budgets,
    text_from_file,
)
from .outputs import StdoutFormat, announcer, check_distinct, check_outputs, csv_text, write_text


@cli_command
@model_command(without=("device_map", "causal"), model=CausalModel)
def patterns(
    options: ModelOptions,
    text: str | None = typer.Argument(None, metavar="TEXT", help="The prompt to search the patterns on (- reads "
                                      "standard input).", show_default=False),
    text_file: Path | None = TextFile,
    budget: str = Budget,
    threshold: float = typer.Option(0.9, "--threshold", min=0.0, max=1.0, help="DuoAttention: a key/value head "
                                    "streams when 64 sinks and a 256-token recent window keep at least this share "
                                    "of every one of its query heads' attention."),
    minference: Path | None = typer.Option(None, "--minference", help="Write MInference's per-head config (its "
                                           "configs/*_best_pattern.json form; the first budget's).",
                                           show_default=False),
    duo: Path | None = typer.Option(None, "--duo", help="Write DuoAttention's full_attention_heads.tsv (layers × "
                                    "key/value heads, 1 a full-attention head).", show_default=False),
    top: int | None = typer.Option(None, "--top", min=1, help="Show only the first N heads (lowest best recall "
                                   "first).", show_default=False),
    fmt: StdoutFormat = typer.Option(StdoutFormat.table, "--format", help="What is printed on stdout: the "
                                       "tables, or json (the whole result), csv (one row per budget × head)."),
    out: list[Path] = typer.Option([], "--out", "-o", help="Write a file (repeatable), its kind from its extension: "
                                   ".json (the whole result), .csv or .parquet (one row per budget × head).",
                                   show_default=False),
    truncate: bool = Truncate,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print no progress."),
    width: int | None = Width,
) -> None:
    """For each head of TEXT's model, the attention mass (recall) each sparse prefill pattern of MInference keeps at
    a budget of keys per query row: A-shape (sink columns and a local band), vertical-slash (the strongest columns
    and diagonals, from the last 64 queries), block-sparse (the strongest 64 × 64 blocks, from pooled queries and
    keys), and which wins; and DuoAttention's split of the key/value heads into streaming and full-attention heads.
    --minference and --duo write the answer in those tools' own forms.

    Example: attnviz patterns --text-file long.txt --model Qwen/Qwen2.5-0.5B-Instruct --budget 1024 --minference best_pattern.json --duo full_attention_heads.tsv
    """
    text = text_from_file(text, text_file)
    if text is None:
        raise UsageError("give the prompt: TEXT, - (standard input) or --text-file")
    budgets = parse_budgets(budget)
    from ..api import PatternsResult  # its module registers the formats it writes

    check_outputs(out, suffixes(PatternsResult.KIND))
    from ..api import check_writable

    for path in (p for p in (minference, duo) if p is not None):
        check_writable(path)  # as every --out: not a link, a pipe or a device; written atomically
    check_distinct([*(("out", path) for path in out), ("minference", minference), ("duo", duo)])
    from ..api import patterns as run_patterns

    result = run_patterns(options.model, text, budgets=budgets, threshold=threshold, engine=options.engine,
                          revision=options.revision, device=options.device,
                          trust_remote_code=options.trust_remote_code, dtype=options.dtype, truncate=truncate,
                          progress=None if quiet or fmt is not StdoutFormat.table else note)
    said = announcer(fmt)
    for path in out:
        result.save(path)
        said(path)
    if minference is not None:
        write_text(minference, result.minference_json() + "\n")
        said(minference)
    if duo is not None:
        write_text(duo, result.duo_tsv())
        said(duo)
    rows = sorted(result.rows(), key=lambda r: (r["budget"], max(r[k] for k in r if k.startswith("recall_")),
                                                r["layer"], r["head"]))
    if fmt is StdoutFormat.json:
        echo_json(result.to_dict())
        return
    if fmt is StdoutFormat.csv:
        from ..api import patterns_columns as columns

        typer.echo(csv_text(result.rows(), columns()), nl=False)
        return
    from ..render.kv import patterns_table
    from ..render.tables import titled

    console = stdout_console(width)
    streaming = sum(not x for row in result.full_attention for x in row)
    from ..api import PATTERNS
    from ..render.kv import pattern_label

    wins = {p: sum(r["winner"] == p for r in result.rows() if r["budget"] == result.budgets[0]) for p in PATTERNS}
    winners = ", ".join(f"{pattern_label(p)} {count}" for p, count in wins.items())
    console.print(titled(f"{result.model_name}: {result.n_tokens:,} tokens; at {result.budgets[0]:,} keys per row "
                         f"the winners are {winners} of {result.n_layers * result.n_heads} heads; {streaming} of "
                         f"{result.n_layers * result.n_kv_heads} key/value heads stream (DuoAttention, ≥ "
                         f"{result.threshold:g})", patterns_table(rows[:top] if top else rows)))
