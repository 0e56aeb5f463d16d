"""Reading a result ``.npz`` as untrusted input: every array's declared shape, type and size is
checked before a byte of it is decompressed, and the whole result before it is returned.

A zip member declares its uncompressed size and an ``.npy`` header its shape and dtype; both are
read first, so a 4 MB zip bomb, a 4 TB shape claim or a member whose header and size disagree
is refused without the memory they ask for (:mod:`attnviz.limits`). Only plain numeric, boolean
and Unicode arrays are accepted (never objects, so never pickles).
"""

from __future__ import annotations

import json
import math
import stat
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ResourceError, ResultFileError
from ..limits import MAX_SMALL_FILE, check_memory, human

MAX_RATIO = 200
"""Compression ratio of a member beyond which it is a zip bomb: attnviz stores its arrays
uncompressed, and real attention weights compress a few times at most."""

_KINDS = "fiub"  # float, signed, unsigned, bool; 'U' (text) is allowed for labels only
_TEXT = {"tokens", "target_tokens", "meta"}


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of an attnviz ``.npz``, each checked against its declared size before it is read."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ResultFileError(f"{path} does not exist; check the path") from None
    except OSError as exc:  # a loop of symbolic links, a name too long, a folder that cannot be searched
        raise ResultFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ResultFileError(f"{path} is not a regular file; give a .npz written by attnviz")
    try:
        with zipfile.ZipFile(path) as archive:
            members = {m.filename: m for m in archive.infolist()}
            if "panels.npy" in members and "format.npy" in members and "attentions.npy" not in members:
                raise ResultFileError(f"{path} holds the numbers of a drawn view (a command's [[out]] as .npz, which "
                                      "numpy.load reads), not a saved result; to save one that [[model]] loads, put "
                                      "the text in a file and run: attnviz export FILE [[formats=npz]] [[out=DIR]] "
                                      "(AttentionResult.save in Python)")
            plans = {name[:-4]: _plan(archive, member, path) for name, member in members.items()
                     if name.endswith(".npy")}
            check_memory(sum(nbytes for nbytes, _ in plans.values()) * 2, f"reading {path}")  # + a float32 copy
            arrays = {}
            for name, (_, member) in plans.items():
                with archive.open(member) as fh:
                    arrays[name] = np.lib.format.read_array(fh, allow_pickle=False)
            return arrays
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, OSError, NotImplementedError) as exc:
        raise ResultFileError(f"{path} is not an attnviz result file ({type(exc).__name__}: {exc}); "
                              "re-create it with AttentionResult.save") from None
    except ResourceError as exc:
        raise ResultFileError(exc.template) from None


def _plan(archive: zipfile.ZipFile, member: zipfile.ZipInfo, path: Path) -> tuple[int, zipfile.ZipInfo]:
    """The bytes an array will take, from its header, checked against what the zip says of it."""
    name = member.filename
    if member.compress_size and member.file_size / member.compress_size > MAX_RATIO:
        raise ResultFileError(f"{path}: {name} would expand {member.file_size / member.compress_size:.0f}-fold "
                              f"(to {human(member.file_size)}); that is a zip bomb, not an attnviz result")
    with archive.open(member) as fh:
        try:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version in ((2, 0), (3, 0)):
                shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                raise ValueError(f"npy version {version}")
            header = fh.tell()
        except ValueError as exc:
            raise ResultFileError(f"{path}: {name} is not a NumPy array ({exc})") from None
    text = name[:-4] in _TEXT
    if dtype.kind not in _KINDS and not (text and dtype.kind == "U"):
        raise ResultFileError(f"{path}: {name} holds {dtype} data; an attnviz result holds numbers and text only")
    count = math.prod(int(d) for d in shape)
    nbytes = count * dtype.itemsize
    if nbytes + header != member.file_size:
        raise ResultFileError(f"{path}: {name} claims shape {tuple(shape)} ({human(nbytes)}) but holds "
                              f"{human(member.file_size - header)}; the file is damaged or not attnviz's")
    if text and nbytes > MAX_SMALL_FILE:
        raise ResultFileError(f"{path}: {name} is {human(nbytes)} of text; more than the {human(MAX_SMALL_FILE)} "
                              "allowed")
    return nbytes, member


def read_meta(arrays: dict[str, np.ndarray], path: Path) -> dict[str, Any]:
    """The JSON metadata of a result: an object naming the attnviz result format."""
    if "meta" not in arrays or arrays["meta"].shape != ():
        raise ResultFileError(f"{path} is not an attnviz result file (no attnviz metadata); re-create it with "
                              "AttentionResult.save")
    try:
        meta = json.loads(str(arrays["meta"]))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ResultFileError(f"{path}: its metadata is not JSON ({type(exc).__name__})") from None
    if not isinstance(meta, dict) or meta.get("format") != "attnviz-result":
        raise ResultFileError(f"{path} is not an attnviz result file (its metadata is not attnviz's)")
    if not isinstance(meta.get("metadata", {}), dict):
        raise ResultFileError(f"{path}: its metadata's 'metadata' is not an object")
    return meta


WEIGHTS = ("attentions", "cross_attentions", "decoder_attentions")
"""The arrays that hold attention weights: probabilities, each row summing to at most 1."""

ROW_TOLERANCE = 1e-2
"""How far a row's sum may pass 1 (float16 storage rounds each weight by up to 2⁻¹¹ of itself)."""


def check_consistent(arrays: dict[str, np.ndarray], path: Path, meta: dict[str, Any] | None = None) -> None:
    """Lengths that must agree, sizes within :data:`attnviz.limits.MAX_INDEX`, metadata that fits the
    arrays, and attention weights that are finite probabilities once cast to float32 (the weight
    arrays in ``arrays`` are replaced by their float32 casts, which the caller then uses)."""
    from ..limits import MAX_INDEX

    if "tokens" not in arrays or "attentions" not in arrays:
        raise ResultFileError(f"{path} has no tokens or attentions; re-create it with AttentionResult.save")
    if arrays["tokens"].ndim != 1 or arrays["tokens"].shape[0] == 0:
        raise ResultFileError(f"{path} holds no tokens; an attnviz result has at least one")
    n = arrays["tokens"].shape[0]
    attn = arrays["attentions"]
    if attn.ndim != 4 or attn.shape[-1] != n or attn.shape[-2] != n:
        raise ResultFileError(f"{path}: attentions {attn.shape} do not match its {n} tokens")
    for name in ("token_ids", "special", "attention_mask", "word_ids", "segment_ids"):
        if name in arrays and arrays[name].shape != (n,):
            raise ResultFileError(f"{path}: {name} has shape {arrays[name].shape}, not one per token ({n})")
    m = _check_target(arrays, path, n)
    for name in WEIGHTS:
        if name not in arrays:
            continue
        layers, heads = arrays[name].shape[:2]
        if heads == 0 or (layers == 0 and not (name == "attentions" and "cross_attentions" in arrays)):
            raise ResultFileError(f"{path}: {name} {arrays[name].shape} holds no layer or no head")
        if layers > MAX_INDEX or heads > MAX_INDEX:
            raise ResultFileError(f"{path}: {name} {arrays[name].shape} claims more than {MAX_INDEX:,} layers or "
                                  "heads; no model has that many")
        with np.errstate(over="ignore"):  # a float64 past float32's range becomes inf, refused just below
            arrays[name] = weights = arrays[name].astype(np.float32, copy=False)  # what AttentionResult holds
        _check_rows(weights, name, path)
    for name in ("scores", "values", "value_norms"):
        if name in arrays and arrays[name].size and np.isnan(arrays[name]).any():
            raise ResultFileError(f"{path}: {name} holds NaN")
    if meta is not None:
        held = arrays["cross_attentions"].shape[0] if attn.shape[0] == 0 and "cross_attentions" in arrays else attn.shape[0]
        _check_metadata(meta, path, held, m if m is not None else n)


def _check_target(arrays: dict[str, np.ndarray], path: Path, n: int) -> int | None:
    """The decoder's tokens against its attentions: decoder ``[L, H, m, m]``, cross ``[L, H, m, n]``."""
    if "target_tokens" not in arrays:
        if "decoder_attentions" in arrays or "cross_attentions" in arrays:
            raise ResultFileError(f"{path} holds a decoder's attentions but no target_tokens to label them")
        if "target_special" in arrays:
            raise ResultFileError(f"{path} holds target_special but no target_tokens")
        return None
    target = arrays["target_tokens"]
    if target.ndim != 1 or target.shape[0] == 0:
        raise ResultFileError(f"{path}: target_tokens has shape {target.shape}; a decoder reads at least one token")
    m = target.shape[0]
    expected = {"decoder_attentions": (m, m), "cross_attentions": (m, n)}
    for name, tail in expected.items():
        if name in arrays and (arrays[name].ndim != 4 or arrays[name].shape[2:] != tail):
            raise ResultFileError(f"{path}: {name} {arrays[name].shape} does not match its {m} target and {n} "
                                  "source tokens")
    if "target_special" in arrays and arrays["target_special"].shape != (m,):
        raise ResultFileError(f"{path}: target_special has shape {arrays['target_special'].shape}, not one per "
                              f"target token ({m})")
    return m


def _check_rows(weights: np.ndarray, name: str, path: Path) -> None:
    if not weights.size:
        return
    if not np.isfinite(weights).all():
        raise ResultFileError(f"{path}: {name} holds NaN or infinite weights (as float32); the model that made it "
                              "overflowed, or the file was not written by attnviz")
    if (weights < 0).any():
        raise ResultFileError(f"{path}: {name} holds negative weights; attention weights are probabilities")
    sums = weights.sum(axis=-1, dtype=np.float64)
    if (sums > 1 + ROW_TOLERANCE).any():
        raise ResultFileError(f"{path}: a row of {name} sums to {float(sums.max()):.4g}; each row of attention "
                              "weights sums to 1 (or less, where tokens were hidden)")


def _check_metadata(meta: dict[str, Any], path: Path, held: int, steps: int) -> None:
    """What the metadata says about the arrays: types, lengths and ranges, so no number in it can size
    an allocation (``"layers": [0, 10**30]`` once made rollout fill memory)."""
    from ..limits import MAX_INDEX

    if not isinstance(meta.get("causal", False), bool):
        raise ResultFileError(f"{path}: its metadata's 'causal' is not true or false")
    if not isinstance(meta.get("model_name", ""), str):
        raise ResultFileError(f"{path}: its metadata's 'model_name' is not text")
    inner = meta.get("metadata", {})
    if "layers" in inner:
        layers = inner["layers"]
        if (not isinstance(layers, list) or len(layers) != held
                or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < MAX_INDEX for x in layers)
                or len(set(layers)) != len(layers)):
            raise ResultFileError(f"{path}: its metadata's 'layers' must list {held} different layer numbers from "
                                  f"0 to {MAX_INDEX - 1}, one per layer it holds")
    if "prompt_length" in inner:
        length = inner["prompt_length"]
        if not isinstance(length, int) or isinstance(length, bool) or not 0 <= length <= steps:
            raise ResultFileError(f"{path}: its metadata's 'prompt_length' must be a whole number from 0 to {steps}")
