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
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import atomic_write
from .items import Item

MANIFEST = "manifest.jsonl"


def manifest_name(shard: tuple[int, int]) -> str:
    k, n = shard
    return MANIFEST if n == 1 else f"manifest.{k}-of-{n}.jsonl"


def _line(entry: dict[str, Any]) -> str:
    return json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n"


def _read(path: Path) -> dict[int, dict[str, Any]]:
    entries: dict[int, dict[str, Any]] = {}
    if not path.exists():
        return entries
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
            entries[int(entry["index"])] = entry
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue  # a line cut short by a kill: that item is simply redone
    return entries


class Journal:
    """The manifest of one run (one shard) in ``out_dir``.

    Each entry records the settings ``fingerprint`` its files were made with and the input's
    ``total`` item count, so a rerun with other settings redoes the work and ``merge`` can tell
    shards of one run from strangers.
    """

    def __init__(self, out_dir: Path, shard: tuple[int, int], *, fingerprint: str = "", total: int = 0) -> None:
        self.out_dir = out_dir
        self.fingerprint, self.total = fingerprint, total
        self.final = out_dir / manifest_name(shard)
        self.journal = out_dir / (self.final.name + ".journal")
        self.entries = {**_read(self.final), **_read(self.journal)}

    def entry(self, item: Item, **fields: Any) -> dict[str, Any]:
        return {"index": item.index, "hash": item.hash, "settings": self.fingerprint, "of": self.total, **fields}

    def finished(self, item: Item) -> bool:
        entry = self.entries.get(item.index)
        return (
            entry is not None
            and entry.get("status") == "ok"
            and entry.get("hash") == item.hash
            and entry.get("settings") == self.fingerprint
            and all(safe_name(name) and (self.out_dir / name).is_file() for name in entry.get("files", []))
        )

    def record(self, entry: dict[str, Any]) -> None:
        """Append one entry durably (flushed and synced) before the run moves on."""
        self.entries[int(entry["index"])] = entry
        with open(self.journal, "a", encoding="utf-8") as fh:
            fh.write(_line(entry))
            fh.flush()
            os.fsync(fh.fileno())

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
        return sorted(path for path in self.out_dir.iterdir()
                      if path.is_file() and path.name not in listed and (m := _OUTPUT.fullmatch(path.name))
                      and m.group(1) in indices)


def safe_name(name: object) -> bool:
    """A file name an export could have written: no folders, no leading dot, nothing else."""
    return isinstance(name, str) and bool(_SAFE.fullmatch(name)) and not name.startswith(".")


_SAFE = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]*")
# What an export writes for an item: {index:06d}-{slug}.npz, .stats.json, .L{layer}[H{head}].{png,svg,pdf}
_OUTPUT = re.compile(r"(\d{6})-[a-z0-9-]+\.(?:npz|stats\.json|L\d+(?:H\d+)?\.(?:png|svg|pdf))")
_REQUIRED = ("index", "hash", "status", "settings", "of")


def merge(dirs: list[Path], out: Path) -> tuple[Path, int]:
    """Join the manifests of shard runs into ``out/manifest.jsonl``, copying their files into ``out``.

    Refuses a shard that is still running or was interrupted (its journal is there), shards made
    with other settings or from another input, file names that would leave ``out``, and a set of
    shards that leaves items out.
    """
    if out.exists() and not out.is_dir():
        raise InputError(f"[[out={out}]] is a file; give a folder for the merged results")
    out.mkdir(parents=True, exist_ok=True)
    entries: dict[int, dict[str, Any]] = {}
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
            for index, entry in _read(manifest).items():
                if any(key not in entry for key in _REQUIRED) or not all(map(safe_name, entry.get("files", []))):
                    raise InputError(f"{manifest} has an entry attnviz did not write (item {index}); refusing to merge it")
                runs.add((entry["settings"], entry["of"]))
                if len(runs) > 1:
                    raise InputError(f"{manifest} comes from a run with other settings or another input; "
                                     "merge only shards of one export")
                known = entries.get(index)
                if known is not None and known["hash"] != entry["hash"]:
                    raise InputError(f"item {index} has different texts in two shards; were they run on one input?")
                if known is None or (known["status"] != "ok" and entry["status"] == "ok"):
                    entries[index] = entry
                    if folder.resolve() != out.resolve():
                        for name in entry.get("files", []):
                            _copy(folder / name, out / name)
    total = next(iter(runs))[1] if runs else 0
    missing = sorted(set(range(total)) - set(entries))
    if missing:
        raise InputError(f"the shards cover {len(entries)} of {total} items ({len(missing)} missing, e.g. item "
                         f"{missing[0]}); run the missing shards before merging")
    final = out / MANIFEST
    lines = "".join(_line(entries[i]) for i in sorted(entries))
    atomic_write(final, lambda tmp: Path(tmp).write_text(lines, encoding="utf-8"))
    return final, len(entries)


def _copy(src: Path, dst: Path) -> None:
    atomic_write(dst, lambda tmp: shutil.copyfile(src, tmp))
