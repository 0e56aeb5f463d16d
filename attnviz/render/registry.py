"""One registry of output formats: a format's name → what writes it, with one signature.

A view format (``kind="view"``) draws a :class:`~attnviz.render.view.HeatmapView` to a file:
``render(view, path, **options) -> Path``. A data format (``kind="data"``) is written by the export
pipeline from the result itself (npz, statistics JSON). ``--out``'s extension check, export's
``--formats`` and both places that draw (the commands and export's drawing processes) read this
table (as do generate's ``--out``, the TUI's ``s`` and export's manifest), so adding a format is one
module plus one :func:`register` call, here, in a user's code or in a plugin (:mod:`attnviz.plugins`).
:data:`FORMATS` is a :class:`~attnviz.records.Registry`: a taken name, or a view format's extension
another view format already writes, is refused. Renderers are named as ``"module:function"`` and
imported only when used, so ``attnviz --help`` loads no matplotlib.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..records import Registry, function_name, resolve


@dataclass(frozen=True)
class Format:
    name: str  # as export's --formats says it
    kind: Literal["view", "data"]
    suffix: str  # of the file it writes
    renderer: str | None = None  # "module:function" drawing a view to a path (view formats)
    description: str = ""
    per_text: bool = False  # export writes it once per text, every layer in it (the page), not once per layer

    def render(self, view: Any, path: str | Path, **options: Any) -> Path:
        """Draw ``view`` to ``path`` with this format's renderer."""
        if self.renderer is None:
            raise ValueError(f"format {self.name!r} is written by the export pipeline, not drawn from a view")
        from ..fileio import write_through

        draw: Callable[..., Path] = resolve(self.renderer, f"format {self.name}")
        return write_through(path, lambda tmp: draw(view, tmp, **options), writer=function_name(self.renderer))


# What a command shows, as numbers (``--out FILE.npz|.json``); export writes results, not views.
VIEW_DATA = {f.suffix: f for f in (
    Format("view-npz", "view", ".npz", "attnviz.render.view_data:write_view_npz", "the view's matrices and labels"),
    Format("view-json", "view", ".json", "attnviz.render.view_data:write_view_json", "the view's matrices as JSON"),
)}


def _check(registered: Registry[Format], fmt: Format) -> None:
    """A view format is found by its file's extension (:func:`for_path`): that extension must be free."""
    if not fmt.suffix.startswith(".") or fmt.suffix != fmt.suffix.lower():
        raise ValueError(f"{fmt.name}: a format's suffix is a lower-case extension such as .png; got {fmt.suffix!r}")
    taken = [f.name for f in registered.values() if f.kind == "view" and f.suffix == fmt.suffix]
    if fmt.kind == "view" and (taken or fmt.suffix in VIEW_DATA):
        raise ValueError(f"the format {(taken or [VIEW_DATA[fmt.suffix].name])[0]!r} already writes {fmt.suffix} files")


FORMATS: Registry[Format] = Registry("format", _check)
"""Every output format, by name, in the order export's ``--formats`` lists them."""
register, unregister, registered = FORMATS.register, FORMATS.unregister, FORMATS.registered

register(Format("png", "view", ".png", "attnviz.render.image:render_image", "a labelled figure (matplotlib)"))
register(Format("svg", "view", ".svg", "attnviz.render.image:render_image", "a labelled figure, vector"))
register(Format("pdf", "view", ".pdf", "attnviz.render.image:render_image", "a labelled figure, for papers"))
register(Format("html", "view", ".html", "attnviz.render.html:render_html",
                "an interactive page: head view, model view, matrices, one self-contained file", per_text=True))
register(Format("npz", "data", ".npz", None, "tokens, ids and attentions (AttentionResult.load reads it)"))
register(Format("json", "data", ".stats.json", None, "every head's statistics and labels"))
register(Format("parquet", "data", ".parquet", None,
                "every head's statistics, one row per text × layer × head: heads.parquet and texts.parquet"))
BUILT_IN = FORMATS.seal()

TILES = Format("tiles", "view", ".png", "attnviz.render.tiles:render_tiles", "bare colour tiles, no labels")


def view_formats() -> list[str]:
    """Names of the formats that draw a view to a file (png, svg, pdf, …)."""
    return [f.name for f in FORMATS.values() if f.kind == "view"]


def output_suffixes() -> list[str]:
    """The extensions ``--out FILE`` accepts: one per view format, and the view's numbers (.npz, .json)."""
    return list(dict.fromkeys([*(FORMATS[name].suffix for name in view_formats()), *VIEW_DATA]))


def figure_suffixes() -> list[str]:
    """The extensions of the view formats that draw one view (png, svg, pdf, …; not a page such as .html)."""
    return [f.suffix for f in FORMATS.values() if f.kind == "view" and not f.per_text]


def page_format(path: str | Path) -> Format | None:
    """The format that writes a whole page (``per_text``: .html) for a file name's extension, or None."""
    suffix = Path(path).suffix.lower()
    return next((f for f in FORMATS.values() if f.kind == "view" and f.per_text and f.suffix == suffix), None)


def or_list(suffixes: list[str]) -> str:
    """``.png, .svg or .pdf``: extensions as a message lists them."""
    return suffixes[0] if len(suffixes) == 1 else ", ".join(suffixes[:-1]) + " or " + suffixes[-1]


def for_path(path: str | Path) -> Format:
    """The view format a file name asks for, by its extension (checked by render.output.check_output_path)."""
    suffix = Path(path).suffix.lower()
    for name in view_formats():
        if FORMATS[name].suffix == suffix:
            return FORMATS[name]
    return VIEW_DATA[suffix]
