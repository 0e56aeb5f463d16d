"""What ``attnviz explain`` shows, as data: one attention computation step by step (:func:`explain`), checked to be
finite and against a config's reference, and the tutorials' errata (:func:`errata`). Re-exported by
:mod:`attnviz.api`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..sources.resolve import load_source

if TYPE_CHECKING:  # pragma: no cover
    from ..explain import Walkthrough
    from ..explain.errata import Erratum


def explain(text: str | None = None, model: str | None = None, *, layer: int = 0, head: int | None = None,
            causal: bool | None = None, scale: str | float | None = None) -> Walkthrough:
    """What ``attnviz explain`` shows: one attention computation, step by step, in float64.

    With no ``text`` and no ``model``: the seed tutorial's worked example. With ``text`` and no
    ``model``: the default model (MiniLM), one real layer. ``model`` may be a config (.toml) or a
    checkpoint the native engine runs. ``head`` keeps one head in view; ``scale`` is ``sqrt-dk``
    (the rule), ``sqrt-len``, ``none`` or a number to divide the scores by. A config's
    ``[reference]`` is compared only when the setup is the config's own (not under another
    ``causal`` or ``scale``)."""
    from ..errors import UsageError

    if layer < 0:
        raise UsageError(f"[[layer={layer}]] is negative; layers are numbered from 0")
    if head is not None and head < 0:
        raise UsageError(f"[[head={head}]] is negative; heads are numbered from 0")
    from ..explain import walkthrough
    from ..explain.reference import compare_reference

    source = load_source(model or (EXPLAIN_DEFAULT if text is None else None), causal=causal)
    inputs_of = getattr(source, "explain_inputs", None)
    if inputs_of is None:
        what = "a saved result" if source.engine == "saved" else f"a {source.engine} model"
        raise UsageError(f"explain walks through attnviz's config models (.toml) and checkpoints the native engine "
                         f"runs; {model} is {what}. Use attnviz heatmap for it")
    inputs = inputs_of(text, layer)
    walk = walkthrough(inputs, scale=scale, head=head)
    _check_walk_finite(walk, source.name)
    if inputs.reference is not None:
        walk.reference_source = inputs.reference.source
        config_causal = getattr(getattr(source, "cfg", None), "causal", inputs.causal)
        if inputs.causal != config_causal:
            walk.reference_off = "causal"
        elif not walk.scale_rule.standard:
            walk.reference_off = "scale"
        else:
            walk.differences = compare_reference(walk, inputs.reference)
    return walk


def _check_walk_finite(walk: Walkthrough, model_name: str) -> None:
    """Refuse a walkthrough whose numbers overflowed, as an extraction refuses NaN weights: its tables
    would show inf and NaN, and its JSON could not be written."""
    import torch

    from ..errors import NumericalError

    for steps in walk.heads:
        for name in ("q", "k", "v", "scores", "weights", "output"):
            if not torch.isfinite(getattr(steps, name)).all():
                raise NumericalError(f"the computation overflows in head {steps.index} of {model_name or 'the model'}: "
                                     f"its {name} hold infinite or NaN numbers. Check the config's values (smaller "
                                     "x or weights)")


def errata() -> list[Erratum]:
    """The tutorials' errors (seeds 000, 001, 003), each shown with numbers computed on the spot."""
    from ..explain.errata import errata as computed

    return computed()


EXPLAIN_DEFAULT = "sample_configs/seed_example.toml"
