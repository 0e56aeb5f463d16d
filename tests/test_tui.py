"""``attnviz tui`` (issue 31), driven by Textual's Pilot: every key and view, errors inside the app, NO_COLOR,
80×24 and resizing, screens against golden text; and the real command under tmux (test_tui_tmux.py)."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from textual.worker import WorkerState

from attnviz.api import load
from attnviz.errors import ModelNotFoundError
from attnviz.result import AttentionResult
from attnviz.sources.saved import SavedSource
from attnviz.tui.app import AttnvizTUI
from attnviz.tui.explorer import Explorer
from attnviz.tui.widgets import KEYS, Ask, Help, keys_line

TINY = "sample_configs/tiny.toml"
TEXT = "The cat sat on the mat and the cat slept."
GOLDEN = Path(__file__).parent / "golden"


PATIENCE = 120.0
"""Seconds a test waits for a condition before it fails: a loaded machine (a newcomer's first ``pytest`` beside a
build, every core busy) is slow, never wrong. Tests wait on the condition they need, never a fixed pause."""

POLL = 0.005
"""Seconds between two checks of a condition: Pilot's pending messages are processed before each check (its
``pause``), and a check costs well under a millisecond. (``pause()`` without a delay waits, in steps of 20 ms, until
the process looks idle, which a computing worker thread or a loaded machine fools anyway: the condition decides.)"""


def run_async(main: Callable[[], Awaitable[None]]) -> None:
    """``asyncio.run(main())``, in a thread of its own when this thread already runs an event loop: Playwright's sync
    API keeps one for the browser the page tests share, and a page test may run before these on the same worker."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(main())
        return
    import threading

    failed: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # handed back to the test's thread
            failed.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def drive(app: AttnvizTUI, script: Callable[..., Awaitable[None]], size: tuple[int, int] = (100, 30)) -> None:
    """Run ``app`` headless at ``size``, wait for its first text (or its error) to be shown, then ``script(pilot)``."""
    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: settled(app), "the first text to be shown")
            await script(pilot)
    run_async(main)


async def until(pilot, condition: Callable[[], bool], what: str, timeout: float = PATIENCE) -> None:
    """Let the app run until ``condition()`` holds (checked after each of Pilot's waits for pending messages and
    an idle moment); fail, naming ``what``, after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        await pilot.pause(POLL)
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}; the screen:\n{screen(pilot.app)}")


def settled(app: AttnvizTUI) -> bool:
    """Whether the app has done all it was asked: no message (a key, a click, a forwarded event) waiting in any
    queue, no model run or view computed on a worker, no spinner, and the pane showing the current state's view.
    (Pilot's own waits use how busy the process looks, which a loaded machine fools: a key could still be on its
    way when they return.)"""
    if not delivered(app) or app.busy or app.query_one("#body").loading:
        return False
    if any(w.group in ("model", "draw") and w.state in (WorkerState.PENDING, WorkerState.RUNNING) for w in app.workers):
        return False
    explorer = app.explorer
    if explorer is None or not explorer.shown:
        return True
    return app.drawn.get("view") == explorer.draw_key(max(40, app.size.width - 2), app.colour)


def delivered(app: AttnvizTUI) -> bool:
    """Whether no message (a key, a click, a mount, a forwarded event) waits in any queue of the app's screens."""
    nodes = [app, *(node for shown in app.screen_stack for node in shown.walk_children(with_self=True))]
    return not any(node.message_queue_size for node in nodes)


def screen(app: AttnvizTUI) -> str:
    """The terminal's text, line by line, as a user sees it."""
    return "\n".join(strip.text.rstrip() for strip in app.screen._compositor.render_strips())


def pane(app: AttnvizTUI) -> str:
    """The text of the view shown now, all of it (scrolled out of sight too), at the app's width."""
    from rich.console import Console

    console = Console(width=app.size.width - 2, no_color=True, color_system=None, record=True, file=io.StringIO())
    console.print(app.query_one("#body").content)
    return console.export_text()


def table_rows(app: AttnvizTUI) -> list[tuple[int, int]]:
    """The (layer, head) of each row of the heads table shown, in order."""
    import re

    return [(int(m.group(1)), int(m.group(2))) for m in re.finditer(r"^\s*(\d+)\s+(\d+)\s", pane(app), re.MULTILINE)]


def drawn(app: AttnvizTUI):
    """The rich renderable of the view shown now."""
    return app.query_one("#body").content


async def press(pilot, name: str) -> None:
    """Press the key ``name`` as Pilot's ``press`` does (the same Key event, through the app's driver, as a
    terminal's keys come), without Pilot's two waits per key for the process to look idle (at least 20 ms each, up to
    a second while a worker computes: 8 of this file's 15 s went to them); the tests wait on what they need instead
    (:func:`until`, :func:`settled`)."""
    import unicodedata

    from textual import events
    from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key

    key = _character_to_key(name) if len(name) == 1 and not name.isalnum() else name
    try:
        char: str | None = unicodedata.lookup(_get_unicode_name_from_key(REPLACED_KEYS.get(key, key)))
    except KeyError:
        char = key if len(key) == 1 else None
    event = events.Key(key, char)
    event.set_sender(pilot.app)
    pilot.app._driver.send_message(event)


async def keys(pilot, *names: str) -> None:
    """Press ``names``, each once the app has done what the one before asked, then wait until it has done what
    the last asked (see :func:`settled`)."""
    for name in names:
        await press(pilot, name)
        await until(pilot, lambda: settled(pilot.app), f"the key {name} (of {' '.join(names)}) to be done")


async def click(pilot, offset: tuple[int, int]) -> None:
    """Click at ``offset`` of the screen, then wait until the app has done what the click asked."""
    await pilot.click(offset=offset)
    await until(pilot, lambda: settled(pilot.app), f"the click at {offset} to be done")


async def resize(pilot, width: int, height: int) -> None:
    """Resize the terminal, then wait until the screen is laid out at that size and the view drawn at its width."""
    app = pilot.app
    await pilot.resize_terminal(width, height)
    await until(pilot, lambda: tuple(app.size) == (width, height) and settled(app)
                and len(screen(app).splitlines()) == height and all(len(line) <= width for line in screen(app).splitlines())
                and keys_line(width - 2) in screen(app), f"the resize to {width}×{height}")


async def opened(pilot, key: str, kind: type) -> None:
    """Press ``key`` and wait for the screen it opens (a prompt, the help)."""
    await press(pilot, key)
    await until(pilot, lambda: isinstance(pilot.app.screen, kind) and pilot.app.screen.is_mounted
                and delivered(pilot.app), f"{key} to open {kind.__name__}")


async def answer(pilot, key: str, text: str) -> None:
    """Press ``key``, type ``text`` into the prompt it opens, Enter, and wait until the app has done it."""
    app = pilot.app
    await opened(pilot, key, Ask)
    app.screen.query_one("#answer").value = text
    await press(pilot, "enter")
    await until(pilot, lambda: not isinstance(app.screen, Ask) and settled(app), f"the answer {text!r} to {key}")


@pytest.fixture(scope="module")
def tiny():
    return load(TINY)


def test_arrows_move_the_layer_and_head_and_tab_or_digits_switch_views(tiny):
    app = AttnvizTUI(Explorer(tiny), TEXT, colour=False)

    async def script(pilot) -> None:
        explorer = app.explorer
        assert explorer.result.tokens[:3] == ["The", "cat", "sat"]
        assert "layer 0 of 2 · head 0 of 4" in screen(app) and "tiny · layer 0 · head 0" in pane(app)
        await keys(pilot, "right")
        assert explorer.layer == 1 and "layer 1 of 2" in screen(app) and "tiny · layer 1 · head 0" in pane(app)
        await keys(pilot, "right")
        assert explorer.layer == 0  # around
        await keys(pilot, "down", "down")
        assert explorer.head == 2 and "head 2 of 4" in screen(app) and "layer 0 · head 2" in pane(app)
        await keys(pilot, "up")
        assert explorer.head == 1
        seen = {}
        for digit, name in zip("123457", ("heatmap", "model", "heads", "token", "compare", "explain"), strict=True):
            await keys(pilot, digit)
            assert explorer.view == name
            seen[name] = pane(app)
        assert "L0" in seen["model"] and "H3" in seen["model"]  # every head's thumbnail
        assert seen["heads"].count("\n") > 8 and "labels" in seen["heads"]
        assert "The" in seen["token"] and "explain" not in seen["heatmap"]
        assert "Scores" in seen["explain"] or "scores" in seen["explain"]
        await keys(pilot, "6")  # no generation in this result
        assert explorer.view == "explain" and "no generation view" in screen(app)
        await keys(pilot, "tab")
        assert explorer.view == "heatmap"  # views go around, skipping the absent one
        await keys(pilot, "shift+tab")
        assert explorer.view == "explain"
        await keys(pilot, "e", "1")
        assert explorer.view == "heatmap"

    drive(app, script)


def test_find_select_and_zoom(tiny):
    app = AttnvizTUI(Explorer(tiny), TEXT, colour=False)

    async def script(pilot) -> None:
        explorer = app.explorer
        await answer(pilot, "slash", "cat")
        assert explorer.token == 1 and "token 1 'cat'" in screen(app)
        await keys(pilot, "n")
        assert explorer.token == explorer.result.tokens.index("cat", 2)  # the next "cat"
        await keys(pilot, "left_square_bracket")
        assert explorer.token == explorer.result.tokens.index("cat", 2) - 1
        await keys(pilot, "right_square_bracket")
        token = explorer.token
        row = explorer.result.attentions[0, 0, token]
        assert f"'cat' (token {token}) attends to: {explorer.result.tokens[int(row.argmax())]}" in pane(app)
        n = explorer.n_tokens
        await keys(pilot, "plus")
        start, stop = explorer.region()
        assert stop - start == n // 2 and start <= explorer.token < stop
        assert f"tokens {start}–{stop - 1}" in screen(app)
        await keys(pilot, "4")
        assert f"{explorer.result.tokens[explorer.token]}" in pane(app)  # its row in every head
        await keys(pilot, "1", "minus")
        assert explorer.region() is None
        await answer(pilot, "slash", "zebra")
        assert "no token contains 'zebra'" in screen(app)

    drive(app, script)


def test_a_new_text_is_computed_by_the_warm_model(tiny):
    app = AttnvizTUI(Explorer(tiny), TEXT, colour=False)

    async def script(pilot) -> None:
        before = app.explorer.source
        await answer(pilot, "t", "A dog ran home.")
        assert app.explorer.source is before  # not loaded again
        assert app.explorer.result.tokens == ["A", "dog", "ran", "home", "."]
        want = tiny.extract("A dog ran home.").attentions
        torch.testing.assert_close(app.explorer.result.attentions, want, rtol=0, atol=0)
        assert "5 tokens" in screen(app)
        await answer(pilot, "t", "   ")
        assert "the text is empty" in screen(app) and app.explorer.result.tokens[0] == "A"  # the last text stays

    drive(app, script)


def test_save_writes_the_view_as_the_commands_do(tiny, tmp_path):
    app = AttnvizTUI(Explorer(tiny), TEXT, colour=False)

    async def save(pilot, name: str) -> None:
        await answer(pilot, "s", str(tmp_path / name))

    async def script(pilot) -> None:
        await keys(pilot, "right", "down")
        await save(pilot, "head.png")
        assert (tmp_path / "head.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "wrote" in screen(app)
        await save(pilot, "result.npz")
        saved = AttentionResult.load(tmp_path / "result.npz")
        torch.testing.assert_close(saved.attentions, app.explorer.result.attentions)
        await save(pilot, "page.html")
        assert "<html" in (tmp_path / "page.html").read_text(encoding="utf-8")[:200]
        await save(pilot, "head.json")
        assert (tmp_path / "head.json").stat().st_size > 0
        await save(pilot, "head.docx")
        assert "head.docx" in screen(app) and not (tmp_path / "head.docx").exists()

    drive(app, script)


def test_help_opens_and_q_quits(tiny):
    app = AttnvizTUI(Explorer(tiny), TEXT, colour=False)

    async def script(pilot) -> None:
        await opened(pilot, "question_mark", Help)
        assert "←/→" in screen(app)
        await press(pilot, "escape")
        await until(pilot, lambda: not isinstance(app.screen, Help), "escape to close the help")
        await press(pilot, "q")
        await until(pilot, lambda: not app.is_running, "q to quit")

    drive(app, script)


def test_errors_are_messages_in_the_app_never_a_crash(tiny, monkeypatch):
    def fail() -> Explorer:
        raise ModelNotFoundError("folder nowhere does not exist; check the path, or give a hub id such as gpt2")

    app = AttnvizTUI(None, TEXT, loader=fail, colour=False)

    async def script(pilot) -> None:
        assert "folder nowhere does not exist" in screen(app) and app.is_running
        await keys(pilot, "right", "1", "slash")  # nothing to move: says so, no crash
        assert app.is_running

    drive(app, script)

    def broken(self, sink) -> None:
        raise ValueError("a bug in a view")

    monkeypatch.setattr(Explorer, "_model", broken)
    app = AttnvizTUI(Explorer(tiny), TEXT, colour=False)

    async def view_fails(pilot) -> None:
        await press(pilot, "2")
        await until(pilot, lambda: app.explorer.view == "model" and "internal error" in screen(app), "the error")
        assert "internal error (ValueError: a bug in a view)" in screen(app) and app.is_running
        await keys(pilot, "1")
        assert "tiny · layer 0 · head 0" in pane(app)

    drive(app, view_fails)


def test_too_long_a_text_is_a_message(tmp_path):
    app = AttnvizTUI(Explorer(load()), " ".join(["word"] * 600), colour=False)

    async def script(pilot) -> None:
        assert "takes at most 512" in screen(app) and app.is_running

    drive(app, script)


def test_no_color_draws_shades_and_colour_draws_colours(tiny):
    for colour in (False, True):
        app = AttnvizTUI(Explorer(tiny), TEXT, colour=colour)

        async def script(pilot, colour=colour, app=app) -> None:
            lines = list(drawn(app).renderables)
            styled = [span for line in lines if hasattr(line, "spans") for span in line.spans if "on #" in str(span.style)
                      or "on rgb" in str(span.style)]
            shades = any(ch in str(line) for line in lines for ch in "░▒▓█")
            assert (not colour and shades and not styled) or (colour and styled and not shades)

        drive(app, script)


def test_80_by_24_every_view_fits_and_resizing_redraws(tiny):
    app = AttnvizTUI(Explorer(tiny), TEXT, colour=False)

    async def script(pilot) -> None:
        for digit in "123457":
            await keys(pilot, digit)
            text = screen(app)
            assert len(text.splitlines()) == 24 and "internal error" not in text
        footer = " ".join(screen(app).split())
        assert all(part in footer for part in ("←→ layer", "↑↓ head", "q quit", "? help", "s save"))
        await keys(pilot, "1")
        narrow = pane(app)
        await resize(pilot, 140, 40)
        wide = pane(app)
        assert len(screen(app).splitlines()) == 40 and max(map(len, wide.splitlines())) <= 140
        assert narrow != wide or max(map(len, narrow.splitlines())) <= 80

    drive(app, script, size=(80, 24))


def test_the_footer_is_one_line_at_80_columns_and_every_key_where_there_is_room(tiny):
    app = AttnvizTUI(Explorer(tiny), TEXT, colour=False)

    async def script(pilot) -> None:
        lines = screen(app).splitlines()
        assert len(lines) == 24 and len(lines[-1]) <= 80
        assert all(hint in lines[-1] for hint in ("←→ layer", "↑↓ head", "view", "? help", "q quit", "s save"))
        assert "quit" not in lines[-2]  # the footer's one line: none of it above
        await resize(pilot, 160, 30)
        assert screen(app).splitlines()[-1].strip() == KEYS  # wide enough: every key
        await resize(pilot, 80, 24)
        assert screen(app).splitlines()[-1] == lines[-1]

    drive(app, script, size=(80, 24))


def test_a_zoomed_region_says_whether_it_is_cell_by_cell_or_pooled_never_both(tiny):
    app = AttnvizTUI(Explorer(tiny), " ".join(["the cat sat on the mat"] * 40), colour=False)

    async def script(pilot) -> None:
        await keys(pilot, "enter", "plus")  # 120 of 240 tokens: pooled to fit 100 columns
        start, stop = app.explorer.region()
        assert (start, stop) == (0, 120)
        assert "downsampled 120×120 → 40×40" in pane(app) and "cell by cell" not in pane(app)
        assert f"a region of 240×240: queries {start}–{stop - 1}, keys {start}–{stop - 1}" in pane(app)
        await keys(pilot, "plus", "plus")  # 30 tokens: one cell each
        assert "cell by cell" in pane(app) and "downsampled" not in pane(app)

    drive(app, script)


def _hand() -> AttentionResult:
    weights = torch.tensor([[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0.1, 0.2, 0.7, 0], [0, 0.3, 0.3, 0.4]])
    uniform = torch.ones(4, 4).tril() / torch.arange(1, 5)[:, None]  # each token over itself and those before
    both = torch.stack([weights, uniform])
    return AttentionResult(tokens=["我", "爱", "cat", "."], attentions=torch.stack([both, both.flip(0)]),
                           model_name="hand", causal=True)


@pytest.mark.parametrize("view", ["heatmap", "model", "token"])
def test_screens_equal_their_golden_text(view):
    """80×24, no colour, a result with weights chosen by hand (so the text can be checked by eye)."""
    app = AttnvizTUI(Explorer(SavedSource(_hand(), "hand.npz")), None, colour=False)

    async def script(pilot) -> None:
        await keys(pilot, str(list(("heatmap", "model", "heads", "token")).index(view) + 1))
        got = screen(app) + "\n"
        golden = GOLDEN / f"tui_{view}_80x24.txt"
        assert got == golden.read_text(encoding="utf-8")

    drive(app, script, size=(80, 24))


def test_a_saved_generation_has_its_step_view(tmp_path):
    import attnviz

    result = attnviz.generate("the cat sat on the", model="sample_configs/causal.toml", max_new_tokens=4,
                              stop_at_eos=False)
    result.save(tmp_path / "gen.npz")
    app = AttnvizTUI(Explorer(load(str(tmp_path / "gen.npz"))), None, colour=False)

    async def script(pilot) -> None:
        await keys(pilot, "6")
        assert app.explorer.view == "steps" and "step 1 of 4" in pane(app)
        await keys(pilot, "full_stop", "full_stop")
        assert "step 3 of 4" in pane(app)
        await keys(pilot, "comma")
        assert "step 2 of 4" in pane(app)
        first = app.explorer.result.metadata["prompt_length"] + 1
        assert f"token {first} " in pane(app)
        await keys(pilot, "t")
        assert "its text is fixed" in screen(app)

    drive(app, script)


def test_a_slow_text_keeps_the_screen_alive(tiny, monkeypatch):
    """The model runs on a worker: while it does, the screen shows a spinner and keys answer."""
    import threading

    gate = threading.Event()
    original = Explorer.compute

    def slow(self, text):
        gate.wait(10)
        original(self, text)

    monkeypatch.setattr(Explorer, "compute", slow)
    app = AttnvizTUI(Explorer(tiny), TEXT, colour=False)

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.query_one("#body").loading, "the spinner")
            await press(pilot, "right")
            await opened(pilot, "question_mark", Help)  # the UI answers meanwhile
            await press(pilot, "escape")
            await until(pilot, lambda: not isinstance(app.screen, Help), "escape to close the help")
            gate.set()
            await until(pilot, lambda: settled(app), "the text to be computed")
            assert not app.query_one("#body").loading and app.explorer.result is not None

    run_async(main)


def test_keys_footer_lists_every_binding():
    bound = {binding.action.split("(")[0] for binding in AttnvizTUI.BINDINGS}
    words = {"layer": "layer", "head": "head", "next_view": "view", "find": "find", "find_next": "next",
             "token": "token", "zoom": "zoom", "step": "step", "explain": "explain", "type_text": "text",
             "save": "save", "help": "help", "quit": "quit", "view": "1-8", "previous_view": "Tab", "select": "Enter",
             "sort": "sort"}
    assert bound <= set(words) and all(words[action] in KEYS for action in bound)


def test_without_textual_the_command_says_how_to_get_it(monkeypatch, run_cli):
    import sys

    monkeypatch.setitem(sys.modules, "textual", None)
    result = run_cli("tui", "The cat sat.")
    assert result.exit_code != 0 and "pip install 'textual>=0.80'" in result.stderr and "pip install -e '.[tui]'" in result.stderr
    assert np.array([1]).size == 1


def test_a_long_text_is_computed_view_by_view_through_the_model(tmp_path, monkeypatch):
    """Past RESULT_BYTES nothing is kept whole: each view is computed through the loaded model on a worker,
    as the commands compute it, and equals the command's picture."""
    from test_page_long import _model

    from attnviz.api import attention_view
    from attnviz.render.terminal import render_terminal
    from attnviz.tui import explorer as module
    from attnviz.tui.explorer import Sink

    _model(tmp_path)
    monkeypatch.setattr(module, "RESULT_BYTES", 1000)
    source = load(str(tmp_path))
    text = " ".join(f"w{i % 50}" for i in range(700))
    app = AttnvizTUI(Explorer(source), text, colour=False)

    async def script(pilot) -> None:
        explorer = app.explorer
        assert explorer.long and explorer.result is None and explorer.n_tokens == 700  # (no start token)
        assert "700 tokens (long: views computed as asked)" in screen(app)
        sink = Sink(app.size.width - 2, False)
        render_terminal(attention_view(source, text, layer=0, head=0), sink)
        assert pane(app).splitlines()[0] == str(sink.items[0])  # the command's own picture (its title)
        assert "by max-pooling" in pane(app)
        await keys(pilot, "down", "3")
        assert len(table_rows(app)) == 8
        await keys(pilot, "1")
        await answer(pilot, "slash", "w7")
        await keys(pilot, "plus", "plus", "plus")
        start, stop = explorer.region()
        assert stop - start == 700 >> 3 and f"tokens {start}–{stop - 1}" in screen(app)
        assert "internal error" not in screen(app)

    drive(app, script)


def test_a_click_on_a_heatmap_row_selects_its_token(tiny):
    app = AttnvizTUI(Explorer(tiny), TEXT, colour=False)

    async def script(pilot) -> None:
        text = screen(app).splitlines()
        y = next(i for i, line in enumerate(text) if line.strip().startswith("sat "))  # the row of "sat"
        await click(pilot, (1, y))
        assert app.explorer.token == 2 and "token 2 'sat'" in screen(app)
        assert "'sat' (token 2) attends to:" in pane(app)

    drive(app, script)


def test_the_heads_table_sorts_with_o_or_a_click_on_a_column_name(tiny):
    app = AttnvizTUI(Explorer(tiny), TEXT, colour=False)

    async def script(pilot) -> None:
        await keys(pilot, "3")
        assert table_rows(app) == [(layer, head) for layer in range(2) for head in range(4)]  # model order
        await keys(pilot, "o")
        column = app.explorer.sort
        assert column is not None and f"sorted by {column}" in pane(app)
        rows, _ = app.explorer.heads_rows()
        values = [float(row[column]) for row in rows]
        assert values == sorted(values, reverse=True) and table_rows(app) == [(r["layer"], r["head"]) for r in rows]
        text = screen(app).splitlines()
        y = next(i for i, line in enumerate(text) if line.split()[:2] == ["L", "H"])  # the header
        x = text[y].index("L")
        await click(pilot, (x, y))
        assert app.explorer.sort is None and table_rows(app)[:2] == [(0, 0), (0, 1)]  # layer order again
        prev = text[y].index("prev")
        await click(pilot, (prev + 1, y))
        assert app.explorer.sort == "prev_score" and "sorted by prev_score" in pane(app)

    drive(app, script)


def test_no_color_in_the_environment_is_honoured(tiny, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert AttnvizTUI(Explorer(tiny), TEXT).colour is False
    monkeypatch.delenv("NO_COLOR")
    assert AttnvizTUI(Explorer(tiny), TEXT).colour is True
