"""The run's record: a journal appended as items finish, and a manifest written in index order at the end.

A killed run leaves its journal; the rerun trusts an entry only if its status is ok, the text's
hash is unchanged and every file it names exists, and redoes the rest. The final manifest holds
no times or durations, so an interrupted-then-resumed run ends byte-identical to one that never
stopped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import atomic_write
from ..limits import read_small
from .items import Item

MANIFEST = "manifest.jsonl"
MAX_MANIFEST = 1 << 30  # bytes of one manifest or journal (about a million items' lines)
MAX_ITEMS = 1 << 40  # items one export may claim ("of"); a claim past it is not an entry attnviz wrote
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def manifest_name(shard: tuple[int, int]) -> str:
    k, n = shard
    return MANIFEST if n == 1 else f"manifest.{k}-of-{n}.jsonl"


def _line(entry: dict[str, Any]) -> str:
    return json.dumps(entry, ensure_ascii=False, allow_nan=False, sort_keys=True) + "\n"


def read_entries(path: Path, *, strict: bool = False) -> dict[int, dict[str, Any]]:
    """The entries of a manifest or journal, by index. A line that is not a whole, well-formed entry
    (cut short by a kill, or edited) is skipped, so its item is redone; with ``strict`` (merging) it
    is an error instead. A symbolic link is never read through."""
    entries: dict[int, dict[str, Any]] = {}
    if not os.path.lexists(path):
        return entries
    if path.is_symlink():
        raise InputError(f"{path} is a symbolic link; attnviz never reads or writes through links in an export "
                         "folder. Remove it")
    try:
        text = read_small(path, limit=MAX_MANIFEST, what="manifest").decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text; it was not written by attnviz") from None
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            entry = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            entry = None
        problem = _problem(entry)
        if problem is None and strict and entry["index"] in entries and entries[entry["index"]]["hash"] != entry["hash"]:
            problem = f"item {entry['index']} appears twice with different texts"
        if problem is None:
            entries[int(entry["index"])] = entry
        elif strict:
            raise InputError(f"{path} line {number} is not an entry attnviz wrote ({problem}); refusing to merge it")
    return entries


def _problem(entry: Any) -> str | None:
    """What is wrong with a manifest entry, or None: every field of the type attnviz writes."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    for key, kinds in (("index", int), ("hash", str), ("status", str), ("settings", str), ("of", int)):
        if key not in entry:
            return f"no {key!r}"
        if not isinstance(entry[key], kinds) or isinstance(entry[key], bool):
            return f"{key!r} is a {type(entry[key]).__name__}"
    if not 0 <= entry["index"] < entry["of"] <= MAX_ITEMS:
        return f"index {entry['index']} of {entry['of']} is out of range"
    files = entry.get("files", [])
    if not isinstance(files, list) or not all(map(safe_name, files)):
        return "'files' is not a list of file names in the folder"
    sizes = entry.get("sizes")
    if sizes is not None and (not isinstance(sizes, list) or len(sizes) != len(files)
                              or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes)):
        return "'sizes' does not match 'files'"
    return None


def file_sizes(folder: Path, names: list[str]) -> list[int]:
    """The sizes of an item's files, recorded with it: a resume trusts only files still that size."""
    return [(folder / name).lstat().st_size for name in names]


class Journal:
    """The manifest of one run (one shard) in ``out_dir``.

    Each entry records the settings ``fingerprint`` its files were made with and the input's
    ``total`` item count, so a rerun with other settings redoes the work and ``merge`` can tell
    shards of one run from strangers.
    """

    def __init__(self, out_dir: Path, shard: tuple[int, int], *, fingerprint: str = "", total: int = 0,
                 reading: dict[str, Any] | None = None) -> None:
        self.out_dir = out_dir
        self.fingerprint, self.total = fingerprint, total
        self.reading = reading  # how the statistics were read, whatever the model (a diff of two exports checks it)
        self.final = out_dir / manifest_name(shard)
        self.journal = out_dir / (self.final.name + ".journal")
        self.entries = {**read_entries(self.final), **read_entries(self.journal)}

    def entry(self, item: Item, **fields: Any) -> dict[str, Any]:
        return {"index": item.index, "hash": item.hash, "settings": self.fingerprint, "of": self.total,
                **({"reading": self.reading} if self.reading is not None else {}), **fields}

    def finished(self, item: Item) -> bool:
        entry = self.entries.get(item.index)
        return (
            entry is not None
            and entry.get("status") == "ok"
            and entry.get("hash") == item.hash
            and entry.get("settings") == self.fingerprint
            and _files_intact(self.out_dir, entry)
        )

    def record(self, entry: dict[str, Any], *, sync: bool = True) -> None:
        """Append one entry durably (flushed and synced) before the run moves on; never through a link.
        ``sync=False`` leaves the sync to :meth:`sync`, once for a block's entries."""
        self.entries[int(entry["index"])] = entry
        try:
            fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o666)
        except OSError as exc:
            if os.path.islink(self.journal):
                raise InputError(f"{self.journal} is a symbolic link; attnviz never writes through links in "
                                 "[[out]]. Remove it") from None
            raise InputError(f"cannot write {self.journal}: {exc.strerror}") from None
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(_line(entry))
            fh.flush()
            if sync:
                os.fsync(fh.fileno())

    def sync(self) -> None:
        """Make every entry recorded so far durable (after ``record(..., sync=False)``)."""
        try:
            fd = os.open(self.journal, os.O_RDONLY | _NOFOLLOW)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def finish(self, items: list[Item]) -> Path:
        """Write the manifest for ``items`` in index order, then drop the journal."""
        wanted = {item.index for item in items}
        lines = [_line(self.entries[i]) for i in sorted(wanted) if i in self.entries]
        atomic_write(self.final, lambda tmp: Path(tmp).write_text("".join(lines), encoding="utf-8"))
        self.journal.unlink(missing_ok=True)
        return self.final

    def stale_files(self, items: list[Item]) -> list[Path]:
        """Files an earlier export of these items wrote that this run's manifest does not list: made with
        other settings (other layers, heads, formats) or from an earlier text. Only names of the form
        an export writes for these items' indices are considered, so other files (and other shards'
        items in a shared folder) are never touched."""
        listed = {name for item in items for name in self.entries.get(item.index, {}).get("files", [])}
        indices = {f"{item.index:06d}" for item in items}
        output = _output_names()
        return sorted(path for path in self.out_dir.iterdir()
                      if path.is_file() and path.name not in listed and (m := output.fullmatch(path.name))
                      and (m.group(1) or m.group(2)) in indices)


def _files_intact(folder: Path, entry: dict[str, Any]) -> bool:
    """Every file an entry names is a regular file (not a link) in the folder, of the recorded size."""
    files, sizes = entry.get("files", []), entry.get("sizes")
    for number, name in enumerate(files):
        try:
            info = (folder / name).lstat()
        except OSError:
            return False
        if not stat.S_ISREG(info.st_mode) or (sizes is not None and info.st_size != sizes[number]):
            return False
    return True


def safe_name(name: object) -> bool:
    """A file name an export could have written: no folders, no leading dot, nothing else."""
    return isinstance(name, str) and bool(_SAFE.fullmatch(name)) and not name.startswith(".")


_SAFE = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]*")


def _output_names() -> re.Pattern[str]:
    """What an export writes for an item, by the formats of :data:`attnviz.render.registry.FORMATS`:
    {index:06d}-{slug} and a data format's or a page's suffix (.npz, .stats.json, .html), or
    .L{layer}[H{head}] and a figure's (.png, .svg, .pdf); and heads-{first index:06d}.parquet, the
    Parquet part of the block an item starts."""
    from ..render.registry import FORMATS

    def either(formats: list[str]) -> str:
        return "|".join(re.escape(suffix.removeprefix(".")) for suffix in sorted(set(formats), key=len, reverse=True))

    whole = [f.suffix for f in FORMATS.values() if (f.kind == "data" and f.name != "parquet") or f.per_text]
    layers = [f.suffix for f in FORMATS.values() if f.kind == "view" and not f.per_text]
    return re.compile(rf"(\d{{6}})-[a-z0-9-]+\.(?:{either(whole)}|L\d+(?:H\d+)?\.(?:{either(layers)}))"
                      r"|heads-(\d{6})\.parquet")


def merge(dirs: list[Path], out: Path) -> tuple[Path, int]:
    """Join the manifests of shard runs into ``out/manifest.jsonl``, copying their files into ``out``.

    Everything is checked before anything is copied, and the copy is all or nothing: the files go
    to a staging folder inside ``out`` and are moved into place only once every one is there.
    Refuses a shard that is still running or was interrupted (its journal is there), shards made
    with other settings or from another input, an entry attnviz did not write, a file that is a
    link or is missing, a set of shards that leaves items out, and an ``out`` that already holds
    another export (whose files it would overwrite).
    """
    if out.exists() and not out.is_dir():
        raise InputError(f"[[out={out}]] is a file; give a folder for the merged results")
    entries, sources = _merge_plan(dirs)
    shard_folders = {folder.resolve() for folder in dirs}
    if out.is_dir() and out.resolve() not in shard_folders:
        output = _output_names()
        other = sorted(out.glob("manifest*.jsonl")) + sorted(p for p in out.iterdir() if output.fullmatch(p.name)
                                                             or p.name in ("heads.parquet", "texts.parquet"))
        if other:
            raise InputError(f"[[out={out}]] already holds an export ({other[0].name}); merging would overwrite it. "
                             "Give an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    copies = [(src, name) for name, src in sorted(sources.items()) if src.parent.resolve() != out.resolve()]
    if copies:
        staging = Path(tempfile.mkdtemp(prefix=f".merge.{os.getpid()}.", dir=out))
        try:
            for src, name in copies:
                shutil.copyfile(src, staging / name, follow_symlinks=False)
            for _, name in copies:
                os.replace(staging / name, out / name)
        except OSError as exc:
            raise InputError(f"cannot copy the shards into {out}: {exc.strerror or exc}; nothing was merged") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    final = out / MANIFEST
    lines = "".join(_line(entries[i]) for i in sorted(entries))
    atomic_write(final, lambda tmp: Path(tmp).write_text(lines, encoding="utf-8"))
    from .table import HEADS_TABLE, TEXTS_TABLE, assemble

    if any(name.endswith(".parquet") for entry in entries.values() for name in entry.get("files", [])):
        assemble(out, entries)  # one heads.parquet and texts.parquet for every shard's items
    else:  # a shard folder merged into itself may hold tables of an earlier run
        for name in (HEADS_TABLE, TEXTS_TABLE):
            if (out / name).is_file() and not (out / name).is_symlink():
                (out / name).unlink()
    return final, len(entries)


def _merge_plan(dirs: list[Path]) -> tuple[dict[int, dict[str, Any]], dict[str, Path]]:
    """Every shard's entries (one per item, a finished one preferred) and where each file comes from,
    all checked; nothing is written."""
    entries: dict[int, dict[str, Any]] = {}
    sources: dict[str, Path] = {}
    runs: set[tuple[str, int]] = set()
    for folder in dirs:
        if not folder.is_dir():
            raise InputError(f"{folder} is not a folder of exported results; check [[merge]]")
        journals = sorted(folder.glob("manifest*.journal"))
        if journals:
            raise InputError(f"{journals[0]} shows an unfinished run; rerun that shard before merging")
        manifests = sorted(folder.glob("manifest*.jsonl"))
        if not manifests:
            raise InputError(f"{folder} has no manifest*.jsonl; is it an export folder?")
        for manifest in manifests:
            for index, entry in read_entries(manifest, strict=True).items():
                runs.add((entry["settings"], entry["of"]))
                if len(runs) > 1:
                    raise InputError(f"{manifest} comes from a run with other settings or another input; "
                                     "merge only shards of one export")
                known = entries.get(index)
                if known is not None and known["hash"] != entry["hash"]:
                    raise InputError(f"item {index} has different texts in two shards; were they run on one input?")
                if known is None or (known["status"] != "ok" and entry["status"] == "ok"):
                    entries[index] = entry
                    for name in entry.get("files", []):
                        sources[name] = _checked_file(folder, name, manifest)
    total = next(iter(runs))[1] if runs else 0
    if len(entries) < total:  # indices are checked to lie in 0..total-1: counting is enough
        first = next(i for i in range(total) if i not in entries)
        raise InputError(f"the shards cover {len(entries)} of {total} items ({total - len(entries)} missing, e.g. "
                         f"item {first}); run the missing shards before merging")
    return entries, sources


def _checked_file(folder: Path, name: str, manifest: Path) -> Path:
    """A shard's file, if it is a regular file in that folder (a link is never followed)."""
    path = folder / name
    try:
        info = path.lstat()
    except OSError:
        raise InputError(f"{manifest} lists {name}, which {folder} does not have; rerun that shard") from None
    if stat.S_ISLNK(info.st_mode):
        raise InputError(f"{path} is a symbolic link; attnviz never copies through links. Replace it with the file")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path} is not a regular file; rerun that shard")
    return path
