"""Picture organisms (issue 59, item 1): a vision-language organism and an image encoder organism, their heads
planted by hand from a TOML, make the patterns their records declare on any picture (the patch reader hottest on its
patch, the first-row head on row 0, the text-only head off the picture, the visual sink drawing every query); their
saved checkpoints load in transformers' own classes and agree with attnviz's result (eager, 1e-5); the README's
picture lines run offline on them. Each check fails on the same organisms with no heads planted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnviz.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
LLAVA = str(ROOT / "sample_configs" / "organism_llava.toml")
VIT = str(ROOT / "sample_configs" / "organism_vit.toml")
HOUSE = ROOT / "examples" / "house.png"
QUESTION = "what is here ?"


def _read(model: str, picture: Path, *, engine: str = "fused"):
    """Every row of the organism's attention over ``picture`` (and the question, for the vision-language one)."""
    from attnviz.images.encoder import image_attention
    from attnviz.images.vlm import vlm_attention
    from attnviz.organisms import read_spec

    if read_spec(model).language:
        return vlm_attention(QUESTION, picture, model, rows="all", engine=engine)
    return image_attention(picture, model)


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> list[Path]:
    """The README's picture, and another of another size and shape: noise, taller than wide."""
    from PIL import Image

    noise = tmp_path_factory.mktemp("pictures") / "noise.png"
    Image.fromarray((np.random.RandomState(7).rand(90, 40, 3) * 255).astype(np.uint8)).save(noise)
    return [HOUSE, noise]


@pytest.fixture(scope="module")
def reads(organism_cache, pictures, tmp_path_factory):
    """Each sample organism (and the same without its heads) read on each picture, built once in the run's cache."""
    from attnviz.organisms import read_spec

    bare = tmp_path_factory.mktemp("bare")
    found = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTNVIZ_CACHE", str(organism_cache))
        for model in (LLAVA, VIT):
            unplanted = bare / Path(model).name
            unplanted.write_text(Path(model).read_text(encoding="utf-8").split("[[head]]")[0].replace(
                'name = "', 'name = "bare-'), encoding="utf-8")
            for which, path in (("planted", model), ("bare", str(unplanted))):
                found[model, which] = (read_spec(model), [_read(path, picture) for picture in pictures])
    return found


# -- each check: a number measured on a result, and whether it holds ------------------------------------------------

def _seeing(at, key: int) -> list[int]:
    return [row for row in range(at.n) if not at.causal or row >= key]


def patch_reader(result, head) -> tuple[float, float, bool]:
    """The last reader's weight on the declared patch and on the next best key; every reader that sees the picture
    puts its most weight on that patch, nearly all of it."""
    from attnviz.organisms.picture_kinds import Arrangement

    at = Arrangement.of(result)
    target = at.patch(head.setting("row"), head.setting("col"))
    weights = result.attentions[head.layer, head.head].double()
    rows = [row for row in at.readers if row in _seeing(at, target)]
    last = weights[rows[-1]]
    other = torch.cat([last[:target], last[target + 1:]]).max()
    holds = all(int(weights[row].argmax()) == target and float(weights[row, target]) > 0.999 for row in rows)
    return float(last[target]), float(other), bool(rows) and holds


def first_row(result, head) -> tuple[float, float, bool]:
    """The least weight a reader puts on row 0's patches, and the largest on any one of them: all of it, evenly."""
    from attnviz.organisms.picture_kinds import Arrangement

    at = Arrangement.of(result)
    row0 = [at.patch(0, col) for col in range(at.cols)]
    weights = result.attentions[head.layer, head.head].double()
    rows = [row for row in at.readers if row in _seeing(at, row0[-1])]
    mass = min(float(weights[row, row0].sum()) for row in rows)
    most = max(float(weights[row, row0].max()) for row in rows)
    return mass, most, bool(rows) and mass > 0.999 and abs(most - 1 / at.cols) < 1e-3


def text_only(result, head) -> tuple[float, bool]:
    """The most weight any row puts on the picture's tokens: ~none."""
    from attnviz.organisms.picture_kinds import Arrangement

    at = Arrangement.of(result)
    weights = result.attentions[head.layer, head.head].double()
    most = float(weights[:, list(at.patches)].sum(-1).max())
    return most, most < 1e-6


def visual_sink(result, head) -> tuple[float, float, bool]:
    """The share of the rows that see the sink whose strongest key it is, and the least weight they put on it."""
    from attnviz.organisms.picture_kinds import Arrangement

    at = Arrangement.of(result)
    sink = at.patch(head.setting("row"), head.setting("col"))
    weights = result.attentions[head.layer, head.head].double()
    rows = _seeing(at, sink)
    share = sum(int(weights[row].argmax()) == sink for row in rows) / len(rows)
    least = min(float(weights[row, sink]) for row in rows)
    return share, least, share > 0.9 and least > 0.999 and len(rows) > at.n / 2


CHECKS = {"patch_reader": patch_reader, "first_row": first_row, "text_only": text_only, "visual_sink": visual_sink}


@pytest.mark.parametrize("model", [LLAVA, VIT], ids=["llava", "vit"])
def test_each_planted_head_makes_its_pattern_on_any_picture(reads, model):
    """On both pictures: the reader hottest on its patch (its weight ~1, the next key's ~e^-60), the first row's six
    patches 1/6 each, the text-only head ~0 on the picture, the sink every row's strongest key; and every row of each
    planted head as its record's expected pattern says."""
    from attnviz.organisms import PICTURE_KINDS
    from attnviz.organisms.picture_kinds import Arrangement

    spec, results = reads[model, "planted"]
    assert {h.kind for h in spec.planted} == ({"patch_reader", "first_row", "text_only", "visual_sink"}
                                             if spec.language else {"patch_reader", "first_row", "visual_sink"})
    for result in results:
        at = Arrangement.of(result)
        assert at.rows == at.cols == 6 and len(at.patches) == 36
        for head in spec.planted:
            measured = CHECKS[head.kind](result, head)
            assert measured[-1], (head.kind, measured)
            expected = PICTURE_KINDS[head.kind].expected(head, at)
            torch.testing.assert_close(result.attentions[head.layer, head.head].double(), expected.weights,
                                       atol=expected.atol, rtol=0)
        reader = next(h for h in spec.planted if h.kind == "patch_reader")
        on, other, _ = patch_reader(result, reader)
        assert on > 1 - 1e-6 and other < 1e-20  # 60 nats against 0: e^-60 ≈ 9e-27 a key


@pytest.mark.parametrize("model", [LLAVA, VIT], ids=["llava", "vit"])
def test_the_checks_fail_on_the_same_organism_without_its_heads(reads, model):
    """The checks above can fail: on the organism with no [[head]] (every head even over what it sees), none holds."""
    spec = reads[model, "planted"][0]
    for result in reads[model, "bare"][1]:
        for head in spec.planted:
            assert not CHECKS[head.kind](result, head)[-1], head.kind


def test_the_saved_checkpoints_load_in_transformers_own_classes_and_agree_with_attnviz(reads, pictures, run_cli,
                                                                                        tmp_path):
    """``attnviz organism CFG --out FOLDER``: transformers' LlavaForConditionalGeneration and ViTModel load the folder
    with their processors, and their eager attention equals attnviz's (its fused engine for the language model) to
    1e-5 on both pictures."""
    import transformers
    from PIL import Image
    from transformers import LlavaForConditionalGeneration, ViTModel

    transformers.logging.set_verbosity_error()
    for model, network_class in ((LLAVA, LlavaForConditionalGeneration), (VIT, ViTModel)):
        folder = tmp_path / Path(model).stem
        done = run_cli("organism", model, "--out", str(folder))
        assert done.exit_code == 0 and (folder / "attnviz-organism.done").is_file(), done.stderr
        processor = transformers.AutoProcessor.from_pretrained(folder)
        network = network_class.from_pretrained(folder, attn_implementation="eager").eval()
        spec, results = reads[model, "planted"]
        for picture, result in zip(pictures, results, strict=True):
            image = Image.open(picture).convert("RGB")
            inputs = (processor(text=f"<image> {QUESTION}", images=[image], return_tensors="pt") if spec.language
                      else processor(images=image, return_tensors="pt"))
            with torch.no_grad():
                attentions = torch.stack([a[0] for a in network(**inputs, output_attentions=True).attentions])
            if spec.language:
                assert [int(i) for i in inputs["input_ids"][0]] == list(result.token_ids)
            torch.testing.assert_close(result.attentions, attentions.float(), atol=1e-5, rtol=0)
        config = network.config.to_dict()
        assert config["attnviz_organism"]["fingerprint"] == spec.fingerprint()


@pytest.mark.parametrize("argv", [
    ["heatmap", QUESTION, "--image", "examples/house.png", "--model", "sample_configs/organism_llava.toml"],
    ["heatmap", "--image", "examples/house.png", "--model", "sample_configs/organism_vit.toml"],
], ids=["llava", "vit"])
def test_the_readmes_picture_lines_run_offline_from_any_folder(run_cli, argv, tmp_path, monkeypatch):
    """From an empty folder, HF_HUB_OFFLINE=1 (conftest): the installed picture and organism."""
    monkeypatch.chdir(tmp_path)
    done = run_cli(*argv)
    assert done.exit_code == 0, done.stderr
    assert "6 × 6 grid of 8-pixel patches" in done.stdout
    drawn = run_cli(*argv, "--layer", "0", "--head", "0", "--out", "heat.png")
    assert drawn.exit_code == 0 and (tmp_path / "heat.png").read_bytes().startswith(b"\x89PNG"), drawn.stderr


def test_the_organism_command_describes_the_planted_heads(run_cli):
    shown = run_cli("organism", LLAVA)
    assert shown.exit_code == 0, shown.stderr
    for words in ("patch_reader", "patch (2, 3) of the picture", "first row", "the text only", "visual sink",
                  "6 × 6 grid"):
        assert words in " ".join(shown.stdout.split()), words
    described = run_cli("organism", VIT, "--format", "json")
    assert '"family": "vit"' in described.stdout and "from CLS" in described.stdout


@pytest.mark.parametrize(("body", "message"), [
    ('family = "vit"\n[[head]]\nkind = "text_only"\nlayer = 0\nhead = 0', "an image encoder, which reads no text"),
    ('family = "llava"\n[[head]]\nkind = "patch_reader"\nlayer = 0\nhead = 0\nrow = 6', "outside the 6 × 6 grid"),
    ('family = "vit"\npositions = 2048', "unknown key 'positions'"),
    ('family = "llava"\nimage_size = 50', "not a whole number of patches"),
    ('family = "clip"', "family is gpt2 (a text organism), llava or vit"),
    ('family = "llava"\n[[head]]\nkind = "first_token"\nlayer = 0\nhead = 0', "kind must be one of patch_reader"),
])
def test_a_wrong_picture_organism_is_one_line(tmp_path, run_cli, body, message):
    path = tmp_path / "bad.toml"
    head, _, rest = body.partition("\n[[head]]")
    path.write_text(f'[model]\ntype = "organism"\n{head}\n' + (f"[[head]]{rest}\n" if rest else ""), encoding="utf-8")
    from attnviz.organisms import read_spec

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_spec(path)
    done = run_cli("organism", str(path))
    assert done.exit_code != 0 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_model_that_cannot_read_pictures_names_the_picture_organisms(run_cli):
    for argv in (["heatmap", "--image", str(HOUSE)],
                 ["heatmap", "--image", str(HOUSE), "--model", "sample_configs/organism_needle.toml"],
                 ["heatmap", "--image", str(HOUSE), "--model", "google/vit-base-patch16-224"]):
        done = run_cli(*argv)
        assert done.exit_code != 0 and "sample_configs/organism_llava.toml" in done.stderr, done.stderr
        assert "organism_vit.toml" in done.stderr and "organism_needle" not in done.stderr.split("offline")[-1]
