"""What a picture-reading command needs before its model loads, found once for the encoders and the vision-language
models: where the model is, its config and its family's layout (refused by name), transformers quieted, and the
options every ``from_pretrained`` takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..organisms import is_picture_organism
from .layouts import PatchLayout, layout_for, needs_picture_model


@dataclass
class Located:
    place: Any
    config: dict[str, Any]
    layout: PatchLayout
    options: dict[str, Any]


def locate(model: str, *, language: bool, device: str, revision: str | None, trust_remote_code: bool) -> Located:
    """The model (``language``: a vision-language model is wanted, else an image encoder), its config and layout."""
    import transformers

    from ..sources.hub import hub_reachable
    from ..sources.resolve import check_device

    check_device(device)
    if model.lower().endswith((".toml", ".npz")) and not is_picture_organism(model):
        raise UsageError(f"{model} is not a model that reads pictures: {needs_picture_model()}")
    place, config = _config(model, revision)
    layout = layout_for(config.get("model_type"), place.name)
    if layout.language and not language:
        raise UsageError(f"{place.name} is a vision-language model ({layout.name}): give the text it reads beside "
                         "the picture")
    if language and not layout.language:
        raise UsageError(f"{place.name} is an image encoder ({layout.name}): it reads a picture without a text (the "
                         "picture alone, to heatmap, heads, rollout, view or tui); texts with pictures need a "
                         "vision-language model")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    options = {"revision": revision, "trust_remote_code": trust_remote_code,
               "local_files_only": place.hub_id is not None and not hub_reachable()}
    return Located(place, config, layout, options)


def _config(model: str, revision: str | None) -> tuple[Any, dict[str, Any]]:
    """Where ``model`` is, and its config (a folder's, or the hub's at ``revision``)."""
    from ..sources.files import read_config
    from ..sources.hub import PICTURE_OFFLINE, fetch_config
    from ..sources.resolve import locate

    place = locate(model)
    folder = place.folder if place.folder is not None else fetch_config(str(place.hub_id), revision, PICTURE_OFFLINE)
    return place, read_config(folder)


def picture_layout(model: str) -> PatchLayout | None:
    """The layout of ``model`` (a folder, or a hub id whose config is at hand) where attnviz reads pictures with it
    (an image encoder or a vision-language model); None for any other model, or where its config cannot be read
    here (the caller's own loading then says why)."""
    from ..errors import AttnvizError
    from .layouts import LAYOUTS

    if model.lower().endswith((".toml", ".npz")) and not is_picture_organism(model):
        return None
    try:
        kind = _config(model, None)[1].get("model_type")
    except (AttnvizError, OSError, ValueError):
        return None
    return next((layout for layout in LAYOUTS.values() if kind in layout.model_types), None)


def reads_pictures(model: str) -> bool:
    """Whether ``model`` is a vision-language model attnviz has a layout for (see :func:`picture_layout`)."""
    layout = picture_layout(model)
    return layout is not None and layout.language


def picture_engine(engine: str, *, encoder: bool = False) -> str:
    """The engine a picture model runs on for the engine asked: ``hf`` (transformers' eager attention) or ``fused``
    (the default, ``auto``); an image encoder runs on eager attention whatever is asked. The one refusal of
    ``native``: attnviz's own engine reads no pictures."""
    engine = str(getattr(engine, "value", engine))
    if engine == "native":
        runs = "an image encoder runs on transformers' eager attention" if encoder else "use fused (the default) or hf"
        raise UsageError(f"[[engine=native]]: attnviz's own engine reads no pictures; {runs}")
    return "hf" if engine == "hf" or encoder else "fused"
