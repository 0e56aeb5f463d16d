"""``attnviz kv``: what a KV-cache policy would lose, head by head, on one's own prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..api import result_suffixes as suffixes
from ..defaults import ANSWER_TOKENS
from ..errors import UsageError
from .common import LIVE_HELP, cli_command, echo_json, note, stdout_console
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
from .outputs import StdoutFormat, announcer, check_outputs, csv_text


def _policy_help() -> str:
    """--policy's help from the registry (:mod:`attnviz.analysis.policies`); the root command writes it again once
    plugins have loaded, so `attnviz kv --help` lists a plugin's policy too."""
    from ..api import policy_help

    return policy_help()


def _settings_help() -> str:
    """--set's help from the registry: every policy's settings (written again once plugins load, as --policy's)."""
    from ..api import settings_help

    return settings_help()


LIVE_HELP["kv"] = {"policy": _policy_help, "set_values": _settings_help}


def _policy_names(incomplete: str) -> list[str]:
    from ..api import POLICIES

    return [name for name in POLICIES if name.startswith(incomplete)]


@cli_command(flags={"continue_tokens": "--continue", "answer_tokens": "--max-new-tokens"})
@model_command(without=("device_map", "causal"), model=CausalModel)
def kv(
    options: ModelOptions,
    text: str | None = typer.Argument(None, metavar="TEXT", help="The prompt whose cache a policy cuts (- reads "
                                      "standard input).", show_default=False),
    text_file: Path | None = TextFile,
    policy: str = typer.Option("all", "--policy", help=_policy_help(), autocompletion=_policy_names),
    budget: str = Budget,
    question: str | None = typer.Option(None, "--question", help="The future queries: this text, appended to the "
                                        "prompt (as a question is).", show_default=False),
    continue_tokens: int | None = typer.Option(None, "--continue", min=1, max=512, help="The future queries: the "
                                               "model's own greedy continuation of this many tokens.",
                                               show_default=False),
    question_window: bool = typer.Option(False, "--question-window", help="SnapKV and PyramidKV observe the "
                                         "question's queries, not the prompt's last ones (a pipeline that cuts the "
                                         "cache once the question is known)."),
    tova_per_group: bool = typer.Option(False, "--tova-per-group", help="TOVA averages the last query's attention "
                                        "within each grouped-query group (one kept set per key/value head), not "
                                        "over every head of the layer (the paper's and kvpress's form)."),
    set_values: list[str] = typer.Option([], "--set", metavar="NAME=VALUE", help=_settings_help(),
                                         show_default=False),
    max_new_tokens: int = typer.Option(ANSWER_TOKENS, "--max-new-tokens", "-n", min=1, max=512,
                                       help="How many tokens to generate at most: the answer after --question, on "
                                            "the full cache and on each cut one."),
    end_to_end: bool = typer.Option(True, "--end-to-end/--no-end-to-end", help="Apply each cut to a real cache "
                                    "and run the future on it: the KL divergence and whether the answer changes."),
    top: int | None = typer.Option(None, "--top", min=1, help="Show only the first N heads (those that lose most).",
                                   show_default=False),
    fmt: StdoutFormat = typer.Option(StdoutFormat.table, "--format", help="What is printed on stdout: the tables, or json "
                                 "(the whole result), csv (one row per policy × budget × layer × key/value head)."),
    out: list[Path] = typer.Option([], "--out", "-o", help="Write a file (repeatable), its kind from its extension: "
                                   ".json (the whole result, each head's kept keys as ranges), .csv or .parquet (one row per policy × budget × layer "
                                   "× key/value head), .png, .svg, .pdf (recall and KL against the budget), .html (the page: "
                                   "the curves, and every head's keys with each run's kept ones overlaid).",
                                   show_default=False),
    truncate: bool = Truncate,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print no progress."),
    width: int | None = Width,
) -> None:
    """Score KV-cache policies on TEXT and show what each would lose, layer by layer and key/value head by key/value
    head (grouped-query attention: one choice per key/value head, as in a real cache): the future queries'
    attention mass on the kept keys (recall), the head's output error, the tokens dropped that the future needed,
    and end to end, with the cut applied to a real cache, the KL divergence of the next-token distributions and
    whether the greedy answer changes. The future is --question (appended) or --continue N (the model's own).

    Example: attnviz kv --text-file report.txt --question "What was the revenue in 2023?" --budget 256,1024 --model Qwen/Qwen2.5-0.5B-Instruct
    """
    text = text_from_file(text, text_file)
    if text is None:
        raise UsageError("give the prompt: TEXT, - (standard input) or --text-file")
    from ..api import parse_policies, parse_settings

    budgets = parse_budgets(budget)
    from ..api import KVResult  # its module registers the formats it writes

    outputs = check_outputs(out, suffixes(KVResult.KIND))
    from ..api import kv as run_kv

    def progress(what: str) -> None:
        if not quiet and fmt is StdoutFormat.table:
            note(what)

    result = run_kv(options.model, text, policies=parse_policies(policy), budgets=budgets, question=question,
                    continue_tokens=continue_tokens, answer_tokens=max_new_tokens, end_to_end=end_to_end,
                    question_window=question_window, truncate=truncate,
                    tova_across="group" if tova_per_group else "layer", settings=parse_settings(set_values),
                    keep_sets=fmt is StdoutFormat.json or any(p.suffix.lower() in (".html", ".json") for p in outputs),
                    engine=options.engine, revision=options.revision, device=options.device,
                    trust_remote_code=options.trust_remote_code, dtype=options.dtype, progress=progress)
    if options.verbose:
        note(f"{result.model_name}: {result.engine} engine, on {options.device}")
    for path in outputs:
        result.save(path)
        announcer(fmt)(path)
    rows = result.rows()
    if fmt is StdoutFormat.json:
        echo_json(result.to_dict())
        return
    if fmt is StdoutFormat.csv:
        from ..api import ROW_COLUMNS

        typer.echo(csv_text(rows, ROW_COLUMNS), nl=False)
        return
    from ..render.kv import heads_table, summary_table
    from ..render.tables import titled

    console = stdout_console(width)
    future = "the question" if result.future_mode == "question" else "the continuation"
    console.print(titled(f"{result.model_name}: {result.n_context:,} tokens cached, {len(result.future)} future tokens "
                         f"({future}); {result.n_layers} layers × {result.n_kv_heads} key/value heads",
                         summary_table([{**_summary(run)} for run in result.runs], result.future_mode)))
    if result.full_answer is not None:
        from rich.text import Text

        from ..api import safe_text

        console.print(Text(f"answer on the full cache: {safe_text(result.full_answer)}", style="dim"))
    console.print()
    shown = rows[:top] if top else rows
    console.print(titled("the heads that lose most (recall: the future's attention mass kept; error: ‖o − o_kept‖ "
                         "/ ‖o‖)", heads_table([{**r, "dropped": _dropped(r)} for r in shown], width=console.width)))


def _summary(run: Any) -> dict[str, Any]:
    return {"policy": run.policy, "budget": run.budget, "keys": run.keys, "recall": run.recall,
            "worst": run.worst.recall, "error": run.error, "kl": run.kl, "changed": run.changed}


def _dropped(row: dict[str, Any]) -> list[tuple[int, str, float]]:
    import json

    return [(int(p), str(t), float(m)) for p, t, m in json.loads(row["dropped"])]
