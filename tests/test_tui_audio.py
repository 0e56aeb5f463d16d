"""``attnviz tui --audio`` (issue 61 item 1): a Whisper hearing a clip explored at the keyboard. Its source
(attnviz.audio.heard_source) gives, with no text, the model's own transcript and with a typed text that text
teacher-forced, each time ``whisper_attention``'s result; the app opens on the cross-attention at once (no text to
type first); the refusals are one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("textual")
pytest.importorskip("soundfile")

from audio_models import CLIP, ORGANISM
from test_tui import drive, pane, settled, until  # the app's own test helpers

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def source():
    from attnviz.api import load

    return load(ORGANISM, audio=CLIP)


def test_no_text_is_its_own_transcript_and_a_typed_text_is_teacher_forced(source):
    from attnviz.audio.whisper import whisper_attention
    from attnviz.tui.explorer import Explorer

    explorer = Explorer(source, kind="cross")
    assert explorer.starts_alone and not explorer.fixed
    explorer.compute(None)
    alone = whisper_attention(CLIP, ORGANISM)
    kept = alone.metadata["audio_positions"]  # the clip's 100 positions: the window's padding left out
    assert len(explorer.result.tokens) == kept == 100 and explorer.result.metadata["cropped_to_clip"]
    np.testing.assert_allclose(explorer.result.cross_attentions.numpy(), alone.cross_attentions[..., :kept].numpy(),
                               atol=1e-6)
    np.testing.assert_allclose(explorer.result.attentions.numpy(), alone.attentions[:, :, :kept, :kept].numpy(),
                               atol=1e-6)
    assert not explorer.result.metadata["teacher_forced"]
    explorer.compute("the cat")
    forced = whisper_attention(CLIP, ORGANISM, text="the cat")
    assert explorer.result.metadata["teacher_forced"] and explorer.result.metadata["transcript"].strip() == "the cat"
    np.testing.assert_allclose(explorer.result.cross_attentions.numpy(),
                               forced.cross_attentions[..., :kept].numpy(), atol=1e-6)
    assert explorer.result.target_tokens == forced.target_tokens


def test_the_app_opens_on_the_cross_attention_without_a_text(source):
    from attnviz.tui.app import AttnvizTUI
    from attnviz.tui.explorer import Explorer

    app = AttnvizTUI(text=None, loader=lambda: Explorer(source, kind="cross"))

    async def script(pilot) -> None:
        await until(pilot, lambda: app.explorer is not None and app.explorer.shown and settled(app), "the clip shown")
        shown = pane(app)
        assert "whisper-organism" in shown and "cross" in shown, shown

    drive(app, script, size=(120, 40))


@pytest.mark.parametrize(("args", "words"), [
    (["--pair", "x"], ["--pair", "--audio"]),
    (["--model", "sample_configs/tiny.toml"], ["not a Whisper"]),
])
def test_refusals_are_one_line(run_cli, args, words):
    found = run_cli("tui", "--audio", CLIP, *(["--model", ORGANISM] if "--model" not in args else []), *args)
    assert found.exit_code != 0 and found.stderr.count("\n") == 1, found.stderr
    assert all(w in found.stderr for w in words), found.stderr
