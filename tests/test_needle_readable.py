"""needle's answers and picture read as they are meant (issue 58, D17): a recall of 91 with the answer cut by `…`
hid why the cell missed; the PNG wrote percent in its cells over a 0-1 colour bar."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from attnviz.needle.scores import missed_words, rouge1_recall
from attnviz.render import needle as drawn

NEEDLE = "the best thing to do in san francisco is eat a sandwich and sit in dolores park on a sunny day"


@pytest.mark.parametrize("answer", ["eat a sandwich and sit in dolores park", "", NEEDLE,
                                    "the the best best thing is to eat in the park on a day"])
def test_the_missed_words_are_what_rouge_did_not_count(answer):
    missed = missed_words(NEEDLE, answer)
    total = len(NEEDLE.split())
    assert rouge1_recall(NEEDLE, answer) == pytest.approx((total - len(missed)) / total)
    assert all(word in NEEDLE.split() for word in missed)


def test_a_word_needed_twice_and_said_once_is_missed_once():
    assert missed_words("in the park in the sun", "in the park the sun") == ["in"]


def test_the_answers_table_shows_the_whole_answer_and_what_it_missed():
    answer = "eat a sandwich and sit in dolores park until sunset. a travelling musician found an old map of the hill"
    rows = [{"length": 1365, "depth": 0.25, "recall": rouge1_recall(NEEDLE, answer), "answer": answer,
             "missed": missed_words(NEEDLE, answer)}]
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(drawn.runs_table(rows, width=80))
    shown = console.file.getvalue()
    assert "…" not in shown
    assert all(word in shown.split() for word in answer.split())  # wrapped, never cut
    assert "missed" in shown and "sunny" in shown and "francisco" in shown


def test_the_recall_colour_bar_is_in_percent_as_the_cells(tmp_path, monkeypatch):
    from attnviz.render import figure_style

    saved = []
    monkeypatch.setattr(figure_style, "save_figure", lambda fig, path: saved.append(fig))
    drawn.needle_figure([[0.91, 1.0], [0.0, 0.5]], [300, 600], [0.0, 1.0], [[0.0, 0.8], [0.1, 0.0]],
                        title="t", path=tmp_path / "n.png")
    fig = saved[0]
    recall_image = fig.axes[0].images[0]
    assert recall_image.get_clim() == (0.0, 100.0)
    assert float(recall_image.get_array().max()) == pytest.approx(100.0)
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert "recall (%)" in labels
