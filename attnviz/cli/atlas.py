"""``attnviz atlas``: what heads do across a corpus, or (``--vs-model``) which heads changed between two
checkpoints; printed as a table or JSON, or written as one offline page (``--out atlas.html``)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import typer

from ..errors import AttnvizWarning, UsageError
from .common import cli_command, echo_json, note, renamed, wrote
from .heads import Ablate, importance_parquet, importance_source
from .options import (
    AllowOutsidePictures,
    Column,
    Field,
    ImageFiles,
    InputFormat,
    ModelOptions,
    Retrieval,
    Truncate,
    Width,
    model_command,
)

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor


class AtlasFormat(str, Enum):
    table = "table"
    json = "json"


class TextsAs(NamedTuple):
    """How TEXTS, a file of many, is read (export's and heads --file's --field, --column, --input-format)."""

    field: str | None
    column: str | None
    input_format: str | None


@cli_command(flags={"max_tokens": "--embed-tokens", "vs": "--similar-to"})
@model_command(without=('device_map', 'causal'))
def atlas(
    options: ModelOptions,
    texts: Path = typer.Argument(..., metavar="TEXTS", help="A UTF-8 file of texts, one per line (or JSONL with "
                                 "--field, CSV or Parquet with --column, as export reads them); or the folder of an export with the parquet format (its "
                                 "heads.parquet: no model runs for the numbers).", show_default=False),
    vs_model: str | None = typer.Option(None, "--vs-model", help="The other checkpoint (a fine-tuned model, say): "
                                        "each head's change from --model to it. With TEXTS an export folder, the "
                                        "folder of the same texts exported with the other model.", show_default=False),
    column: str | None = Column,
    field: str | None = Field,
    input_format: str | None = InputFormat,
    fmt: AtlasFormat = typer.Option(AtlasFormat.table, "--format", help="table, or json: every head's numbers (with "
                                    "--vs-model, every head in order of change, each with its layer and head)."),
    top: int | None = typer.Option(None, "--top", min=1, help="Only the N heads that changed most (with --vs-model), "
                                   "or the N highest of each statistic; on the page too.", show_default=False),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the atlas as one offline page (.html): the "
                                    "layers × heads grid of a statistic's mean (or change), and per head its "
                                    "distribution, the texts where it is highest with the head's attention on "
                                    "them, and its queries and keys embedded together.", show_default=False),
    embed_tokens: int = typer.Option(10_000, "--embed-tokens", min=0, help="With --out: the tokens of the page's "
                                     "query-key embedding, from texts chosen at random (--seed); 0 leaves it out. "
                                     "Fewer where every head's points would pass 6 MB; at most 100000."),
    importance: bool = typer.Option(False, "--importance", help="TEXTS a file of texts: also each head's importance "
                                    "(as attnviz heads --importance; an export folder's importance.parquet is read "
                                    "when it is there)."),
    ablate: Ablate | None = typer.Option(None, "--ablate", help="With --importance: each head's ablation too (zero or "
                                         "mean).", show_default=False),
    vs: str | None = typer.Option(None, "--similar-to", help="With --importance on a sentence encoder: the text "
                                  "whose similarity is the loss.", show_default=False),
    old_vs: str | None = typer.Option(None, "--vs", hidden=True),
    retrieval: Path | None = Retrieval,
    per_text: Path | None = typer.Option(None, "--per-text", help="With --vs-model: also write every text's change "
                                         "per head (the JS divergence and each statistic) to this .parquet file, one "
                                         "row per text × layer × head.", show_default=False),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=100, help="Bootstrap resamples of the texts (95% interval)."),
    permutations: int = typer.Option(1000, "--permutations", min=100, help="Sign-flip permutations (p-values)."),
    force: bool = typer.Option(False, "--force", help="With --vs-model: resample even where --bootstrap and "
                               "--permutations are estimated to take more than 5 minutes."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**62, help="Seed of the resampling and of the embedding's "
                             "texts."),
    width: int | None = Width,
    truncate: bool = Truncate,
    image: list[Path] = ImageFiles,
    allow_outside_pictures: bool = AllowOutsidePictures,
) -> None:
    """What heads do across a corpus: each statistic's mean per head, how often each head earns each label, the
    statistics' distributions and the texts where a head shows each most. With --vs-model, which heads changed
    from --model to it instead: per head, the distance between the two models' attention (Jensen-Shannon,
    per query row) and each statistic's change, with bootstrap 95% intervals and permutation p-values. With
    --out, one offline page: the layers × heads grid, and per head its distribution, the texts where it is
    highest with its attention on them, and its queries and keys embedded together (AttentionViz).

    With a vision-language model (--image, the same pictures for every text; or the corpus's "image" field or
    column): each head's share on the pictures, entropy over their patches and sink across the texts, and the
    visual sinks (the grid places drawn to whatever is asked).

    Examples: attnviz atlas texts.txt --out atlas.html · attnviz atlas texts.txt --vs-model ./finetuned --top 10 ·
    attnviz atlas export-base/ --vs-model export-finetuned/ --format json ·
    attnviz atlas questions.txt --image photo.png --model llava-hf/llava-1.5-7b-hf
    """
    from ..api import hears_sound, reads_pictures

    if not image and options.model is not None and hears_sound(options.model):
        from .sound import audio_atlas

        audio_atlas(options, texts, vs_model, fmt=fmt.value, top=top, out=out, bootstrap=bootstrap, seed=seed,
                    width=width)
        return
    if image or (options.model is not None and reads_pictures(options.model)):
        from .images import image_atlas

        if vs_model is not None or importance or retrieval is not None or per_text is not None:
            raise UsageError("with pictures, atlas gives each head's share, entropy and sink and the visual sinks; "
                             "--vs-model, --importance, --retrieval and --per-text read texts alone")
        image_atlas(options, texts, image, field=field, column=column, input_format=input_format,
                    fmt=fmt.value, top=top, out=out, width=width, allow_outside=allow_outside_pictures)
        return
    if allow_outside_pictures:
        raise UsageError("--allow-outside-pictures goes with a corpus of pictures (a vision-language model); leave it "
                         "out")
    vs = renamed(vs, old_vs, "--vs", "--similar-to")  # --vs is compare-heads' second text
    if texts.suffix.lower() == ".jsonl" and column is not None and field is None:  # atlas once named the field so
        field, column = renamed(None, column, "--column", "--field"), None
    texts_as = TextsAs(field, column, input_format)
    if out is not None:
        if out.suffix.lower() != ".html" or out.name.lower() == ".html":
            raise UsageError(f"--out writes the atlas page: give a file name ending in .html, not {out.name}")
        if fmt is not AtlasFormat.table:
            raise UsageError("--format chooses what atlas prints; --out writes the page instead: give one of them")
        from ..render.output import check_output_path

        check_output_path(out)  # before any model runs
    if per_text is not None:
        if vs_model is None or per_text.suffix.lower() != ".parquet":
            raise UsageError("--per-text writes each text's change between two checkpoints: give --vs-model and a "
                             ".parquet file")
        from ..api import check_writable

        check_writable(per_text)
    if embed_tokens == 1:
        raise UsageError("--embed-tokens 1: the embedding needs at least 2 tokens (or 0 to leave it out)")
    from ..api import MAX_EMBED_TOKENS

    if embed_tokens > MAX_EMBED_TOKENS:
        raise UsageError(f"--embed-tokens {embed_tokens}: the page embeds at most {MAX_EMBED_TOKENS:,} tokens (each "
                         "head's points are drawn; 10000, the default, shows a corpus's shape): give fewer")
    texts = _folder_of(texts)
    if (ablate is not None or vs is not None) and not importance:
        raise UsageError(f"{'--ablate' if ablate is not None else '--vs'} goes with --importance")
    if importance and _folder_of(texts).is_dir():
        raise UsageError("--importance runs the model on a file of texts; an export folder brings its own "
                         "importance.parquet (attnviz heads --importance --format parquet)")
    found_retrieval = None
    if retrieval is not None:
        if vs_model is not None:
            raise UsageError("--retrieval adds one model's retrieval scores; it does not go with --vs-model")
        from ..api import read_retrieval

        found_retrieval = read_retrieval(retrieval)  # a damaged file fails before the model runs
    if vs_model is None:
        _corpus(texts, options, texts_as=texts_as, fmt=fmt, top=top, width=width, truncate=truncate, out=out,
                embed_tokens=embed_tokens, seed=seed,
                importance=(ablate, vs) if importance else None, retrieval=found_retrieval)
    else:
        _diff(texts, vs_model, options, texts_as=texts_as, fmt=fmt, top=top, width=width, truncate=truncate, out=out,
              bootstrap=bootstrap, permutations=permutations, seed=seed,
              importance=(ablate, vs) if importance else None, per_text=per_text, force=force)


def _folder_of(path: Path) -> Path:
    """An export's ``heads.parquet`` given by its path stands for its folder (where its texts.parquet is)."""
    return path.parent if path.name == "heads.parquet" and path.is_file() else path


def _corpus(texts: Path, options: ModelOptions, *, texts_as: TextsAs, fmt: AtlasFormat, top: int | None,
            width: int | None, truncate: bool, out: Path | None, embed_tokens: int, seed: int,
            importance: tuple[Ablate | None, str | None] | None = None, retrieval: Any = None) -> None:
    """The corpus's atlas: from an export folder as it is, or from a file of texts exported first; with
    ``retrieval`` (:class:`attnviz.needle.tables.RetrievalColumns`), a needle run's scores as statistics."""
    from ..api import scratch_folder
    from ..export.atlas_data import atlas_data, document

    if texts.is_dir():
        data = atlas_data(texts)
    else:
        from .heads_parquet import parquet_settings, write_parquet
        from .options import reading

        settings = parquet_settings(replace(options, verbose=False), truncate=truncate, layer=None,
                                    column=texts_as.column, input_format=texts_as.input_format,
                                    reading=reading(False, False, False), batch_size=8,
                                    field=texts_as.field)
        found = importance_source(options, importance[1]) if importance is not None else None  # fails early
        with scratch_folder("atlas") as folder:  # removed on Ctrl-C and SIGTERM too
            write_parquet(texts, Path(folder), settings, verbose=False, quiet=True, partial=True)  # its own tables
            if importance is not None:
                importance_parquet(texts, Path(folder), found, column=texts_as.column, field=texts_as.field,
                                   input_format=texts_as.input_format, ablate=importance[0],
                                   vs=importance[1], truncate=truncate, quiet=True)
            data = atlas_data(folder)
    if retrieval is not None:
        from ..export.atlas_data import add_head_columns

        name = data.model or options.model or "the model"
        # run here on every layer, the model's number of layers is known; an export may hold only some
        model_layers = None if texts.is_dir() else len(data.layers)
        add_head_columns(data, {k: v.numpy() for k, v in retrieval.for_layers(data.layers, data.n_heads, name,
                                                                                model_layers).items()},
                         retrieval.labels())
    if out is not None:
        from ..export.atlas_attach import attach_attention, attach_embedding
        from ..render.atlas_page import render_atlas

        if not data.texts:
            warnings.warn(f"{texts} has no texts.parquet: the page shows no texts, attention or embedding (give the "
                          "whole export folder)", AttnvizWarning, stacklevel=1)
        page = document(data, top)
        source = options.load()
        if data.model and source.name != data.model:
            raise UsageError(f"the export was made with {data.model}, not {source.name}: give it with --model so the "
                             "page's attention and embedding are that model's")
        attach_attention(page, [source], data.layers, data.n_heads)  # each cited text's attention, drawn
        if embed_tokens and data.texts:
            try:
                attach_embedding(page, source, data.texts, max_tokens=embed_tokens, seed=seed)
            except UsageError as exc:  # the rest of the page stands without it
                warnings.warn(f"the page has no query-key embedding: {exc}", AttnvizWarning, stacklevel=1)
        wrote(render_atlas(page, out))
        return
    if fmt is AtlasFormat.json:
        echo_json(document(data, top))
        return
    from .atlas_tables import print_corpus

    print_corpus(data, top, width)


def _diff(texts: Path, vs_model: str, options: ModelOptions, *, texts_as: TextsAs, fmt: AtlasFormat,
          top: int | None, width: int | None, truncate: bool, out: Path | None, bootstrap: int, permutations: int,
          seed: int, importance: tuple[Ablate | None, str | None] | None = None, per_text: Path | None = None,
          force: bool = False) -> None:
    """The checkpoint diff: both models run on a file of texts, or two exports' tables read as they are."""
    from ..export.atlas_data import diff_document

    sources = []
    other_folder = _folder_of(Path(vs_model))
    if texts.is_dir():
        if not other_folder.is_dir():
            raise UsageError(f"{texts} is an export folder: give --vs-model the folder of the same texts exported with "
                             "the other model (or give TEXTS as a file of texts to run both models)")
        from ..export.paired import exports_diff

        diff = exports_diff(texts, other_folder, bootstrap=bootstrap, permutations=permutations, seed=seed,
                            force=force)
        corpus = diff.texts  # the first export's texts, checked against its heads table
    else:
        from ..api import read_corpus

        if other_folder.is_dir() and (other_folder / "heads.parquet").is_file():
            raise UsageError(f"{vs_model} is an export; to compare two exports give TEXTS as the other export's folder")
        lines = read_corpus(texts, field=texts_as.field, column=texts_as.column, input_format=texts_as.input_format)
        sources = [options.load(), replace(options, model=vs_model).load()]
        if any(source.capabilities.fixed_input for source in sources):
            raise UsageError("atlas runs both models on TEXTS; a saved result or a matrices config has a fixed input")
        from ..api import STATISTICS, check_summary_cost, run_diff

        measures = 1 + len(STATISTICS) + (0 if not importance else 1 if importance[0] is None else 2)
        # before any model runs, with at least one head a layer (run_diff checks again once it sees the heads)
        check_summary_cost(len(lines), sources[0].n_layers, measures, bootstrap, permutations, force=force)
        extra = _importance_changes(options, vs_model, lines, importance, truncate) if importance else None
        diff = run_diff(sources[0], sources[1], lines, truncate=truncate, bootstrap=bootstrap,
                        permutations=permutations, seed=seed, extra=extra, force=force)
        corpus = dict(enumerate(lines))
    if per_text is not None:

        note(f"wrote {diff.write_parquet(per_text)} (each text's change per head)")
    if out is not None:
        from ..export.atlas_attach import attach_attention
        from ..render.atlas_page import render_atlas

        if top:
            diff.heads = diff.heads[:top]  # the page shows the heads that changed most
        page = diff_document(diff, corpus)
        if sources:  # each cited text's attention in both models, on one scale
            attach_attention(page, sources, diff.layers, next(iter(diff.per_text.values())).shape[2])
        wrote(render_atlas(page, out))
        return
    if fmt is AtlasFormat.json:
        echo_json(diff.document(top))
        return
    from .atlas_tables import print_diff

    print_diff(diff, top, width)


def _importance_changes(options: ModelOptions, vs_model: str, texts: list[str],
                        importance: tuple[Ablate | None, str | None], truncate: bool) -> dict[str, Tensor]:
    """Each text's head importance (and ablation) in the other model minus in --model, scaled per layer as the
    heads table scales each (so the change of a head's mean is the change of its normalised importance)."""
    from ..api import head_importance

    ablate, vs = importance
    found = [head_importance(importance_source(o, vs), texts, ablate=None if ablate is None else ablate.value,
                             vs=vs, truncate=truncate) for o in (options, replace(options, model=vs_model))]
    changes = {"importance": found[1].scaled_per_text() - found[0].scaled_per_text()}
    if ablate is not None:
        after, before = found[1].ablation_per_text, found[0].ablation_per_text
        assert after is not None and before is not None  # kept with ablate
        changes["ablation"] = after - before
    return changes

