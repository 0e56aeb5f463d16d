"""Atomic file writes: a temporary file beside the target, then a rename.

A crash, a full disk or a kill mid-write never leaves half a file under the final name.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .errors import AttnvizError, InputError, RenderError, UsageError
from .interrupts import always_on_stop, on_stop


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(path: str | os.PathLike[str]) -> Path:
    """Fail early, before any work, for a file that could not be written there (a folder, a missing or read-only
    folder, a read-only file), or should not be: a symbolic link, a pipe, a device or a socket is never replaced by
    the file (nor written through)."""
    path = Path(path)
    _refuse_special(path)
    if path.is_dir():
        raise RenderError(f"cannot write {path}: it is a folder; give a file name such as {path / 'heatmap.png'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        above = next((p for p in (parent, *parent.parents) if p.exists()), None)
        if above is not None and not above.is_dir():  # somefile.txt/x.png: no folder can be made there
            raise RenderError(f"cannot write {path}: {above} is a file, not a folder; put the output in a "
                              "folder, or remove the file")
        raise RenderError(f"cannot write {path}: folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise RenderError(f"cannot write {path}: folder {parent} is not writable; choose another [[out]]")
    if path.exists() and not os.access(path, os.W_OK):  # replacing it would go around its read-only mode
        raise RenderError(f"cannot write {path}: it exists and is read-only; choose another [[out]] or make it "
                          "writable")
    return path


def refuse_overwriting_inputs(outputs: Iterable[str | os.PathLike[str]], inputs: Iterable[str | os.PathLike[str]],
                              *, folders_read_whole: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Refuse, before any work, an output that is one of the command's inputs: the same file by device and inode
    (``p.png``, ``./p.png``, an absolute spelling or a hard link alike), or a file inside a folder the command reads
    whole (a model's folder: its config, weights and tokenizer). Writing there would replace what was read."""
    identities: dict[tuple[int, int], str] = {}
    for name in inputs:
        identity = _identity(name)
        if identity is not None:
            identities.setdefault(identity, os.fspath(name))
    whole = [(os.fspath(folder), _identity(folder)) for folder in folders_read_whole]
    for out in outputs:
        identity = _identity(out)
        if identity is None:  # nothing there yet: nothing of the inputs' to lose
            continue
        if identity in identities:
            source = identities[identity]
            same = "" if os.fspath(source) == os.fspath(out) else f" ({source})"
            raise UsageError(f"cannot write {os.fspath(out)}: it is one of this command's inputs{same}, which the "
                             "output would replace; choose another [[out]]")
        for folder, folder_identity in whole:
            if folder_identity is not None and _inside(Path(out), folder_identity):
                raise UsageError(f"cannot write {os.fspath(out)}: it is inside {folder}, which this command reads "
                                 "(a model's files); choose another [[out]]")


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """A path's (device, inode), following links; None for what is not there or cannot be a path (a text)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # not there, not reachable, a NUL byte or a name too long: not a file of ours
        return None
    return info.st_dev, info.st_ino


def _inside(path: Path, folder: tuple[int, int]) -> bool:
    """Whether ``path`` (an existing file) lies somewhere under the folder of identity ``folder``."""
    try:
        parents = path.resolve().parents
    except (OSError, RuntimeError):
        return False
    return any(_identity(parent) == folder for parent in parents)


def _refuse_special(path: Path) -> None:
    """A symbolic link, a pipe, a device or a socket at ``path``: an output file would silently replace it."""
    import stat

    try:
        mode = path.lstat().st_mode
    except OSError:  # nothing there (or not reachable: the folder checks below say why)
        return
    if stat.S_ISLNK(mode):
        raise RenderError(f"cannot write {path}: it is a symbolic link, which attnviz neither writes through nor "
                          "replaces; give another file name or remove the link")
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise RenderError(f"cannot write {path}: it is not a regular file (a pipe, device or socket), which the "
                          "output would replace; give another file name")


def write_json(path: str | os.PathLike[str], document: object) -> Path:
    """``document`` as attnviz's JSON (every unsafe character in a string written as ``\\uXXXX``, one space of
    indent), written atomically to ``path``: the one ``save`` of the results (kv, patterns, needle)."""
    from .labels import json_text

    text = json_text(document, indent=1) + "\n"
    return atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def atomic_write(path: Path, write: Callable[[str], object]) -> Path:
    """Call ``write(tmp_path)``, then rename the temporary file onto ``path``.

    The file gets the usual permissions (0666 less the umask). An ``OSError`` becomes a
    :class:`RenderError` naming the path; the temporary file is always removed.
    """
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:80]}.{os.getpid()}.", suffix=".tmp" + path.suffix,
                                   dir=path.parent)
        IN_PROGRESS.add(tmp)
        os.close(fd)
        write(tmp)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except OSError as exc:
        raise RenderError(f"cannot write {path}: {exc.strerror or exc}; check free space and permissions") from None
    finally:
        IN_PROGRESS.discard(tmp)
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_through(path: str | os.PathLike[str], write: Callable[[Path], object], *, writer: str) -> Path:
    """Call ``write(tmp)``, a registered writer (``writer``: its ``"module:function"``), on a temporary file beside
    ``path`` and rename it onto ``path`` only when it wrote something: a writer that fails, or writes nothing, leaves
    ``path`` as it was. A writer outside attnviz (a plugin's, a user's) that fails is named as the culprit."""
    path = Path(path)
    own = writer.startswith("attnviz.")

    def run(tmp: str) -> None:
        try:
            write(Path(tmp))
        except AttnvizError:
            raise
        except Exception as exc:
            if own:
                raise
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            raise RenderError(f"cannot write {path}: its writer {writer} (not attnviz's) failed ({type(exc).__name__}: "
                              f"{first}); {path} was left as it was; report it to that writer's authors") from None
        try:
            empty = os.path.getsize(tmp) == 0
        except OSError:  # the writer removed its file
            empty = True
        if empty:
            raise RenderError(f"cannot write {path}: its writer {writer} wrote nothing; {path} was left as it was")

    return atomic_write(path, run)


@contextlib.contextmanager
def scratch_folder(kind: str) -> Iterator[Path]:
    """A temporary folder (``$TMPDIR/attnviz-KIND-PID-…``) for a command's own intermediate files, removed
    when the block ends, on Ctrl-C and on SIGTERM (:func:`attnviz.interrupts.on_stop`). One that a killed
    run (SIGKILL) left behind is removed by the next run that makes one of this kind."""
    import shutil

    prefix = f"attnviz-{kind}-"
    for stale in Path(tempfile.gettempdir()).glob(prefix + "*"):
        owner = re.match(rf"{re.escape(prefix)}(\d+)-", stale.name)
        if owner and _stale_folder(stale, int(owner.group(1))):
            shutil.rmtree(stale, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))

    def remove() -> None:
        shutil.rmtree(folder, ignore_errors=True)

    try:
        with on_stop(remove, note=""):  # nothing of it is kept: no "rerun to resume" from the work inside
            yield folder
    finally:
        remove()


def _stale_folder(path: Path, pid: int) -> bool:
    """A scratch folder of this user's whose process is gone (not a link: never removed through one)."""
    try:
        info = path.lstat()
    except OSError:
        return False
    import stat as stat_module

    mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return stat_module.S_ISDIR(info.st_mode) and mine and pid != os.getpid() and not _alive(pid)


IN_PROGRESS: set[str] = set()
"""Temporary files this process is writing now (:func:`atomic_write`)."""


def remove_own_temporaries() -> None:
    """Delete the temporary files this process is writing, before it exits without unwinding
    (``os._exit``: a drawing process whose export was killed), so none is left behind."""
    for tmp in list(IN_PROGRESS):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


always_on_stop(remove_own_temporaries)  # SIGTERM ends the process without unwinding: these go first


_TEMP = re.compile(r"^\..*\.(\d+)\.[^.]+\.tmp")


def remove_stale_temporaries(folder: Path) -> int:
    """Delete temporary files that a dead process left in ``folder`` (a killed run never renamed them).

    A temporary file carries its writer's process id; files of a process still alive (another
    shard writing into the same folder) are left alone. Returns how many were removed.
    """
    removed = 0
    for path in folder.glob(".*.tmp*"):
        match = _TEMP.match(path.name)
        if not match or not path.is_file():
            continue
        pid = int(match.group(1))
        if pid != os.getpid() and _alive(pid):
            continue
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited but not been reaped (a killed export's drawing process whose new
    parent, in a container, never reaps it): it writes nothing more, so its files are stale."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False  # no /proc (macOS): trust the signal check
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


def corpus_path(source: str | os.PathLike[str], number: int, folder: Path, written: str, *, what: str,
                allow_outside: bool = False, allow_option: str | None = None) -> Path:
    """Row ``number`` of the corpus ``source`` names the file ``written`` (its ``what``: a picture, a clip, a
    reference), resolved in the corpus's ``folder`` with links followed. Refused where it lands outside, unless
    ``allow_outside``: an absolute path or one that climbs out is refused before anything outside is looked at, and
    the message is the same whether such a file exists or not (a corpus from elsewhere must not read, draw or name
    files it was not given, nor learn which exist). ``allow_option``: the option that lets it through, named."""
    relative = os.path.normpath(written)
    leaves = os.path.isabs(written) or relative == os.pardir or relative.startswith(os.pardir + os.sep)
    fix = f", or pass [[{allow_option}]] to read it anyway" if allow_option else ""
    refused = InputError(f"{source} row {number}: its {what} {written!r} is outside the corpus's folder; give "
                         f"paths inside it{fix}")
    if leaves and not allow_outside:
        raise refused  # nothing outside asked about
    try:
        resolved = (folder / written).resolve()
    except (OSError, RuntimeError):  # a loop of links: said as an outside path is (nothing told of where it leads)
        if not allow_outside:
            raise refused from None
        raise InputError(f"{source} row {number}: its {what} {written!r} cannot be resolved (a loop of links?); "
                         "give the file's own path") from None
    if not allow_outside and not resolved.is_relative_to(folder):
        raise refused
    return resolved
