"""``attnviz serve``: the interactive page on a local server, the model kept loaded between requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..errors import UsageError
from .common import cli_command, given, stdout_console
from .options import (
    AudioFile,
    Cmap,
    CmapOpt,
    ExpandImages,
    ImageFiles,
    ModelOptions,
    model_command,
)


@cli_command
@model_command()
def serve(
    options: ModelOptions,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on. 127.0.0.1 (the default) is this "
                             "machine only; 0.0.0.0 or another address opens the server to your network, with no "
                             "password."),
    allow_host: list[str] = typer.Option([], "--allow-host", metavar="NAME", help="A host name the server answers to "
                                         "besides IP addresses and localhost (a reverse proxy's name, say); "
                                         "repeatable. Other names are refused, against DNS rebinding."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to listen on (0: any free one)."),
    cache_size: str = typer.Option("512M", "--cache-size", metavar="SIZE", help="Memory the server keeps between "
                                   "requests at most (pages, their queries and keys, tiles), least recently used "
                                   "dropped first: bytes, or with K, M or G."),
    cmap: Cmap = CmapOpt,
    image: list[Path] = ImageFiles,
    expand_images: bool = ExpandImages,
    audio: Path | None = AudioFile,
) -> None:
    """Serve the interactive page at http://HOST:PORT/ with the model kept loaded: type a text and every
    view follows. GET /api/attention?text=... answers with the attention of every head as JSON.
    Ctrl-C stops it.

    With --image, a vision-language model reads each text typed beside the pictures given here (the page of
    attnviz view --image).

    With --audio, a Whisper --model hears the clip given here: the page of attnviz view --audio, with a box for the
    transcript to teacher-force (empty: the model's own), every view redrawn for it.

    Example: attnviz serve --port 8000
    """
    from ..serve import cache_bytes, check_available
    from ..serve import serve as run

    check_available()
    if not host.strip():
        raise UsageError("--host is empty; give an address such as 127.0.0.1")
    if audio is not None:
        sounds = _sounds(options, audio)
        run(None, host=host, port=port, cmap=cmap.value, allowed_hosts=tuple(allow_host), on_ready=_ready(sounds.name),
            sounds=sounds)
        return
    cache = cache_bytes(cache_size)
    if not image and expand_images:
        raise UsageError("--expand-images expands the pictures of a server started with --image; give them")
    if image:
        pictures = _pictures(options, image, expand_images)
        run(None, host=host, port=port, cmap=cmap.value, allowed_hosts=tuple(allow_host), cache_size=cache,
            on_ready=_ready(pictures.name), pictures=pictures)
        return
    source = options.load()
    if source.capabilities.fixed_input:
        raise UsageError(f"{source.name} has a fixed input (a matrices config or a saved result): there is nothing "
                         "to type; use attnviz view")
    run(source, host=host, port=port, cmap=cmap.value, allowed_hosts=tuple(allow_host), cache_size=cache,
        on_ready=_ready(source.name))


def _ready(name: str) -> Any:
    """What the server says once it listens."""
    console = stdout_console()

    def ready(where: str, number: int) -> None:
        shown = f"[{where}]" if ":" in where else where
        console.print(f"attnviz: serving {name} at http://{shown}:{number}/ (Ctrl-C stops)")

    return ready


def _pictures(options: ModelOptions, images: list[Path], expand: bool) -> Any:
    """``serve --image``: the pictures (read and embedded once) and a vision-language model, loaded once, to read each
    text beside them; the pictures, the model and the engine checked before it loads (as every picture command's)."""
    from ..api import load_vlm, locate_picture_model
    from ..views.picture_page import Pictures, encode_pictures
    from .images import checked_pictures, loading

    checked_pictures(options, images, [], (), "", text="")
    engine = loading(options).language_engine()  # attnviz's own engine reads no pictures
    where: dict[str, Any] = {"device": options.device, "revision": options.revision,
                             "trust_remote_code": options.trust_remote_code}
    try:
        locate_picture_model(str(options.model), language=True, **where)
    except UsageError:
        found = locate_picture_model(str(options.model), language=False, **where)  # (what is neither says so here)
        raise UsageError(f"{found.place.name} is an image encoder: it reads a picture without a text, and serve "
                         "--image reads each typed text beside its pictures (a vision-language model); attnviz view "
                         "--image writes an encoder's page") from None
    encoded = encode_pictures(images)
    model = load_vlm(str(options.model), **where, engine="hf" if engine == "hf" else "fused")
    return Pictures(read=lambda text: model.read(text, images), images=encoded, name=model.name, expand=expand)


SOUND_UNUSED = ("image", "expand_images", "cache_size", "engine", "causal", "device_map", "dtype", "trust_remote_code")
"""The options of ``serve`` that do not go with ``--audio`` (parameter names): the server keeps no pages between
requests (each transcript's page is computed whole), and a Whisper loads as transformers' model."""


def _sounds(options: ModelOptions, audio: Path) -> Any:
    """``serve --audio``: the clip (read, and refused, before the model loads) and the Whisper, loaded once
    (:func:`attnviz.views.sound_page.heard_clip`); what does not go with it refused in one line."""
    from ..api import audio_header, hearing_kind
    from ..views.sound_page import heard_clip

    for name in SOUND_UNUSED:
        if given(name):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} does not go with --audio (the server teacher-forces each transcript typed over "
                             f"the clip, through a Whisper): leave out {flag}")
    if options.model is None:
        raise UsageError("--audio needs --model: a Whisper checkpoint (a folder, a hub id such as openai/whisper-tiny, "
                         "or sample_configs/organism_whisper.toml)")
    audio_header(audio)  # a missing, damaged or too long clip is said before the model loads
    model = str(options.model)
    kind = hearing_kind(model)  # (neither a Whisper nor another speech model: refused there, in one line)
    if kind == "encoder":
        raise UsageError(f"{model} is a speech encoder: it hears the clip alone, with no transcript to type, and serve "
                         f"--audio teacher-forces each one typed through a Whisper; use attnviz view --audio {audio} "
                         f"--model {model}")
    if kind != "whisper":
        raise UsageError(f"{model} is a speech encoder-decoder but not a Whisper, and the sound page times its words "
                         f"with a Whisper's alignment heads; attnviz heatmap --audio {audio} --model {model} draws its "
                         "cross-attention")
    return heard_clip(audio, model, device=options.device, revision=options.revision)
