"""Shared fixtures: paths of the sample configs and a CLI runner that keeps stderr apart."""

from __future__ import annotations

import os
from pathlib import Path

# Every test runs offline: the hub library reads this when it is first imported.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "sample_configs" / "tiny.toml")
SEED = str(ROOT / "sample_configs" / "seed_example.toml")


@pytest.fixture
def run_cli():
    """Invoke the attnviz CLI in-process; returns click's Result (stdout, stderr, exit_code)."""
    from attnviz.cli import app

    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None, input: str | None = None):
        return runner.invoke(app, list(args), env=env, input=input)

    return invoke


def write_config(tmp_path: Path, text: str, name: str = "model.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory):
    """Folders of tiny random Hugging Face models (bert, gpt2, llama, mistral, qwen2, t5), built once."""
    from tiny_models import BUILDERS

    root = tmp_path_factory.mktemp("tiny_hf")
    return {name: str(build(root / name)) for name, build in BUILDERS.items()}
