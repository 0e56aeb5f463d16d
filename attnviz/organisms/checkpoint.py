"""An organism's checkpoint on disk: its files written into a folder (the weights streamed from the tensors that
hold them, never copied whole; the fingerprint of its description in the weights, the config and the mark), the mark
last; and a folder checked against a description before it is used (:func:`problem`): a half-built folder, a
truncated file or another organism's weights is never taken for it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from torch import Tensor

from ..errors import AttnvizError
from ..limits import check_regular, read_small
from .picture_spec import PictureSpec
from .spec import OrganismSpec
from .weights import EPS, VERSION, build_state, fingerprint

MARK = "attnviz-organism.done"  # written last: the fingerprint and each file's size; a folder without it is not used
WEIGHTS = "model.safetensors"
MAX_HEADER = 1 << 20  # bytes of the weights' header (about 70 per tensor; an organism has at most 146 tensors)


def tokenizer_folder() -> Path:
    from ..sources.places import default_model_folder

    return default_model_folder()


def write_checkpoint(spec: OrganismSpec, folder: Path) -> Path:
    """Write ``spec`` as a GPT-2 checkpoint with its tokenizer into the empty folder ``folder`` (the caller makes it,
    places it and removes it if this fails); the mark last."""
    from tokenizers import Tokenizer, processors

    tokenizer = Tokenizer.from_file(str(tokenizer_folder() / "tokenizer.json"))
    cls, sep, pad = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
    # A causal model's encoding: the first token [CLS] (a BOS), no [SEP] after the text.
    tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A", pair="[CLS] $A $B",
                                                             special_tokens=[("[CLS]", cls)])
    tokenizer.no_truncation()
    tokenizer.no_padding()
    vocab = tokenizer.get_vocab()
    own = fingerprint(spec)
    state, lay = build_state(spec, len(vocab), vocab)
    write_safetensors(folder / WEIGHTS, state, {"format": "pt", "attnviz_organism": own})
    del state
    config: dict[str, Any] = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": len(vocab),
        "n_embd": lay.d_model, "n_layer": spec.layers, "n_head": spec.heads, "n_positions": spec.positions,
        "n_inner": 4, "activation_function": "gelu_new", "layer_norm_epsilon": EPS, "resid_pdrop": 0.0,
        "embd_pdrop": 0.0, "attn_pdrop": 0.0, "scale_attn_weights": True, "tie_word_embeddings": True,
        "bos_token_id": cls, "eos_token_id": sep, "pad_token_id": pad, "initializer_range": 0.02,
        "attnviz_organism": {"name": spec.name, "fingerprint": own, "version": VERSION,
                             "planted": [vars(h) for h in spec.planted],
                             **({"needle": spec.needle} if spec.needle else {}),
                             **({"question": spec.question} if spec.question else {})},
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (folder / "generation_config.json").write_text(
        json.dumps({"bos_token_id": cls, "eos_token_id": sep, "pad_token_id": pad}), encoding="utf-8")
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "[CLS]", "eos_token": "[SEP]",
        "unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]",
        "mask_token": "[MASK]", "model_max_length": spec.positions, "do_lower_case": True}), encoding="utf-8")
    sizes = {path.name: path.stat().st_size for path in folder.iterdir() if path.name != MARK}
    (folder / MARK).write_text(json.dumps({"fingerprint": own, "version": VERSION, "files": sizes}),
                               encoding="utf-8")
    return folder


def write_safetensors(path: Path, state: dict[str, Tensor], metadata: dict[str, str]) -> None:
    """``state`` (float32 tensors) as a safetensors file, each tensor written from its own memory: safetensors'
    ``save_file`` first copies every tensor into bytes, doubling a build's peak. The format: the header's length
    (8 bytes, little-endian), the header (JSON: each tensor's dtype, shape and byte range; padded to 8 bytes), the
    tensors' bytes one after another."""
    if sys.byteorder != "little":  # pragma: no cover - the format is little-endian; let safetensors convert
        from safetensors.torch import save_file

        save_file(state, str(path), metadata=metadata)
        return
    header: dict[str, Any] = {"__metadata__": metadata}
    at = 0
    for name, tensor in state.items():
        size = 4 * tensor.numel()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [at, at + size]}
        at += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as handle:
        handle.write(len(text).to_bytes(8, "little"))
        handle.write(text)
        for tensor in state.values():
            handle.write(tensor.float().contiguous().numpy().data)


def fingerprint_of(spec: OrganismSpec | PictureSpec) -> str:
    """What names an organism's folder, a text organism's or a picture organism's."""
    return spec.fingerprint() if isinstance(spec, PictureSpec) else fingerprint(spec)


def problem(folder: Path, spec: OrganismSpec | PictureSpec) -> str | None:
    """``None`` when ``folder`` holds ``spec``'s finished checkpoint; ``""`` when nothing is there; else what is
    wrong with what is, in words ("is half-built", "holds another organism's weights", ...)."""
    if not os.path.lexists(folder):
        return ""
    if folder.is_symlink() or not folder.is_dir():
        return "is not a folder attnviz built"
    expected = fingerprint_of(spec)
    try:
        return _problem(folder, expected)
    except FileNotFoundError as exc:
        if Path(str(exc.filename)).name == MARK:
            return f"is half-built (it has no {MARK}, which a build writes last)"
        return f"lacks {Path(str(exc.filename)).name}"
    except (OSError, ValueError, LookupError, TypeError, AttnvizError) as exc:
        return f"has an unreadable file ({exc})"


def _problem(folder: Path, expected: str) -> str | None:
    mark = json.loads(read_small(folder / MARK, limit=MAX_HEADER))
    files = mark.get("files") if isinstance(mark, dict) else None
    if not isinstance(files, dict) or mark.get("fingerprint") != expected:
        return f"holds another organism (its {MARK} does not name fingerprint {expected})"
    for name, size in files.items():
        found = check_regular(folder / Path(str(name)).name).st_size
        if found != size:
            return f"has a changed or truncated {name} ({found:,} bytes, not {size:,})"
    config = json.loads(read_small(folder / "config.json", limit=MAX_HEADER))["attnviz_organism"]
    if (config["fingerprint"], _weights_header(folder / WEIGHTS)["__metadata__"]["attnviz_organism"]) != (expected,
                                                                                                       expected):
        return f"holds another organism's config or weights (not fingerprint {expected})"
    return None


def _weights_header(path: Path) -> dict[str, Any]:
    """The header of a safetensors file, checked against the file's size (a truncated file is refused)."""
    size = check_regular(path).st_size
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        if not 0 < length <= MAX_HEADER:
            raise ValueError(f"{path.name} is not a safetensors file")
        header = json.loads(handle.read(length))
    ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
    if 8 + length + max(ends, default=0) != size:
        raise ValueError(f"{path.name} is truncated")
    return header
