"""tui --image (issue 53): view 8 shows the selected token's attention over the picture, its share checked against
the result's row (itself equal to transformers' eager attention, tests/test_images.py); a text-only result has no
picture view; the command's refusals are one line."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("textual")


@pytest.fixture
def picture(tmp_path) -> Path:
    from PIL import Image

    path = tmp_path / "picture.png"
    Image.fromarray((np.random.RandomState(0).rand(48, 64, 3) * 255).astype(np.uint8)).save(path)
    return path


def test_view_8_draws_the_selected_tokens_attention_over_the_picture(llava, picture):
    from test_tui import drive, keys, pane

    from attnviz.images.vlm import load_vlm
    from attnviz.tui.app import AttnvizTUI
    from attnviz.tui.explorer import Explorer

    explorer = Explorer(load_vlm(str(llava)), pictures=(picture,))
    app = AttnvizTUI(explorer, "what is in the picture ?", colour=False)

    async def script(pilot) -> None:
        result = explorer.full  # every image token; the matrices show the picture as one token
        assert "picture" in explorer.views() and result.metadata["images"][0]["rows"] == 4
        assert explorer.result.tokens[0] == "<image 1: 4×4>" and explorer.result.tokens[1:] == result.tokens[16:]
        assert "<image␣1:␣4×4>" in pane(app)  # view 1, the heatmap (a label shows its spaces)
        await keys(pilot, "right", "down", "8")  # layer 1, head 1, the picture view
        assert explorer.view == "picture"
        every = result.metadata["images"][0]["image_positions"]
        shown = pane(app)
        last = len(result.tokens) - 1
        share = float(result.attentions[1, 1, last, every].double().sum())
        assert f"? (token {last}), layer 1 head 1: {share:.0%} of its attention on the picture" in shown
        weights = result.attentions[1, 1, last, every].reshape(4, 4)
        index = int(weights.argmax())
        assert f"most on r{index // 4}c{index % 4}" in shown
        assert len(re.findall("▀▀▀▀", shown)) == 2  # 4 rows of 4 patches, two per line
        await keys(pilot, "left_square_bracket")  # the token before: "picture"
        assert f"picture (token {last - 1})" in pane(app)

    drive(app, script)


def test_a_text_only_result_has_no_picture_view_and_the_command_refuses_in_one_line(run_cli, tiny_hf, picture,
                                                                                  llava):
    from attnviz.sources.resolve import load_source
    from attnviz.tui.explorer import Explorer

    explorer = Explorer(load_source(tiny_hf["bert"]))
    explorer.compute("a cat")
    assert "picture" not in explorer.views()
    for args, message in [
        (("tui", "a text", "--image", str(picture), "--model", str(llava), "--pair", "b"), "--pair"),
        (("tui", "--image", str(picture), "--image", str(picture), "--model", str(llava)), "pictures without a text"),
        (("tui", "a", "--image", str(picture.with_name("none.png")), "--model", str(llava)), "none.png"),
    ]:
        refused = run_cli(*args)
        assert refused.exit_code != 0 and message in refused.stderr, (args, refused.stderr)
        assert refused.stderr.count("\n") == 1


def test_expand_images_keeps_every_image_token_in_the_matrices(llava, picture):
    """--expand-images: the matrices' result is the full one; without it, each picture is one token whose row is its
    tokens' mean and whose column their sum (checked against the full result)."""
    import torch

    from attnviz.images.vlm import load_vlm
    from attnviz.tui.explorer import Explorer

    model = load_vlm(str(llava))
    expanded = Explorer(model, pictures=(picture,), expand=True)
    expanded.compute("what is in the picture ?")
    assert expanded.result is expanded.full and expanded.result.tokens[0] == "<img r0c0>"
    collapsed = Explorer(model, pictures=(picture,))
    collapsed.compute("what is in the picture ?")
    full, small = collapsed.full.attentions.double(), collapsed.result.attentions.double()
    image = collapsed.full.metadata["images"][0]["image_positions"]
    torch.testing.assert_close(small[:, :, 1:, 0], full[:, :, 16:][..., image].sum(-1), atol=1e-6, rtol=0)
    torch.testing.assert_close(small[:, :, 0, 0], full[:, :, image][..., image].sum(-1).mean(-1), atol=1e-6, rtol=0)
