"""``attnviz view``: one self-contained interactive HTML page of every head, offline."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import UsageError
from .common import cli_command, given, renamed, wrote
from .options import (
    AudioFile,
    Cmap,
    CmapOpt,
    ExpandImages,
    HideSpecial,
    ImageFiles,
    Kind,
    KindChoice,
    Layer,
    ModelOptions,
    Pair,
    Renormalize,
    Target,
    TextFile,
    Truncate,
    Words,
    kind_name,
    model_command,
    parse_head,
    parse_layer,
    reading,
    text_from_file,
    text_or_example,
)


def _show_help() -> str:
    from ..render.page_views import PAGE_VIEWS

    listed = ", ".join(f"{view.name} ({view.tab.lower()})" for view in PAGE_VIEWS.values())
    return (f"The view open first: {listed}. A view the page has no data for (qk, table) opens the head view (qk "
            "with a warning: at most 64 tokens, on the native engine or a config model), and a page that holds "
            "neither single cells nor each query's strongest keys opens the matrix and says why. The picture view "
            "is a page of pictures' (--image), which opens on it.")


def _view_names(incomplete: str) -> list[str]:
    from ..render.page_views import PAGE_VIEWS

    return [name for name in PAGE_VIEWS if name.startswith(incomplete)]


SHOW_HELP = _show_help()


@cli_command(flags={"view": "--show", "out": "--page"})
@model_command()
def view(
    options: ModelOptions,
    text: str | None = typer.Argument(
        None, metavar="TEXT", help="Input text. Leave out for configs with a fixed input.", show_default=False
    ),
    page_file: Path = typer.Option(Path("attnviz.html"), "--page", help="The page to write (.html), in this folder "
                                   "unless a path says where (--open shows it in the browser)."),
    old_out: Path | None = typer.Option(None, "--out", "-o", hidden=True),  # --out: write a file instead of printing
    layer: str = Layer,
    head: str = typer.Option("0", "--head", help="The head shown first (a number from 0)."),
    kind: KindChoice = Kind,
    target: str | None = Target,
    pair: str | None = Pair,
    text_file: Path | None = TextFile,
    first: str = typer.Option("head", "--show", help=SHOW_HELP, autocompletion=_view_names),
    stats: bool = typer.Option(True, "--stats/--no-stats", help="Include the sortable table of head statistics."),
    open_page: bool = typer.Option(False, "--open", help="Open the page in the default browser once written."),
    hide_special: bool = HideSpecial,
    renormalize: bool = Renormalize,
    words: bool = Words,
    cmap: Cmap = CmapOpt,
    truncate: bool = Truncate,
    image: list[Path] = ImageFiles,
    expand_images: bool = ExpandImages,
    audio: Path | None = AudioFile,
) -> None:
    """Write an interactive page: the head view (tokens in two columns, hover one), the model view (every
    layer x head; click one), each head's matrix with a tooltip, and the sortable head statistics.
    One file, no network: open it anywhere.

    With --image, the page of a model reading pictures (an image encoder's, or a vision-language model's beside
    TEXT): the same views, and the picture view, each picture with a token's attention as heat over its patches.

    With --audio, the page of a Whisper --model hearing a clip: its spectrogram, the words of TEXT (teacher-forced)
    or of the model's own transcript at their times, each word's cross-attention along the clip (hover), the word
    played (click), and the alignment path the times come from.

    Example: attnviz view "The cat sat on the mat." --page cat.html
    """
    out = renamed(page_file, old_out, "--out", "--page", parameter="page_file")
    if Path(out).suffix.lower() != ".html":
        raise UsageError(f"--page {out} must end in .html; the page is one HTML file")
    heard = None
    if audio is not None:
        from .sound import speech_encoder_options

        heard = speech_encoder_options(options, audio, text)
    if heard is not None:
        options, audio = heard, None  # a speech encoder's frames: the page of any result
    if audio is not None:
        _refuse_with_audio()
    from ..render.page_views import check_view

    check_view(first)
    if first == "table" and not stats:
        raise UsageError("--show table needs the statistics; drop --no-stats")
    if not image and first == "picture":
        raise UsageError("--show picture shows the pictures a model read, and this page has none: give them with "
                         "--image PICTURE (and a model that reads pictures)")
    if not image and expand_images:
        raise UsageError("--expand-images expands the pictures of a page made with --image; this page has none")
    head_choice = parse_head(head)
    if not isinstance(head_choice, int):
        raise UsageError(f"--head {head} is the head shown first: give a number (the page shows every head)")
    layer_choice = parse_layer(layer)
    from ..render.output import check_output_path

    check_output_path(out)
    text = text_from_file(text, text_file)
    if audio is not None:
        _sound_page(options, text, audio, out, layer=layer_choice, head=head_choice if given("head") else None,
                    cmap=cmap.value, open_page=open_page)
        return
    if image:
        shown = first if given("first") else "picture"
        _picture_page(options, text, image, out, layer=layer_choice, head=head_choice, view=shown, stats=stats,
                      expand=expand_images, cmap=cmap.value, open_page=open_page,
                      refused={"--kind": kind_name(kind) != "self", "--pair": pair is not None,
                               "--target": target is not None, "--hide-special": hide_special,
                               "--renormalize": renormalize, "--words": words, "--truncate": truncate})
        return
    source = options.load()
    text = text_or_example(text, source)
    from ..api import page_view
    from ..render.html import render_html

    page = page_view(source, text, layer=layer_choice, head=head_choice, kind=kind_name(kind), pair=pair, target=target,
                     reading=reading(hide_special, renormalize, words), truncate=truncate, stats=stats, view=first)
    written = render_html(page, out, cmap=cmap.value)
    wrote(written)
    if open_page:
        import webbrowser

        webbrowser.open(written.resolve().as_uri())


def _picture_page(options: ModelOptions, text: str | None, images: list[Path], out: Path, *, layer: int | None,
                  head: int, view: str, stats: bool, expand: bool, cmap: str, open_page: bool,
                  refused: dict[str, bool]) -> None:
    """``view --image``: the page of a picture result (:func:`attnviz.views.picture_page.picture_page`), the pictures,
    model and page checked before the model runs (as every picture command's)."""
    for option, asked in refused.items():
        if asked:
            raise UsageError(f"{option} goes with a page of a text; with --image the page shows every token as the "
                             f"model read it beside the pictures: leave out {option}")
    if view == "qk":
        raise UsageError("--show qk shows query and key vectors, which the picture models' engines hand out to no "
                         "page: open another view")
    from ..views.picture_commands import picture_attention
    from .images import checked_pictures, loading

    checked_pictures(options, images, [], (), "", text=text)
    from ..views.picture_page import encode_pictures, picture_page

    pictures = encode_pictures(images)  # each read (and refused) before the model loads
    if text is None:  # an image encoder: one picture's few hundred tokens, computed whole
        result = picture_attention(text, images, str(options.model), loading=loading(options))
        page = picture_page(result, pictures, text=text, layer=layer, head=head, view=view, stats=stats, expand=expand)
    else:  # a vision-language model: the page built as each layer is computed (thousands of image tokens)
        from ..views.picture_commands import picture_model
        from ..views.picture_stream import streamed_picture_page

        model = picture_model(str(options.model), loading=loading(options))
        page = streamed_picture_page(model, text, images, pictures, layer=layer, head=head, view=view, stats=stats,
                                     expand=expand)
    from ..render.html import render_html

    written = render_html(page, out, cmap=cmap)
    wrote(written)
    if open_page:
        import webbrowser

        webbrowser.open(written.resolve().as_uri())


SOUND_UNUSED = ("image", "expand_images", "kind", "pair", "target", "hide_special", "renormalize", "words", "truncate",
                "engine", "causal", "device_map", "dtype", "trust_remote_code")
"""The options of ``view`` that do not go with ``--audio`` (parameter names; ``--show`` and ``--stats`` apart)."""


def _refuse_with_audio() -> None:
    """One line naming the first option given beside ``--audio`` that the sound page does not take."""
    from .sound import refuse_unused_with_audio

    refuse_unused_with_audio(SOUND_UNUSED)
    for parameter, flag in (("first", "--show"), ("stats", "--stats/--no-stats")):
        if given(parameter):
            raise UsageError(f"{flag} chooses among the views of a text's page; with --audio the page is the sound "
                             f"page (spectrogram, words, their attention and the alignment path): leave out {flag}")


def _sound_page(options: ModelOptions, text: str | None, audio: Path, out: Path, *, layer: int | None,
                head: int | None, cmap: str, open_page: bool) -> None:
    """``view --audio``: the page of a Whisper hearing a clip (:func:`attnviz.views.sound_page.sound_page`), the clip
    read (and refused) before the model loads."""
    from ..api import audio_header
    from ..views.sound_page import sound_page

    if options.model is None:
        raise UsageError("--audio needs --model: a Whisper checkpoint (a folder, a hub id such as openai/whisper-tiny, "
                         "or sample_configs/organism_whisper.toml)")
    audio_header(audio)  # a missing, damaged or too long clip is said before the model loads
    page = sound_page(audio, options.model, text, layer=layer, head=head, device=options.device,
                      revision=options.revision, cmap=cmap)
    written = page.write(out)
    wrote(written)
    if open_page:
        import webbrowser

        webbrowser.open(written.resolve().as_uri())
