"""A clip as Whisper hears it: its samples at the model's rate, the log-mel frames of its 30-s window (the feature
extractor pads the clip with silence to the window, as transformers and openai-whisper do), and how many of those
frames, and of the encoder's positions, hold the clip (the rest is the window's padding).

A clip's frames are ``len(samples) // hop_length`` (openai-whisper's ``content_frames``: the frames of the mel
spectrogram of the padded window that start inside the clip), its encoder positions ``frames // stride`` (what
``timing.find_alignment`` and transformers' ``_extract_token_timestamps`` crop the cross-attention to:
``num_frames // 2``). A clip longer than the window is refused here with the limit and the fix; word timings read
one window after another (:mod:`.long_form`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from .model import WhisperModel


@dataclass(frozen=True)
class Heard:
    """One clip heard: ``features`` ``[1, mels, window frames]`` (float32, on the model's device), the clip's
    ``samples`` at ``rate``, and the frames and encoder positions that hold it."""

    samples: np.ndarray
    rate: int
    features: Any
    frames: int
    positions: int
    name: str

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.rate


def hear(audio: str | os.PathLike[str] | np.ndarray, loaded: WhisperModel) -> Heard:
    """``audio`` (a sound file, read by :func:`attnviz.audio.read.read_audio` at the model's rate; or mono float
    samples already at that rate) as ``loaded`` hears it (see the module)."""
    import torch

    rate = loaded.sampling_rate
    if isinstance(audio, np.ndarray):
        samples, name = _checked_samples(audio), "the samples"
        _check_window(len(samples) / rate, name, loaded)
    else:
        from .read import audio_header, read_audio

        name = os.fspath(audio)
        _check_window(audio_header(audio).seconds, name, loaded)  # from the header, before a sample is decoded
        samples = read_audio(audio, rate=rate)[: loaded.window_samples]  # a resampled sample of rounding past it
    extracted = loaded.features(samples, sampling_rate=rate, return_tensors="np", padding="max_length")
    features = torch.from_numpy(np.asarray(extracted["input_features"], dtype=np.float32)).to(loaded.device)
    frames = len(samples) // loaded.hop_length
    return Heard(samples, rate, features, frames, min(frames // loaded.stride, loaded.positions), name)


def _check_window(seconds: float, name: str, loaded: WhisperModel) -> None:
    """Refuse a clip longer than the window ``loaded`` hears at once, with the limit and how to cut it."""
    if seconds > loaded.window_seconds + 1e-9:
        raise InputError(f"{name} is {seconds:.1f} s long, more than the {loaded.window_seconds:g} s "
                         f"{loaded.name} hears at once; cut it into clips of {loaded.window_seconds:g} s or less "
                         f"(e.g. ffmpeg -i IN -f segment -segment_time {loaded.window_seconds:g} clip%03d.wav)")


def _checked_samples(audio: np.ndarray) -> np.ndarray:
    """Samples handed in as an array: one channel of finite numbers, at least one."""
    if audio.ndim != 1:
        raise InputError(f"samples of shape {tuple(audio.shape)}: give one channel (mono), a 1-D array at the "
                         "model's sample rate")
    if audio.size == 0:
        raise InputError("the samples are empty; give a recording")
    samples = np.ascontiguousarray(audio, dtype=np.float32)
    if not np.isfinite(samples).all():
        raise InputError("the samples hold values that are not numbers (NaN or infinite)")
    return samples
