"""Numerical edges, faults and security: the guarantees the README's reliability section states."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import torch
from processes import run_each

import attnviz
from attnviz.render.image import render_image
from attnviz.result import AttentionResult
from attnviz.views.heatmap import heatmap_view


def test_sequence_of_length_one(run_cli, tiny_hf):
    for model in (None, tiny_hf["gpt2"]):
        r = attnviz.extract("cat", model=model)
        assert not torch.isnan(r.attentions).any()
        torch.testing.assert_close(r.attentions.sum(-1), torch.ones(r.attentions.shape[:-1]))
    tiny = attnviz.extract("cat", model=str(Path(__file__).parent.parent / "sample_configs" / "tiny.toml"))
    assert tiny.attentions.shape[-2:] == (1, 1) and tiny.attentions.flatten().tolist() == [1.0] * 8


def test_bfloat16_and_float16_models(tiny_hf, tmp_path):
    from transformers import AutoModel

    folder = tmp_path / "bf16"
    shutil.copytree(tiny_hf["llama"], folder)
    AutoModel.from_pretrained(folder).to(torch.bfloat16).save_pretrained(folder)
    native = attnviz.extract("The cat sat.", model=str(folder), engine="native")
    hf = attnviz.extract("The cat sat.", model=str(folder), engine="hf")
    assert not torch.isnan(native.attentions).any()
    torch.testing.assert_close(native.attentions, hf.attentions, rtol=0, atol=1e-5)


def test_largest_and_smallest_weights_render_at_the_ends_of_the_scale(tmp_path):
    """A 1 and a 0 draw as viridis' two ends; nothing is clipped or lost."""
    from PIL import Image

    attn = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
    path = render_image(heatmap_view(AttentionResult(tokens=["a", "b"], attentions=attn)), tmp_path / "x.png")
    with Image.open(path) as im:
        pixels = np.asarray(im.convert("RGB")).reshape(-1, 3).astype(int)
    top, bottom = np.array([253, 231, 37]), np.array([68, 1, 84])
    assert (np.abs(pixels - top).sum(1) < 6).sum() > 500 and (np.abs(pixels - bottom).sum(1) < 6).sum() > 500


def test_a_pickle_checkpoint_never_runs_its_code(run_cli, tiny_hf, tmp_path):
    """Only safetensors are read natively; transformers loads .bin with weights_only=True, so no code runs."""
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    folder = tmp_path / "pickled"
    shutil.copytree(tiny_hf["bert"], folder)
    (folder / "model.safetensors").unlink()
    with open(folder / "pytorch_model.bin", "wb") as fh:
        pickle.dump({"x": Payload()}, fh)
    for engine in ("native", "hf"):
        r = run_cli("heatmap", "x", "--model", str(folder), "--engine", engine)
        assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not marker.exists()


def test_offline_means_no_connection_is_even_attempted(tmp_path):
    attempts = tmp_path / "attempts.txt"
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(
        "import socket\n"
        f"LOG = {str(attempts)!r}\n"
        "def _record(*args, **kwargs):\n"
        "    open(LOG, 'a').write(repr(args) + '\\n')\n"
        "    raise OSError('network disabled by the test')\n"
        "socket.socket.connect = _record\n"
        "socket.create_connection = _record\n"
        "socket.getaddrinfo = _record\n"
    )
    env = {"PYTHONPATH": str(guard), "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "cache")}
    done = run_each([["heatmap", "The cat sat.", "--model", "nobody/nothing"], ["heatmap", "The cat sat."]], env)
    assert [code for code, _, _ in done] == [1, 0], done
    assert not attempts.exists(), attempts.read_text()
