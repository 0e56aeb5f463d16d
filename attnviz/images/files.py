"""A picture read as untrusted input: a regular file of at most 64 MiB, a PNG, JPEG (an MPO's first picture: a
phone's or camera's JPEG with more pictures after it) or WebP by its content (not its name), at most
:data:`MAX_PIXELS` pixels by its header, whatever its size (a decompression bomb is refused before it is decoded, and
before Pillow's own limit is asked), and decoded whole (a truncated file is refused, not padded with grey). A PNG's
text and colour-profile chunks are dropped before it is read: attnviz draws no metadata, and Pillow would refuse a
large one as if the picture were broken.

Each file is read once while it is unchanged (the same resolved path, device, inode, size and modification time):
its header, its digest (:func:`picture_digest`) and, while they fit :data:`CACHE_BYTES`, its decoded pixels, so a
corpus of 300 rows naming one picture decodes it once. A picture handed out is shared: draw on a copy."""

from __future__ import annotations

import hashlib
import io
import struct
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, ResourceError

MAX_PIXELS = 50_000_000  # a 7,000 × 7,000 photo; a processor resizes it to a few hundred pixels a side anyway
MAX_BYTES = 64 << 20
FORMATS = ("PNG", "JPEG", "MPO", "WEBP")  # MPO: a JPEG with more pictures after its first (read alone)
PNG_METADATA = (b"tEXt", b"zTXt", b"iTXt", b"iCCP")
"""A PNG's chunks dropped before it is read: texts and a colour profile, which attnviz draws nothing of."""
DECODING_BYTES = 9
"""Bytes per pixel a picture costs while it is decoded and made RGB (the decoded picture, its RGB copy and the
processor's array of it): what :func:`read_image` checks against the memory budget first."""
UNCHECKED_BYTES = 16 << 20
"""Bytes of pictures whose memory is not checked against the budget (:func:`check_picture_memory`): less than any
model that reads them takes."""
CACHE_BYTES = 512 << 20
"""Bytes of decoded pictures kept for the next read of the same file (an eighth of the memory budget where less)."""
_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class PictureHeader:
    """What a picture's header says: its format and size, read without decoding it."""

    path: Path
    format: str
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


_LOCK = threading.RLock()  # Pillow's pixel limit is a global: set and restored under this lock
_HEADERS: OrderedDict[tuple[Any, ...], PictureHeader] = OrderedDict()
_DIGESTS: OrderedDict[tuple[Any, ...], bytes] = OrderedDict()
_DECODED: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_KEPT = 4096  # headers and digests remembered


def picture_header(path: str | Path, *, max_pixels: int = MAX_PIXELS) -> PictureHeader:
    """The header of the picture at ``path``, every refusal of :func:`read_image` but a damaged body made (one
    line naming the file), nothing decoded."""
    path = Path(path)
    key = _identity(path)
    with _LOCK:
        found = _HEADERS.get(key)
    if found is None:
        found = _probe(path, _read(path))
        _remember(_HEADERS, key, found)
    _check_pixels(found, max_pixels)
    return found


def read_image(path: str | Path, *, max_pixels: int = MAX_PIXELS) -> Any:
    """The picture at ``path`` as an RGB ``PIL.Image`` (see the module); each refusal is one line naming the file.
    The image may be shared with other readers of the same file: draw on a copy."""
    from ..limits import memory_budget

    path = Path(path)
    key = _identity(path)
    with _LOCK:
        kept = _DECODED.get(key)
        if kept is not None:
            _DECODED.move_to_end(key)
    if kept is not None:
        _check_pixels(PictureHeader(path, "", kept.width, kept.height), max_pixels)
        return kept
    data = _read(path)
    header = _probe(path, data)
    _remember(_HEADERS, key, header)
    _check_pixels(header, max_pixels)
    check_picture_memory(DECODING_BYTES * header.pixels,
                         f"decoding {path} ({header.width:,} × {header.height:,} pixels)")
    image = _decode(path, _without_metadata(data), max_pixels)
    size = 3 * header.pixels
    with _LOCK:
        room = min(CACHE_BYTES, memory_budget() // 8)
        if size <= room:
            _DECODED[key] = image
            while sum(3 * each.width * each.height for each in _DECODED.values()) > room:
                _DECODED.popitem(last=False)
    return image


def check_picture_memory(needed: int, what: str) -> None:
    """Refuse ``what`` (pictures decoded, processed) where its ``needed`` bytes pass the memory budget
    (:func:`attnviz.limits.check_memory`), unless they are fewer than :data:`UNCHECKED_BYTES`."""
    from ..limits import check_memory

    if needed > UNCHECKED_BYTES:
        check_memory(needed, what)


def picture_digest(path: str | Path) -> bytes:
    """SHA-256 of the bytes of the picture file at ``path``, computed once while the file is unchanged."""
    path = Path(path)
    key = _identity(path)
    with _LOCK:
        found = _DIGESTS.get(key)
    if found is None:
        found = hashlib.sha256(_read(path)).digest()
        _remember(_DIGESTS, key, found)
    return found


def _identity(path: Path) -> tuple[Any, ...]:
    """What names one version of a file: its resolved path, device, inode, size and modification time (a folder,
    pipe or device refused first; a missing file is one line)."""
    from ..limits import check_regular

    try:
        info = check_regular(path, "picture")
        resolved = path.resolve()
    except FileNotFoundError:
        raise InputError(f"picture {path} does not exist; check the path") from None
    except OSError as exc:
        raise InputError(f"picture {path} cannot be read ({exc.strerror or type(exc).__name__})") from None
    return str(resolved), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def _remember(store: OrderedDict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any) -> None:
    with _LOCK:
        store[key] = value
        store.move_to_end(key)
        while len(store) > _KEPT:
            store.popitem(last=False)


def _read(path: Path) -> bytes:
    from ..limits import read_small

    try:
        return read_small(path, limit=MAX_BYTES, what="picture")
    except FileNotFoundError:
        raise InputError(f"picture {path} does not exist; check the path") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise InputError(f"picture {path} cannot be read ({exc.strerror})") from None


def _probe(path: Path, data: bytes) -> PictureHeader:
    """The format and size of the picture in ``data``, from its header; WebP's and PNG's read here (libwebp would
    make a WebP's whole canvas first), the rest by Pillow with its own pixel limit off (ours follows)."""
    from PIL import Image, UnidentifiedImageError

    size = _png_size(data) or _webp_size(data)
    if size is not None and size[0] * size[1] > MAX_PIXELS:
        return PictureHeader(path, "PNG" if data.startswith(_SIGNATURE) else "WEBP", *size)
    with _LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow's DecompressionBombWarning: the size is checked below
        previous = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            with Image.open(io.BytesIO(_without_metadata(data))) as probe:  # the header only: its format and size
                kind, (width, height) = probe.format, probe.size
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError, struct.error, EOFError):
            raise InputError(f"{path} is not a picture attnviz reads (PNG, JPEG or WebP)") from None
        finally:
            Image.MAX_IMAGE_PIXELS = previous
    if kind not in FORMATS:
        raise InputError(f"{path} is a {kind} image; attnviz reads PNG, JPEG or WebP")
    return PictureHeader(path, str(kind), int(width), int(height))


def _check_pixels(header: PictureHeader, max_pixels: int) -> None:
    if header.pixels > max_pixels:
        raise ResourceError(f"{header.path} is {header.width:,} × {header.height:,} pixels, more than the "
                            f"{max_pixels:,} a picture may be (a decompression bomb, or a photo to shrink first)")


def _decode(path: Path, data: bytes, max_pixels: int) -> Any:
    from PIL import Image

    with _LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = max_pixels
        try:
            with Image.open(io.BytesIO(data)) as image:
                image.load()  # an MPO's first picture
                rgb = image.convert("RGB")
        except (OSError, SyntaxError, ValueError, EOFError, struct.error, Image.DecompressionBombError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
            raise InputError(f"{path} is damaged or truncated ({first}); it cannot be decoded whole") from None
        finally:
            Image.MAX_IMAGE_PIXELS = previous
    rgb.readonly = 1  # shared (see the module): Pillow copies it before anything draws on it
    return rgb


def _png_size(data: bytes) -> tuple[int, int] | None:
    """A PNG's width and height from its IHDR chunk."""
    if data.startswith(_SIGNATURE) and len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return width, height
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    """A WebP's canvas (an extended file's VP8X chunk) or its one frame's width and height."""
    if len(data) < 30 or data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return None
    chunk = data[12:16]
    if chunk == b"VP8X":
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def _without_metadata(data: bytes) -> bytes:
    """A PNG without its :data:`PNG_METADATA` chunks (anything else as it is; a chunk past the end left to Pillow
    to refuse)."""
    if not data.startswith(_SIGNATURE):
        return data
    kept, at, dropped = [data[:8]], 8, False
    while at + 12 <= len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, end = data[at + 4 : at + 8], at + 12 + length
        if end > len(data):
            break
        if kind in PNG_METADATA:
            dropped = True
        else:
            kept.append(data[at:end])
        at = end
        if kind == b"IEND":
            break
    if not dropped:
        return data
    kept.append(data[at:])
    return b"".join(kept)
