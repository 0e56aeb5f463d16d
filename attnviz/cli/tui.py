"""``attnviz tui``: a terminal explorer of every view, the model kept loaded (the ``tui`` extra)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import UsageError
from .common import cli_command
from .options import (
    Causal,
    Device,
    DeviceMap,
    DeviceOpt,
    Dtype,
    DtypeOpt,
    EngineChoice,
    EngineOpt,
    HideSpecial,
    Kind,
    KindChoice,
    Model,
    Pair,
    Renormalize,
    Revision,
    Target,
    TextFile,
    TrustRemoteCode,
    Words,
    kind_name,
    model_options,
    reading,
    text_from_file,
)


def check_available() -> None:
    """Textual is an optional extra: say how to get it."""
    try:
        import textual  # noqa: F401
    except ImportError:
        raise UsageError("attnviz tui needs the tui extra: pip install 'attnviz[tui]' (Textual)") from None


@cli_command
def tui(
    text: str | None = typer.Argument(None, metavar="TEXT", help="The first text (leave out to type one in the app; a "
                                      "saved result shows its own).", show_default=False),
    model: str | None = Model,
    text_file: Path | None = TextFile,
    pair: str | None = Pair,
    target: str | None = Target,
    kind: KindChoice = Kind,
    hide_special: bool = HideSpecial,
    renormalize: bool = Renormalize,
    words: bool = Words,
    causal: bool | None = Causal,
    engine: EngineChoice = EngineOpt,
    revision: str | None = Revision,
    device: Device = DeviceOpt,
    dtype: Dtype | None = DtypeOpt,
    device_map: str | None = DeviceMap,
    trust_remote_code: bool = TrustRemoteCode,
) -> None:
    """Explore attention in the terminal: every layer, head and view at the keyboard, the model kept loaded
    (←/→ layer, ↑/↓ head, Tab or 1–7 views, / find, t new text, s save, ? help, q quit). Works over SSH and
    in tmux; needs the tui extra (pip install 'attnviz[tui]').

    Example: attnviz tui "The cat sat on the mat."
    """
    check_available()
    text = text_from_file(text, text_file)
    view = reading(hide_special, renormalize, words)  # checked before the model loads
    options = model_options(model, engine=engine, causal=causal, revision=revision, device=device,
                            device_map=device_map, trust_remote_code=trust_remote_code, verbose=False, dtype=dtype)
    from ..tui.app import AttnvizTUI
    from ..tui.explorer import Explorer

    def load() -> Explorer:
        return Explorer(options.load(), pair=pair, target=target, kind=kind_name(kind), reading=view)

    AttnvizTUI(text=text, loader=load).run()
