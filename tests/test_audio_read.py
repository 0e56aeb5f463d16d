"""Sound read as untrusted input (attnviz/audio/read.py): WAV, FLAC, OGG and MP3 through soundfile, mixed to mono,
resampled by soxr; every hostile file of issue 61 refused in one line before its samples are decoded or held to its
header after; the extra imported only when a sound is read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile  # the sound extra: the test extra installs it
import soxr  # noqa: F401

from attnviz.audio import read
from attnviz.audio.read import audio_header, read_audio
from attnviz.errors import InputError, ResourceError, UsageError


def _sine(seconds: float, rate: int, hz: float = 440.0, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.25 * np.sin(2 * np.pi * hz * t)
    return np.stack([wave * (1 + 0.5 * c) for c in range(channels)], axis=1).astype(np.float32)


def _write(path: Path, samples: np.ndarray, rate: int = 16_000, **kwargs) -> Path:
    soundfile.write(path, samples, rate, **kwargs)
    return path


@pytest.mark.parametrize(("name", "kwargs", "tolerance"), [
    ("a.wav", {"subtype": "FLOAT"}, 0.0),
    ("a.flac", {}, 1e-4),  # 16-bit
    ("a.ogg", {"format": "OGG", "subtype": "VORBIS"}, 0.05),
    ("a.mp3", {"format": "MP3", "subtype": "MPEG_LAYER_III"}, 0.08),
])
def test_each_format_reads_back_as_mono_float32_at_its_rate(tmp_path, name, kwargs, tolerance):
    wave = _sine(1.0, 16_000)
    path = _write(tmp_path / name, wave, **kwargs)
    got = read_audio(path)
    assert got.dtype == np.float32 and got.ndim == 1 and len(got) == len(wave)
    if name.endswith(".mp3"):  # an encoder's delay shifts the wave: compare its loudness, not its samples
        assert abs(np.sqrt(np.mean(got**2)) - np.sqrt(np.mean(wave**2))) < tolerance
    else:
        assert np.abs(got - wave[:, 0]).max() <= tolerance + 1e-7
    header = audio_header(path)
    assert (header.rate, header.channels, header.frames) == (16_000, 1, 16_000) and header.seconds == 1.0


def test_channels_are_mixed_by_their_mean(tmp_path):
    stereo = _sine(0.5, 16_000, channels=3)
    got = read_audio(_write(tmp_path / "s.wav", stereo, subtype="FLOAT"))
    np.testing.assert_allclose(got, (stereo[:, 0] + stereo[:, 1] + stereo[:, 2]) / 3, atol=1e-7)


def test_a_48_khz_sine_resampled_to_16_khz_is_that_sine_at_16_khz(tmp_path):
    got = read_audio(_write(tmp_path / "hi.wav", _sine(1.0, 48_000), 48_000, subtype="FLOAT"))
    want = _sine(1.0, 16_000)[:, 0]
    assert len(got) == len(want)
    middle = slice(200, -200)  # the filter's edges
    assert np.abs(got[middle] - want[middle]).max() < 2e-3
    assert len(read_audio(_write(tmp_path / "lo.wav", _sine(1.0, 8_000), 8_000), rate=16_000)) == 16_000


def test_a_symlink_is_followed_to_its_file(tmp_path):
    path = _write(tmp_path / "a.wav", _sine(0.2, 16_000), subtype="FLOAT")
    link = tmp_path / "link.wav"
    link.symlink_to(path)
    np.testing.assert_array_equal(read_audio(link), read_audio(path))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_blocking_also_behind_a_symlink(tmp_path):
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    link = tmp_path / "link.wav"
    link.symlink_to(fifo)
    for path in (fifo, link):
        with pytest.raises(ResourceError, match="not a regular file"):
            read_audio(path)


def test_a_folder_and_a_missing_file_are_one_line(tmp_path):
    with pytest.raises(ResourceError, match="is a folder"):
        read_audio(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        read_audio(tmp_path / "nope.wav")


def test_an_empty_file_and_a_file_of_no_samples_are_refused(tmp_path):
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match=r"empty \(0 bytes\)"):
        read_audio(empty)
    with pytest.raises(InputError, match="holds no sound"):
        read_audio(_write(tmp_path / "none.wav", np.zeros((0, 1), np.float32)))


def test_what_is_not_sound_is_refused_by_its_content_not_its_name(tmp_path):
    text = tmp_path / "speech.wav"
    text.write_text("hello, not a recording " * 20)
    with pytest.raises(InputError, match="not a sound file attnviz reads"):
        read_audio(text)
    aiff = _write(tmp_path / "a.aiff", _sine(0.2, 16_000), format="AIFF")
    with pytest.raises(InputError, match="is a AIFF file; attnviz reads WAV, FLAC, OGG or MP3"):
        read_audio(aiff)


def test_64_channels_are_refused_from_the_header(tmp_path):
    path = _write(tmp_path / "c64.wav", np.zeros((100, 64), np.float32))
    with pytest.raises(ResourceError, match="64 channels, more than the 8") as caught:
        audio_header(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    assert len(read_audio(path, max_channels=64)) == 100  # the limit, raised


def _flac_claiming(path: Path, frames: int) -> Path:
    """A FLAC whose STREAMINFO says ``frames`` samples (its 36-bit total), whatever it holds."""
    data = bytearray(path.read_bytes())
    assert data[:4] == b"fLaC"
    packed = int.from_bytes(data[18:26], "big")
    data[18:26] = ((packed & ~((1 << 36) - 1)) | frames).to_bytes(8, "big")
    out = path.with_name("claims.flac")
    out.write_bytes(bytes(data))
    return out


def test_a_header_claiming_days_is_refused_before_decoding(tmp_path):
    lying = _flac_claiming(_write(tmp_path / "a.flac", _sine(0.5, 16_000)), (1 << 36) - 1)
    assert soundfile.info(lying).frames == (1 << 36) - 1  # what libsndfile would allocate for
    with pytest.raises(ResourceError, match=r"49\.7 days long by its header, more than the 60\.0 min"):
        read_audio(lying)
    with pytest.raises(ResourceError, match="max_seconds"):
        read_audio(_write(tmp_path / "three.wav", _sine(3.0, 16_000)), max_seconds=2.0)


def test_a_header_claiming_more_than_the_file_holds_is_refused_not_padded(tmp_path):
    lying = _flac_claiming(_write(tmp_path / "a.flac", _sine(0.5, 16_000)), 16_000 * 20)
    with pytest.raises(InputError, match="truncated") as caught:
        read_audio(lying)
    assert "320,000 samples" in str(caught.value) or "cannot be decoded whole" in str(caught.value)


@pytest.mark.parametrize(("name", "kwargs"), [("t.wav", {}), ("t.flac", {}),
                                               ("t.mp3", {"format": "MP3", "subtype": "MPEG_LAYER_III"})])
def test_a_truncated_file_is_refused(tmp_path, name, kwargs):
    whole = _write(tmp_path / name, _sine(2.0, 16_000), **kwargs)
    assert len(read_audio(whole)) == 32_000
    cut = tmp_path / ("cut" + whole.suffix)
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(InputError, match="truncated") as caught:
        read_audio(cut)
    assert str(cut) in str(caught.value) and "\n" not in str(caught.value)


def test_a_wav_whose_data_chunk_claims_gigabytes_is_refused(tmp_path):
    path = _write(tmp_path / "a.wav", _sine(0.5, 16_000))
    data = bytearray(path.read_bytes())
    at = data.index(b"data")
    data[at + 4 : at + 8] = (4_000_000_000).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="its data chunk says 4,000,000,000 bytes"):
        read_audio(path)


def test_a_streaming_wav_of_unknown_length_is_read(tmp_path):
    path = _write(tmp_path / "a.wav", _sine(0.5, 16_000))
    data = bytearray(path.read_bytes())
    at = data.index(b"data")
    data[at + 4 : at + 8] = (0xFFFFFFFF).to_bytes(4, "little")  # what a recorder writes before it knows
    path.write_bytes(bytes(data))
    assert len(read_audio(path)) == 8_000


def test_a_rate_outside_any_recording_is_refused(tmp_path):
    path = _write(tmp_path / "a.wav", _sine(0.5, 16_000))
    data = bytearray(path.read_bytes())
    at = data.index(b"fmt ") + 12  # the fmt chunk's sample rate
    data[at : at + 4] = (1).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="1 samples a second"):
        read_audio(path)
    with pytest.raises(UsageError, match="rate=5"):
        read_audio(tmp_path / "whatever.wav", rate=5)
    for limits, words in (({"max_seconds": 0}, "max_seconds=0"), ({"max_seconds": float("nan")}, "max_seconds=nan"),
                          ({"max_channels": 0}, "max_channels=0")):
        with pytest.raises(UsageError, match=words):
            read_audio(path, **limits)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_samples_that_are_not_numbers_are_refused(tmp_path, bad):
    wave = _sine(0.5, 16_000)
    wave[4_000, 0] = bad
    with pytest.raises(InputError, match=r"not numbers \(NaN or infinite, the first at 0\.250 s\)"):
        read_audio(_write(tmp_path / "nan.wav", wave, subtype="FLOAT"))


def test_a_large_decode_is_checked_against_the_memory_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "1M")
    monkeypatch.setattr(read, "UNCHECKED_BYTES", 0)
    with pytest.raises(ResourceError, match=r"decoding .* needs about"):
        read_audio(_write(tmp_path / "a.wav", _sine(5.0, 16_000, channels=2)))  # 1.9 MiB decoded


def test_a_missing_extra_is_one_line_naming_it(tmp_path, monkeypatch):
    path = _write(tmp_path / "a.wav", _sine(0.2, 16_000))
    monkeypatch.setitem(sys.modules, "soundfile", None)  # what an install without the extra finds
    with pytest.raises(UsageError, match=r"pip install 'attnviz\[sound\]'"):
        read_audio(path)
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "soxr", None)
    with pytest.raises(UsageError, match=r"pip install 'attnviz\[sound\]'"):
        read_audio(_write(tmp_path / "b.wav", _sine(0.2, 8_000), 8_000))


def test_the_sound_libraries_are_not_imported_until_a_sound_is_read():
    code = ("import sys, attnviz.audio, attnviz.audio.read, attnviz.audio.whisper, attnviz.audio.timing, "
            "attnviz.audio.heads_format, attnviz.cli; "
            "print(sorted(m for m in ('soundfile', 'soxr') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
