"""Alignment heads in the forms people load (attnviz/audio/heads_format.py): openai-whisper's shipped masks
(``_ALIGNMENT_HEADS`` in whisper/__init__.py, release 20250625, copied here) decode to the heads whisper.cpp lists for
the same checkpoints (``g_aheads_*`` in src/whisper.cpp at ggml-org/whisper.cpp 233fe1fc9, copied here): two sources
that agree; each form round-trips; transformers' ``generate`` takes the generation-config form."""

from __future__ import annotations

import base64
import gzip

import numpy as np
import pytest

from attnviz.audio.heads_format import (
    from_openai_mask,
    from_whisper_cpp,
    generation_config_heads,
    openai_mask,
    whisper_cpp_heads,
)
from attnviz.errors import UsageError

# openai-whisper's masks, and the decoder's layers × heads of each checkpoint (its ModelDimensions)
OPENAI = {
    "tiny.en": (b"ABzY8J1N>@0{>%R00Bk>$p{7v037`oCl~+#00", 4, 6),
    "tiny": (b"ABzY8bu8Lr0{>%RKn9Fp%m@SkK7Kt=7ytkO", 4, 6),
    "base": (b"ABzY8KQ!870{>%RzyTQH3`Q^yNP!>##QT-<FaQ7m", 6, 8),
    "small": (b"ABzY8DmU6=0{>%Rpa?J`kvJ6qF(V^F86#Xh7JUGMK}P<N0000", 12, 12),
    "large-v3": (b"ABzY8gWO1E0{>%R7(9S+Kn!D~%ngiGaR?*L!iJG9p-nab0JQ=-{D1-g00", 32, 20),
    "large-v3-turbo": (b"ABzY8j^C+e0{>%RARaKHP%t(lGR*)0g!tONPyhe`", 4, 20),
}
# whisper.cpp's presets for the same checkpoints
WHISPER_CPP = {
    "tiny.en": "{1, 0}, {2, 0}, {2, 5}, {3, 0}, {3, 1}, {3, 2}, {3, 3}, {3, 4}",
    "tiny": "{2, 2}, {3, 0}, {3, 2}, {3, 3}, {3, 4}, {3, 5}",
    "base": "{3, 1}, {4, 2}, {4, 3}, {4, 7}, {5, 1}, {5, 2}, {5, 4}, {5, 6}",
    "small": "{5, 3}, {5, 9}, {8, 0}, {8, 4}, {8, 7}, {8, 8}, {9, 0}, {9, 7}, {9, 9}, {10, 5}",
    "large-v3": "{7, 0}, {10, 17}, {12, 18}, {13, 12}, {16, 1}, {17, 14}, {19, 11}, {21, 4}, {24, 1}, {25, 6}",
    "large-v3-turbo": "{2, 4}, {2, 11}, {3, 3}, {3, 6}, {3, 11}, {3, 14}",
}


@pytest.mark.parametrize("name", list(OPENAI))
def test_openais_masks_decode_to_whisper_cpps_heads(name):
    mask, layers, heads = OPENAI[name]
    want = from_whisper_cpp(f"static const whisper_ahead g_aheads[] = {{ {WHISPER_CPP[name]} }};")
    assert from_openai_mask(mask, layers, heads) == want
    # and as openai-whisper's own set_alignment_heads reads it
    array = np.frombuffer(gzip.decompress(base64.b85decode(mask)), dtype=bool).reshape(layers, heads)
    assert [tuple(int(v) for v in pair) for pair in np.argwhere(array)] == want


@pytest.mark.parametrize("name", list(OPENAI))
def test_each_form_round_trips(name):
    mask, layers, heads = OPENAI[name]
    found = from_openai_mask(mask, layers, heads)
    written = openai_mask(found, layers, heads)
    assert from_openai_mask(written, layers, heads) == found
    assert base64.b85decode(written)[4:8] == bytes(4)  # gzip's time is 0: the same heads, the same text
    assert from_whisper_cpp(whisper_cpp_heads(found)) == found
    assert generation_config_heads(found) == [list(pair) for pair in found]


def test_the_mask_written_for_tinys_heads_is_openais_but_for_gzips_header():
    """openai's tiny mask carries its gzip time and system in bytes 4 to 9; the rest, the heads, is the same."""
    written = openai_mask(from_openai_mask(OPENAI["tiny"][0], 4, 6), 4, 6)
    assert written == "ABzY8000000s~`UKn9Fp%m@SkK7Kt=7ytkO"
    theirs = base64.b85decode(OPENAI["tiny"][0])
    ours = base64.b85decode(written)
    assert ours[:4] + ours[10:] == theirs[:4] + theirs[10:]


def test_the_whisper_cpp_form_is_the_cpp_its_presets_are_written_in():
    text = whisper_cpp_heads([(2, 2), (3, 0)])
    assert text.splitlines() == [
        "static const whisper_ahead g_aheads_custom[] = { {2, 2}, {3, 0} };",
        "cparams.dtw_token_timestamps = true;",
        "cparams.dtw_aheads_preset = WHISPER_AHEADS_CUSTOM;",
        "cparams.dtw_aheads = { 2, g_aheads_custom };",
    ]
    with pytest.raises(UsageError, match="not a C identifier"):
        whisper_cpp_heads([(0, 0)], name="bad name")


@pytest.mark.parametrize(("text", "words"), [
    ("no array here", "no whisper_ahead array"),
    ("static const whisper_ahead a[] = { {1, 2}, oops };", "something other than"),
    ("static const whisper_ahead a[] = { };", "something other than"),
])
def test_a_whisper_cpp_text_that_is_not_heads_is_one_line(text, words):
    with pytest.raises(UsageError, match=words):
        from_whisper_cpp(text)


def test_a_mask_of_another_model_or_not_a_mask_is_one_line():
    mask, _, _ = OPENAI["tiny"]
    with pytest.raises(UsageError, match=r"holds 24 heads, not the 4 × 8 = 32"):
        from_openai_mask(mask, 4, 8)
    with pytest.raises(UsageError, match=r"holds more than 16 heads, not the 4 × 4 = 16"):
        from_openai_mask(mask, 4, 4)
    with pytest.raises(UsageError, match="not base85 of gzip"):
        from_openai_mask("not a mask at all ~~~", 4, 6)
    bomb = base64.b85encode(gzip.compress(b"\x01" * 10_000_000))
    with pytest.raises(UsageError, match=r"holds more than 24 heads, not the 4 × 6 = 24"):
        from_openai_mask(bomb, 4, 6)  # decompressed one byte past 24, no further
    twos = base64.b85encode(gzip.compress(bytes([2] * 24)))
    with pytest.raises(UsageError, match="other than true and false"):
        from_openai_mask(twos, 4, 6)
    with pytest.raises(UsageError, match="outside a decoder of 4 layers"):
        openai_mask([(4, 0)], 4, 6)


def test_transformers_reads_the_generation_config_form(tmp_path):
    """transformers' generate(return_token_timestamps=True) runs on a checkpoint whose alignment_heads is the list
    written here (from a mask written here)."""
    import soundfile  # noqa: F401  (the test extra installs the sound extra)
    import torch
    from audio_models import clip, tiny_whisper

    from attnviz.audio.hearing import hear
    from attnviz.audio.model import load_whisper

    mask = openai_mask([(1, 0), (1, 3)], 2, 4)
    heads = generation_config_heads(from_openai_mask(mask, 2, 4))
    model = load_whisper(str(tiny_whisper(tmp_path / "tiny", alignment_heads=heads, init_std=0.4, seed=2)))
    extracted = model.features(hear(clip(tmp_path / "a.wav"), model).samples, sampling_rate=16_000,
                               return_tensors="pt", return_attention_mask=True)
    with torch.no_grad():
        out = model.network.generate(extracted.input_features, attention_mask=extracted.attention_mask,
                                     language="en", task="transcribe", max_new_tokens=6, return_timestamps=False,
                                     return_token_timestamps=True, return_dict_in_generate=True)
    assert model.network.generation_config.alignment_heads == [[1, 0], [1, 3]]
    assert out["token_timestamps"].shape == out["sequences"].shape
