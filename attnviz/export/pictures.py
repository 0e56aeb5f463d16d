"""An export of texts with pictures (a vision-language model): each row's pictures from the corpus's ``image`` field
or column, or the same pictures for every text (:mod:`attnviz.images.corpus`); per text its ``.npz`` (every row,
where each patch sits), its ``.stats.json`` (each head's share on the pictures, entropy over their patches and sink:
:mod:`attnviz.images.statistics`), a PNG per layer of heat over the pictures (the text's last token, a panel per
head, or the heads given), and with ``parquet`` one ``pictures.parquet`` (a row per text × layer × head).

Resumable and shardable as every export: the same manifest, journal and lock (:mod:`.manifest`, :mod:`.lock`);
an item's hash covers its text and its pictures' bytes, so a changed picture is a new item. The model is loaded
once and reads one text at a time (the pictures make each prompt its own length). Each distinct picture file is
decoded and hashed once (:mod:`attnviz.images.files`); a row the model cannot read (its picture past what the processor
may make of it, its prompt past the model's positions) is a failed item and the others go on; a run refused before it
writes anything leaves no folder behind."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..fileio import atomic_write
from .blocks import ExportSummary
from .item_runs import run_loaded_items
from .items import Item
from .settings import ExportSettings

FORMATS = ("png", "npz", "json", "parquet")
TABLE = "pictures.parquet"


@dataclass(frozen=True)
class PictureItem(Item):
    pictures: tuple[Path, ...] = ()

    @property
    def hash(self) -> str:
        """SHA-256 of the text and each picture's bytes, first 16 hex digits (each file hashed once)."""
        from ..images.files import picture_digest

        digest = hashlib.sha256(self.text.encode("utf-8"))
        for picture in self.pictures:
            digest.update(b"\0" + picture_digest(picture))
        return digest.hexdigest()[:16]


def check_settings(settings: ExportSettings) -> None:
    """What an export of pictures cannot do, each one line before anything loads."""
    other = [f for f in settings.formats if f not in FORMATS]
    if other:
        raise UsageError(f"[[formats={','.join(other)}]]: an export of pictures writes {', '.join(FORMATS)}")
    if settings.backend != "local":
        raise UsageError("an export of pictures runs on this machine (the local backend)")
    if settings.pair is not None or settings.hide_special or settings.renormalize or settings.words:
        raise UsageError("an export of pictures reads each text as the model's processor makes it: no [[pair]], "
                         "[[hide_special]], [[renormalize]] or [[words]]")
    from ..images.picture_models import picture_engine

    picture_engine(settings.engine)  # attnviz's own engine reads no pictures
    if "parquet" in settings.formats:
        from ..tables import pyarrow

        pyarrow()


def run_picture_export(source_path: str, out_dir: Path, settings: ExportSettings, pictures: list[Path], *,
                       on_start: Any = None, on_item: Any = None, allow_outside: bool = False) -> ExportSummary:
    """Export this shard of ``source_path``'s texts with their pictures into ``out_dir`` (see the module);
    ``allow_outside``: a corpus's pictures may lie outside its folder (:func:`~attnviz.images.corpus.picture_rows`)."""
    from ..images.corpus import picture_rows
    from ..images.files import read_image

    check_settings(settings)
    rows = picture_rows(source_path, field=settings.field if settings.field != "text" else None,
                        column=settings.column if settings.column != "text" else None,
                        input_format=None if settings.input_format == "auto" else settings.input_format,
                        pictures=pictures or None, allow_outside=allow_outside)
    for picture in dict.fromkeys(p for row in rows for p in row.pictures):  # each read before the model loads (once):
        read_image(picture)  # a bad one is one line, not a late failure
    all_items: list[PictureItem] = [PictureItem(i, row.text, row.pictures) for i, row in enumerate(rows)]
    from ..images.vlm import load_vlm

    def load() -> Any:
        return load_vlm(str(settings.model), device=settings.device, revision=settings.revision,
                        trust_remote_code=settings.trust_remote_code,
                        engine="hf" if settings.engine == "hf" else "fused")

    return run_loaded_items(out_dir, settings, all_items, load, _export_item,
                            (lambda items: _table(out_dir, items)) if "parquet" in settings.formats else None,
                            on_start=on_start, on_item=on_item)


def _export_item(model: Any, item: PictureItem, out_dir: Path, settings: ExportSettings) -> tuple[list[str],
                                                                                                 dict[str, Any]]:
    from ..images.files import read_image
    from ..images.statistics import image_head_rows
    from ..render.overlay import overlay_png

    result = model.read(item.text, list(item.pictures), rows="all" if "npz" in settings.formats else "text")
    n_layers, n_heads = int(result.attentions.shape[0]), int(result.attentions.shape[1])
    layers = list(range(n_layers)) if settings.layers is None else list(settings.layers)
    from ..layer_range import check_heads, check_layers

    check_layers(layers, owner=result.model_name, count=n_layers)
    if settings.heads is not None:
        check_heads(settings.heads, owner=result.model_name, count=n_heads, option="heads")
    files: list[str] = []
    if "npz" in settings.formats:
        files.append(result.save(out_dir / f"{item.stem}.npz", float16=settings.float16).name)
    heads = [row for row in image_head_rows(result) if row["layer"] in layers]
    if "json" in settings.formats or "parquet" in settings.formats:
        doc = {"index": item.index, "hash": item.hash, "text": item.text,
               "pictures": [str(p) for p in item.pictures], "model": result.model_name, "tokens": result.tokens,
               "images": [{k: v for k, v in meta.to_dict().items() if k not in ("boxes", "grids")}
                          for meta in result.pictures], "heads": heads}
        path = out_dir / f"{item.stem}.stats.json"
        text = json.dumps(doc, ensure_ascii=False, allow_nan=False, sort_keys=True, indent=1) + "\n"
        atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        files.append(path.name)
    if "png" in settings.formats:
        images = [read_image(picture) for picture in item.pictures]
        grid = settings.grid if settings.grid is not None else not settings.heads
        drawn = list(range(n_heads)) if grid or not settings.heads else list(settings.heads)
        for layer in layers:
            path = out_dir / f"{item.stem}.L{layer}.png"
            overlay_png(result, images, path, layers=[layer], heads=drawn, query=len(result.tokens) - 1,
                        cmap=settings.cmap)
            files.append(path.name)
    share = sum(row["image_share"] for row in heads) / max(1, len(heads))
    return files, {"tokens": len(result.tokens), "image_share_mean": round(share, 6)}


def _table(out_dir: Path, items: list[PictureItem]) -> None:
    """``pictures.parquet``: a row per text × layer × head, from each finished text's ``.stats.json``."""
    from ..images.statistics import COLUMNS
    from ..tables import write_rows

    rows: list[dict[str, Any]] = []
    for item in items:
        found = json.loads((out_dir / f"{item.stem}.stats.json").read_text(encoding="utf-8"))
        rows.extend({"index": item.index, "text": item.text, "pictures": "|".join(found["pictures"]), **head}
                    for head in found["heads"])
    write_rows(out_dir / TABLE, rows, ("index", "text", "pictures", *COLUMNS))
