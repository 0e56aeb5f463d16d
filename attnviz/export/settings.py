"""Export settings: defaults, then a TOML file (``--config``), then command-line flags, in that order."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from ..sources.resolve import Engine

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover
    pass



@dataclass(frozen=True)
class ExportSettings:
    """Everything an export run needs besides INPUT and --out. ``sample_configs/batch.toml`` documents each."""

    model: str | None = None
    engine: Engine = "auto"
    revision: str | None = None
    device: str = "cpu"
    dtype: str | None = None  # the model's precision on the transformers engines (None: float32 on the CPU)
    trust_remote_code: bool = False
    causal: bool | None = None  # config models: force a causal mask on or off (None: the config's)
    layers: tuple[int, ...] | None = None  # None: every layer
    heads: tuple[int, ...] | None = None  # heads drawn one by one (besides or instead of the grid)
    grid: bool | None = None  # a grid of every head per layer; default: yes unless --heads is given
    formats: tuple[str, ...] = ("png", "npz", "json")
    batch_size: int = 8
    jobs: int = 2
    shard: tuple[int, int] = (1, 1)  # (K, N), K from 1
    input_format: str = "auto"  # auto (by extension; --field means JSONL, --column CSV or Parquet), lines, jsonl, csv, parquet
    field: str = "text"  # JSONL
    column: str = "text"  # CSV and Parquet
    float16: bool = False
    truncate: bool = False
    quiet: bool = False
    cmap: str = "viridis"
    style: str = "figure"  # figure: labelled like `attnviz heatmap`; tiles: bare colour tiles, far faster (png)
    pair: str | None = None  # a second sentence for every text (a sentence pair, its boundary marked)
    hide_special: bool = False  # drop [CLS], [SEP], BOS… from every output
    renormalize: bool = False  # with hide_special: rescale each row to sum to 1
    words: bool = False  # join word pieces into words (sum to a word, mean from a word)
    backend: str = "local"  # local: this process and --jobs drawing processes; ray: --jobs Ray actors
    ray_address: str | None = None  # an existing Ray cluster (None: a local one with this machine's CPUs)

    @property
    def reading(self) -> Any:
        """The :class:`~attnviz.analysis.reading.Reading` for hide_special, renormalize and words."""
        from ..analysis.reading import Reading

        return Reading(hide_special=self.hide_special, renormalize=self.renormalize, words=self.words)

    @property
    def image_formats(self) -> list[str]:
        """The formats that draw each layer's view (png, svg, pdf, and any registered since)."""
        from ..render.registry import FORMATS, view_formats

        return [f for f in self.formats if f in view_formats() and not FORMATS[f].per_text]

    @property
    def page_formats(self) -> list[str]:
        """The formats written once per text with every exported layer in them (the interactive page)."""
        from ..render.registry import FORMATS

        return [f for f in self.formats if f in FORMATS and FORMATS[f].per_text]

    def fingerprint(self) -> str:
        """What an output depends on. A rerun with other settings redoes the items instead of trusting old files."""
        import hashlib
        import json

        keys = ("model", "revision", "engine", "device", "layers", "heads", "grid", "formats", "batch_size",
                "float16", "truncate", "cmap", "style")
        values = {k: getattr(self, k) for k in keys}
        # Only when set, so earlier exports keep their fingerprint.
        values.update({k: getattr(self, k) for k in ("causal", "pair", "dtype") if getattr(self, k) is not None})
        values.update({k: True for k in ("hide_special", "renormalize", "words") if getattr(self, k)})
        blob = json.dumps(values, sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def reading_of(settings: ExportSettings) -> dict[str, Any]:
    """The settings that change what a statistic means, whatever the model: two exports compared head by head
    must share them."""
    return {"hide_special": bool(settings.hide_special), "renormalize": bool(settings.renormalize),
            "words": bool(settings.words), "truncate": bool(settings.truncate),
            "layers": None if settings.layers is None else list(settings.layers)}


def parse_int_list(value: str | list[Any] | None, what: str) -> tuple[int, ...] | None:
    """``"all"`` → None; ``"0,2,4-6"`` or ``[0, 2]`` → (0, 2, 4, 5, 6)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "all"):
        return None
    from ..limits import MAX_INDEX

    parts = value if isinstance(value, list) else [p for p in str(value).split(",") if p.strip()]
    if len(parts) > MAX_INDEX:
        raise UsageError(f"[[{what}]] lists {len(parts)} numbers; no model has more than {MAX_INDEX:,} {what}")
    out: list[int] = []
    try:
        for part in parts:
            text = str(part).strip()
            lo, hi = text.split("-", 1) if "-" in text[1:] else (text, text)
            first, last = int(lo), int(hi)
            if max(first, last) >= MAX_INDEX:  # before a range is expanded: "0-100000000" costs nothing
                raise UsageError(f"[[{what}={value!r}]] names {what[:-1]} {max(first, last):,}; no model has more "
                                 f"than {MAX_INDEX:,} {what}, and attnviz checks the list against the model")
            out.extend(range(first, last + 1))
    except ValueError:
        raise UsageError(f"[[{what}={value!r}]] is not a list of numbers; write e.g. 0,2,4-6 or all") from None
    if not out or any(n < 0 for n in out):
        raise UsageError(f"[[{what}={value!r}]] must name numbers from 0 (or say all)")
    return tuple(dict.fromkeys(out))


def parse_formats(value: str | list[str]) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [p.strip().lower() for p in value.split(",") if p.strip()]
    from ..render.registry import FORMATS

    bad = [f for f in items if f not in FORMATS]
    if bad or not items:
        raise UsageError(f"[[formats={value!r}]]: use some of {', '.join(FORMATS)}")
    return tuple(dict.fromkeys(items))


def parse_shard(value: str) -> tuple[int, int]:
    """``"K/N"`` with 1 ≤ K ≤ N."""
    try:
        k, n = (int(x) for x in str(value).split("/"))
    except ValueError:
        raise UsageError(f"[[shard={value!r}]] is not K/N; write e.g. 2/8 for the second of eight shards") from None
    if not 1 <= k <= n:
        raise UsageError(f"[[shard={value}]]: K must be between 1 and N (shards are numbered 1 to {max(n, 1)})")
    return k, n


_PARSERS = {
    "layers": lambda v: parse_int_list(v, "layers"),
    "heads": lambda v: parse_int_list(v, "heads"),
    "formats": parse_formats,
    "shard": parse_shard,
}
_KINDS = {"batch_size": int, "jobs": int, "trust_remote_code": bool, "causal": bool, "float16": bool, "truncate": bool, "quiet": bool,
          "grid": bool, "model": str, "revision": str, "engine": str, "device": str, "dtype": str, "field": str,
          "column": str,
          "cmap": str, "input_format": str, "style": str, "pair": str,
          "hide_special": bool, "renormalize": bool, "words": bool, "backend": str, "ray_address": str}
_INPUT_FORMATS = ("auto", "lines", "jsonl", "csv", "parquet")


def build_settings(config: str | Path | None, overrides: dict[str, Any]) -> ExportSettings:
    """Defaults, updated by the TOML file's ``[export]`` table, updated by flags that were given (not None).

    ``config`` is found as ``--model`` configs are: ``sample_configs/batch.toml`` works from any folder.
    """
    from ..sources.resolve import sample_config

    values: dict[str, Any] = {}
    if config is not None:
        values.update(_read_toml(sample_config(config)))
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name for f in fields(ExportSettings)}
    settings = ExportSettings()
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{config}: unknown key {key!r} in [export]; valid keys: {', '.join(sorted(known))}")
        if key in _PARSERS and not isinstance(value, tuple):
            value = _PARSERS[key](value)
        elif key in _KINDS and (not isinstance(value, _KINDS[key]) or (_KINDS[key] is int and isinstance(value, bool))):
            raise ConfigError(f"{config}: {key} = {value!r} must be {_KINDS[key].__name__}")
        settings = replace(settings, **{key: value})
    if settings.grid is None:
        settings = replace(settings, grid=settings.heads is None)
    if settings.input_format not in _INPUT_FORMATS:
        raise UsageError(f"[[input_format={settings.input_format!r}]]: use one of {', '.join(_INPUT_FORMATS)}")
    if settings.input_format == "auto" and ("field" in overrides and overrides["field"] is not None):
        settings = replace(settings, input_format="jsonl")
    elif settings.input_format == "auto" and ("column" in overrides and overrides["column"] is not None):
        settings = replace(settings, input_format="csv")
    if not settings.grid and not settings.heads and settings.image_formats:
        raise UsageError("[[grid=False]] draws nothing without [[heads]]; give heads to draw, or drop image formats")
    if settings.backend not in ("local", "ray"):
        raise UsageError(f"[[backend={settings.backend!r}]]: use local or ray")
    if settings.ray_address is not None and settings.backend != "ray":
        raise UsageError("[[ray_address]] names a Ray cluster; it goes with [[backend=ray]]")
    if settings.backend == "ray":
        from ..cluster import ray_module

        ray_module()  # not installed: say so before any work
    if "parquet" in settings.formats:
        from .table import pyarrow

        pyarrow()  # not installed: say so before any work
    if settings.style not in ("figure", "tiles"):
        raise UsageError(f"[[style={settings.style!r}]]: use figure or tiles")
    if settings.style == "tiles" and (set(settings.image_formats) - {"png"} or settings.page_formats):
        raise UsageError("[[style=tiles]] writes PNG only; drop svg/pdf from [[formats]] or use [[style=figure]]")
    from ..render.colors import COLORMAPS

    if settings.cmap not in COLORMAPS:
        raise UsageError(f"[[cmap={settings.cmap!r}]]: use {', '.join(COLORMAPS)}")
    if settings.batch_size < 1:
        raise UsageError(f"[[batch_size={settings.batch_size}]] must be at least 1")
    if settings.jobs < 1:
        raise UsageError(f"[[jobs={settings.jobs}]] must be at least 1")
    settings.reading  # noqa: B018 (checks renormalize without hide_special)
    return settings


def _read_toml(path: Path) -> dict[str, Any]:
    from ..config import read_toml

    if path.is_dir():
        raise ConfigError(f"[[config={path}]] is a folder; give a .toml file with an [export] table")
    if not os.path.lexists(path):
        raise ConfigError(f"config file {path} does not exist; check [[config]]")
    data = read_toml(path, "a batch config")
    unknown = set(data) - {"export"}
    if unknown:
        raise ConfigError(f"{path}: unknown table or key {sorted(unknown)[0]!r}; put every option under [export]")
    table = data.get("export", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [export] must be a table")
    return dict(table)
