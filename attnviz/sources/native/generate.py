"""Generation on the native engine: the family's own forward pass on a key/value cache (GPT-2, the
LLaMA family), the language-model head read from the checkpoint, and :func:`attnviz.sources.decoding.decode`.

RoPE positions continue from the cache's length, grouped-query keys are cached as the query heads
read them, and a sliding window (Mistral) masks by absolute position over the whole cache, so
every row lands at its true positions (transformers' sliding cache drops the old keys instead:
the same weights, fewer columns).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import AttnvizError, InputError
from ...result import AttentionResult
from ..decoding import decode, sampling_metadata
from ..stream import check_finite
from ..tokens import encode, label_from_piece

if TYPE_CHECKING:  # pragma: no cover
    from ..sampling import Sampling

NativeSource = Any  # attnviz.sources.native.NativeSource, named, not imported: the package imports this module


def end_of_sequence_ids(folder: Path, config: dict[str, Any]) -> list[int]:
    """The ids that end generation: ``generation_config.json``'s ``eos_token_id`` (one or a list), as
    transformers reads it, else ``config.json``'s."""
    from ...limits import read_small

    found: Any = None
    with contextlib.suppress(FileNotFoundError, ValueError, AttributeError, AttnvizError):
        found = json.loads(read_small(folder / "generation_config.json", what="generation_config.json")).get("eos_token_id")
    if found is None:
        found = config.get("eos_token_id")
    found = found if isinstance(found, list) else [found]
    return [int(i) for i in found if isinstance(i, int) and not isinstance(i, bool)]


def generate_native(source: NativeSource, prompt: str, *, max_new_tokens: int, sampling: Sampling,
                    stop_at_eos: bool) -> AttentionResult:
    """Continue ``prompt`` on ``source``'s model with its own attention and a key/value cache."""
    model = source.model
    info = encode(source.tokenizer, prompt, model_name=source.name, special_ids=frozenset(source.special_ids()))
    limit = source.max_positions
    if limit is not None and len(info.ids) + max_new_tokens > limit:
        raise InputError(f"the prompt ({len(info.ids)} tokens) and [[max_new_tokens={max_new_tokens}]] pass the "
                         f"{limit} positions {source.name} takes; ask for fewer tokens")
    if source.vocab_rows is not None and max(info.ids) >= source.vocab_rows:
        raise InputError(f"{source.name}: the tokenizer gives token id {max(info.ids)} past the embedding's "
                         f"{source.vocab_rows} rows")
    from ..stepping import NativeStepper

    done = decode(NativeStepper(source), info.ids, max_new_tokens=max_new_tokens, sampling=sampling,
                  eos_ids=end_of_sequence_ids(source.folder, model.config), stop_at_eos=stop_at_eos, keep="matrix")
    assert done.attentions is not None  # keep="matrix" keeps them
    for layer in range(done.attentions.shape[0]):
        check_finite(done.attentions[layer], layer, source.name)
    specials = source.special_ids()
    new_ids = done.ids[len(info.ids):]
    labels = info.labels + [label_from_piece(source.tokenizer.id_to_token(i) or f"<{i}>") for i in new_ids]
    return AttentionResult(
        tokens=labels, attentions=done.attentions, token_ids=done.ids,
        special=info.special + [i in specials for i in new_ids],
        word_ids=info.word_ids + [-1 if i in specials else max(info.word_ids) + 1 + n  # a word each
                                  for n, i in enumerate(new_ids)],
        causal=True, model_name=source.name,
        metadata={"engine": "native", "family": source.family, "device": source.device, "generation": True,
                  "prompt_length": len(info.ids), "sampling": sampling_metadata(sampling),
                  "stopped_at_eos": done.stopped_at_eos},
    )
