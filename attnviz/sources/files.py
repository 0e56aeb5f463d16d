"""A Hugging Face model folder's files: where the config and the safetensors weights are.

Light on purpose (no torch): the resolver uses it to decide which engine can run a folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import AttnvizError, ModelNotFoundError

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


def folder_stamp(folder: Path) -> tuple[tuple[str, int, int], ...] | None:
    """Each file of ``folder``: its name, size and modification time (what a rewrite changes), to key what is kept of
    a loaded checkpoint; None where the folder cannot be listed."""
    try:
        return tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in folder.iterdir() if f.is_file()))
    except OSError:
        return None


def read_config(folder: Path) -> dict[str, Any]:
    """A folder's ``config.json``: a regular file of bounded size holding a JSON object whose fields
    attnviz reads have sensible types and sizes (:func:`check_config`)."""
    from ..limits import read_small

    path = folder / "config.json"
    try:
        config = json.loads(read_small(path, what="config.json").decode("utf-8"))
    except FileNotFoundError:
        raise ModelNotFoundError(f"{folder} has no config.json; point [[model]] at a Hugging Face model folder") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ModelNotFoundError(f"{path} is not valid JSON ({type(exc).__name__}); re-download the model") from None
    except AttnvizError as exc:
        raise ModelNotFoundError(exc.template) from None
    if not isinstance(config, dict):
        raise ModelNotFoundError(f"{path} holds a {type(config).__name__}, not a JSON object; re-download the model")
    check_config(config, path)
    return config


# Fields of config.json that attnviz or transformers size things by: counts (at least 1) and epsilons.
_COUNTS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers",
           "num_attention_heads", "n_head", "num_heads", "num_key_value_heads", "encoder_attention_heads",
           "decoder_attention_heads", "hidden_size", "n_embd", "d_model", "d_kv", "intermediate_size", "n_inner",
           "d_ff", "encoder_ffn_dim", "decoder_ffn_dim", "vocab_size", "max_position_embeddings", "n_positions",
           "head_dim")
_POSITIVE = ("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps", "rope_theta")


def check_config(config: dict[str, Any], path: Path) -> None:
    """Refuse a config.json whose sizes are not numbers of the right kind, or would not fit in memory."""
    from ..limits import MAX_POSITIONS, check_memory

    kind = config.get("model_type")
    if kind is not None and not isinstance(kind, str):
        raise ModelNotFoundError(f"{path}: model_type is a {type(kind).__name__}, not a name; fix config.json")
    for key in _COUNTS:
        value = config.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ModelNotFoundError(f"{path}: {key} = {value!r} must be a whole number of at least 1; fix config.json")
    for key in _POSITIVE:
        value = config.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                  or not 0 < value < float("inf")):
            raise ModelNotFoundError(f"{path}: {key} = {value!r} must be a positive number; fix config.json")
    positions = _first(config, "max_position_embeddings", "n_positions")
    if positions > MAX_POSITIONS:
        raise ModelNotFoundError(f"{path}: {positions:,} positions is more than the {MAX_POSITIONS:,} attnviz allows")
    width = _first(config, "hidden_size", "n_embd", "d_model")
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers", "encoder_layers") + \
        _first(config, "num_decoder_layers", "decoder_layers")
    inner = _first(config, "intermediate_size", "n_inner", "d_ff", "encoder_ffn_dim") or 4 * width
    params = layers * (4 * width * width + 3 * width * inner) + (_first(config, "vocab_size") + positions) * width
    check_memory(4 * params, f"{path.parent.name or path}: a model of {layers:,} layers of width {width:,}")


def _first(config: dict[str, Any], *keys: str) -> int:
    return next((config[k] for k in keys if isinstance(config.get(k), int)), 0)


def check_folder_files(folder: Path) -> None:
    """Refuse a model folder holding a pipe, a device or a socket where a file should be: opening a
    FIFO named ``model.safetensors`` would wait forever, and a device never ends. Links are followed
    (the hub's cache links each file to its blob); a broken link is left for the reader to name."""
    import os
    import stat

    try:
        entries = list(os.scandir(folder))
    except OSError as exc:
        raise ModelNotFoundError(f"cannot read folder {folder}: {exc.strerror or exc}") from None
    for entry in entries:
        try:
            mode = entry.stat().st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise ModelNotFoundError(f"{folder / entry.name} is not a regular file (a pipe, device or socket); a model "
                                     "folder holds files: replace it with the real file")


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
