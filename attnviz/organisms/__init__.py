"""Model organisms: causal models whose heads are written by hand, not trained, so what each head does is known
exactly (issue 52). Every command has something true to find in them, offline.

An organism is a TOML file (``[model] type = "organism"``, one ``[[head]]`` table per planted head;
:mod:`.spec`). Given as ``--model``, it is built once into a GPT-2 checkpoint with the embedded MiniLM's
tokenizer (:mod:`.weights`, which documents each planted head's pattern beside the weights that make it), kept in
attnviz's cache folder under its name and a fingerprint of its description (:mod:`.cache`; :mod:`.checkpoint` writes
its files and checks a folder holds them, whole, before it is used), and from then on it is that folder:
attnviz's own attention (the native engine) runs it, and so do the fused and eager engines, kvpress, TransformerLens
or a notebook, by path (:func:`save_organism` writes it where you say).

A picture organism (``[model] family = "llava"`` or ``"vit"``, :mod:`.picture_spec`) is a vision-language model or
an image encoder whose heads read declared patches of any picture (:mod:`.picture_kinds`), built the same way into
transformers' own LLaVA or ViT with its processor (:mod:`.picture_weights`, :mod:`.picture_checkpoint`).
"""

from __future__ import annotations

from pathlib import Path

from .cache import cache_root, organism_folder, save_organism
from .kinds import KINDS, HeadKind
from .picture_kinds import PICTURE_KINDS, PictureKind
from .spec import OrganismSpec, PictureSpec, PlantedHead, is_organism_file, is_picture_organism, read_spec

__all__ = ["KINDS", "PICTURE_KINDS", "HeadKind", "OrganismSpec", "PictureKind", "PictureSpec", "PlantedHead",
           "cache_root", "is_organism_file", "is_picture_organism", "organism_folder", "read_spec", "save_organism"]


def declared_needle(model: str | None) -> tuple[str | None, str | None]:
    """The needle and question a model organism declares (its TOML's ``[model] needle``/``question``, or a saved
    organism's ``config.json``), for ``attnviz needle`` to use when none is given; ``(None, None)`` otherwise."""
    import json

    if model is None:
        return None, None
    if is_organism_file(model):
        spec = read_spec(model)
        return (None, None) if isinstance(spec, PictureSpec) else (spec.needle, spec.question)
    config = Path(model).expanduser() / "config.json"
    try:
        found = json.loads(config.read_text(encoding="utf-8")).get("attnviz_organism") if config.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None, None
    if not isinstance(found, dict):
        return None, None
    needle, question = found.get("needle"), found.get("question")
    return (needle if isinstance(needle, str) else None), (question if isinstance(question, str) else None)
