"""What ``attnviz tui`` shows, without the terminal: the text's result, the layer, head, view, zoom and
selected token, and each view drawn as rich renderables by the same renderers as the commands.

The model runs once per text (:meth:`Explorer.compute`, on a worker thread in the app); the result is
then read through a :class:`~attnviz.sources.saved.SavedSource`, so switching layer, head or view
never runs the model again. A text whose every weight would pass :data:`RESULT_BYTES` (thousands of
tokens) is *long*: nothing is kept whole, and each view is computed through the loaded model as the
commands compute it (streamed, pooled, a region's rows alone when zoomed), on a worker thread, and kept
once drawn. Explaining a head needs the model itself (the native engine or a config).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.text import Text

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from ..render.view import Kind

RESULT_BYTES = 1 << 30
"""A text's weights (layers × heads × tokens², float32) kept whole up to this; past it the views are computed
through the model, one at a time."""

VIEWS = ("heatmap", "model", "heads", "token", "compare", "steps", "explain", "picture")
TITLES = {"heatmap": "1 head", "model": "2 model", "heads": "3 heads table", "token": "4 one token",
          "compare": "5 compare heads", "steps": "6 generation", "explain": "7 explain", "picture": "8 picture"}


class Sink:
    """A console that keeps what the renderers print (they print ``Text`` lines and tables to a console),
    at a width, with or without colour."""

    def __init__(self, width: int, colour: bool) -> None:
        self.width = max(20, width)
        self.no_color = not colour
        self.color_system = "truecolor" if colour else None
        self.items: list[RenderableType] = []

    def print(self, *objects: Any, **_: Any) -> None:
        for item in objects:
            self.items.append(Text(item) if isinstance(item, str) else item)

    def group(self) -> Group:
        return Group(*self.items)


@dataclass
class Explorer:
    """The state of one exploring session over a loaded source (or a saved result)."""

    source: Any
    pair: str | None = None  # a second sentence (BERT-style pairs)
    target: str | None = None  # the decoder's input (T5, BART)
    kind: Kind = "self"  # which attention of an encoder-decoder: self (the encoder's), decoder or cross
    reading: Any = None  # hide special tokens, renormalise, words (a Reading; None: as computed)
    text: str | None = None
    result: Any = None  # the AttentionResult of ``text``
    saved: Any = None  # ``result`` as a source
    layer: int = 0
    head: int = 0
    view: str = "heatmap"
    token: int | None = None  # the selected token (a row of the heatmap, the one-token view's query)
    zoom: int = 0  # 0: the whole matrix; each step halves the region around the selected token
    step: int = 0  # the generation view's step
    sort: str | None = None
    cache: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    long: bool = False  # the text's weights are not kept whole: views are computed through the model
    tokens: list[str] = field(default_factory=list)
    shape: tuple[int, int] = (0, 0)  # layers, heads
    model_name: str = ""
    pictures: tuple[Any, ...] = ()  # the pictures a vision-language model reads beside each text (source: its
    # loaded VisionLanguageModel)
    expand: bool = False  # the matrices show every image token (else each picture is one token of ``result``)
    full: Any = None  # with pictures: the result with every image token (the picture view reads it)

    @property
    def fixed(self) -> bool:
        """A saved result: its text is fixed."""
        return getattr(self.source, "engine", None) == "saved"

    @property
    def starts_alone(self) -> bool:
        """A saved result, or a source with a text of its own (a Whisper hearing a clip: its own transcript)."""
        return self.fixed or bool(getattr(self.source, "own_text", False))

    def compute(self, text: str | None) -> None:
        """Run the model on ``text`` (a saved result: its own text) and keep the result; the slow part,
        run off the UI thread by the app. The selection is kept where the new text has room for it."""
        from ..sources.saved import SavedSource

        long = False
        if self.fixed or (not text and self.starts_alone):
            if text:
                raise UsageError(f"{self.source.name} is a saved result; its text is fixed")
            result = self.source.extract(None)
        else:
            if text is None or not text.strip():
                raise UsageError("the text is empty; type the text to inspect")
            if self.pictures:  # a vision-language model: the text read with the pictures, every row kept
                from ..views.picture_page import collapsed_result

                labels: list[str] = []
                long, shape = False, (0, 0)
                self.full = self.source.read(text, list(self.pictures))
                result = self.full if self.expand else collapsed_result(self.full)
            else:
                long, labels, shape = self._measure(text)
                result = None if long else self.source.extract(text, pair=self.pair, target=self.target)
        self.result, self.text, self.long = result, text, long
        if result is not None:
            shown = _kind_tensor(result, self.kind)  # a decoder may have fewer (or more) layers than its encoder
            self.tokens, self.shape = list(result.tokens), (int(shown.shape[0]), int(shown.shape[1]))
            self.model_name = result.model_name
            self.saved = SavedSource(result, getattr(self.source, "name", "result"))
        else:
            self.tokens, self.shape, self.model_name, self.saved = labels, shape, self.source.name, None
        self.cache.clear()
        self.layer = min(self.layer, self.n_layers - 1)
        self.head = min(self.head, self.n_heads - 1)
        self.token = None if self.token is None or self.token >= self.n_tokens else self.token
        self.zoom, self.step = 0, 0

    def _measure(self, text: str) -> tuple[bool, list[str], tuple[int, int]]:
        """Whether ``text`` is long (see :data:`RESULT_BYTES`), its labels, and the model's layers and heads
        (from a one-word run: nothing of the text is computed yet)."""
        encode = getattr(self.source, "encode", None)
        if encode is None or self.target is not None or self.kind != "self":
            return False, [], (0, 0)
        info = encode(text, self.pair)
        if len(info.ids) < 512:
            return False, [], (0, 0)
        probe = self.source.extract("a").attentions
        layers, heads = int(probe.shape[0]), int(probe.shape[1])
        return layers * heads * len(info.ids) ** 2 * 4 > RESULT_BYTES, list(info.labels), (layers, heads)

    @property
    def shown(self) -> bool:
        """A text (or a saved result) has been computed."""
        return self.result is not None or self.long

    def inputs(self) -> tuple[Any, str | None, dict[str, Any]]:
        """The source, text and options the views are computed from: the kept result, or the model."""
        if not self.long:
            return self.saved, None, self._reading()
        return self.source, self.text, {**self._reading(), **({"pair": self.pair} if self.pair else {})}

    @property
    def n_layers(self) -> int:
        return self.shape[0]

    @property
    def n_heads(self) -> int:
        return self.shape[1]

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def layer_number(self) -> int:
        """The model's number of the current layer (a saved result may hold some layers only)."""
        held = self.result.metadata.get("layers") if self.result is not None else None
        return int(held[self.layer]) if held else self.layer

    @property
    def generated(self) -> bool:
        return self.result is not None and bool(self.result.metadata.get("generation"))

    def views(self) -> list[str]:
        """The views this result has (the generation view only for a generation)."""
        shown = self.full if self.full is not None else self.result
        pictures = shown is not None and bool(shown.pictures)
        return [v for v in VIEWS if (v != "steps" or self.generated) and (v != "picture" or pictures)]

    # --- moving ------------------------------------------------------------------------------------------

    def move_layer(self, delta: int) -> None:
        self.layer = (self.layer + delta) % max(1, self.n_layers)

    def move_head(self, delta: int) -> None:
        self.head = (self.head + delta) % max(1, self.n_heads)

    def move_token(self, delta: int) -> None:
        # none selected: the first token, or in the picture view (which shows the last) the one beside the last
        start = (self.n_tokens - 1 + delta if self.view == "picture" else 0) if self.token is None else self.token + delta
        self.token = max(0, min(self.n_tokens - 1, start))

    def select_here(self) -> None:
        """Enter: select the token the view shows (the first, when none is selected yet)."""
        self.token = 0 if self.token is None else self.token

    def select(self, token: int) -> None:
        if not 0 <= token < self.n_tokens:
            raise UsageError(f"token {token} is out of range; the text has tokens 0 to {self.n_tokens - 1}")
        self.token = token

    def find(self, query: str) -> int:
        """The next token after the selected one whose label contains ``query`` (case-folded), selected."""
        if not query.strip():
            raise UsageError("type part of a token to find it")
        wanted = query.strip().casefold()
        tokens = self.tokens
        start = -1 if self.token is None else self.token
        for offset in range(1, len(tokens) + 1):
            i = (start + offset) % len(tokens)
            if wanted in tokens[i].casefold():
                self.token = i
                return i
        raise UsageError(f"no token contains {query.strip()!r}")

    def zoom_in(self) -> None:
        if self.n_tokens >> (self.zoom + 1) >= 2:
            self.zoom += 1

    def zoom_out(self) -> None:
        self.zoom = max(0, self.zoom - 1)

    def region(self) -> tuple[int, int] | None:
        """The rows and columns shown when zoomed: ``n / 2^zoom`` tokens around the selected one."""
        if self.zoom == 0:
            return None
        size = max(2, self.n_tokens >> self.zoom)
        centre = self.token if self.token is not None else self.n_tokens // 2
        start = max(0, min(self.n_tokens - size, centre - size // 2))
        return start, start + size

    # --- drawing -----------------------------------------------------------------------------------------

    def _reading(self) -> dict[str, Any]:
        return {} if self.reading is None else {"reading": self.reading}

    def status(self) -> str:
        if not self.shown:
            return "no text yet: press t to type one"
        token = "" if self.token is None else f" · token {self.token} {self.tokens[self.token]!r}"
        region = self.region()
        zoom = "" if region is None else f" · tokens {region[0]}–{region[1] - 1}"
        long = " (long: views computed as asked)" if self.long else ""
        return (f"{self.model_name} · {self.n_tokens} tokens{long} · layer {self.layer_number} of {self.n_layers} · "
                f"head {self.head} of {self.n_heads}{token}{zoom}")

    def draw_key(self, width: int, colour: bool) -> tuple[Any, ...]:
        """What the current view's drawing depends on (views that do not read the head leave it out)."""
        head = None if self.view in ("model", "token", "compare", "heads") else self.head
        layer = None if self.view in ("model", "token", "heads") else self.layer
        token = self.token if self.view in ("heatmap", "token", "picture") else None
        zoom = self.zoom if self.view == "heatmap" else None
        sort = self.sort if self.view == "heads" else None
        step = self.step if self.view == "steps" else None
        return (id(self.result) if self.result is not None else self.text, self.view, layer, head, token, zoom, sort,
                step, width, colour)

    def drawn(self, width: int, colour: bool) -> bool:
        """Whether the current view is drawn already (a long text's views take a while the first time)."""
        return self.draw_key(width, colour) in self.cache

    def draw(self, width: int, colour: bool) -> RenderableType:
        """The current view, drawn by the commands' renderers (kept per state: drawn once)."""
        if not self.shown:
            return Text("no text yet: press t to type one, ? for help")
        key = self.draw_key(width, colour)
        if key not in self.cache:
            self.cache[key] = self._draw(width, colour)
        return self.cache[key]

    def _draw(self, width: int, colour: bool) -> RenderableType:
        from .heads_view import draw_heads
        from .picture import draw_picture

        draw: dict[str, Callable[[Sink], None]] = {
            "heatmap": self._heatmap, "model": self._model, "token": self._token, "compare": self._compare,
            "steps": self._steps, "explain": self._explain,
            "heads": lambda sink: draw_heads(self, sink), "picture": lambda sink: draw_picture(self, sink),
        }
        sink = Sink(width, colour)
        draw[self.view](sink)
        return sink.group()

    def _heatmap(self, sink: Sink) -> None:
        from ..api import attention_view
        from ..render.terminal import render_terminal

        region = self.region()
        source, text, options = self.inputs()
        view = attention_view(source, text, layer=self.layer_number, head=self.head, kind=self.kind,
                              rows=region, cols=region, **options)
        render_terminal(view, sink)
        self._remember_rows(view, sink)
        if self.token is not None:
            self._row_and_column(sink, self.token)

    def _remember_rows(self, view: Any, sink: Sink) -> None:
        """Which printed item is which row's line, so a click on it selects that row's (first) token: the rows
        are the lines just above the legend, as :func:`~attnviz.render.terminal.render_terminal` pools them."""
        from ..render.terminal import pool_to_fit, terminal_safe

        shown = pool_to_fit(terminal_safe(view), sink.width, 2, grid=False)
        legend = next((i for i, item in enumerate(sink.items) if str(item).startswith("scale ")), None)
        rows = int(shown.panels.shape[1])
        row_items: dict[int, int] = {}  # printed item's index -> its row's first token
        key = ("rows", *self.draw_key(sink.width, not sink.no_color))
        self.cache[key] = (row_items, sink.items)  # (with the drawing's state: a copy drawing ahead keeps it too)
        if legend is None:
            return
        index = legend - rows - len(shown.row_breaks)
        for row in range(rows):
            if row in shown.row_breaks:
                index += 1  # the rule between a pair's two texts
            row_items[index] = (shown.row_start or 0) + row * shown.token_step
            index += 1

    def token_at(self, line: int, width: int, drawn: tuple[Any, ...]) -> int | None:
        """The token of the heatmap's row drawn at ``line`` of its pane (``width`` wide), the drawing's state
        ``drawn`` (its :meth:`draw_key`), or None."""
        from rich.console import Console

        found = self.cache.get(("rows", *drawn))
        if self.view != "heatmap" or not found:
            return None
        row_items, items = found
        console = Console(width=width, file=None, color_system=None, legacy_windows=False)
        options = console.options.update_width(width)
        at = 0
        for i, item in enumerate(items):
            height = len(console.render_lines(item, options, pad=False))
            if at <= line < at + height:
                return row_items.get(i)
            at += height
        return None

    def _row_and_column(self, sink: Sink, token: int) -> None:
        """The selected token's row (what it attends to most) and column (who attends to it most) in this head."""
        import torch

        if self.result is None:
            sink.print(Text(f"token {token} {self.tokens[token]!r}: see view 4 for its row in every head"))
            return
        kinds = {"self": self.result.attentions, "decoder": self.result.decoder_attentions}
        matrix = kinds.get(self.kind, self.result.attentions)
        if matrix is None or token >= matrix.shape[-1]:
            return
        weights = matrix[self.layer, self.head].float()
        tokens = self.result.tokens if self.kind != "decoder" else (self.result.target_tokens or [])
        label = tokens[token]
        for name, values in ((f"{label!r} (token {token}) attends to", weights[token]),
                             (f"{label!r} is attended to by", weights[:, token])):
            top = torch.topk(values, min(5, values.numel()))
            shown = ", ".join(f"{tokens[int(i)]} ({int(i)}) {float(v):.2f}" for v, i in zip(top.values, top.indices,
                                                                                           strict=True))
            sink.print(Text(f"{name}: {shown}"))

    def _model(self, sink: Sink) -> None:
        from ..api import attention_view
        from ..render.terminal import render_thumbnails

        numbers = list((self.result.metadata.get("layers") if self.result is not None else None) or range(self.n_layers))
        source, text, options = self.inputs()
        view = attention_view(source, text, layer=None, head="all", kind=self.kind, **options)
        render_thumbnails(view, sink, layers=numbers, size=8)

    def _token(self, sink: Sink) -> None:
        from ..api import query_view
        from ..render.terminal import render_terminal

        token = 0 if self.token is None else self.token
        source, text, options = self.inputs()
        view = query_view(source, text, token, layer=None, kind=self.kind, **options)  # every layer and head
        render_terminal(view, sink)
        if self.token is None:
            sink.print(Text("the first token; select another with [ ] or find one with /", style="dim"))

    def _compare(self, sink: Sink) -> None:
        from ..api import compare_heads_of_text
        from ..report import comparison_report

        source, text, options = self.inputs()
        overview = compare_heads_of_text(source, text, layer=self.layer_number, kind=self.kind,
                                         **options)
        comparison_report(overview, console=sink, out=None, top=5, cmap="viridis")

    def _steps(self, sink: Sink) -> None:
        from ..api import generation_summary

        summary = generation_summary(self.result, layer=self.layer_number, head=self.head)
        steps = summary.steps
        if not steps:
            sink.print(Text("nothing was generated"))
            return
        self.step = max(0, min(self.step, len(steps) - 1))
        step = steps[self.step]
        sink.print(Text(f"step {self.step + 1} of {len(steps)} (, and . move): token {step.position} "
                        f"{step.label!r}", style="bold"))
        sink.print(Text(f"{summary.where}: what it attended to most", style="dim"))
        for position, label, weight in step.attended:
            bar = "█" * max(1, round(weight * 30))
            sink.print(Text(f"  {position:>5} {label[:20]:<20} {weight:6.3f} {bar}"))
        if step.source is not None:
            sink.print(Text("in the source (cross-attention):", style="dim"))
            for position, label, weight in step.source:
                sink.print(Text(f"  {position:>5} {label[:20]:<20} {weight:6.3f} {'█' * max(1, round(weight * 30))}"))

    def _explain(self, sink: Sink) -> None:
        from ..explain import walkthrough
        from ..explain.printed import render_walkthrough

        inputs_of = getattr(self.source, "explain_inputs", None)
        if inputs_of is None or self.fixed:
            raise UsageError("explain walks through one layer of a model attnviz runs itself (the native engine or a "
                             "config model); this one cannot")
        walk = walkthrough(inputs_of(self.text, self.layer_number), head=self.head)
        render_walkthrough(walk, sink)

    def next_sort(self) -> None:
        """``o``: sort the heads table by the next statistic (model order after the last); a column the width
        leaves out comes first when sorted by."""
        _, stats = self.heads_rows()
        order = [None, *stats]
        self.sort = order[(order.index(self.sort) + 1) % len(order)] if self.sort in order else stats[0]

    def sort_at(self, line: str, x: int) -> bool:
        """A click at column ``x`` of the heads table's header ``line``: sort by the column named there."""
        from ..analysis.statistics import STATISTICS, short_name

        names = {short_name(s): s for s in STATISTICS} | {"L": "layer", "H": "head"}
        start = 0
        for word in line.split():
            start = line.index(word, start)
            if start <= x < start + len(word) and word in names:
                column = names[word]
                self.sort = None if column in ("layer", "head") else column
                return True
            start += len(word)
        return False

    def heads_rows(self) -> tuple[list[dict[str, Any]], list[str]]:
        """Every head's statistics on the text, sorted by ``sort`` (largest first), and the statistics' names."""
        key = ("heads", id(self.result) if self.result is not None else self.text)
        if key not in self.cache:
            from ..api import heads_of

            source, text, options = self.inputs()
            table = heads_of(source, [text], kind=self.kind, **options)
            self.cache[key] = (table, list(table.stats))
        table, stats = self.cache[key]
        rows = table.select(sort=self.sort) if self.sort else table.select()
        return rows, stats


def _kind_tensor(result: Any, kind: str) -> Any:
    """The weights of ``kind`` in ``result`` (the encoder's where the result has no other)."""
    from ..analysis.transforms import kind_tensor

    try:
        return kind_tensor(result, kind)[0]
    except UsageError:
        return result.attentions
