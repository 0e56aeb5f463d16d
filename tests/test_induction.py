"""End to end: `heads --probe induction` labels a real induction circuit and the head that feeds it."""

from __future__ import annotations

import json

import pytest
import torch
from induction_circuit import build


@pytest.fixture(scope="module")
def circuit(tmp_path_factory):
    return str(build(tmp_path_factory.mktemp("circuit") / "induction-gpt2"))


@pytest.mark.parametrize("engine", ["native", "hf"])
def test_heads_labels_the_induction_head_and_its_previous_token_head(run_cli, circuit, engine):
    r = run_cli("heads", "--probe", "induction", "--model", circuit, "--engine", engine, "--format", "json")
    assert r.exit_code == 0, r.stderr
    labels = {(row["layer"], row["head"]): row["labels"] for row in json.loads(r.stdout)["heads"]}
    assert "previous-token" in labels[(0, 0)]
    assert "induction" in labels[(1, 0)]
    assert not any("induction" in labels[key] for key in labels if key != (1, 0))
    assert not any("previous-token" in labels[key] for key in labels if key != (0, 0))


def test_without_the_previous_token_head_there_is_no_induction(run_cli, circuit, tmp_path):
    """The negative control: cut what layer 0 writes, and layer 1 no longer finds the copy."""
    import shutil

    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(circuit, broken)
    weights = load_file(str(broken / "model.safetensors"))
    key = next(k for k in weights if k.endswith("h.0.attn.c_proj.weight"))
    weights[key] = torch.zeros_like(weights[key])
    save_file(weights, str(broken / "model.safetensors"), metadata={"format": "pt"})
    r = run_cli("heads", "--probe", "induction", "--model", str(broken), "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert not any("induction" in row["labels"] for row in json.loads(r.stdout)["heads"])
