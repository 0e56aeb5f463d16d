"""Model organisms: causal models whose heads are written by hand, not trained, so what each head does is known
exactly (issue 52). Every command has something true to find in them, offline.

An organism is a TOML file (``[model] type = "organism"``, one ``[[head]]`` table per planted head;
:mod:`.spec`). Given as ``--model``, it is built once into a GPT-2 checkpoint with the embedded MiniLM's
tokenizer (:mod:`.weights`, which documents each planted head's pattern beside the weights that make it), kept in
attnviz's cache folder under its name and a fingerprint of its description, and from then on it is that folder:
attnviz's own attention (the native engine) runs it, and so do the fused and eager engines, kvpress, TransformerLens
or a notebook, by path (:func:`save_organism` writes it where you say).
"""

from __future__ import annotations

import os
from pathlib import Path

from .spec import KINDS, OrganismSpec, PlantedHead, is_organism_file, read_spec

__all__ = ["KINDS", "OrganismSpec", "PlantedHead", "cache_root", "is_organism_file", "organism_folder", "read_spec",
           "save_organism"]


def cache_root() -> Path:
    """Where built organisms are kept: ``$ATTNVIZ_CACHE/organisms``, else ``$XDG_CACHE_HOME/attnviz/organisms``, else
    ``~/.cache/attnviz/organisms``."""
    if os.environ.get("ATTNVIZ_CACHE"):
        return Path(os.environ["ATTNVIZ_CACHE"]).expanduser() / "organisms"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "attnviz" / "organisms"


def organism_folder(path: str | Path) -> tuple[Path, OrganismSpec]:
    """The built checkpoint of the organism described at ``path`` (built on first use), and its description."""
    from .weights import COMPLETE, fingerprint, write_checkpoint

    spec = read_spec(path)
    folder = cache_root() / f"{spec.name}-{fingerprint(spec)}"
    if not (folder / COMPLETE).is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        write_checkpoint(spec, folder)
    return folder, spec


def save_organism(path: str | Path, out: str | Path) -> Path:
    """Write the organism described at ``path`` as a GPT-2 checkpoint with its tokenizer into the folder ``out``
    (a new folder, or an empty one), for transformers, kvpress, TransformerLens or a notebook to load by path."""
    from ..errors import UsageError
    from .weights import write_checkpoint

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder; give a new folder for the checkpoint")
    if out.is_dir():
        out.rmdir()
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_checkpoint(read_spec(path), out)


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
