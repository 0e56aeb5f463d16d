"""A vision-language model answers through the same decoding settings as ``generate`` (issue 60, item 3): on the one
decoding loop (images/answer.py's PictureStepper), greedy by default, sampled with a seed as transformers samples, and
a checkpoint's generation_config.json chooses nothing but its end tokens. On the tiny LLaVA of picture_models.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from test_images import gemma3  # noqa: F401 (the tiny Gemma 3, whose greedy answer reaches for its image token)

QUESTION = "what is in the picture ?"


@pytest.fixture
def picture(tmp_path) -> Path:
    from PIL import Image

    path = tmp_path / "picture.png"
    Image.fromarray((np.random.RandomState(0).rand(48, 64, 3) * 255).astype(np.uint8)).save(path)
    return path


def _answer(result) -> list[int]:
    return result.token_ids[result.metadata["prompt_length"]:]


def test_a_checkpoints_generation_config_cannot_change_the_answer(llava, picture, tmp_path):
    """Sampling, a temperature of 5, a repetition penalty of 3, beams and a bias against the greedy answer's first
    token in generation_config.json: the answer is the greedy one without them, token for token."""
    from attnviz.images.vlm import vlm_attention

    plain = vlm_attention(QUESTION, picture, str(llava), max_new_tokens=4)
    assert "sampling" not in plain.metadata  # a greedy answer's file holds what it held
    folder = tmp_path / "configured"
    shutil.copytree(llava, folder)
    config = folder / "generation_config.json"
    found = json.loads(config.read_text(encoding="utf-8")) if config.exists() else {}
    config.write_text(json.dumps({**found, "do_sample": True, "temperature": 5.0, "repetition_penalty": 3.0,
                                  "num_beams": 3, "sequence_bias": [[[_answer(plain)[0]], -100.0]]}), encoding="utf-8")
    again = vlm_attention(QUESTION, picture, str(folder), max_new_tokens=4)
    assert again.token_ids == plain.token_ids
    torch.testing.assert_close(again.attentions, plain.attentions, rtol=0, atol=0)


def test_a_seed_gives_the_same_sampled_answer_as_transformers_samples(llava, picture):
    """The same seed twice gives the same tokens, and the tokens transformers' own sampling draws with that seed
    (temperature, top-k, top-p, one draw a step); the result records how they were chosen."""
    import transformers
    from PIL import Image

    from attnviz.images.vlm import load_vlm
    from attnviz.sources.sampling import Sampling

    sampling = Sampling(True, temperature=1.5, top_k=8, top_p=0.95, seed=3)
    model = load_vlm(str(llava), engine="hf")
    first = model.read(QUESTION, picture, max_new_tokens=6, sampling=sampling)
    again = model.read(QUESTION, picture, max_new_tokens=6, sampling=sampling)
    assert first.token_ids == again.token_ids
    assert first.metadata["sampling"] == {"sample": True, "temperature": 1.5, "top_k": 8, "top_p": 0.95, "seed": 3}
    processor = transformers.AutoProcessor.from_pretrained(llava)
    inputs = processor(text=f"<image> {QUESTION}", images=[Image.open(picture).convert("RGB")], return_tensors="pt")
    network = transformers.AutoModelForImageTextToText.from_pretrained(llava, attn_implementation="eager").eval()
    with torch.no_grad():
        torch.manual_seed(3)
        out = network.generate(**inputs, max_new_tokens=6, do_sample=True, temperature=1.5, top_k=8, top_p=0.95,
                               pad_token_id=0)
    assert first.token_ids == out[0].tolist()
    greedy = model.read(QUESTION, picture, max_new_tokens=6)
    others = [model.read(QUESTION, picture, max_new_tokens=6, sampling=Sampling(True, temperature=1.5, seed=seed))
              for seed in (4, 5, 6)]
    assert any(_answer(other) != _answer(greedy) for other in [first, *others])  # sampling draws, greedy does not


def test_sampling_settings_are_checked_as_generates_are(llava, picture):
    from attnviz.errors import UsageError
    from attnviz.images.vlm import vlm_attention
    from attnviz.sources.sampling import Sampling

    with pytest.raises(UsageError, match=r"choose how to sample; add sample=True"):
        vlm_attention(QUESTION, picture, str(llava), max_new_tokens=2, sampling=Sampling(temperature=0.5))
    with pytest.raises(UsageError, match=r"sampling chooses the answer's tokens; give max_new_tokens"):
        vlm_attention(QUESTION, picture, str(llava), sampling=Sampling(True, seed=1))


def test_generate_with_a_picture_takes_the_decoding_options(run_cli, llava, picture, tmp_path):
    """`generate --image` with --sample, --temperature, --top-k, --top-p and --seed answers as the library does with
    that Sampling (it refused them before); the same seed gives the same file."""
    from attnviz.images.vlm import vlm_attention
    from attnviz.result import AttentionResult
    from attnviz.sources.sampling import Sampling

    options = ["--sample", "--temperature", "1.5", "--top-k", "8", "--top-p", "0.95", "--seed", "3"]
    for name in ("a.npz", "b.npz"):
        r = run_cli("generate", QUESTION, "--image", str(picture), "--model", str(llava), "-n", "5", *options,
                    "--out", str(tmp_path / name))
        assert r.exit_code == 0, r.stderr
    saved = AttentionResult.load(tmp_path / "a.npz")
    expected = vlm_attention(QUESTION, picture, str(llava), max_new_tokens=5,
                             sampling=Sampling(True, temperature=1.5, top_k=8, top_p=0.95, seed=3))
    assert saved.token_ids == expected.token_ids and saved.metadata["sampling"]["seed"] == 3
    again = AttentionResult.load(tmp_path / "b.npz")  # the same seed, the same tokens and weights (not the same bytes:
    assert again.token_ids == saved.token_ids and again.tokens == saved.tokens  # a file's bytes are no promise)
    torch.testing.assert_close(again.attentions, saved.attentions, rtol=0, atol=1e-6)
    r = run_cli("generate", QUESTION, "--image", str(picture), "--model", str(llava), "-n", "2", "--temperature", "0.5")
    assert r.exit_code == 2 and "add --sample" in r.stderr


def test_the_image_token_is_never_the_answer(gemma3, picture):  # noqa: F811
    """The tiny Gemma 3's greedy answer, on transformers' generate, reaches for its image token; the answer read again
    with the picture then held more image tokens than the picture's features, and failed (a ValueError of
    transformers'). The image token is never chosen: up to where transformers chose it, the answers are the same."""
    import transformers
    from PIL import Image

    from attnviz.images.vlm import vlm_attention

    image_token = 6
    result = vlm_attention(QUESTION, picture, str(gemma3), max_new_tokens=5)
    answer = _answer(result)
    assert len(answer) == 5 and image_token not in answer
    processor = transformers.AutoProcessor.from_pretrained(gemma3)
    inputs = processor(text=f"<start_of_image> {QUESTION}", images=[Image.open(picture).convert("RGB")],
                       return_tensors="pt")
    assert inputs["input_ids"][0].tolist() == result.token_ids[:result.metadata["prompt_length"]]
    network = transformers.AutoModelForImageTextToText.from_pretrained(gemma3, attn_implementation="eager").eval()
    with torch.no_grad():
        theirs = network.generate(**inputs, max_new_tokens=5, do_sample=False, pad_token_id=0)[0].tolist()
    theirs = theirs[len(inputs["input_ids"][0]):]
    first = theirs.index(image_token)
    assert answer[:first] == theirs[:first]
