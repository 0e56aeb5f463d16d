"""``attnviz heads --audio`` (issue 61 item 2): each cross-attention head's statistics over time. The definitions
(attnviz.audio.cross_stats) are checked on matrices whose answer is known by hand (a diagonal, an even spread, a
reversed diagonal, tied centres); the command on the sound organism, whose planted heads are an alignment head (L1H0,
a diagonal over the declared word times), a head on the first frames (L1H1) and uniform ones, against the same
statistics computed here from ``whisper_attention``'s cross-attention (transformers' eager weights)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("soundfile")

from audio_models import CLIP, ORGANISM

from attnviz.audio.cross_stats import COLUMNS, DIAGONAL_BAND, head_time_statistics, spearman

ROOT = Path(__file__).resolve().parent.parent


def test_a_diagonal_head_is_focused_monotonic_and_on_the_diagonal():
    rows, positions = 5, 50
    w = np.zeros((rows, positions))
    for t in range(rows):
        w[t, int((t + 0.5) * positions / rows)] = 1.0
    found = head_time_statistics(w)
    assert found["entropy"] == pytest.approx(0.0, abs=1e-12)
    assert found["focus"] == pytest.approx(1.0)
    assert found["monotonicity"] == pytest.approx(1.0)
    assert found["diagonal"] == pytest.approx(1.0)
    assert found["clip_share"] == pytest.approx(1.0)
    backwards = head_time_statistics(w[::-1])
    assert backwards["monotonicity"] == pytest.approx(-1.0)
    assert backwards["diagonal"] < 0.5  # only the middle row stays on the diagonal


def test_an_even_head_has_entropy_one_and_the_bands_share_on_the_diagonal():
    rows, positions = 4, 40
    w = np.full((rows, positions), 0.5 / positions)  # half its weight on the clip, spread evenly
    found = head_time_statistics(w)
    assert found["clip_share"] == pytest.approx(0.5)
    assert found["entropy"] == pytest.approx(1.0)
    assert found["focus"] == pytest.approx(1 / positions)
    assert found["monotonicity"] == 0.0  # every centre equal
    band = DIAGONAL_BAND * positions  # 4 positions each side of centres 5, 15, 25, 35: 9 positions a row
    inside = [sum(abs(p - (t + 0.5) * positions / rows) <= band for p in range(positions)) for t in range(rows)]
    assert found["diagonal"] == pytest.approx(np.mean(inside) / positions)


def test_spearman_reads_tied_values_at_their_mean_rank():
    x = np.array([0.0, 1.0, 2.0, 3.0])
    y = np.array([1.0, 1.0, 2.0, 0.0])  # ranks by hand: 1.5, 1.5, 3, 0
    rx, ry = np.array([0, 1, 2, 3.0]), np.array([1.5, 1.5, 3, 0])
    rx, ry = rx - rx.mean(), ry - ry.mean()
    assert spearman(x, y) == pytest.approx((rx * ry).sum() / math.sqrt((rx**2).sum() * (ry**2).sum()))
    assert spearman(x[:1], y[:1]) == 0.0


def by_hand(weights: np.ndarray) -> dict[str, float]:
    """The statistics written out again from their definitions (docs/sound.md), row by row."""
    rows, positions = weights.shape
    shares, entropies, focus, centres, diagonal = [], [], [], [], []
    for t in range(rows):
        share = weights[t].sum()
        a = weights[t] / share
        shares.append(share)
        entropies.append(-sum(v * math.log(v) for v in a if v > 0) / math.log(positions))
        focus.append(a.max())
        centres.append(sum(p * a[p] for p in range(positions)))
        middle = (t + 0.5) * positions / rows
        diagonal.append(sum(a[p] for p in range(positions) if abs(p - middle) <= max(1.0, 0.1 * positions)))
    centres = np.round(np.array(centres), 6)
    if len(set(centres)) == 1:  # the head on the first frames: every token read at one time
        rho = 0.0
    else:  # the alignment head: each token later than the one before, distinct centres
        order = np.argsort(np.argsort(centres)).astype(float)
        rho = np.corrcoef(np.arange(rows, dtype=float), order)[0, 1]
    return {"clip_share": np.mean(shares), "entropy": np.mean(entropies), "focus": np.mean(focus),
            "monotonicity": rho, "diagonal": np.mean(diagonal)}


@pytest.fixture(scope="module")
def table():
    from typer.testing import CliRunner

    from attnviz.cli import app

    found = CliRunner().invoke(app, ["heads", "--audio", CLIP, "--model", ORGANISM, "--format", "json"])
    assert found.exit_code == 0, found.stderr
    return json.loads(found.stdout)


def test_the_organisms_planted_heads_read_as_planted(table):
    rows = {(r["layer"], r["head"]): r for r in table["heads"]}
    assert table["columns"] == list(COLUMNS) and len(rows) == 8
    aligned = rows[(1, 0)]
    assert aligned["alignment"] and aligned["monotonicity"] > 0.95 and aligned["diagonal"] > 0.9
    others = [r for k, r in rows.items() if k != (1, 0)]
    assert all(aligned["diagonal"] > r["diagonal"] + 0.5 for r in others)
    assert all(aligned["label_free"] > r["label_free"] for r in others)
    uniform = rows[(0, 0)]
    assert uniform["entropy"] > 0.99 and not uniform["alignment"]
    first = rows[(1, 1)]  # the head on the first frames: its weight in a few positions at the clip's start
    assert first["entropy"] < 0.7 and first["clip_share"] > 0.99


def test_the_numbers_are_the_definitions_over_transformers_cross_attention(table):
    from attnviz.audio.whisper import whisper_attention

    result = whisper_attention(CLIP, ORGANISM)
    start = result.metadata["prompt_length"] - 1
    kept = result.metadata["audio_positions"]
    cross = np.asarray(result.cross_attentions, dtype=np.float64)[:, :, start:-1, :kept]
    for row in table["heads"]:
        if row["layer"] != 1 or row["head"] not in (0, 1):
            continue
        expected = by_hand(cross[row["layer"], row["head"]])
        for name, value in expected.items():
            assert row[name] == pytest.approx(value, abs=1e-6), (row["layer"], row["head"], name)


def test_sort_top_csv_and_files(run_cli, tmp_path):
    out = tmp_path / "heads.csv"
    found = run_cli("heads", "--audio", CLIP, "--model", ORGANISM, "--sort", "diagonal", "--top", "2", "--format",
                    "csv", "--out", str(out))
    assert found.exit_code == 0, found.stderr
    lines = found.stdout.splitlines()
    assert lines[0].split(",") == list(COLUMNS) and len(lines) == 3
    assert lines[1].split(",")[:2] == ["1", "0"]
    assert len(out.read_text().splitlines()) == 9  # the file holds every head
    shown = run_cli("heads", "--audio", CLIP, "--model", ORGANISM, "--sort", "monotonicity", "--top", "1")
    assert shown.exit_code == 0 and "aligns" in shown.stdout and "yes" in shown.stdout, shown.stderr


@pytest.mark.parametrize(("args", "words"), [
    (["--layer", "1"], ["--layer", "--audio"]),
    (["--sort", "prev"], ["--sort", "diagonal"]),
    (["--out", "x.png"], ["--out", ".json"]),
])
def test_refusals_are_one_line(run_cli, args, words):
    found = run_cli("heads", "--audio", CLIP, "--model", ORGANISM, *args)
    assert found.exit_code != 0
    assert found.stderr.count("\n") == 1 and found.stderr.startswith("attnviz: error: "), found.stderr
    assert all(w in found.stderr for w in words), found.stderr
