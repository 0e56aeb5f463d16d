"""A Hugging Face model folder's files: where the config and the safetensors weights are.

Light on purpose (no torch): the resolver uses it to decide which engine can run a folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ModelNotFoundError

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelNotFoundError(f"{folder} has no config.json; point [[model]] at a Hugging Face model folder") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelNotFoundError(f"{path} is not valid JSON ({exc}); re-download the model") from None
    if not isinstance(config, dict):
        raise ModelNotFoundError(f"{path} holds a {type(config).__name__}, not a JSON object; re-download the model")
    return config


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a folder, or [] when it has none."""
    if (folder / SINGLE).is_file():
        return [folder / SINGLE]
    if (folder / INDEX).is_file():
        try:
            index = json.loads((folder / INDEX).read_text(encoding="utf-8"))
            return [folder / name for name in sorted(set(index["weight_map"].values()))]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError):
            raise ModelNotFoundError(f"{folder / INDEX} is not a valid shard index; re-download the model") from None
    return sorted(folder.glob("*.safetensors"))
