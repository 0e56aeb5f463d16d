"""Generation on the native engine (GPT-2, the LLaMA family): the family's own forward pass on a key/value cache
(:class:`attnviz.sources.stepping.NativeStepper`, the language-model head read from the checkpoint), decoded into a
result the one way every causal engine is (:func:`attnviz.sources.generated.generate_on`).

RoPE positions continue from the cache's length, grouped-query keys are cached as the query heads read them, and a
sliding window (Mistral) masks by absolute position over the whole cache, so every row lands at its true positions
(transformers' sliding cache drops the old keys instead: the same weights, fewer columns).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ...result import AttentionResult
    from ..sampling import Sampling
    from ..stepping import CausalModel

NativeSource = Any  # attnviz.sources.native.NativeSource, named, not imported: the package imports this module


def native_causal(source: NativeSource) -> CausalModel:
    """A native engine's source (a causal family's) ready to decode: its stepper, and the end tokens its folder
    names (what :func:`attnviz.sources.causal.load_causal` returns for it)."""
    from ..generated import end_of_sequence_ids
    from ..stepping import CausalModel, NativeStepper

    return CausalModel(source, NativeStepper(source), end_of_sequence_ids(source.folder, source.model.config),
                       source.folder)


def generate_native(source: NativeSource, prompt: str, *, max_new_tokens: int, sampling: Sampling,
                    stop_at_eos: bool) -> AttentionResult:
    """Continue ``prompt`` on ``source``'s model (:meth:`NativeSource.generate`, for a source already loaded;
    :func:`attnviz.generate` loads through :func:`attnviz.sources.causal.load_causal` and runs the same function)."""
    from ..generated import generate_on

    return generate_on(native_causal(source), prompt, max_new_tokens=max_new_tokens, sampling=sampling,
                       stop_at_eos=stop_at_eos)
