"""attnviz: see what every attention head of a transformer does, in the terminal or as image files.

The public API is imported lazily, so ``import attnviz`` (and ``attnviz --help``) stays fast and
does not load torch until a function that needs it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["AttentionResult", "AttnvizError", "__version__", "extract", "extract_batch", "generate", "show"]

if TYPE_CHECKING:  # pragma: no cover
    from .api import extract, extract_batch, show
    from .errors import AttnvizError
    from .generation import generate
    from .result import AttentionResult

_LAZY = {
    "extract": ("attnviz.api", "extract"),
    "extract_batch": ("attnviz.api", "extract_batch"),
    "AttentionResult": ("attnviz.result", "AttentionResult"),
    "AttnvizError": ("attnviz.errors", "AttnvizError"),
    "show": ("attnviz.api", "show"),
    "generate": ("attnviz.generation", "generate"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'attnviz' has no attribute {name!r}")
