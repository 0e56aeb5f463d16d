"""Generation into a result, one way for every causal engine (the native engine, a causal config model, transformers
on the fused or the eager engine): the prompt encoded once as its engine reads it, the positions and the vocabulary
checked once, :func:`attnviz.sources.decoding.decode` on the stepper :func:`attnviz.sources.causal.load_causal` built
(every row kept), the result built once.

What differs by engine is only how a text becomes ids and ids become labels (:class:`Encoded`): the native engine's
tokenizer with its word ids, a config model's words (each later step an index into its ``vocab``), transformers'
tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InputError, UsageError
from ..result import AttentionResult
from .decoding import decode, sampling_metadata
from .stream import check_finite

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from .sampling import Sampling
    from .stepping import CausalModel

Labelled = tuple[list[str], list[int], list[bool], list[int]]
"""Tokens' labels, ids (as a result records them), special flags and word ids (empty lists: none recorded)."""


@dataclass(frozen=True)
class Encoded:
    """A prompt as its engine reads it: the ids its stepper is fed, their labels, special flags and word ids (empty
    where the engine records none), how it labels the tokens chosen after it (``follow``, given the chosen ids as the
    stepper gave them) and the metadata the engine adds after its name (``facts``)."""

    ids: list[int]
    labels: list[str]
    special: list[bool]
    word_ids: list[int]
    follow: Callable[[list[int]], Labelled]
    facts: dict[str, Any]


def generate_on(causal: CausalModel, prompt: str, *, max_new_tokens: int, sampling: Sampling,
                stop_at_eos: bool) -> AttentionResult:
    """Continue ``prompt`` on ``causal``'s stepper and keep every row of attention (see the module)."""
    stepper, source, name = causal.stepper, causal.source, causal.name
    encoded = READERS.get(stepper.engine, _transformers)(source, prompt)
    ids = encoded.ids
    if not ids:
        raise UsageError("the tokenizer produced no tokens for the prompt")
    limit = stepper.max_positions
    if limit is not None and len(ids) + max_new_tokens > limit:
        raise InputError(f"the prompt ({len(ids)} tokens) and [[max_new_tokens={max_new_tokens}]] pass the "
                         f"{limit} positions {name} takes; ask for fewer tokens")
    rows = getattr(source, "vocab_rows", None)
    if rows is not None and max(ids) >= rows:
        raise InputError(f"{name}: the tokenizer gives token id {max(ids)} past the embedding's {rows} rows")
    done = decode(stepper, ids, max_new_tokens=max_new_tokens, sampling=sampling, eos_ids=causal.eos,
                  stop_at_eos=stop_at_eos, keep="matrix")
    attentions = done.attentions
    assert attentions is not None  # keep="matrix" keeps them
    for layer in range(attentions.shape[0]):
        check_finite(attentions[layer], layer, name)
    labels, token_ids, special, word_ids = encoded.follow(done.new)
    return AttentionResult(
        tokens=encoded.labels + labels, attentions=attentions, token_ids=ids + token_ids,
        special=encoded.special + special, word_ids=encoded.word_ids + word_ids, causal=True, model_name=name,
        metadata={"engine": stepper.engine, **encoded.facts, "generation": True, "prompt_length": len(ids),
                  "sampling": sampling_metadata(sampling), "stopped_at_eos": done.stopped_at_eos},
    )


def _native(source: Any, prompt: str) -> Encoded:
    """The native engine: its ``tokenizers`` tokenizer, special tokens and word ids (each new token a word)."""
    from .tokens import encode, label_from_piece

    specials = source.special_ids()
    info = encode(source.tokenizer, prompt, model_name=source.name, special_ids=frozenset(specials))
    after = max(info.word_ids, default=-1) + 1

    def follow(new: list[int]) -> Labelled:
        return ([label_from_piece(source.tokenizer.id_to_token(i) or f"<{i}>") for i in new], new,
                [i in specials for i in new], [-1 if i in specials else after + n for n, i in enumerate(new)])

    return Encoded(list(info.ids), info.labels, info.special, info.word_ids, follow,
                   {"family": source.family, "device": source.device})


def _config(source: Any, prompt: str) -> Encoded:
    """A causal config model: the prompt's words (their word ids), then words of its ``vocab`` (the stepper gives
    their indices there)."""
    from .words import word_id

    cfg = source.network.cfg
    tokens, ids = source.tokenize(prompt)

    def follow(new: list[int]) -> Labelled:
        words = [cfg.vocab[i] for i in new]
        return words, [word_id(w, cfg.vocab_size) for w in words], [], []

    return Encoded(ids, tokens, [], [], follow, {"config_type": "TransformerConfig"})  # the one config that decodes


def _transformers(source: Any, prompt: str) -> Encoded:
    """transformers (the fused or the eager engine): its tokenizer's ids, labels and special tokens."""
    tokenizer = source.hf_tokenizer
    ids = [int(i) for i in tokenizer(prompt)["input_ids"]]
    special = set(tokenizer.all_special_ids)

    def labelled(chosen: list[int]) -> Labelled:
        return generated_labels(tokenizer, chosen), chosen, [i in special for i in chosen], []

    labels, _, flags, _ = labelled(ids)
    return Encoded(ids, labels, flags, [], labelled, {})


READERS: dict[str, Callable[[Any, str], Encoded]] = {"native": _native, "config": _config}
"""How each engine reads a prompt, by its stepper's engine; every other (``fused``, ``hf``) is transformers'."""


def generated_labels(tokenizer: Any, ids: list[int]) -> list[str]:
    """Readable labels of a transformers tokenizer's ``ids``, as the other commands write them (byte-level pieces
    decoded); an id the vocabulary has no piece for (a model whose embedding has more rows than its tokenizer) is
    ``<id>``."""
    from .tokens import label_from_piece

    pieces = tokenizer.convert_ids_to_tokens(ids)
    return [label_from_piece(piece) if piece is not None else f"<{i}>" for piece, i in zip(pieces, ids, strict=True)]


def end_of_sequence_ids(folder: Path, config: dict[str, Any]) -> list[int]:
    """The ids that end generation: ``generation_config.json``'s ``eos_token_id`` (one or a list), as
    transformers reads it, else ``config.json``'s."""
    import contextlib
    import json

    from ..errors import AttnvizError
    from ..limits import read_small

    found: Any = None
    with contextlib.suppress(FileNotFoundError, ValueError, AttributeError, AttnvizError):
        found = json.loads(read_small(folder / "generation_config.json", what="generation_config.json")).get("eos_token_id")
    if found is None:
        found = config.get("eos_token_id")
    found = found if isinstance(found, list) else [found]
    return [int(i) for i in found if isinstance(i, int) and not isinstance(i, bool)]
