"""``attnviz tui``: every view at the keyboard, in any terminal (over SSH, in tmux), with the model kept warm.

A Textual app over an :class:`~attnviz.tui.explorer.Explorer`: the model runs on a worker thread (a
spinner meanwhile; the screen never freezes), every view is drawn by the commands' own renderers, and an
error is a message in the app, never a crash. ``q`` or Ctrl-C leaves the terminal as it was.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static, Tab, Tabs
from textual.worker import get_current_worker

from ..errors import AttnvizError, UsageError
from ..labels import safe_text
from .explorer import TITLES, Explorer
from .widgets import Ask, Help, Pane, ViewTabs, keys_line


def require_terminal() -> None:
    """The app draws on a terminal and reads its keys: with standard input or output not one (piped, redirected),
    it would draw once and wait for keys that never come. Refused in one line, naming what to use instead."""
    import sys

    for name, stream in (("output", sys.stdout), ("error output", sys.stderr), ("input", sys.stdin)):
        try:
            terminal = stream is not None and stream.isatty()
        except (AttributeError, ValueError, OSError):  # a closed or replaced stream
            terminal = False
        if not terminal:
            raise UsageError(f"attnviz tui runs in a terminal, and its standard {name} is not one (piped or "
                             "redirected); run it in a terminal, or use heatmap, heads or view for files and pipes")


def _monochrome_that_survives_plain_text(app: App[Any]) -> None:
    """Textual's NO_COLOR filter (``Monochrome``) fails on a segment without a style (``None.color``: a traceback,
    then exit 0): each such filter is replaced by one that passes unstyled text through and greys the rest."""
    from textual.filter import Monochrome

    class PlainTextMonochrome(Monochrome):
        def apply(self, segments: list[Any], background: Any) -> list[Any]:
            from rich.segment import Segment
            from rich.style import Style

            return super().apply([Segment(text, style or Style.null(), control) for text, style, control in segments],
                                 background)

    filters = getattr(app, "_filters", None)
    if isinstance(filters, list):
        filters[:] = [PlainTextMonochrome() if type(f) is Monochrome else f for f in filters]


class AttnvizTUI(App[None]):
    """The explorer (see the module)."""

    TITLE = "attnviz"
    CSS = """
    #status { height: auto; max-height: 2; background: $boost; padding: 0 1; }
    #tabs { height: 2; }
    #body { height: 1fr; }
    #message { height: auto; max-height: 3; color: $warning; padding: 0 1; }
    #keys { height: auto; padding: 0 1; background: $boost; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "layer(-1)", "layer −"), Binding("right", "layer(1)", "layer +"),
        Binding("up", "head(-1)", "head −"), Binding("down", "head(1)", "head +"),
        Binding("tab", "next_view", "view", priority=True), Binding("shift+tab", "previous_view", show=False,
                                                                    priority=True),
        *[Binding(str(i), f"view({i})", show=False) for i in range(1, 9)],
        Binding("slash", "find", "find"), Binding("n", "find_next", show=False),
        Binding("enter", "select", show=False),
        Binding("left_square_bracket", "token(-1)", show=False), Binding("right_square_bracket", "token(1)", show=False),
        Binding("plus,equals_sign", "zoom(1)", "zoom"), Binding("minus", "zoom(-1)", show=False),
        Binding("comma", "step(-1)", show=False), Binding("full_stop", "step(1)", show=False),
        Binding("o", "sort", show=False),
        Binding("e", "explain", "explain"), Binding("t", "type_text", "text"), Binding("s", "save", "save"),
        Binding("question_mark", "help", "help"), Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", show=False, priority=True),
    ]

    def __init__(self, explorer: Explorer | None = None, text: str | None = None, *,
                 loader: Any = None, colour: bool | None = None) -> None:
        """``explorer`` over a loaded source, or ``loader`` (a callable returning the source) to load it on a
        worker while the app shows a spinner; ``text``: the first text (None: a saved result's own, or ask)."""
        no_color = os.environ.get("NO_COLOR") not in (None, "")
        super().__init__()
        _monochrome_that_survives_plain_text(self)
        self.explorer, self.loader, self.first_text = explorer, loader, text
        self.colour = (not no_color) if colour is None else colour
        self.last_find: str | None = None
        self.busy = False
        self.drawn: dict[str, Any] = {}  # each pane's state when it was drawn
        self.ahead: dict[tuple[Any, ...], Any] = {}  # views drawn, or drawn ahead: their renderable and lines
        self.idle_timer: Any = None
        self.animation_level = "none"  # content at once, over SSH too

    # --- layout ------------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static("loading…", id="status")
        yield ViewTabs(*[Tab(title, id=f"v-{name}") for name, title in TITLES.items()], id="tabs")
        # One pane for every view: each view's lines are rendered once per state and kept, so switching is
        # swapping lines.
        yield Pane(id="body")
        yield Static("", id="message")
        yield Static(self._keys(), id="keys")

    def on_mount(self) -> None:
        # The keys are the app's: the tabs and the table take clicks, not the arrows (←/→ layer, ↑/↓ head).
        self.set_focus(None)
        self.query_one("#body").loading = True
        self.load_and_compute()

    @work(thread=True, exclusive=True, group="model")
    def load_and_compute(self) -> None:
        """Load the model (when given a loader) and run it on the first text, off the UI thread."""
        try:
            if self.explorer is None:
                loaded = self.loader()  # an Explorer (the command's options in it) or a source
                self.explorer = loaded if isinstance(loaded, Explorer) else Explorer(loaded)
            if self.first_text is not None or self.explorer.starts_alone:
                self.explorer.compute(self.first_text)
        except Exception as exc:  # shown in the app, never a crash
            self.call_from_thread(self.went_wrong, exc)
            return
        self.call_from_thread(self.computed)

    def computed(self) -> None:
        self.query_one("#body").loading = False
        self.busy = False
        self.say("")
        self.ahead.clear()
        if self.explorer is not None and not self.explorer.shown:
            self.action_type_text()
        self.refresh_view()
        self._when_idle()

    def _when_idle(self) -> None:
        """After a change, once the user has paused on it (0.4 s): draw the other views ahead (see :meth:`_idle`)."""
        if self.idle_timer is not None:
            self.idle_timer.stop()
        if self.explorer is None or not self.explorer.shown or self.explorer.long:
            return
        explorer = self.explorer  # the app's explorer, once loaded, stays the same object
        text = explorer.text
        self.idle_timer = self.set_timer(0.4, lambda: None if self.busy or explorer.text != text
                                         else self._idle(text))

    def _idle(self, text: str | None) -> None:
        """While the user reads: the other views at the current state drawn ahead on a worker, and the heads table
        filled (on the UI thread, as Textual wants; once per text)."""
        self._draw_ahead(max(40, self.size.width - 2), text)


    @work(thread=True, exclusive=True, group="ahead")
    def _draw_ahead(self, width: int, text: str | None) -> None:
        """The other views of a new text drawn ahead, off the UI thread, from a frozen copy of the state, so a
        first visit shows them at once (explain, a second of CPU, waits to be asked)."""
        import copy

        explorer = self.explorer
        if explorer is None:  # only a loaded explorer's text is drawn ahead
            return
        for name in explorer.views():
            if name in ("explain", explorer.view) or self.busy or explorer.text != text:
                continue
            frozen = copy.copy(explorer)  # shares the result and the cache; its selection stays as it is now
            frozen.view = name
            try:
                renderable = frozen.draw(width, self.colour)
                self._keep(frozen.draw_key(width, self.colour), (renderable, Pane.strips(renderable, width)))
            except Exception:
                continue

    def went_wrong(self, exc: BaseException) -> None:
        self.query_one("#body").loading = False
        self.busy = False
        self.say(_said(exc))
        self.refresh_view()

    def say(self, text: str) -> None:
        self.query_one("#message", Static).update(Text(safe_text(text)))

    # --- drawing -----------------------------------------------------------------------------------------

    def refresh_view(self) -> None:
        explorer = self.explorer
        status = self.query_one("#status", Static)
        if explorer is None:
            status.update("loading the model…")
            return
        status.update(Text(safe_text(explorer.status())))
        tabs = self.query_one("#tabs", Tabs)
        for name in TITLES:
            tab = tabs.query_one(f"#v-{name}", Tab)
            tab.display = name in explorer.views()
        if tabs.active != f"v-{explorer.view}":
            tabs.active = f"v-{explorer.view}"
        if not explorer.shown:
            return
        pane = self.query_one("#body", Pane)
        try:
            width = max(40, self.size.width - 2)
            key = explorer.draw_key(width, self.colour)
            if self.drawn.get("view") != key:  # the pane keeps what it drew until the state changes
                if explorer.long and not explorer.drawn(width, self.colour):
                    pane.update(Text("computing this view through the model…", style="dim"))
                    self.drawn.pop("view", None)
                    self._draw_later(explorer, width)
                    return
                ready = self.ahead.get(key)  # drawn before, or ahead while the user looked at another view
                if ready is None:
                    renderable = explorer.draw(width, self.colour)
                    ready = self._keep(key, (renderable, Pane.strips(renderable, width)))
                pane.update(*ready)
                self.drawn["view"] = key
        except Exception as exc:  # in the app, never a crash: an AttnvizError says what to do
            pane.update(Text(_said(exc)))
            self.drawn.pop("view", None)

    @work(thread=True, exclusive=True, group="draw")
    def _draw_later(self, explorer: Explorer, width: int) -> None:
        """A long text's view, computed through the model off the UI thread; shown when done (if still wanted).

        A newer draw cancels this one (the group is exclusive), but a thread cannot be stopped: once cancelled,
        it leaves the screen alone (its error, its spinner), which is the newer draw's."""
        worker = get_current_worker()

        def tell(callback: Any, *args: Any) -> None:
            if not worker.is_cancelled:
                self.call_from_thread(callback, *args)

        tell(self._drawing, True)
        try:
            explorer.draw(width, self.colour)
        except Exception as exc:
            tell(self._draw_failed, exc)
        else:
            tell(self.refresh_view)
        finally:
            tell(self._drawing, False)

    def _keep(self, key: tuple[Any, ...], drawn: Any) -> Any:
        """Keep a drawn view's lines (the last 128: a few MB at most)."""
        self.ahead[key] = drawn
        while len(self.ahead) > 128:
            self.ahead.pop(next(iter(self.ahead)))
        return drawn

    def _drawing(self, busy: bool) -> None:
        self.query_one("#body").loading = busy

    def _draw_failed(self, exc: BaseException) -> None:
        self.query_one("#body", Pane).update(Text(_said(exc)))
        self.drawn.pop("view", None)

    def _keys(self) -> Text:
        """The footer's key hints, on one line at the app's width (its padding left out)."""
        return Text(keys_line(self.size.width - 2), style="dim")

    def on_resize(self) -> None:
        # This handler runs before Textual's own takes the new size: the footer and the view are drawn after it.
        self.call_later(self._resized)

    def _resized(self) -> None:
        self.query_one("#keys", Static).update(self._keys())
        if self.explorer is not None and self.explorer.shown:
            self.refresh_view()

    # --- actions -----------------------------------------------------------------------------------------

    def _has_result(self) -> bool:
        return self._with_result() is not None

    def _with_result(self) -> Explorer | None:
        """The explorer when it holds a result to act on; else None, and the status line says why."""
        if self.busy or self.explorer is None or not self.explorer.shown:
            self.say("computing…" if self.busy else "no text yet: press t to type one")
            return None
        return self.explorer

    def _apply(self, change: Callable[[Explorer], object]) -> None:
        explorer = self._with_result()
        if explorer is None:
            return
        try:
            change(explorer)
        except Exception as exc:
            self.say(_said(exc))
            return
        self.say("")
        self.refresh_view()
        self._when_idle()

    def action_layer(self, delta: int) -> None:
        self._apply(lambda explorer: explorer.move_layer(delta))

    def action_head(self, delta: int) -> None:
        self._apply(lambda explorer: explorer.move_head(delta))

    def action_select(self) -> None:
        self._apply(lambda explorer: explorer.select_here())

    def action_token(self, delta: int) -> None:
        self._apply(lambda explorer: explorer.move_token(delta))

    def action_zoom(self, delta: int) -> None:
        self._apply(lambda explorer: explorer.zoom_in() if delta > 0 else explorer.zoom_out())

    def action_step(self, delta: int) -> None:
        def move(explorer: Explorer) -> None:
            explorer.step = max(0, explorer.step + delta)
        self._apply(move)

    def _show(self, name: str) -> None:
        def switch(explorer: Explorer) -> None:
            if name not in explorer.views():
                raise _NotHere(f"this result has no {TITLES[name].split(' ', 1)[1]} view")
            explorer.view = name
        self._apply(switch)

    def action_view(self, number: int) -> None:
        self._show(list(TITLES)[number - 1])

    def action_next_view(self, step: int = 1) -> None:
        explorer = self._with_result()
        if explorer is None:
            return
        views = explorer.views()
        self._show(views[(views.index(explorer.view) + step) % len(views)])

    def action_previous_view(self) -> None:
        self.action_next_view(-1)

    def action_explain(self) -> None:
        self._show("explain")

    def on_click(self, event: events.Click) -> None:
        """A click on a heatmap row selects its token (its row and column are listed under the heatmap)."""
        if self.explorer is None or not self.explorer.shown or self.explorer.view not in ("heatmap", "heads"):
            return
        pane = self.query_one("#body", Pane)
        offset = event.get_content_offset(pane)
        if offset is None:
            return
        line = offset.y + int(pane.scroll_offset.y)
        if self.explorer.view == "heads":  # a column's name in the table's header: sort by it
            if 0 <= line < len(pane.lines):
                text = pane.lines[line].text
                self._apply(lambda explorer: explorer.sort_at(text, offset.x + int(pane.scroll_offset.x)))
            return
        token = self.explorer.token_at(line, pane.size.width, self.drawn.get("view", ()))
        if token is not None:
            self._apply(lambda explorer: explorer.select(token))

    @on(Tabs.TabActivated)
    def tab_clicked(self, event: Tabs.TabActivated) -> None:
        name = (event.tab.id or "v-heatmap")[2:]
        if self.explorer is not None and self.explorer.shown and self.explorer.view != name:
            self._show(name)

    def action_sort(self) -> None:
        if self.explorer is not None and self.explorer.view != "heads":
            self._show("heads")
        self._apply(lambda explorer: explorer.next_sort())

    def action_find(self) -> None:
        if not self._has_result():
            return

        def found(answer: str | None) -> None:
            if answer:
                self.last_find = answer
                self._apply(lambda explorer: explorer.find(answer))
        self.push_screen(Ask("find a token (Enter selects the next one whose text contains it):", self.last_find or ""),
                         found)

    def action_find_next(self) -> None:
        last = self.last_find
        if last:
            self._apply(lambda explorer: explorer.find(last))

    def action_type_text(self) -> None:
        if self.busy or self.explorer is None:
            return
        if self.explorer.fixed:
            self.say(f"{self.explorer.source.name} is a saved result; its text is fixed")
            return

        if self.idle_timer is not None:  # typing: nothing drawn ahead meanwhile for the text being replaced
            self.idle_timer.stop()

        def typed(answer: str | None) -> None:
            if answer is not None:
                self.run_text(answer)
        self.push_screen(Ask("a new text (the model stays loaded):", self.explorer.text or ""), typed)

    def run_text(self, text: str) -> None:
        self.busy = True
        self.query_one("#body").loading = True
        self.say("")
        self._compute(text)

    @work(thread=True, exclusive=True, group="model")
    def _compute(self, text: str) -> None:
        try:
            if self.explorer is None:
                raise RuntimeError("the model is not loaded yet")
            self.explorer.compute(text)
        except Exception as exc:  # shown in the app, never a crash
            self.call_from_thread(self.went_wrong, exc)
            return
        self.call_from_thread(self.computed)

    def action_save(self) -> None:
        explorer = self._with_result()
        if explorer is None:
            return

        def chosen(answer: str | None) -> None:
            if not answer:
                return
            try:
                written = self.save_to(Path(answer))
            except (AttnvizError, OSError) as exc:
                self.say(exc.for_cli() if isinstance(exc, AttnvizError) else f"cannot write {answer}: {exc}")
                return
            self.say(f"wrote {written}")
        default = f"layer{explorer.layer_number}_head{explorer.head}.png"
        self.push_screen(Ask("save as (.png, .svg, .pdf: this head; .html: the page; .npz: the result):", default),
                         chosen)

    def save_to(self, path: Path) -> Path:
        """Write the current text's view to ``path``, by its extension, as the commands write them."""
        from .saving import save_view

        return save_view(self.explorer, path)

    def action_help(self) -> None:
        self.push_screen(Help())


def _said(exc: BaseException) -> str:
    """What an error says in the app: an attnviz error's message (with the command's flags); anything else
    named as an internal error, with its type, to report."""
    if isinstance(exc, AttnvizError):
        return exc.for_cli()
    return f"internal error ({type(exc).__name__}: {exc}); please report it"


class _NotHere(AttnvizError):
    """A view this result does not have."""
