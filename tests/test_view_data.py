"""What a command shows, as numbers: ``--out FILE.npz`` and ``--out FILE.json`` write the view's
matrices and labels (float64, as computed), and a signed view keeps zero in the middle of its scale."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz import api
from attnviz.errors import ResultFileError
from attnviz.render.colors import ColorScale
from attnviz.render.view import matrix_view
from attnviz.result import AttentionResult

TEXT = "The cat sat."


def test_rollout_numbers_written_as_npz_and_json_equal_the_api(run_cli, tmp_path):
    rolled, result = api.rollout_of_text(api.load(), TEXT)
    for name in ("r.npz", "r.json"):
        r = run_cli("rollout", TEXT, "--out", str(tmp_path / name))
        assert r.exit_code == 0, r.stderr
    with np.load(tmp_path / "r.npz") as data:
        assert str(data["format"]) == "attnviz-view"
        assert np.allclose(data["panels"][0], rolled.numpy(), atol=1e-6)
        assert list(data["row_labels"]) == list(result.tokens) == list(data["col_labels"])
        meta = json.loads(str(data["meta"]))
    assert meta["value_name"] == "share of the input token" and "rollout" in meta["title"]
    document = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert np.allclose(np.array(document["panels"][0]), rolled.numpy(), atol=1e-6)
    assert document["row_labels"] == list(result.tokens) and document["panel_titles"] == ["rollout to layer 5"]
    with pytest.raises(ResultFileError, match="numbers of a drawn view"):  # not mistaken for a saved result
        AttentionResult.load(tmp_path / "r.npz")
    r = run_cli("heatmap", "--model", str(tmp_path / "r.npz"))
    assert r.exit_code != 0 and "not a saved result" in r.stderr and "Traceback" not in r.stderr


def test_json_writes_null_where_a_value_is_not_finite(tmp_path):
    view = matrix_view(np.array([[[0.5, np.nan], [np.inf, 1.0]]]), ["a", "b"], ["a", "b"], title="t",
                       panel_titles=["p"])
    from attnviz.render.view_data import write_view_json

    document = json.loads(write_view_json(view, tmp_path / "v.json").read_text(encoding="utf-8"))
    assert document["panels"] == [[[0.5, None], [None, 1.0]]]


def test_a_signed_view_is_centred_on_zero(tmp_path):
    values = np.array([[[-0.2, 0.1], [0.05, 0.4]]])
    view = matrix_view(values, ["a", "b"], ["a", "b"], title="t", panel_titles=["p"], signed=True, cmap="coolwarm")
    assert (view.scale.vmin, view.scale.vmax) == (-0.4, 0.4)
    middle = ColorScale(-1.0, 1.0, "coolwarm").rgb(np.array([0.0]))[0]
    assert tuple(middle) == (221, 220, 220)  # coolwarm's grey: zero is neither blue nor red
    from attnviz.render.page import head_values, page_of_view

    kind = page_of_view(view).kinds["self"]
    assert np.allclose(head_values(kind, 0, 0), values[0], atol=1e-4)  # as the page reads it
    assert kind["vmax"] == pytest.approx(0.4)
