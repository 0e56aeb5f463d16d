"""``heatmap --audio``: a Whisper decoder's cross-attention over a sound clip (issue 61 item 2), each token's weights
over time in the terminal (blocks of round seconds with a seconds axis), or under the clip's log-mel spectrogram
(``--out x.png``, .svg, .pdf), its numbers (``--out x.json``) or the whole result (``--out x.npz``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from .common import given, stdout_console, wrote

SOUND_OUTPUTS = (".png", ".svg", ".pdf", ".json", ".npz")
UNUSED = ("image", "query", "rows", "cols", "kind", "pair", "target", "hide_special", "renormalize", "words",
          "values", "fit", "vmax", "colour_scale", "per_panel", "blocky", "engine", "causal", "device_map", "dtype",
          "trust_remote_code")


def refuse_unused_with_audio(names: tuple[str, ...] = UNUSED) -> None:
    """One line naming the first of these options (parameter names) given beside ``--audio``."""
    for name in names:
        if given(name):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} does not go with --audio (the command draws each token's cross-attention over "
                             f"the clip's time): leave out {flag}")


def audio_heatmap(options: Any, text: str | None, audio: Path, *, layer: int | None, head: Any, out: list[Path],
                  cmap: str, width: int | None) -> None:
    """Check, run and show (see the module)."""
    from ..api import audio_header, example_file, write_document
    from ..render.sound_figure import render_sound_figure
    from ..render.terminal import render_terminal
    from ..views.sound_heat import sound_heatmap
    from .outputs import check_outputs

    refuse_unused_with_audio()
    audio = example_file(audio)  # examples/NAME: the copy installed with attnviz, from any folder
    if options.model is None:
        raise UsageError("--audio needs --model: a Whisper checkpoint (a folder, a hub id such as openai/whisper-tiny, "
                         "or sample_configs/organism_whisper.toml)")
    checked = check_outputs(out, SOUND_OUTPUTS, written="with --audio, --out writes .png, .svg or .pdf (the heat "
                            "under the spectrogram), .json (the numbers shown) or .npz (the whole result)")
    audio_header(audio)  # a missing, damaged or too long clip is said before the model loads
    shown = sound_heatmap(audio, options.model, text=text, layer=layer, head=head, device=options.device,
                          revision=options.revision, cmap=cmap)
    for path in checked:
        suffix = path.suffix.lower()
        if suffix == ".npz":
            shown.result.save(path)
        elif suffix == ".json":
            write_document(path, shown.heat.document())
        else:
            render_sound_figure(shown.heat, path)
        wrote(path)
    if checked:
        return
    console = stdout_console(width)
    render_terminal(shown.heat.terminal_view(console.width), console)
