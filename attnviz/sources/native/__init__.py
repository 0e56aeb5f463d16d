"""The native engine: our own attention on a Hugging Face folder's safetensors weights.

No transformers model is built (transformers is not even imported): ``config.json`` is read as
JSON, weights with safetensors, ``tokenizer.json`` with the ``tokenizers`` library. It gives what
transformers does not: the pre-softmax scores and each head's query, key and value vectors.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...errors import AttnvizError, ModelNotFoundError
from ...records import Registry
from .. import stream
from ..base import Capabilities
from ..engine import Capture, LayerOut, ModelSource
from ..files import read_config, weight_files
from . import gpt2, llama
from .bert import Bert
from .common import NativeModel
from .weights import load_weights

if TYPE_CHECKING:  # pragma: no cover
    from ...result import AttentionResult
    from ..contracts import ExplainInputs
    from ..sampling import Sampling

CLASSES: list[type[NativeModel]] = []
"""The families the native engine runs; each class says its traits (:class:`NativeModel`)."""

FAMILIES: Registry[type[NativeModel]] = Registry("native family")
"""config.json's ``model_type`` → the family's class (reading it loads the plugins: :mod:`attnviz.plugins`)."""


def register_family(cls: type[NativeModel]) -> type[NativeModel]:
    """Add a family from outside (a user's code, a plugin): a :class:`NativeModel` subclass whose
    ``model_types`` are all new."""
    taken = [kind for kind in cls.model_types if kind in FAMILIES]
    if not cls.model_types or taken:
        raise ValueError(f"{cls.__name__}: " + (f"model_type {taken[0]!r} is already registered" if taken
                                                else "a family names the model_type values it runs"))
    for kind in cls.model_types:
        FAMILIES[kind] = cls
    CLASSES.append(cls)
    return cls


def unregister_family(cls: type[NativeModel]) -> None:
    """Remove a family :func:`register_family` added (attnviz's own stay)."""
    if set(cls.model_types) & FAMILIES.built_in:
        raise ValueError(f"{cls.__name__} is one of attnviz's own native families; it stays")
    for kind in cls.model_types:
        if FAMILIES.get(kind) is cls:
            FAMILIES.unregister(kind)
    if cls in CLASSES:
        CLASSES.remove(cls)


@contextmanager
def registered_family(cls: type[NativeModel]) -> Iterator[type[NativeModel]]:
    """``cls`` registered for the ``with`` block only."""
    register_family(cls)
    try:
        yield cls
    finally:
        unregister_family(cls)


for _family in (Bert, gpt2.GPT2, llama.Llama, llama.Mistral, llama.Qwen2):
    register_family(_family)
BUILT_IN = FAMILIES.seal()


def family_names() -> str:
    """The families as messages name them: ``BERT, GPT-2, LLaMA, Mistral, Qwen2`` (and those added)."""
    return ", ".join(name for cls in dict.fromkeys(FAMILIES.values()) for name in cls.model_types.values())


def native_unsupported(folder: Path, config: dict[str, Any] | None = None) -> str | None:
    """Why the native engine cannot run the model in ``folder``, or None when it can."""
    config = read_config(folder) if config is None else config
    kind = config.get("model_type")
    if kind not in FAMILIES:
        return f"model_type {kind!r} is not one of {', '.join(sorted(FAMILIES))}"
    if not weight_files(folder):
        return "the folder has no .safetensors weights"
    if not (folder / "tokenizer.json").is_file():
        return "the folder has no tokenizer.json"
    return FAMILIES[str(kind)].unsupported(config)


@contextmanager
def skip_init() -> Iterator[None]:
    """Layers are built only to be overwritten with the checkpoint: skip their random initialisation."""
    from torch import nn

    saved = {cls: cls.reset_parameters for cls in (nn.Linear, nn.LayerNorm, nn.Embedding)}
    try:
        for cls in saved:
            cls.reset_parameters = lambda self: None  # type: ignore[method-assign]  # torch's stubs: a method of its classes
        yield
    finally:
        for cls, method in saved.items():
            cls.reset_parameters = method  # type: ignore[method-assign]  # torch's stubs: its own method, put back


class NativeSource(ModelSource):
    """A Hugging Face folder run by attnviz's own attention."""

    engine = "native"
    capabilities = Capabilities(details=True, value_norms=True, pairs=True, streaming=True, token_ids=True,
                                queries_keys=True)

    def __init__(self, folder: Path, *, name: str, device: str = "cpu") -> None:
        from tokenizers import Tokenizer

        config = read_config(folder)
        reason = native_unsupported(folder, config)
        if reason:
            raise ModelNotFoundError(f"the native engine cannot run {name}: {reason}; use [[engine=hf]]")
        family = FAMILIES[config["model_type"]]
        self.capabilities = replace(self.capabilities, generation=family.causal)
        self.folder = folder
        self.weights = weights = load_weights(folder, family.prefixes)  # read lazily: the head only to generate
        try:
            with skip_init():
                self.model = family(config, weights).to(device)
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise ModelNotFoundError(
                f"{name}: config.json and the weights do not fit together ({type(exc).__name__}: {exc}); "
                "re-download the model, or try [[engine=hf]]"
            ) from None
        from ...limits import MAX_TOKENIZER_FILE, read_small
        from ..tokens import guarded

        path = folder / "tokenizer.json"
        try:
            text = read_small(path, limit=MAX_TOKENIZER_FILE, what="tokenizer.json").decode("utf-8")
        except (AttnvizError, UnicodeDecodeError, OSError) as exc:
            raise ModelNotFoundError(f"cannot read {path}: {getattr(exc, 'template', exc)}") from None
        tokenizer = guarded(lambda: Tokenizer.from_str(text), name, "to load")
        max_positions = config.get("max_position_embeddings") or config.get("n_positions")
        super().__init__(
            name=name, tokenizer=tokenizer, causal=family.causal, max_positions=max_positions,
            family=config["model_type"], device=device, pad_id=config.get("pad_token_id"),
            bos_id=config.get("bos_token_id"), vocab_rows=self.model.vocab_rows,
        )

    @property
    def n_layers(self) -> int:
        return self.model.n_layers

    def rows_for(self, batch: int, tokens: int) -> bool:
        """Whether a batch this size hands each layer over as row blocks: its ``[B, H, T, T]`` float32
        weights would pass :data:`attnviz.sources.stream.ROWS_FROM_BYTES`."""
        return batch * self.model.attention(0).n_heads * tokens**2 * 4 > stream.ROWS_FROM_BYTES

    def explain_inputs(self, text: str | None, layer: int = 0) -> ExplainInputs:
        """What ``attnviz explain`` walks through: the input of ``layer``'s attention for ``text``,
        that layer's module, the token labels, the masking and (RoPE families) the rotary tables."""
        from .explain import explain_inputs

        return explain_inputs(self, text, layer)

    def generate(self, prompt: str, *, max_new_tokens: int, sampling: Sampling, stop_at_eos: bool) -> AttentionResult:
        """Continue ``prompt`` (causal families) with incremental decoding on a key/value cache."""
        from .generate import generate_native

        if not self.capabilities.generation:
            raise ModelNotFoundError(f"{self.name} is a {self.family} encoder; it cannot generate")
        return generate_native(self, prompt, max_new_tokens=max_new_tokens, sampling=sampling, stop_at_eos=stop_at_eos)

    def forward_layers(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor,
                       capture: Capture) -> Iterator[LayerOut]:
        """Each captured layer as soon as it is computed; the run stops after the last one wanted."""
        from ...attention import head_value_norms
        from ...attention.buffers import reused_buffers

        n_layers = self.n_layers if capture.layers is None else max(capture.layers) + 1
        # Row blocks for an input too long to hold a layer, or a long one whose caller asked for them.
        asked = capture.rows and ids.shape[1] > stream.ROWS_ASKED_FROM_TOKENS
        rows = (asked or self.rows_for(ids.shape[0], ids.shape[1])) and not (capture.details or capture.grad)
        capture = replace(capture, rows=rows)
        i = -1
        with reused_buffers():  # a layer's weights written where an earlier layer's were, once nobody holds them
            for out in self.model.run(ids, mask, types, n_layers, capture):  # (enumerate would hold the last layer)
                i += 1
                if capture.wants(i):
                    yield LayerOut(
                        layer=i, weights=out.weights, rows=out.rows,
                        scores=out.scores if capture.details else None,
                        values=out.values if capture.details or capture.values else None,
                        queries=out.queries if capture.details or capture.queries_keys else None,
                        keys=out.keys if capture.details or capture.queries_keys else None,
                        value_norms=head_value_norms(out.values, self.model.o_weight(i)),
                    )
                del out  # one layer's matrices at a time
