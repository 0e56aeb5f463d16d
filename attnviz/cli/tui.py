"""``attnviz tui``: a terminal explorer of every view, the model kept loaded (the ``tui`` extra)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import UsageError
from .common import cli_command, given
from .options import (
    AudioFile,
    ExpandImages,
    HideSpecial,
    ImageFiles,
    Kind,
    KindChoice,
    ModelOptions,
    Pair,
    Renormalize,
    Target,
    TextFile,
    Words,
    kind_name,
    model_command,
    reading,
    text_from_file,
)


def check_available() -> None:
    """Textual is an optional extra: say how to get it."""
    try:
        import textual  # noqa: F401
    except ImportError:
        raise UsageError("attnviz tui needs Textual: pip install 'textual>=0.80' (in attnviz's clone, pip install -e "
                         "'.[tui]' installs it as the tui extra)") from None


@cli_command
@model_command(without=('verbose',))
def tui(
    options: ModelOptions,
    text: str | None = typer.Argument(None, metavar="TEXT", help="The first text (leave out to type one in the app; a "
                                      "saved result shows its own).", show_default=False),
    text_file: Path | None = TextFile,
    pair: str | None = Pair,
    target: str | None = Target,
    kind: KindChoice = Kind,
    hide_special: bool = HideSpecial,
    renormalize: bool = Renormalize,
    words: bool = Words,
    image: list[Path] = ImageFiles,
    expand_images: bool = ExpandImages,
    audio: Path | None = AudioFile,
) -> None:
    """Explore attention in the terminal: every layer, head and view at the keyboard, the model kept loaded
    (←/→ layer, ↑/↓ head, Tab or 1–8 views, / find, t new text, s save, ? help, q quit). Works over SSH and
    in tmux; needs Textual (pip install textual, or pip install -e '.[tui]' in attnviz's clone). With --image, a vision-language model reads each
    text with the pictures (an image encoder, the picture alone), and view 8 shows the selected token's attention
    over them; each picture is one token of the matrices unless --expand-images.

    Example: attnviz tui "The cat sat on the mat." · attnviz tui "what is in the picture ?" --image photo.png
    --model llava-hf/llava-1.5-7b-hf
    """
    check_available()
    if expand_images and not image:
        raise UsageError("--expand-images shows every image token of a text read with --image; give --image")
    text = text_from_file(text, text_file)
    view = reading(hide_special, renormalize, words)  # checked before the model loads
    if audio is not None:
        from .sound import heard_options

        options, chosen = heard_options(options, audio, text, image=bool(image), pair=pair, target=target)
        kind = kind if given("kind") else chosen
    from ..tui.app import AttnvizTUI, require_terminal
    from ..tui.explorer import Explorer

    if image:
        from .images import picture_explorer

        if pair is not None or target is not None:
            raise UsageError("--pair and --target read texts alone; with --image the model reads a picture")
        picture_loader = picture_explorer(options, text, image, reading=view, expand=expand_images)
        require_terminal()
        AttnvizTUI(text=None if picture_loader.fixed else text, loader=lambda: picture_loader.load()).run()
        return

    def load() -> Explorer:
        return Explorer(options.load(), pair=pair, target=target, kind=kind_name(kind), reading=view)

    require_terminal()
    AttnvizTUI(text=text, loader=load).run()
