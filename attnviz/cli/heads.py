"""``attnviz heads``: every statistic of every head, with labels, as a table, JSON or CSV."""

from __future__ import annotations

from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..errors import UsageError
from .common import cli_command, echo_json, note, renamed, say, stdout_console
from .options import (
    AudioFile,
    Column,
    Field,
    HideSpecial,
    ImageFiles,
    InputFormat,
    Kind,
    KindChoice,
    Layer,
    ModelOptions,
    Pair,
    Renormalize,
    Retrieval,
    Target,
    TextFile,
    Truncate,
    Width,
    Words,
    kind_name,
    model_command,
    parse_index_or_word,
    parse_layer,
    reading,
    text_from_file,
    text_or_example,
)
from .outputs import StdoutFormat, announcer, check_outputs, write_table, write_text

if TYPE_CHECKING:  # pragma: no cover
    from ..api import HeadRow

BATCH = 16
EXACTLY_ONE = "give exactly one of TEXT, --file FILE or --probe induction"


class Ablate(str, Enum):
    zero = "zero"
    mean = "mean"


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    parquet = "parquet"


class Probe(str, Enum):
    induction = "induction"


@cli_command(flags={"vs": "--similar-to", "head": "--only-head"})
@model_command()
def heads(
    options: ModelOptions,
    text: str | None = typer.Argument(None, metavar="TEXT", help="Input text (or use --text-file, --file or --probe; - reads standard input).", show_default=False),
    text_file: Path | None = TextFile,
    file: Path | None = typer.Option(None, "--file", "-f", help="A UTF-8 file of texts, one per line: statistics are averaged over them.", show_default=False),
    probe: Probe | None = typer.Option(None, "--probe", help="induction: random tokens repeated twice (causal models).", show_default=False),
    sort: str | None = typer.Option(None, "--sort", help="Sort by this statistic, largest first (full or short name: prev_score or prev, induction or ind), or by layer or head.", show_default=False),
    top: int | None = typer.Option(None, "--top", min=1, help="Show only the first N heads (after --sort).", show_default=False),
    columns: str | None = typer.Option(None, "--columns", help="The statistics the table shows, in this order, e.g. prev,ind,dup (full or short names; 'all' for every one). JSON and CSV always have every statistic.", show_default=False),
    fmt: Format = typer.Option(Format.table, "--format", help="What is printed on stdout: table, json (one object: model, text, tokens, heads) or csv (one row per head). (parquet, with --file and --out FOLDER, is kept for this release: use --out heads.parquet, or attnviz export for a corpus's rows per text.)"),
    out: list[Path] = typer.Option([], "--out", "-o", help="Write a file (repeatable), its kind from its extension: .json (the whole table), .csv or .parquet (one row per head).", show_default=False),
    image: list[Path] = ImageFiles,
    audio: Path | None = AudioFile,
    column: str | None = Column,
    field: str | None = Field,
    input_format: str | None = InputFormat,
    width: int | None = Width,
    truncate: bool = Truncate,
    layer: str = Layer,
    kind: KindChoice = Kind,
    target: str | None = Target,
    only_head: int | None = typer.Option(None, "--only-head", help="Show only this head's rows (a number from 0), in "
                                         "each layer shown; without it, every head's.", show_default=False),
    old_head: str | None = typer.Option(None, "--head", hidden=True),  # --head: the head a command draws, default 0
    pair: str | None = Pair,
    hide_special: bool = HideSpecial,
    renormalize: bool = Renormalize,
    words: bool = Words,
    importance: bool = typer.Option(False, "--importance", help="Add each head's importance (Michel et al. 2019: "
                                    "E|dL/d gate|, the model's own loss, normalised per layer) as a column; runs the "
                                    "model through transformers."),
    ablate: Ablate | None = typer.Option(None, "--ablate", help="With --importance: the loss change when each head's "
                                         "output is set to 0 (zero) or to its mean (mean), one head at a time.",
                                         show_default=False),
    vs: str | None = typer.Option(None, "--similar-to", help="With --importance on a sentence encoder (no language-model "
                                  "head): the loss is 1 − the cosine similarity of each text's embedding with this "
                                  "text's.", show_default=False),
    old_vs: str | None = typer.Option(None, "--vs", hidden=True),
    retrieval: Path | None = Retrieval,
) -> None:
    """One row per head: entropy, self/previous/next-token, first token/[SEP]/punctuation, distance, induction, labels.

    Example: attnviz heads "The cat sat on the mat." --sort prev --top 10
    """

    vs = renamed(vs, old_vs, "--vs", "--similar-to")  # --vs is compare-heads' second text
    head = renamed(only_head, None if old_head is None else parse_index_or_word(old_head, "--head", "head", ("all",)),
                   "--head", "--only-head")
    head = None if head == "all" else head
    text = text_from_file(text, text_file)
    if audio is not None:
        from .sound import audio_heads, speech_encoder_options

        heard = speech_encoder_options(options, audio, text)
        if heard is None:
            audio_heads(options, text, audio, sort=sort, top=top, fmt=fmt.value, out=out, width=width)
            return
        options = heard  # a speech encoder's frames: every statistic of every head, as any result
    if image:
        from .images import image_heads, refuse_unused

        refuse_unused("file", "probe", "sort", "columns", "layer", "kind", "target", "only_head", "pair",
                      "hide_special", "renormalize", "words", "importance", "ablate", "vs", "retrieval", "column",
                      "field", "input_format", why="every head of every layer, on the picture")
        image_heads(options, text, image, fmt=fmt, out=out, top=top, width=width)
        return
    found_retrieval = None
    if retrieval is not None:
        from ..api import read_retrieval

        found_retrieval = read_retrieval(retrieval)  # a damaged file fails before the model runs
    sort = _sort_column(sort, importance=importance, ablate=ablate is not None, retrieval=retrieval is not None)
    chosen = _chosen_columns(columns, importance=importance, ablate=ablate is not None,
                             retrieval=retrieval is not None)
    if (ablate is not None or vs is not None) and not importance:
        raise UsageError(f"{'--ablate' if ablate is not None else '--similar-to'} goes with --importance")
    if importance and probe is not None:
        raise UsageError("--importance is over TEXT or --file's texts, with the model's own loss (not --probe)")
    given = sum(x is not None for x in (text, file, probe))
    if given > 1 or (given == 0 and options.model is None):
        raise UsageError(EXACTLY_ONE)
    if fmt is Format.parquet:
        from .heads_parquet import parquet_settings, refuse_options, write_parquet

        if len(out) > 1:
            raise UsageError("--format parquet writes one folder: give --out FOLDER once")
        folder = out[0] if out else None
        refuse_options(text=text, probe=probe, out=folder, given={
            "--sort": sort is not None, "--top": top is not None, "--columns": columns is not None,
            "--only-head": head is not None, "--pair": pair is not None, "--target": target is not None,
            "--kind": kind_name(kind) not in ("self", "encoder"), "--device-map": options.device_map is not None,
            "--retrieval": retrieval is not None})
        assert file is not None and folder is not None  # checked above
        settings = parquet_settings(options, truncate=truncate, layer=parse_layer(layer), column=column,
                                    reading=reading(hide_special, renormalize, words), batch_size=BATCH, field=field,
                                    input_format=input_format)
        found = importance_source(options, vs) if importance else None  # a model without a loss fails now
        write_parquet(file, folder, settings, verbose=options.verbose)
        if found is not None:
            importance_parquet(file, folder, found, column=column, ablate=ablate, vs=vs, truncate=truncate, field=field,
                               input_format=input_format)
        # Said once the folder is written (an error stays one line): the form that goes after this release.
        note("--format parquet (a corpus's rows per text in a folder) is kept for this release only: --out "
             "heads.parquet writes the head table, and attnviz export --formats parquet a corpus's rows per text")
        return
    for path in out:
        if not path.suffix:
            raise UsageError(f"--out {path}: a folder is what --format parquet writes (kept for this release); the "
                             "head table is --out FILE.json, .csv or .parquet")
    outputs = check_outputs(out, HEADS_OUTPUTS)
    texts = None
    if file is not None:
        from ..api import read_corpus

        # One text per line, JSONL (--field), CSV or Parquet (--column): as export and atlas read them.
        texts = read_corpus(file, field=field, column=column, input_format=input_format)
    if pair is not None and text is None:
        raise UsageError("--pair is a second sentence for TEXT; it does not go with --file or --probe")
    if target is not None and text is None:
        raise UsageError("--target is the decoder's input for TEXT; it does not go with --file or --probe")
    view = reading(hide_special, renormalize, words)
    if importance and options.engine == "auto":
        options = replace(options, engine="fused")  # the gates sit in attnviz's attention function (transformers')
    source = options.load()
    if given == 0:  # the example sentence (a matrices config or a saved result has its own input)
        text = text_or_example(text, source)
    from ..api import heads_of

    one_layer = parse_layer(layer)
    # Padded batches of modest size, each layer's statistics taken as it is computed: memory stays flat.
    # One --layer is the only layer computed.
    table = heads_of(source, None if probe is not None else (texts if texts is not None else [text]),
                     probe=None if probe is None else probe.value, truncate=truncate, batch_size=BATCH, pair=pair,
                     reading=view, kind=kind_name(kind), target=target, layer=one_layer, retrieval=found_retrieval)
    found = None
    if importance:
        from ..api import head_importance

        # (no text only for a fixed-input source: a matrices config or a saved result, which have no fused engine)
        found = head_importance(source, texts if texts is not None else [] if text is None else [text],
                                ablate=None if ablate is None else ablate.value, vs=vs, truncate=truncate)
        table.stats.update(found.columns())
        if chosen is not None:
            chosen += [c for c in found.columns() if c not in chosen]
    if found_retrieval is not None:
        from ..api import retrieval_columns as RETRIEVAL_COLUMNS

        if chosen is not None:
            chosen += [c for c in RETRIEVAL_COLUMNS if c not in chosen]
        if found_retrieval.model_name not in (None, table.model_name):
            note(f"the retrieval scores were measured on {found_retrieval.model_name}; this table is {table.model_name}'s")
    rows = table.select(layer=one_layer, head=head, sort=sort, top=top)
    what: dict[str, object] = ({"probe": probe.value} if probe is not None else
                               {"file": str(file)} if file is not None else {"text": text})
    if found is not None:
        what["importance"] = {"objective": found.objective, "mean_loss": round(found.loss, 6),
                              "normalised": "per layer, by the l2 norm of its heads' scores (Michel et al. 2019)",
                              "ablate": found.ablate}
    for path in outputs:
        write_heads_output(table.document(rows, **what), rows, path)
        announcer(StdoutFormat(fmt.value))(path)
    if fmt is Format.json:
        echo_json(table.document(rows, **what))
    elif fmt is Format.csv:
        from ..api import rows_csv

        typer.echo(rows_csv(rows), nl=False)
    else:
        title = f"{table.model_name} · " + ("the induction probe" if probe else
                                             f"{table.n_texts} texts (averaged)" if texts else "one text")
        shown = [{**row, "labels": [f"sink@{','.join(map(str, row['sinks']))}" if label == "sink" and row.get("sinks")
                                    else label for label in row["labels"]]} for row in rows]
        extra = {} if found is None else {
            "importance": "Michel et al. 2019: mean |dL/d gate| over the texts, normalised per layer (l2)",
            **({"ablation": f"mean loss change with the head's output set to {found.ablate}"} if found.ablate else {})}
        if found_retrieval is not None:
            extra |= {"retrieval_score": f"Wu et al. 2024: copies from the needle (from {retrieval})",
                      "reasoning_score": "HeadKV (Fu et al. 2024): attention on the needle while answering"}
        print_table(shown, title=title, width=width, sort=sort, chosen=chosen, extra=extra,
                    label_rules=table.extra_labels)
        if found is not None:
            stdout_console(width).print(f"importance: the loss is {found.objective}; its mean over the {found.n_texts} "
                                        f"text(s) is {found.loss:.4f}", style="dim")
        stdout_console(width).print(
            f"sink rate: {table.sink_rate:.0%} of {'heads' if one_layer is None else f'the heads of layer {one_layer}'} "
            "have a sink on the first token (α₀ > 0.3, Gu et al. 2024); "
            "sink@K marks the keys where α_K > 0.3", style="dim")


HEADS_OUTPUTS = (".json", ".csv", ".parquet")


def write_heads_output(document: dict[str, Any], rows: list[Any], path: Path) -> None:
    """The head table to ``path``, its kind by extension: the JSON document, or one row per head as CSV or Parquet."""
    from ..api import json_text, rows_flat

    if path.suffix.lower() == ".json":
        write_text(path, json_text(document, indent=1) + "\n")
        return
    columns, table = rows_flat(rows)
    write_table(path, [dict(zip(columns, row, strict=True)) for row in table], columns)


def importance_source(options: Any, vs: str | None) -> Any:
    """The model importance runs on (the fused engine where the engine is auto), checked to have a loss."""
    from dataclasses import replace

    from ..api import check_importance, is_config_model, is_saved_result

    if is_config_model(options.model) or is_saved_result(options.model):
        kind = "a config model" if is_config_model(options.model) else "a saved result"
        raise UsageError(f"head importance needs a transformers checkpoint with its loss; {options.model} is {kind}")
    source = (replace(options, engine="fused") if options.engine == "auto" else options).load()
    check_importance(source, vs)
    return source


def importance_parquet(file: Path, out: Path, source: Any, *, column: str | None, ablate: Ablate | None,
                       vs: str | None, truncate: bool, quiet: bool = False, field: str | None = None,
                       input_format: str | None = None) -> None:
    """``importance.parquet`` beside heads.parquet: each text's importance (and ablation) per head, by ``source``
    (:func:`importance_source`)."""
    from ..api import head_importance, read_corpus

    texts = read_corpus(file, field=field, column=column, input_format=input_format)
    found = head_importance(source, texts, ablate=None if ablate is None else ablate.value, vs=vs,
                            truncate=truncate)
    path = found.write_parquet(out / "importance.parquet")
    if not quiet:
        say(f"{path}: each text's importance{' and ablation' if ablate else ''} per head ({found.objective})")


def _sort_column(sort: str | None, *, importance: bool = False, ablate: bool = False,
                 retrieval: bool = False) -> str | None:
    """The statistic ``--sort`` names (full or short name), ``layer``, ``head``, ``importance`` or ``ablation``
    (with ``--importance`` and ``--ablate``), or None."""
    from ..api import RETIRED, STATISTICS, short_name, statistic_named

    if sort is None or sort in ("layer", "head"):
        return sort
    if sort in ("retrieval_score", "reasoning_score"):
        if not retrieval:
            raise UsageError(f"--sort {sort} needs --retrieval RUN.json (a needle run)")
        return sort
    if sort in ("importance", "ablation"):
        if not importance or (sort == "ablation" and not ablate):
            raise UsageError(f"--sort {sort} needs --importance{' and --ablate' if sort == 'ablation' else ''}")
        return sort
    found = statistic_named(sort)
    if found is None:
        hint = f" ({sort} is now {RETIRED[sort]}: they were always equal)" if sort in RETIRED else ""
        names = ", ".join(f"{s} ({short_name(s)})" if short_name(s) != s else s for s in STATISTICS)
        raise UsageError(f"--sort {sort!r} is not a column{hint}; use layer, head or one of {names}")
    return found


def _chosen_columns(columns: str | None, *, importance: bool = False, ablate: bool = False,
                    retrieval: bool = False) -> list[str] | None:
    """The statistics ``--columns`` names, in its order (full or short names, or ``all``; ``importance`` and
    ``ablation`` with ``--importance`` and ``--ablate``); None if not given."""
    from ..api import RETIRED, STATISTICS, short_name, statistic_named

    if columns is None:
        return None
    names = [c.strip() for c in columns.split(",") if c.strip()]
    if names == ["all"]:
        return list(STATISTICS)
    chosen: list[str] = []
    for name in names:
        if name in ("retrieval_score", "reasoning_score"):
            if not retrieval:
                raise UsageError(f"--columns {name} needs --retrieval RUN.json (a needle run)")
            if name not in chosen:
                chosen.append(name)
            continue
        if name in ("importance", "ablation"):
            if not importance or (name == "ablation" and not ablate):
                raise UsageError(f"--columns {name} needs --importance{' and --ablate' if name == 'ablation' else ''}")
            if name not in chosen:
                chosen.append(name)
            continue
        found = statistic_named(name)
        if found is None:
            hint = f" ({name} is now {RETIRED[name]}: they were always equal)" if name in RETIRED else ""
            known = ", ".join(short_name(s) for s in STATISTICS)
            raise UsageError(f"--columns: {name!r} is not a statistic{hint}; use 'all' or some of {known} "
                             "(or their full names), e.g. --columns prev,ind,dup")
        if found not in chosen:
            chosen.append(found)
    if not chosen:
        raise UsageError("--columns is empty; name some statistics, e.g. --columns prev,ind,dup")
    return chosen


def print_table(rows: list[HeadRow], *, title: str, width: int | None, sort: str | None,
                chosen: list[str] | None, extra: dict[str, str] | None = None,
                label_rules: dict[str, tuple[str, float]] | None = None) -> None:
    """The table at the console's width, a legend of its columns, what was left out and how to see it,
    and the label rules."""
    from ..api import STATISTICS, column_order, labels, priority_order, short_name
    from ..render.tables import choose_columns, head_stats_table, legend_table

    console = stdout_console(width)
    extra = extra or {}
    keep_first = sort if sort in STATISTICS or sort in extra else None
    if extra and chosen is None:  # importance and ablation first, then the statistics as they give way
        stats = [*extra, *priority_order()]
        layout = choose_columns(rows, stats, console.width, header=short_name, keep_first=keep_first, chosen=True)
        layout.shown.sort(key=lambda s: [*column_order(), *extra].index(s))  # in the usual order, the extras last
    else:
        stats = chosen if chosen is not None else column_order()
        layout = choose_columns(rows, stats, console.width, header=short_name, keep_first=keep_first,
                                chosen=chosen is not None, priority=priority_order())
    console.print(head_stats_table(rows, layout.shown, title=title, header=short_name))
    console.print(legend_table([(short_name(s), s, STATISTICS[s].description if s in STATISTICS else extra[s])
                                for s in layout.shown]), style="dim")
    if layout.all_zero:
        console.print(f"0.000 for every head, so not shown: {', '.join(short_name(s) for s in layout.all_zero)}",
                      style="dim")
    if layout.left_out:
        missing = ",".join(short_name(s) for s in layout.left_out)
        them = "them" if len(layout.left_out) > 1 else "it"
        console.print(f"left out at {console.width} columns: {', '.join(_both(s) for s in layout.left_out)}; "
                      f"show {them} with --columns {missing} (or a wider --width, or --format csv/json)", style="dim")
    rules = {**labels(), **(label_rules or {})}
    console.print("labels: " + "; ".join(f"{name} = {short_name(stat)} ≥ {thr}" for name, (stat, thr) in rules.items()),
                  style="dim")


def _both(statistic: str) -> str:
    from ..api import short_name

    return statistic if short_name(statistic) == statistic else f"{short_name(statistic)} ({statistic})"
