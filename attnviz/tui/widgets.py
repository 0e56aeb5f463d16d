"""The pieces of ``attnviz tui``'s screen: the one-line prompt, the help, the views' tabs and the pane a view is
drawn in (its lines rendered once by rich and kept as strips); the keys as the footer lists them."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.geometry import Size
from textual.screen import ModalScreen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input, Static, Tabs

from ..render.safe import escaped_segments

HELP = """\
attnviz tui: the keys

  ←/→        previous / next layer          ↑/↓       previous / next head
  Tab, 1–8   views: head, model, heads table, one token, compare heads, generation, explain, picture
  /          find a token by its text       n         the next token that matches
  Enter      select a token (the first)     [ ]       select the previous / next token
             a selected token's row and column are listed under the heatmap; view 4 shows it everywhere
  + -        zoom into the selected token's region / out
  , .        previous / next generation step (view 6)
  e          explain this head (view 7)     t         type a new text (the model stays loaded)
  s          save the current view (.png, .svg, .pdf, .html, .npz)
  ?          this help                      q         quit (Ctrl-C too)

  o          sort the heads table (view 3) by the next column; a click on a column's name sorts by it

A click on a heatmap row selects its token; a click on a tab shows its view; the mouse wheel scrolls.
"""


# The footer's hints: (keys, what, rank). The whole list where the terminal is wide enough; narrower, the hints
# of rank above a cut are left out, least needed first, so the footer stays one line (? lists every key).
HINTS = (("←→", "layer", 0), ("↑↓", "head", 0), ("Tab/1-8", "view", 0), ("/", "find", 1), ("n", "next", 3),
         ("Enter", "select", 3), ("[ ]", "token", 2), ("+-", "zoom", 1), (",.", "step", 3), ("o", "sort", 3),
         ("e", "explain", 2), ("t", "text", 2), ("s", "save", 1), ("?", "help", 0), ("q", "quit", 0))
KEYS = "  ".join(f"{keys} {what}" for keys, what, _ in HINTS)  # every binding


def keys_line(width: int) -> str:
    """The footer at ``width`` cells: every hint that fits on one line, the least needed left out first."""
    shown = list(HINTS)
    for hint in sorted(HINTS, key=lambda h: -h[2] * len(HINTS) - HINTS.index(h)):  # the last of the highest rank first
        line = "  ".join(f"{keys} {what}" for keys, what, _ in shown)
        if cell_len(line) <= width or hint[2] == 0:
            return line
        shown.remove(hint)
    return "  ".join(f"{keys} {what}" for keys, what, _ in shown)


class Ask(ModalScreen[str | None]):
    """One line of input (a token to find, a new text, a file name); Escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    Ask { align: center middle; }
    Ask > Vertical { width: 80%; max-width: 100; height: auto; border: round $accent; padding: 0 1; }
    """

    def __init__(self, prompt: str, value: str = "") -> None:
        super().__init__()
        self.prompt, self.value = prompt, value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.prompt)
            yield Input(value=self.value, id="answer")

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class Help(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark", "close", "close")]
    DEFAULT_CSS = """
    Help { align: center middle; }
    Help > Static { width: auto; max-width: 100%; height: auto; border: round $accent; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        yield Static(HELP, id="help")

    def action_close(self) -> None:
        self.dismiss(None)


class ViewTabs(Tabs, can_focus=False):
    """The views' tabs: clicked, never focused (the arrows are the app's)."""


class Pane(ScrollView, can_focus=False):
    """Where a view is drawn: its lines rendered once (by rich, at the pane's width) and kept as strips, of which
    Textual draws only those in sight; scrolled with the mouse. Far quicker than re-laying out a renderable."""

    DEFAULT_CSS = "Pane { height: 1fr; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lines: list[Strip] = []
        self.content: Any = Text("")  # what was drawn, for whoever reads it back (tests, saving)

    @staticmethod
    def strips(renderable: Any, width: int) -> list[Strip]:
        """``renderable``'s lines at ``width``, as Textual draws them (pure: a worker may call it)."""
        from rich.console import Console

        console = Console(width=width, color_system="truecolor", force_terminal=True, legacy_windows=False)
        lines = console.render_lines(renderable, console.options.update_width(width), pad=False)
        return [Strip(list(escaped_segments(line))) for line in lines]  # a token's ESC or U+202E, escaped

    def update(self, renderable: Any, lines: list[Strip] | None = None) -> None:
        self.content = renderable
        width = max(20, self.size.width or self.app.size.width - 2)
        self.lines = self.strips(renderable, width) if lines is None else lines
        self.virtual_size = Size(max((strip.cell_length for strip in self.lines), default=0), len(self.lines))
        self.scroll_to(0, 0, animate=False)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        line = y + int(self.scroll_offset.y)
        if not 0 <= line < len(self.lines):
            return Strip.blank(self.size.width)
        return self.lines[line].crop_extend(int(self.scroll_offset.x), int(self.scroll_offset.x) + self.size.width,
                                            None)
