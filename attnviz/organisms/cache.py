"""Where organisms are built: attnviz's cache folder, one folder per description (its name and fingerprint), built
once and checked on every use (rebuilt when it is not what its name says: half-built, truncated, another organism's),
and a folder of the user's (:func:`save_organism`). A build is refused before it starts if it would not fit in
memory (:func:`check_build_memory`); its temporary folder goes on Ctrl-C, on SIGTERM, and, if a killed process left
one, with the next build."""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

from ..errors import AttnvizWarning, RenderError, ResourceError, UsageError
from ..interrupts import on_stop
from .picture_spec import PictureSpec
from .spec import OrganismSpec, read_spec

_TEMPORARY = re.compile(r"\.tmp(\d+)(?:-old)?$")  # NAME.tmpPID (a build), NAME.tmpPID-old (what it replaces)
_OWN = ".attnviz-organism.tmp"  # a save's temporary folder inside [[out]]
CACHE_ENV = "ATTNVIZ_CACHE"


def cache_root() -> Path:
    """Where built organisms are kept: ``$ATTNVIZ_CACHE/organisms``, else ``$XDG_CACHE_HOME/attnviz/organisms``, else
    ``~/.cache/attnviz/organisms``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser() / "organisms"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "attnviz" / "organisms"


def check_build_memory(spec: OrganismSpec | PictureSpec, path: str | Path) -> None:
    """Refuse to build ``spec`` if its peak memory (:func:`~.weights.build_bytes`, about what loading it takes too)
    is more than :func:`attnviz.limits.memory_budget`, in one line naming the estimate and what to shrink."""
    from ..limits import MEMORY_ENV, human, memory_budget
    from .weights import Layout, build_bytes

    if isinstance(spec, PictureSpec):
        from .picture_checkpoint import build_bytes as picture_bytes

        needed, budget = picture_bytes(spec), memory_budget()
        if needed > budget:
            raise ResourceError(f"{path}: building this picture organism needs about {human(needed)}, more than the "
                                f"{human(budget)} this machine has; use fewer heads or layers, or set {MEMORY_ENV} to "
                                "try anyway")
        return
    needed, budget = build_bytes(spec), memory_budget()
    if needed > budget:
        raise ResourceError(
            f"{path}: building this organism ({spec.layers} layers × {spec.heads} heads, {spec.positions:,} "
            f"positions) needs about {human(needed)}, more than the {human(budget)} this machine has; use fewer heads "
            f"(each widens every weight by {Layout(spec).d_head} numbers), layers or positions, or set {MEMORY_ENV} "
            "to try anyway")


def organism_folder(path: str | Path) -> tuple[Path, OrganismSpec | PictureSpec]:
    """The built checkpoint of the organism described at ``path`` (a text organism or a picture organism; built on
    first use, and again when the folder is not what it should be, with a warning), and its description."""
    from .checkpoint import problem

    spec = read_spec(path)
    root = cache_root()
    folder = _cache_folder(spec)
    wrong = problem(folder, spec)
    if wrong is None:
        return folder, spec
    check_build_memory(spec, path)
    _make_root(root)
    remove_stale(root)
    if wrong:
        warnings.warn(AttnvizWarning(f"{folder} {wrong}; building it again"), stacklevel=2)

    def failed(exc: OSError) -> ResourceError:
        return ResourceError(f"cannot build {spec.name} in {root}: {_reason(exc)}; free space there, or set "
                             f"{CACHE_ENV} to another folder")

    temporary, aside = (folder.with_name(f"{folder.name}.tmp{os.getpid()}{end}") for end in ("", "-old"))
    _build(lambda into: _write(spec, into), temporary, failed, lambda: _place(temporary, folder, aside, spec), aside)
    return folder, spec


def save_organism(path: str | Path, out: str | Path) -> Path:
    """Write the organism described at ``path`` as a checkpoint into the folder ``out`` (a new folder, or an empty
    one), for transformers, kvpress, TransformerLens or a notebook to load by path: a text organism's GPT-2 with its
    tokenizer, a picture organism's LLaVA or ViT with its processor."""
    spec = read_spec(path)
    check_new_folder(Path(out))
    built = _built(spec)
    if built is None:
        check_build_memory(spec, path)
    return save_checkpoint(out, lambda folder: _write(spec, folder) if built is None else _copy(built, folder))


def _built(spec: OrganismSpec | PictureSpec) -> Path | None:
    """The cache's finished checkpoint of ``spec``, if it is there (:func:`organism_folder` built it) and holds what a
    build of ``spec`` would write (a build is seeded): then a save copies it instead of building again. A text
    organism's needle and question are not in its fingerprint (they name no weight), so they are compared too."""
    from .checkpoint import problem

    folder = _cache_folder(spec)
    if problem(folder, spec) is not None:
        return None
    if isinstance(spec, OrganismSpec):
        from ..limits import read_small
        from .checkpoint import MAX_HEADER

        said = json.loads(read_small(folder / "config.json", limit=MAX_HEADER))["attnviz_organism"]
        if (said.get("needle"), said.get("question")) != (spec.needle or None, spec.question or None):
            return None
    return folder


def _cache_folder(spec: OrganismSpec | PictureSpec) -> Path:
    """Where the cache keeps ``spec``'s checkpoint: its name and fingerprint."""
    from .checkpoint import fingerprint_of

    return cache_root() / f"{spec.name}-{fingerprint_of(spec)}"


def _copy(built: Path, folder: Path) -> None:
    """The files of the finished checkpoint ``built`` that its mark lists, and the mark, copied into ``folder``
    (nothing else a folder may have gained since: a stray file, a link, a folder a save was asked to write into)."""
    from .checkpoint import MARK

    listed = json.loads((built / MARK).read_text(encoding="utf-8"))["files"]
    for name in [*listed, MARK]:
        shutil.copyfile(built / Path(str(name)).name, folder / Path(str(name)).name, follow_symlinks=False)


def _write(spec: OrganismSpec | PictureSpec, folder: Path) -> None:
    """A text or picture organism's checkpoint written into ``folder``."""
    from .checkpoint import write_checkpoint
    from .picture_checkpoint import write_picture_checkpoint

    if isinstance(spec, PictureSpec):
        write_picture_checkpoint(spec, folder)
    else:
        write_checkpoint(spec, folder)


def check_new_folder(out: Path) -> None:
    """``out`` may receive a checkpoint: a new folder, or an empty one (not a link, not a file, under a folder)."""
    if out.is_symlink():
        raise UsageError(f"{out} is a link; give a new folder (or an empty one) for the checkpoint as [[out]]")
    if out.exists() and (not out.is_dir() or any(p for p in out.iterdir() if not p.name.startswith(_OWN))):
        raise UsageError(f"{out} exists and is not an empty folder; give a new folder for the checkpoint")
    parent = next((p for p in out.absolute().parents if os.path.lexists(p)), None)
    if parent is not None and not parent.is_dir():
        raise UsageError(f"{out}: {parent} is not a folder; give a new folder for the checkpoint as [[out]]")


def save_checkpoint(out: str | Path, write: Callable[[Path], None]) -> Path:
    """A checkpoint written by ``write(folder)`` into the folder ``out`` (checked by :func:`check_new_folder`), built
    beside its files and moved in whole, the mark last: whatever stops it (an error, Ctrl-C, SIGTERM) leaves ``out``
    as it was (a folder made for it removed)."""
    out = Path(out)
    temporary = out / f"{_OWN}{os.getpid()}"
    if out.is_dir() and not out.is_symlink():
        remove_stale(out, _OWN)  # what a killed save left in it
    check_new_folder(out)
    new = not out.exists()

    def failed(exc: OSError) -> RenderError:
        return RenderError(f"cannot write the checkpoint into {out}: {_reason(exc)}; choose another [[out]]")

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise failed(exc) from None

    def place() -> None:  # each file into the folder, the mark (written last) last
        from .checkpoint import MARK

        for file in sorted(temporary.iterdir(), key=lambda f: f.name == MARK):
            os.replace(file, out / file.name)
        temporary.rmdir()

    _build(write, temporary, failed, place, out if new else None)
    return out


def _build(write: Callable[[Path], None], temporary: Path, failed: Callable[[OSError], Exception],
           place: Callable[[], None], also: Path | None) -> None:
    """``write`` the checkpoint into ``temporary`` and ``place`` it; whatever stops it (an error, Ctrl-C, SIGTERM)
    removes ``temporary`` and ``also`` (a folder made for it, what the placing moved aside)."""

    def remove() -> None:
        for path in (temporary, also):
            if path is not None:
                _remove(path)

    done = False
    try:
        with on_stop(remove):
            _remove(temporary)
            temporary.mkdir()
            write(temporary)
            place()
            done = True
    except OSError as exc:
        raise failed(exc) from None
    finally:
        if not done:
            remove()


def _place(temporary: Path, folder: Path, aside: Path, spec: OrganismSpec | PictureSpec) -> None:
    """``temporary`` renamed ``folder`` (one step: no process ever sees it half-built); what was there (half-built,
    another organism's, a link) first moved aside and removed. Another process that built it meanwhile wins."""
    from .checkpoint import problem

    try:
        os.replace(temporary, folder)  # a new name, or an empty folder's
        return
    except OSError:
        if problem(folder, spec) is None:  # built meanwhile by another process
            _remove(temporary)
            return
    os.replace(folder, aside)
    os.replace(temporary, folder)
    _remove(aside)


def _remove(path: Path) -> None:
    """Remove a folder, a file or a link (never what a link points to); nothing if there is nothing."""
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def remove_stale(root: Path, prefix: str = "") -> int:
    """Remove the temporary folders of builds whose process is gone (SIGKILL, a power cut) from ``root`` (those whose
    name starts with ``prefix``); those of live processes (another build now) stay. Returns how many went."""
    removed = 0
    try:
        entries = list(root.iterdir())
    except OSError:
        return 0
    for entry in entries:
        found = _TEMPORARY.search(entry.name) if entry.name.startswith(prefix) else None
        if found is None or int(found.group(1)) == os.getpid() or _alive(int(found.group(1))):
            continue
        try:
            info = entry.lstat()
        except OSError:
            continue
        if not hasattr(os, "getuid") or info.st_uid == os.getuid():
            _remove(entry)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (not one that exited and was never reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True  # no /proc (macOS): the signal says it lives
    return state.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def _make_root(root: Path) -> None:
    """``root`` made if need be; a folder that cannot be made is one line naming it and the way out."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not os.access(root, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied", str(root))
    except OSError as exc:
        broken = next((p for p in (root, *root.parents) if p.is_symlink() and not p.exists()), None)
        reason = f"{broken} is a link to nothing" if broken is not None else _reason(exc)
        raise ResourceError(f"cannot keep built organisms in {root}: {reason}; set {CACHE_ENV} to a folder you can "
                            "write") from None


def _reason(exc: OSError) -> str:
    """An OSError in words: its reason and the path it names."""
    reason = exc.strerror or type(exc).__name__
    return f"{reason} ({exc.filename})" if exc.filename else reason
