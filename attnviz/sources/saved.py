"""A saved result (``.npz``, :meth:`AttentionResult.save`) as a source: every command that reads a
result shows it as it was computed. Nothing runs: the text, the model and its settings are fixed,
so an option that would change them is an error naming it, never silently ignored."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..errors import UsageError
from ..result import AttentionResult
from .base import Capabilities, ExtractOptions, Source


class SavedSource(Source):
    """A loaded :class:`AttentionResult`; ``extract`` returns it (narrowed to the layers asked for)."""

    engine = "saved"

    def __init__(self, result: AttentionResult, path: str | Path) -> None:
        result.check_square("drawn as a matrix")
        self.result = result
        self.path = Path(path)
        self.name = result.model_name or self.path.name
        self.causal = result.causal
        self.capabilities = Capabilities(
            details=result.scores is not None and result.values is not None,
            value_norms=result.value_norms is not None,
            cross=result.cross_attentions is not None,
            fixed_input=True,
            self_attention=not result.cross_only,
        )

    @classmethod
    def open(cls, path: str | Path) -> SavedSource:
        """The result saved at ``path``, read as untrusted input (every failure a ResultFileError)."""
        return cls(AttentionResult.load(path), path)

    @property
    def layer_numbers(self) -> list[int]:
        """The model's numbers of the layers the file holds (all of them, unless saved with ``layers=``)."""
        return list(self.result.metadata.get("layers") or range(self.result.layers_held))

    @property
    def n_layers(self) -> int:
        return max(self.layer_numbers) + 1

    def describe(self) -> str:
        made_by = self.result.metadata.get("engine")
        return f"saved result {self.path}, model {self.name}" + (f" (engine {made_by})" if made_by else "")

    def check(self, options: ExtractOptions, *, pairs: Sequence[str | None] = (), batch: bool = False) -> None:
        """What would need the model to run again is refused, naming the option."""
        fixed = f"{self.path} is a saved result, shown as it was computed"
        if any(p is not None for p in pairs):
            raise UsageError(f"[[pair]]: {fixed}; its text is fixed")
        if options.target is not None:
            raise UsageError(f"[[target]]: {fixed}; its decoder's input is fixed")
        if options.truncate:
            raise UsageError(f"[[truncate=True]]: {fixed}; its text is fixed")
        if options.details and not self.capabilities.details:
            raise UsageError(f"[[details=True]]: {self.path} holds no pre-softmax scores or value vectors; save a "
                             "result extracted with details=True")
        if options.layers is not None:
            self.check_layers(options.layers)

    def check_layers(self, layers: Sequence[int]) -> list[int]:
        from ..layer_range import check_layers

        return check_layers(layers, owner=str(self.path), held=self.layer_numbers)

    def _extract_batch(self, texts: Sequence[str | None], pairs: list[str | None], options: ExtractOptions) -> list[AttentionResult]:
        return [self._one(text, options) for text in texts]

    def _one(self, text: str | None, options: ExtractOptions) -> AttentionResult:
        if text:
            raise UsageError(f"{self.path} is a saved result of {len(self.result.tokens)} tokens, shown as it was "
                             "computed: its text is fixed; leave out TEXT, or give a model to run your own text")
        result = self.result
        if not options.details:  # as every source: scores, values, queries and keys only when asked for
            result = replace(result, scores=None, values=None, queries=None, keys=None)
        held = self.layer_numbers
        positions = None if options.layers is None else [held.index(layer) for layer in sorted(set(options.layers))]
        return result.narrowed(positions, float16=options.float16)
