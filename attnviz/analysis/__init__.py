"""What attention weights say about heads: pure functions from tensors to tensors and the tables built on them.

``metrics`` (the definitions docs/design.md cites), ``statistics`` (the head statistics, one record each),
``heads`` (the head table), ``compare`` (head distances), ``probes`` (the induction probe),
``transforms`` and ``reading`` (how a result is read: special tokens, words), ``weights``
(attention as read from a model's tensors). Nothing here loads a model or draws a picture.
"""

from typing import Any

AttentionResult = Any
"""How analysis (and the page built from it) names an :class:`attnviz.result.AttentionResult` in its
annotations: it reads a result by its fields alone and never imports the class, because the result's
notebook display imports the page, which imports analysis (no import circle, not even for types)."""
