"""Model organisms: causal models whose heads are written by hand, not trained, so what each head does is known
exactly (issue 52). Every command has something true to find in them, offline.

An organism is a TOML file (``[model] type = "organism"``, one ``[[head]]`` table per planted head;
:mod:`.spec`). Given as ``--model``, it is built once into a GPT-2 checkpoint with the embedded MiniLM's
tokenizer (:mod:`.weights`, which documents each planted head's pattern beside the weights that make it), kept in
attnviz's cache folder under its name and a fingerprint of its description (:mod:`.cache`; :mod:`.checkpoint` writes
its files and checks a folder holds them, whole, before it is used), and from then on it is that folder:
attnviz's own attention (the native engine) runs it, and so do the fused and eager engines, kvpress, TransformerLens
or a notebook, by path (:func:`save_organism` writes it where you say).
"""

from __future__ import annotations

from pathlib import Path

from .cache import cache_root, organism_folder, save_organism
from .kinds import KINDS, HeadKind
from .spec import OrganismSpec, PlantedHead, is_organism_file, read_spec

__all__ = ["KINDS", "HeadKind", "OrganismSpec", "PlantedHead", "cache_root", "is_organism_file", "organism_folder", "read_spec",
           "save_organism"]


def declared_needle(model: str | None) -> tuple[str | None, str | None]:
    """The needle and question a model organism declares (its TOML's ``[model] needle``/``question``, or a saved
    organism's ``config.json``), for ``attnviz needle`` to use when none is given; ``(None, None)`` otherwise."""
    import json

    if model is None:
        return None, None
    if is_organism_file(model):
        spec = read_spec(model)
        return spec.needle, spec.question
    config = Path(model).expanduser() / "config.json"
    try:
        found = json.loads(config.read_text(encoding="utf-8")).get("attnviz_organism") if config.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None, None
    if not isinstance(found, dict):
        return None, None
    needle, question = found.get("needle"), found.get("question")
    return (needle if isinstance(needle, str) else None), (question if isinstance(question, str) else None)
