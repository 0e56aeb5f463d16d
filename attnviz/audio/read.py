"""Sound read as untrusted input: a regular file (a symlink resolved; a pipe, device or folder refused, also behind a
link), WAV, FLAC, OGG or MP3 as libsndfile reads them (through soundfile; the format by the file's content, not its
name), mixed to mono by the mean of its channels and resampled with soxr to the rate a model hears.

Everything a file says about its size is checked from its header before a sample is decoded: its rate
(:data:`MIN_RATE`..:data:`MAX_RATE`), its channels (:data:`MAX_CHANNELS`), its duration (``max_seconds``,
:data:`MAX_SECONDS` unless told) and the memory its samples take. Then it is decoded whole and held to its header: a
file that holds fewer frames than its header says (truncated, or a header that lies) is refused, not padded with
silence; sound past the header's count is never read; a WAV whose ``data`` chunk claims more bytes than the file
has is refused though libsndfile would read what is there. Samples that are not finite (NaN, infinity: a float WAV can hold them) are refused.

soundfile and soxr are the optional ``sound`` extra (``pip install 'attnviz[sound]'``), imported when a sound is read,
never when attnviz starts."""

from __future__ import annotations

import importlib
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, ResourceError, UsageError
from ..quiet import stderr_silenced

SAMPLE_RATE = 16_000
"""Samples per second a sound is resampled to unless told: what Whisper's feature extractor reads."""
MAX_SECONDS = 3_600.0
"""Seconds of sound a file may hold by its header (an hour; ``max_seconds`` overrides it)."""
MAX_CHANNELS = 8
"""Channels a sound file may have (7.1 surround); more is a multitrack recording to mix down first."""
MIN_RATE = 1_000
MAX_RATE = 384_000
"""The sample rates a file may declare, in Hz: below 1 kHz no speech is left; above 384 kHz no recorder records."""
FORMATS = ("WAV", "WAVEX", "FLAC", "OGG", "MP3")
"""libsndfile's names of the containers read (WAVEX: a WAV of the extensible format)."""
MP3_SLACK = 2 * 1152
"""Frames an MP3 may decode to fewer than its header says (two MPEG frames: an encoder's delay and padding,
where the header's count is an estimate) before it is refused as truncated or lying."""
UNCHECKED_BYTES = 16 << 20
"""Bytes of decoded samples whose memory is not checked against the budget (a minute of stereo at 48 kHz)."""
_STREAMING = (0, 0xFFFFFFFF)  # a WAV data size that says "unknown" (written while recording): libsndfile reads to the end

INSTALL = "pip install 'attnviz[sound]'"


@dataclass(frozen=True)
class AudioHeader:
    """What a sound file's header says, read before any sample is decoded."""

    path: Path
    format: str
    subtype: str
    rate: int
    channels: int
    frames: int

    @property
    def seconds(self) -> float:
        return self.frames / self.rate


def soundfile_module() -> Any:
    """The soundfile package, or the one line that names the extra to install."""
    try:
        return importlib.import_module("soundfile")
    except (ImportError, OSError):  # OSError: the package without its libsndfile
        raise UsageError(f"reading sound needs soundfile and soxr, which are not installed: {INSTALL}") from None


def _soxr() -> Any:
    try:
        return importlib.import_module("soxr")
    except ImportError:
        raise UsageError(f"resampling sound needs soxr, which is not installed: {INSTALL}") from None


def audio_header(path: str | os.PathLike[str], *, max_seconds: float = MAX_SECONDS,
                 max_channels: int = MAX_CHANNELS) -> AudioHeader:
    """The header of the sound file at ``path`` (see the module), every refusal of :func:`read_audio` made but those
    of its samples (truncated, lying, not finite); nothing decoded."""
    path = Path(path)
    _check_limits(max_seconds, max_channels)
    with stderr_silenced(), _opened(path) as (handle, size), _sound(path, handle) as sound:
        return _checked(path, sound, size, handle, max_seconds, max_channels)


def read_audio(path: str | os.PathLike[str], *, rate: int = SAMPLE_RATE, max_seconds: float = MAX_SECONDS,
               max_channels: int = MAX_CHANNELS) -> np.ndarray:
    """The sound at ``path`` as mono float32 samples at ``rate`` Hz: the mean of its channels, resampled by soxr's
    high-quality filter where the file's rate differs (see the module for what is refused; each refusal is one line
    naming the file)."""
    path = Path(path)
    _check_limits(max_seconds, max_channels)
    if isinstance(rate, bool) or not isinstance(rate, int) or not MIN_RATE <= rate <= MAX_RATE:
        raise UsageError(f"[[rate={rate}]] is not a sample rate attnviz resamples to; give {MIN_RATE:,} to "
                         f"{MAX_RATE:,} (Hz), e.g. {SAMPLE_RATE:,}")
    with stderr_silenced(), _opened(path) as (handle, size), _sound(path, handle) as sound:
        header = _checked(path, sound, size, handle, max_seconds, max_channels)
        samples = _decode(path, sound, header)
    mono = samples.mean(axis=1, dtype=np.float32) if header.channels > 1 else samples[:, 0]  # the mean of channels
    del samples
    if header.rate != rate:
        mono = _soxr().resample(mono, header.rate, rate, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def _check_limits(max_seconds: float, max_channels: int) -> None:
    """The limits asked for: a positive number of seconds, a whole number of channels of at least 1."""
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float)) or not 0 < max_seconds < float("inf"):
        raise UsageError(f"[[max_seconds={max_seconds}]]: give a positive number of seconds")
    if isinstance(max_channels, bool) or not isinstance(max_channels, int) or max_channels < 1:
        raise UsageError(f"[[max_channels={max_channels}]]: give a whole number of channels, at least 1")


class _opened:
    """The file at ``path`` opened for reading as one regular file: a symlink resolved, a folder, pipe (FIFO),
    device or socket refused before and after it is opened (opened without blocking, so a FIFO cannot hang the
    open), a missing or unreadable file one line. Yields the binary handle and its size."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle: Any = None

    def __enter__(self) -> tuple[Any, int]:
        from ..limits import check_regular

        path = self.path
        try:
            check_regular(path, "sound file")
            fd = os.open(path.resolve(), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            raise InputError(f"sound file {path} does not exist; check the path") from None
        except ResourceError:
            raise
        except OSError as exc:
            raise InputError(f"sound file {path} cannot be read ({exc.strerror or type(exc).__name__})") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped for a pipe or device between the check and the open
            os.close(fd)
            raise ResourceError(f"{path} is not a regular file (a pipe, device or socket); a sound file must be a "
                                "regular file")
        self.handle = os.fdopen(fd, "rb")
        return self.handle, info.st_size

    def __exit__(self, *exc: object) -> None:
        self.handle.close()


class _sound:
    """libsndfile's reader of an opened file; a file it does not read (empty, not sound) is one line."""

    def __init__(self, path: Path, handle: Any) -> None:
        self.path, self.handle, self.sound = path, handle, None

    def __enter__(self) -> Any:
        soundfile = soundfile_module()
        try:
            self.sound = soundfile.SoundFile(self.handle)
        except (soundfile.SoundFileError, RuntimeError, TypeError, ValueError, struct.error) as exc:
            empty = self.handle.seek(0, os.SEEK_END) == 0
            if empty:
                raise InputError(f"{self.path} is empty (0 bytes); give a WAV, FLAC, OGG or MP3 file") from None
            why = _first_line(exc)
            raise InputError(f"{self.path} is not a sound file attnviz reads (WAV, FLAC, OGG or MP3: {why})") from None
        return self.sound

    def __exit__(self, *exc: object) -> None:
        if self.sound is not None:
            self.sound.close()


def _checked(path: Path, sound: Any, size: int, handle: Any, max_seconds: float, max_channels: int) -> AudioHeader:
    """The header of ``sound``, refused in one line where it is not what attnviz reads or claims too much."""
    header = AudioHeader(path, str(sound.format), str(sound.subtype), int(sound.samplerate), int(sound.channels),
                         int(sound.frames))
    if header.format not in FORMATS:
        raise InputError(f"{path} is a {header.format} file; attnviz reads WAV, FLAC, OGG or MP3 (convert it, e.g. "
                         f"ffmpeg -i {path.name} out.wav)")
    if not MIN_RATE <= header.rate <= MAX_RATE:
        raise InputError(f"{path} says it has {header.rate:,} samples a second, outside the {MIN_RATE:,} to "
                         f"{MAX_RATE:,} a sound file may have; the file is damaged, or not a recording")
    if header.channels > max_channels:
        raise ResourceError(f"{path} has {header.channels} channels, more than the {max_channels} a sound file may "
                            f"have; mix it down first (e.g. ffmpeg -i {path.name} -ac 1 mono.wav)")
    if header.frames <= 0:
        raise InputError(f"{path} holds no sound (0 samples); give a recording")
    if header.seconds > max_seconds:
        raise ResourceError(f"{path} is {_duration(header.seconds)} long by its header, more than the "
                            f"{_duration(max_seconds)} a sound may be; cut it first (e.g. ffmpeg -i {path.name} -t "
                            f"{int(max_seconds)} cut.wav), or pass [[max_seconds]]")
    needed = 4 * header.frames * header.channels
    if needed > UNCHECKED_BYTES:
        from ..limits import check_memory

        check_memory(3 * needed, f"decoding {path} ({_duration(header.seconds)}, {header.channels} channels)")
    if header.format in ("WAV", "WAVEX"):
        _check_wav_data(path, handle, size)
    return header


def _decode(path: Path, sound: Any, header: AudioHeader) -> np.ndarray:
    """Every frame of ``sound`` as float32 ``[frames, channels]``, held to the header's count (see the module):
    never more than the header says (soundfile reads no further), and refused where fewer."""
    soundfile = soundfile_module()
    slack = MP3_SLACK if header.format == "MP3" else 0
    try:
        samples = sound.read(frames=header.frames, dtype="float32", always_2d=True)
    except (soundfile.SoundFileError, RuntimeError, ValueError) as exc:
        raise InputError(f"{path} is damaged or truncated ({_first_line(exc)}); it cannot be decoded whole") from None
    if len(samples) < header.frames - slack:
        raise InputError(f"{path} is truncated: its header says {header.frames:,} samples "
                         f"({_duration(header.seconds)}) but it holds {len(samples):,}; re-export or re-download it")
    if not np.isfinite(samples).all():
        at = int(np.argmin(np.isfinite(samples).all(axis=1)))
        raise InputError(f"{path} holds samples that are not numbers (NaN or infinite, the first at "
                         f"{at / header.rate:.3f} s); re-export it from its source")
    return samples


def _check_wav_data(path: Path, handle: Any, size: int) -> None:
    """Refuse a RIFF WAV whose ``data`` chunk claims more bytes than the file holds after it (libsndfile would read
    what is there). A size that says "unknown" (0 or 0xFFFFFFFF, written while recording) is left to libsndfile."""
    handle.seek(0)
    head = handle.read(12)
    if len(head) < 12 or head[:4] not in (b"RIFF", b"RIFX") or head[8:12] != b"WAVE":
        return  # RF64 and other WAV forms: libsndfile checks them
    order = "<" if head[:4] == b"RIFF" else ">"
    at = 12
    for _ in range(4096):  # chunks before the data (fmt, LIST, bext, ...): a bounded walk
        handle.seek(at)
        chunk = handle.read(8)
        if len(chunk) < 8:
            return
        (length,) = struct.unpack(order + "I", chunk[4:])
        if chunk[:4] == b"data":
            if length not in _STREAMING and at + 8 + length > size:
                raise InputError(f"{path} is truncated: its data chunk says {length:,} bytes but the file holds "
                                 f"{max(0, size - at - 8):,}; re-export or re-download it")
            return
        at += 8 + length + (length & 1)


def _duration(seconds: float) -> str:
    """``42.5 s``, ``3.2 h``, ``49.7 days``: a duration as a person reads it."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _first_line(exc: BaseException) -> str:
    """libsndfile's reason, without its prefix (``Error opening <handle>: ``)."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return re.sub(r"^Error( opening .*?)?\s*:\s*", "", text)[:120]
