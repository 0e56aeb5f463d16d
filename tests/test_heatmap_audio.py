"""``attnviz heatmap --audio`` (issue 61 item 2) on the sound organism, whose alignment head L1H0 reads, as it writes
the i-th word, the positions of its declared time: the terminal's strongest cell in each word's row of L1H0 lies in
the time block holding that word's declared time (shade characters under NO_COLOR, the brightest colour with
colour); the view's numbers are ``whisper_attention``'s cross-attention cropped to the clip, read here on their own;
the PNG is written at a readable size and not blank; every refusal is one line with a non-zero exit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("soundfile")

from audio_models import CLIP, ORGANISM, one_error_line

from attnviz.audio.organism_spec import read_sound_spec
from attnviz.render.colors import SHADES

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def spec():
    return read_sound_spec(ORGANISM)


@pytest.fixture(scope="module")
def shown():
    from attnviz.views.sound_heat import sound_heatmap

    return sound_heatmap(CLIP, ORGANISM, layer=1, head=0)


def word_rows(lines: list[str], spec) -> list[str]:
    """The grid's lines of each declared word, in order (a word such as 'the' may come twice)."""
    found, words = [], list(spec.tokens)
    for line in lines:
        if words and len(line) > 15 and line[:14].strip() == words[0] and line[14] == " ":  # a 14-cell label
            found.append(line)
            words.pop(0)
    assert not words, lines
    return found


def block_of(seconds: float, step: float) -> int:
    return int(np.floor(seconds / step + 1e-9))


@pytest.mark.parametrize("width", [70, 100, 160])
def test_no_color_the_darkest_shade_of_each_word_sits_in_its_declared_time(run_cli, spec, width):
    r = run_cli("heatmap", "--audio", CLIP, "--model", ORGANISM, "--layer", "1", "--head", "0", "--width", str(width),
                env={"NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    assert "\x1b" not in r.stdout
    step = float(re.search(r"each column ([\d.]+)\s+s", r.stdout).group(1))
    for word, start, line in zip(spec.tokens, spec.times[:-1], word_rows(r.stdout.splitlines(), spec), strict=True):
        grid = line[15:]  # the renderer's 14-cell labels and a space
        cells = [grid[i : i + 2] for i in range(0, len(grid.rstrip()) + 1, 2)]
        strengths = [SHADES.index(c[0]) if c and c[0] in SHADES else 0 for c in cells]
        assert int(np.argmax(strengths)) == block_of(start, step), (word, start, line)
        assert max(strengths) == len(SHADES) - 1


def test_with_colour_the_brightest_cell_of_each_word_sits_in_its_declared_time(shown, spec):
    from rich.console import Console

    from attnviz.render.terminal import render_terminal

    console = Console(width=100, force_terminal=True, color_system="truecolor", record=True)
    view = shown.heat.terminal_view(100)
    step = float(re.search(r"each column ([\d.]+) s", view.title).group(1))
    with console.capture() as captured:
        render_terminal(view, console)
    lines = captured.get().splitlines()
    rows = [line for line in lines if "48;2;" in line and not line.startswith("scale")]
    assert len(rows) == len(shown.heat.tokens)
    first = shown.result.metadata["prompt_length"] - 1  # the rows writing the prompt's tokens after the first
    for i, (word, start) in enumerate(zip(spec.tokens, spec.times[:-1], strict=True)):
        index = first + i
        assert shown.heat.tokens[index] == word
        colours = [tuple(map(int, m)) for m in re.findall(r"48;2;(\d+);(\d+);(\d+)m", rows[index])]
        light = [0.299 * r + 0.587 * g + 0.114 * b for r, g, b in colours]  # viridis: brighter is stronger
        assert int(np.argmax(light)) == block_of(start, step), (word, rows[index])


def test_the_views_numbers_are_whisper_attentions_cross_attention_cropped(shown):
    from attnviz.audio.whisper import whisper_attention

    result = whisper_attention(CLIP, ORGANISM)
    positions = round(result.metadata["duration"] / 0.02)  # 2.00 s of 0.02-s positions
    assert result.metadata["audio_positions"] == positions == shown.heat.positions
    cross = result.cross_attentions.numpy()
    expected = cross[1, 0, :-1, :positions]  # the rows that write a token (the last reads end of text)
    np.testing.assert_allclose(shown.heat.panels[0], expected, rtol=0, atol=1e-7)
    assert shown.heat.tokens == result.target_tokens[1:]
    blocks = shown.heat.blocks(5, "max")
    np.testing.assert_allclose(blocks[0, :, 3], expected[:, 15:20].max(axis=1), atol=1e-7)
    mean = shown.heat.blocks(5, "mean")
    np.testing.assert_allclose(mean[0, :, 3], expected[:, 15:20].mean(axis=1), atol=1e-7)


def test_every_head_and_the_mean_and_every_layer():
    from attnviz.audio.whisper import whisper_attention
    from attnviz.views.sound_heat import sound_heat

    result = whisper_attention(CLIP, ORGANISM)
    cross = result.cross_attentions.numpy()[:, :, :-1, :100]
    every = sound_heat(result, layer=1, head="all")
    assert every.panel_titles == ["L1H0", "L1H1", "L1H2", "L1H3"]
    np.testing.assert_allclose(every.panels, cross[1], atol=1e-7)
    mean = sound_heat(result, layer=None, head="mean")
    np.testing.assert_allclose(mean.panels, cross.mean(axis=1), atol=1e-6)
    view = every.terminal_view(120)
    assert view.scale.vmax == pytest.approx(float(view.panels.max()))  # one scale across the panels


def test_the_png_is_written_readable_and_not_blank(run_cli, tmp_path):
    from PIL import Image

    png, data = tmp_path / "heat.png", tmp_path / "heat.json"
    r = run_cli("heatmap", "--audio", CLIP, "--model", ORGANISM, "--layer", "1", "--head", "all", "--out", str(png),
                "--out", str(data))
    assert r.exit_code == 0, r.stderr
    image = np.asarray(Image.open(png).convert("RGB"))
    assert min(image.shape[:2]) >= 300
    assert image.std() > 10 and len(np.unique(image.reshape(-1, 3), axis=0)) > 50
    document = json.loads(data.read_text())
    assert document["model"] == "whisper-organism" and len(document["panels"]) == 4
    assert document["tokens"][3:9] == ["the", "cat", "sat", "on", "the", "mat"]


@pytest.mark.parametrize(("args", "words"), [
    (["--image", "examples/cat.png"], ["--image", "--audio"]),
    (["--values"], ["--values"]),
    (["--kind", "cross"], ["--kind"]),
    (["--query", "1"], ["--query"]),
    (["--layer", "7"], ["--layer 7"]),
    (["--head", "9"], ["--head 9"]),
    (["--out", "x.csv"], ["--out"]),
    (["--out", CLIP], ["input"]),
])
def test_refusals_are_one_line(run_cli, args, words):
    r = run_cli("heatmap", "--audio", CLIP, "--model", ORGANISM, *args)
    one_error_line(r, *words)


def test_a_model_that_is_not_a_whisper_is_refused(run_cli):
    r = run_cli("heatmap", "--audio", CLIP, "--model", str(ROOT / "sample_configs" / "tiny.toml"))
    one_error_line(r, "not a Whisper")
