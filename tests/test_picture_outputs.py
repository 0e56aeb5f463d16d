"""Pictures a person can read (issue 59, items 2-4): every --out kind the text side writes, written with --image and
read back; the PNG of a 64 × 48 picture at a readable size; one colour scale across a figure's panels (uniform heads
are no longer painted as hot as a reader); the planted patch reader hottest on its patch in the numbers, the JSON, the
PNG's pixels and the terminal without colour; a crop said and drawn."""

from __future__ import annotations

import json

import numpy as np
import pytest
from picture_models import planted_vit
from PIL import Image

from attnviz.result import AttentionResult

TARGET = 5  # the planted head's patch: row 1, column 1 of the 4 × 4 grid


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    return planted_vit(tmp_path_factory.mktemp("outputs") / "vit", TARGET)


@pytest.fixture
def grey(tmp_path):
    """A 64 × 48 picture of one grey: whatever colour a panel shows is the heat's."""
    path = tmp_path / "grey.png"
    Image.new("RGB", (64, 48), (128, 128, 128)).save(path)
    return path


def test_every_out_kind_is_written_and_reads_back(run_cli, vit, grey, tmp_path):
    outs = {suffix: tmp_path / f"heat{suffix}" for suffix in (".png", ".svg", ".pdf", ".html", ".npz", ".json")}
    done = run_cli("heatmap", "--image", str(grey), "--model", str(vit), "--head", "all",
                   *[a for path in outs.values() for a in ("--out", str(path))])
    assert done.exit_code == 0, done.stderr
    with Image.open(outs[".png"]) as png:
        assert min(png.size) >= 300, png.size  # a 64 × 48 picture drawn at a readable size
    assert outs[".svg"].read_text(encoding="utf-8").lstrip().startswith(("<?xml", "<svg"))
    assert outs[".pdf"].read_bytes().startswith(b"%PDF")
    page = outs[".html"].read_text(encoding="utf-8")
    assert "<html" in page.lower() and '"pictures"' in page  # the picture page, with its picture view's data
    loaded = AttentionResult.load(outs[".npz"])
    assert loaded.pictures[0].rows == 4 and loaded.pictures[0].cols == 4
    document = json.loads(outs[".json"].read_text(encoding="utf-8"))
    assert len(document["panels"]) == 4 and document["pictures"][0]["layout"] == "vit"
    assert document["scale"]["per_panel"] is False


def test_the_planted_reader_is_hottest_on_its_patch_in_the_numbers_and_the_pixels(run_cli, vit, grey, tmp_path):
    out = tmp_path / "reader.json"
    assert run_cli("heatmap", "--image", str(grey), "--model", str(vit), "--head", "0", "--out", str(out)).exit_code == 0
    weights = np.array(json.loads(out.read_text(encoding="utf-8"))["panels"][0]["weights"])
    assert np.unravel_index(weights.argmax(), weights.shape) == divmod(TARGET, 4)
    # The pixels: the heat over the one-grey picture, a block per patch, is brightest on the planted patch.
    from attnviz.images.encoder import image_attention
    from attnviz.render import figure_style
    from attnviz.render.picture_figure import render_picture_figure
    from attnviz.views.picture_heat import layer_head_panels, picture_heat

    result = image_attention(grey, str(vit))
    view = picture_heat(result, layer_head_panels(result, layers=[0], heads=[0], query=0), who="CLS", what="head 0",
                        smooth=False, cmap="magma")
    figures = []
    real = figure_style.save_figure
    import attnviz.render.picture_figure as module

    module.save_figure = lambda fig, path: figures.append(fig) or real(fig, path)  # type: ignore[assignment]
    try:
        png = render_picture_figure(view, [Image.open(grey).convert("RGB")], tmp_path / "reader.png")
    finally:
        module.save_figure = real  # type: ignore[assignment]
    box = figures[0].axes[0].get_window_extent()
    pixels = np.asarray(Image.open(png).convert("RGB"), dtype=np.float64)
    height = pixels.shape[0]
    inside = pixels[int(height - box.y1) + 2 : int(height - box.y0) - 2, int(box.x0) + 2 : int(box.x1) - 2].sum(-1)
    cells = np.array([[inside[r * inside.shape[0] // 4 : (r + 1) * inside.shape[0] // 4,
                             c * inside.shape[1] // 4 : (c + 1) * inside.shape[1] // 4].mean() for c in range(4)]
                      for r in range(4)])
    assert np.unravel_index(cells.argmax(), cells.shape) == divmod(TARGET, 4), cells.round()


def test_the_terminal_grid_carries_the_weights_without_colour(run_cli, vit, grey):
    shown = run_cli("heatmap", "--image", str(grey), "--model", str(vit), "--head", "0", env={"NO_COLOR": "1"})
    assert shown.exit_code == 0, shown.stderr
    assert "\x1b[" not in shown.stdout and "scale ' '" in shown.stdout
    rows = {line.split()[0]: line for line in shown.stdout.splitlines() if line[:2] in ("r0", "r1", "r2", "r3")}
    assert "█" in rows["r1"] and all("█" not in rows[r] for r in ("r0", "r2", "r3"))
    at = rows["r1"].index("█")
    assert rows["r1"][at:at + 2] == "██" and at == len("r1 ") + 2 * (TARGET % 4)  # column c1, two characters a cell


def test_one_scale_across_the_panels_and_per_panel_when_asked(run_cli, vit, grey, tmp_path):
    shared, own = tmp_path / "shared.json", tmp_path / "own.json"
    for path, extra in ((shared, []), (own, ["--per-panel-scale"])):
        assert run_cli("heatmap", "--image", str(grey), "--model", str(vit), "--head", "all", "--out", str(path),
                       *extra).exit_code == 0
    one, each = (json.loads(p.read_text(encoding="utf-8")) for p in (shared, own))
    top = max(max(max(row) for row in panel["weights"]) for panel in one["panels"])
    assert one["scale"]["max"] == pytest.approx(top) and "one colour scale" in one["title"]
    assert each["scale"]["per_panel"] is True and "each panel scaled to its own largest" in each["title"]


def test_a_centre_crop_is_said_and_hatched(run_cli, tmp_path, grey):
    """A processor that centre-crops (CLIP's) leaves bands of the picture unseen: the note says so."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    folder = tmp_path / "clip"
    CLIPVisionModel(CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=4, intermediate_size=37)).save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    out = tmp_path / "crop.json"
    done = run_cli("heatmap", "--image", str(grey), "--model", str(folder), "--out", str(out), "--out",
                   str(tmp_path / "crop.png"))
    assert done.exit_code == 0, done.stderr
    assert any("cropped" in note for note in json.loads(out.read_text(encoding="utf-8"))["notes"])


def test_rollout_writes_every_kind_too(run_cli, vit, grey, tmp_path):
    outs = [tmp_path / f"r{suffix}" for suffix in (".png", ".svg", ".json", ".npz")]
    done = run_cli("rollout", "--image", str(grey), "--model", str(vit), *[a for p in outs for a in ("--out", str(p))])
    assert done.exit_code == 0, done.stderr
    assert all(p.stat().st_size > 0 for p in outs)


def test_a_panel_title_a_font_lacks_is_named_not_drawn_as_a_box(tmp_path, monkeypatch, grey):
    """`generate --image --out answer.png` drew `##დ` as an empty box without a word: the figure's titles go through
    the font chain, and what no installed font has is named once."""
    from test_render_image import _dejavu

    from attnviz.render import fonts
    from attnviz.render.colors import ColorScale
    from attnviz.render.image import MissingGlyphsWarning
    from attnviz.render.picture_figure import render_picture_figure
    from attnviz.result.placement import PatchGrid, Placement
    from attnviz.views.picture_heat import PictureHeat, PicturePanel

    monkeypatch.setattr(fonts, "_installed", lambda: [(fonts.DEFAULT_FAMILY, _dejavu())])
    placed = Placement("vit", (64, 48), 1, 0, 16, tuple(range(1, 5)),
                       (PatchGrid.of("patches", 2, 2, range(1, 5), [(0, 0, 32, 24), (32, 0, 64, 24), (0, 24, 32, 48),
                                                                    (32, 24, 64, 48)]),))
    view = PictureHeat("model · each new token", [PicturePanel("'##猫' (token 7)", np.eye(2), 0)], [placed],
                       ColorScale(0.0, 1.0, "magma"), 1)
    with pytest.warns(MissingGlyphsWarning, match="猫"):
        render_picture_figure(view, [Image.open(grey).convert("RGB")], tmp_path / "answer.png")


def test_generate_on_the_picture_organism_titles_each_new_token_in_full(run_cli, tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "answer.json"
    done = run_cli("generate", "what is here ?", "--image", str(root / "examples" / "house.png"), "--model",
                   str(root / "sample_configs" / "organism_llava.toml"), "-n", "2", "--out", str(out), "--out",
                   str(tmp_path / "answer.png"))
    assert done.exit_code == 0, done.stderr
    document = json.loads(out.read_text(encoding="utf-8"))
    assert len(document["panels"]) == 2 and all("(token " in p["title"] for p in document["panels"])


def test_a_checkpoints_generation_config_cannot_change_the_greedy_answer(tmp_path):
    """generate --image called transformers' generate without the decoding settings said, so a checkpoint's
    generation_config.json (here: the first answer token banned) changed its answer; the text engines' do not."""
    from pathlib import Path

    from attnviz.images.vlm import vlm_attention
    from attnviz.organisms import save_organism

    root = Path(__file__).resolve().parent.parent
    folder = save_organism(str(root / "sample_configs" / "organism_llava.toml"), tmp_path / "llava")
    picture = root / "examples" / "house.png"
    first = vlm_attention("what is here ?", picture, str(folder), max_new_tokens=2)
    answer = first.token_ids[first.metadata["prompt_length"]:]
    config = folder / "generation_config.json"
    found = json.loads(config.read_text(encoding="utf-8")) if config.exists() else {}
    config.write_text(json.dumps({**found, "bad_words_ids": [[answer[0]]], "num_beams": 3,
                                  "repetition_penalty": 50.0}), encoding="utf-8")
    again = vlm_attention("what is here ?", picture, str(folder), max_new_tokens=2)
    assert again.token_ids[again.metadata["prompt_length"]:] == answer


def test_heads_draws_every_head_over_the_picture(run_cli, tmp_path):
    """`heads --image --out heads.png`: each head's attention from the text over the picture, a panel per head on
    one scale, where the table names shares and sinks (the picture organism's patch reader on its patch)."""
    from pathlib import Path

    from attnviz.api import heads_over_pictures, vlm_attention

    root = Path(__file__).resolve().parent.parent
    model, picture = root / "sample_configs" / "organism_llava.toml", root / "examples" / "house.png"
    out = tmp_path / "heads.png"
    done = run_cli("heads", "what is here ?", "--image", str(picture), "--model", str(model), "--out", str(out))
    assert done.exit_code == 0, done.stderr
    with Image.open(out) as png:
        assert min(png.size) >= 300
    view = heads_over_pictures(vlm_attention("what is here ?", picture, str(model), rows="text"))
    reader = next(p for p in view.panels if p.title == "L0 H0")
    assert np.unravel_index(reader.weights.argmax(), reader.weights.shape) == (2, 3)  # its declared patch
