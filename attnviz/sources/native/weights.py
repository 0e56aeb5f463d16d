"""Read a Hugging Face folder's config and safetensors weights, with no transformers import.

Only ``.safetensors`` files are read (never pickles). Sharded checkpoints are joined through their
``model.safetensors.index.json``. Keys lose the task-head prefix (``bert.``, ``transformer.``,
``model.``) so each family sees the names of its bare model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from ...errors import ModelNotFoundError
from ..files import weight_files


class LazyWeights(Mapping[str, torch.Tensor]):
    """A folder's tensors by name, read from its safetensors files only when asked for (as float32
    when floating): a tensor the model does not use is never read, however large."""

    def __init__(self, files: list[Path], prefixes: tuple[str, ...]) -> None:
        from safetensors import SafetensorError, safe_open

        self._handles = []
        raw: dict[str, tuple[int, str]] = {}
        for number, file in enumerate(files):
            try:
                handle = safe_open(str(file), framework="pt")
            except (SafetensorError, OSError, ValueError) as exc:
                raise ModelNotFoundError(f"cannot read {file}: {exc}; the file may be truncated, re-download it") from None
            self._handles.append((file, handle))
            raw.update({key: (number, key) for key in handle.keys()})  # noqa: SIM118 (a safetensors handle)
        for prefix in prefixes:
            if any(k.startswith(prefix) for k in raw):
                raw = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in raw.items()}
                break
        self._where = raw

    def __getitem__(self, key: str) -> torch.Tensor:
        from safetensors import SafetensorError

        number, name = self._where[key]
        file, handle = self._handles[number]
        try:
            tensor = handle.get_tensor(name)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise ModelNotFoundError(f"cannot read {name} from {file}: {exc}; re-download the model") from None
        return tensor.float() if tensor.is_floating_point() else tensor

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def load_weights(folder: Path, prefixes: tuple[str, ...]) -> LazyWeights:
    """The tensors of the folder's safetensors files, read lazily, with a leading prefix removed."""
    files = weight_files(folder)
    if not files:
        raise ModelNotFoundError(f"{folder} has no .safetensors weights; attnviz reads only safetensors")
    return LazyWeights(files, prefixes)


def take(weights: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    try:
        return weights[key]
    except KeyError:
        raise ModelNotFoundError(f"the weights have no tensor {key!r}; the checkpoint does not match its config.json") from None
