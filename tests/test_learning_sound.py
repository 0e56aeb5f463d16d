"""docs/learning.md's walkthrough of the sound organism ("How a clip becomes frames, and how cross-attention lines
words up with time", and its Chinese twin) computed again from the library: every number the prose works out by hand
is what attnviz and transformers compute on sample_configs/organism_whisper.toml and examples/organism_whisper.flac,
written in both languages, and the terminal outputs the section quotes are the commands' own. (Its python blocks run
in tests/test_doc_examples.py, its bash lines in tests/test_readme_commands.py.)"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("soundfile")
import torch
from audio_models import CLIP, ORGANISM
from docs_text import section

ROOT = Path(__file__).resolve().parent.parent
ENGLISH = "## How a clip becomes frames, and how cross-attention lines words up with time"
CHINESE = "## 一段声音怎样变成帧，交叉注意力又怎样把词和时间对上"
ROW = 4  # the decoder's row that reads 'the' and writes 'cat'


def sections(*, flat: bool = True) -> dict[str, str]:
    """The two parts of the section; ``flat``: their lines joined (with a space in English, none in Chinese), so
    that where a line breaks does not matter."""
    english, chinese = section("learning.md", ENGLISH), section("learning.md", CHINESE)
    if flat:
        english, chinese = " ".join(english.split()), re.sub(r" *\n *", "", chinese)
    return {"en": english, "zh": chinese}


def quoted(text: str, after: str) -> str:
    """The first ```text block after ``after`` in ``text``."""
    return re.search(r"^```text\n(.*?)^```", text[text.index(after):], re.MULTILINE | re.DOTALL).group(1)


def words(text: str) -> list[str]:
    return text.split()  # the terminal's wrapping aside


def power(x: float) -> str:
    """2.09e-12 as the prose writes it: 2.09 · 10⁻¹²."""
    mantissa, exponent = f"{x:.2e}".split("e")
    digits = str(int(exponent)).replace("-", "⁻").translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{mantissa} · 10{digits}"


def minus(x: float, places: int) -> str:
    return f"{x:.{places}f}".replace("-", "−")


@pytest.fixture(scope="module")
def organism():
    """The organism loaded, its clip heard and one teacher-forced pass of its own transcript: layer 1's
    cross-attention scores, every cross weight, and what enters layer 1's cross-attention (its layer norm applied)."""
    from attnviz.audio.model import load_whisper
    from attnviz.audio.whisper import forward

    loaded = load_whisper(ORGANISM)
    cross = loaded.network.model.decoder.layers[1].encoder_attn
    entering = {}

    def keep(module, args, kwargs):
        entering["hidden"] = (kwargs["hidden_states"] if "hidden_states" in kwargs else args[0])[0].detach()
        entering["memory"] = (kwargs["key_value_states"] if "key_value_states" in kwargs else args[1])[0].detach()

    hook = cross.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        run = forward(CLIP, loaded, text=None, language=None, task="transcribe", encoder=False, weights=True,
                      scores=[1], text_only=True)
    finally:
        hook.remove()
    return loaded, run, entering


def test_the_clip_its_frames_and_positions(organism):
    loaded, run, _ = organism
    heard = run.heard
    text = sections()
    assert (len(heard.samples), heard.rate, loaded.hop_length, loaded.features.n_fft) == (32_000, 16_000, 160, 400)
    assert tuple(heard.features.shape) == (1, 80, 3_000) and loaded.window_samples == 480_000
    assert (heard.frames, heard.positions, loaded.positions, loaded.stride) == (200, 100, 1_500, 2)
    encoder = loaded.network.model.encoder
    assert (encoder.conv1.stride[0], encoder.conv2.stride[0], encoder.conv2.kernel_size[0]) == (1, 2, 3)
    deaf = [float(conv.weight.detach().abs().max()) for conv in (encoder.conv1, encoder.conv2)]
    assert deaf == [0.0, 0.0]  # the organism hears nothing
    for k, tone in enumerate((220, 330, 262, 392, 220, 294)):  # a burst in each word's 0.3 s
        part = heard.samples[k * 4_800 : (k + 1) * 4_800]
        assert round(float(np.argmax(np.abs(np.fft.rfft(part, 64_000)))) / 4) == tone  # 0.25-Hz bins
        sounding = np.nonzero(np.abs(part) > 1e-3)[0] / 16_000
        assert sounding[0] == pytest.approx(0.025, abs=2e-3) and sounding[-1] == pytest.approx(0.255, abs=2e-3)
    assert float(np.abs(heard.samples[28_800:]).max()) == 0  # silence from 1.8 s
    mel = heard.features[0]
    loudest, floor = float(mel.max()), float(mel[:, heard.frames:].max())
    assert float(mel[:, heard.frames:].min()) == floor and floor == pytest.approx(loudest - 2, abs=1e-5)
    bins = int(mel[:, 10].argmax()), int(mel[:, 45].argmax())
    assert bins == (5, 8)
    for language, body in text.items():
        for number in ("32,000", "480,000", "3,000", "1,500", f"{loudest:.3f}", minus(floor, 3),
                       "(3,000 + 2 × 1 − 3) // 2 + 1"):
            assert number in body, (language, number)
    assert "loudest in mel bin 5, frame 45 (0.45 s, 330 Hz) in bin 8" in text["en"]
    assert "最响的是第 5 个梅尔频带，第 45 帧（0.45 秒，330 Hz）是第 8 个" in text["zh"]


def test_one_words_cross_attention_by_hand(organism):
    loaded, run, entering = organism
    cross = loaded.network.model.decoder.layers[1].encoder_attn
    size = cross.head_dim
    with torch.no_grad():
        query = cross.q_proj(entering["hidden"])[ROW, :size]  # head 0 (the scaling left to the division below)
        keys = cross.k_proj(entering["memory"])[:, :size]
    assert query.nonzero().flatten().tolist() == [1] and entering["hidden"][ROW].nonzero().flatten().tolist() == [2, 3]
    assert [int(keys[p].nonzero()) for p in (14, 15, 30)] == [0, 1, 2]
    entry, q, k = float(entering["hidden"][ROW, 2]), float(query[1]), float(keys[15, 1])
    memory = float(entering["memory"][15, 1])
    score = float(run.scores[1][0, ROW, 15])
    assert q * k / math.sqrt(size) == pytest.approx(score, rel=1e-5)
    row = run.scores[1][0, ROW]
    assert torch.equal(torch.nonzero(row > 1).flatten(), torch.arange(15, 30))  # cat's 15 positions
    assert float(row[row < 1].abs().max()) < 1e-5  # the other 1,485 score 0
    weights = run.cross[1, 0, ROW]
    tiny = math.exp(-score)
    assert float(weights[15]) == pytest.approx(1 / (15 + 1485 * tiny), rel=1e-5)
    assert float(weights[14]) == pytest.approx(tiny / 15, rel=1e-3)
    for language, body in sections().items():
        for number in (f"{memory:.2f}", f"{entry:.3f}", f"{q:.1f}", f"{k:.2f}", f"{q * k:.1f}",
                       f"{math.sqrt(size):.3f}",
                       f"**{score:.1f}**", f"**{float(weights[15]):.4f}**", f"**{power(float(weights[14]))}**",
                       power(1485 * tiny), power(tiny), "1,485", f"{float(weights[14]):.3g}"):
            assert number in body, (language, number)


def test_from_weights_to_word_times(organism):
    from attnviz.audio.organism_spec import read_sound_spec
    from attnviz.audio.timing import alignment_matrix, decoder_of, word_alignment

    loaded, run, _ = organism
    heads = [tuple(h) for h in loaded.network.generation_config.alignment_heads]
    assert heads == [(1, 0)]
    positions = run.heard.positions
    cropped = torch.softmax(run.scores[1][0, :, :positions].double(), dim=-1)
    column = cropped[:, 20]
    mean, std = float(column.mean()), float(column.std(unbiased=False))
    assert [round(float(v), 4) for v in column[:5]] == [0.01, 0.01, 0.01, 0, round(1 / 15, 4)]
    assert float(cropped[ROW + 5, 95]) == pytest.approx(0.1)  # end of text's row, on 90-99
    normalised = alignment_matrix(run.scores, heads, positions, scores=True, width=1)  # before the median filter
    z = [round(float(v), 2) for v in normalised[:, 20]]
    assert z == [0.06] * 3 + [-0.47, 3.08] + [-0.47] * 6
    filtered = alignment_matrix(run.scores, heads, positions, scores=True)
    edge = round(float(filtered[ROW, 14]), 2), round(float(filtered[ROW, 15]), 2)
    assert edge == (-0.47, 3.08)
    found = word_alignment(run.scores, run.logits, run.read, positions, decoder_of(loaded), 50.0, heads)
    starts = [int(found.columns[found.rows == r][0]) for r in range(int(found.rows.max()) + 1)]
    times = [c / 50 for c in starts]
    assert times == list(read_sound_spec(ORGANISM).times) == [0.0, 0.3, 0.6, 0.9, 1.2, 1.5, 1.8]
    assert [w.start for w in found.words] + [found.words[-1].end] == times
    text = sections()
    for language, body in text.items():
        for number in (f"{mean:.5f}", f"{std:.4f}", "3.08", "−0.47", "0.06", "7 × 100"):
            assert number in body, (language, number)
    assert "0, 15, 30, 45, 60, 75, 90" in text["en"] and "0.0, 0.3, 0.6, 0.9, 1.2, 1.5, 1.8" in text["en"]
    assert "0、15、30、45、60、75、90" in text["zh"] and "0.0、0.3、0.6、0.9、1.2、1.5、1.8" in text["zh"]


def test_the_quoted_outputs_are_the_commands_own(run_cli):
    """heatmap, align and heads as the section quotes them (its English part), and heads' numbers by hand."""
    english = sections(flat=False)["en"]
    line = "--model sample_configs/organism_whisper.toml"
    for command, after in ((["heatmap", "--audio", CLIP, "--layer", "1", "--head", "0"], "The heatmap is the answer"),
                           (["align", CLIP], "assert times == list("),
                           (["heads", "--audio", CLIP, "--sort", "diagonal"], "**What the other commands show.**")):
        assert f"attnviz {command[0]} " in english and line in english
        r = run_cli(*command, "--model", ORGANISM)
        assert r.exit_code == 0, r.stderr
        shown = words(quoted(english, after))
        assert " ".join(shown) in " ".join(words(r.stdout)), (command[0], r.stdout)
        if command[0] == "heads":
            planted = next(row.split() for row in r.stdout.splitlines() if row.split()[:2] == ["1", "0"])
            clip, entropy = float(planted[2]), float(planted[3])
    assert clip == round((6 + 10 / 1410) / 7, 3) == 0.858  # the end-of-text row: 10 of positions 90-1,499 in the clip
    assert entropy == round((6 * math.log(15) + math.log(10)) / (7 * math.log(100)), 3) == 0.575
    for language, body in sections().items():
        for number in ("(6 + 10 / 1,410) / 7 = 0.858", f"{math.log(15) / math.log(100):.3f}", "0.575",
                       "100 / 1,500 = 0.067"):
            assert number in body, (language, number)


@pytest.mark.heavy
def test_the_chinese_organism_quoted_in_the_chinese_part(run_cli, tmp_path):
    """The Chinese part's organism (its TOML as the section gives it; a build of a few seconds): align's quoted output,
    CJK words in their columns, is the command's own."""
    chinese = sections(flat=False)["zh"]
    toml = re.search(r"^```toml\n(.*?)^```", chinese, re.MULTILINE | re.DOTALL).group(1)
    (tmp_path / "organism_zh.toml").write_text(toml, encoding="utf-8")
    r = run_cli("align", CLIP, "--model", str(tmp_path / "organism_zh.toml"))
    assert r.exit_code == 0, r.stderr
    shown = quoted(chinese, "attnviz align examples/organism_whisper.flac --model organism_zh.toml")
    assert " ".join(words(shown)) in " ".join(words(r.stdout))
    assert "猫     0.00  0.30" in shown and [line.split()[0] for line in shown.splitlines()[3:]] == list("猫坐在垫子上")
