"""A picture family is one layout record (issue 59, item 6; issue 60, item 2): a plugin's layout for a family attnviz
lacks (DeiT: a CLS token and a distillation token before the patches) is read by the commands end to end, listed
with the families in --image's help and the error that asks for a picture model, and a layout that would shadow
another's model type is refused (it used to be ignored without a word)."""

from __future__ import annotations

import pytest
import torch

from attnviz.images.layouts import LAYOUTS, Grid, PatchLayout, families, needs_picture_model


def deit_grid(config, height: int, width: int) -> Grid:
    patch = int(config.get("patch_size") or 16)
    return Grid(("[CLS]", "[DIST]"), height // patch, width // patch, patch)


DEIT = PatchLayout("deit", ("deit",), "DeiT: a CLS and a distillation token, then the patches", deit_grid,
                   family="DeiT")


@pytest.fixture(scope="module")
def deit(tmp_path_factory):
    from transformers import DeiTConfig, DeiTImageProcessor, DeiTModel

    folder = tmp_path_factory.mktemp("deit") / "deit"
    torch.manual_seed(0)
    DeiTModel(DeiTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=37), add_pooling_layer=False).save_pretrained(folder)
    DeiTImageProcessor(size={"height": 32, "width": 32}, do_center_crop=False).save_pretrained(folder)
    return folder


@pytest.fixture
def picture(tmp_path):
    from PIL import Image

    path = tmp_path / "p.png"
    Image.new("RGB", (40, 30), (200, 40, 40)).save(path)
    return path


def test_a_plugin_layout_reads_its_family_end_to_end(deit, picture, run_cli, tmp_path):
    from transformers import DeiTImageProcessor, DeiTModel

    from attnviz.images.encoder import image_attention

    refused = run_cli("heatmap", "--image", str(picture), "--model", str(deit))
    assert refused.exit_code != 0 and "no patch layout" in refused.stderr, refused.stderr
    with LAYOUTS.registered(DEIT):
        assert "DeiT" in families(language=False) and "DeiT" in needs_picture_model()
        result = image_attention(picture, str(deit))
        assert result.tokens[:2] == ["[CLS]", "[DIST]"] and len(result.tokens) == 2 + 16
        placed = result.pictures[0]
        assert (placed.layout, placed.specials, placed.rows, placed.cols) == ("deit", 2, 4, 4)
        model = DeiTModel.from_pretrained(deit, attn_implementation="eager").eval()
        from PIL import Image

        pixels = DeiTImageProcessor.from_pretrained(deit)(Image.open(picture).convert("RGB"),
                                                          return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            reference = torch.stack([a[0] for a in model(pixel_values=pixels, output_attentions=True).attentions])
        torch.testing.assert_close(result.attentions, reference, atol=1e-5, rtol=1e-5)
        drawn = run_cli("heatmap", "--image", str(picture), "--model", str(deit), "--out", str(tmp_path / "d.png"))
        assert drawn.exit_code == 0, drawn.stderr
        shown = run_cli("heatmap", "--help")
        assert "DeiT" in " ".join(shown.stdout.split())
    assert "deit" not in LAYOUTS


def test_a_layout_for_a_model_type_another_has_is_refused():
    with pytest.raises(ValueError, match="model type 'llava' is the llava layout's already"):
        LAYOUTS.register(PatchLayout("my_llava", ("llava",), "a second LLaVA", deit_grid, language=True))
    assert "my_llava" not in LAYOUTS
    with pytest.raises(TypeError, match="vit"):
        LAYOUTS["vit"] = DEIT  # type: ignore[assignment]
