"""Long inputs: every command holds one layer's attention matrices at a time, and the streamed
outputs equal the whole-result ones (issue 10, part 3)."""

from __future__ import annotations

import weakref

import numpy as np
import pytest
import torch

import attnviz
from attnviz.analysis import metrics
from attnviz.analysis.heads import head_table
from attnviz.attribution.rollout import rollout
from attnviz.result import AttentionResult
from attnviz.result.writer import ResultWriter
from attnviz.sources.native import NativeSource

TEXT = "The cat sat on the mat because it was tired of running after the dog."


def _count_alive_layers(monkeypatch) -> list[int]:
    """Instrument the native engine: for each layer it computes, record how many earlier layers'
    attention matrices are still alive (referenced by anything) at that moment."""
    seen: list[int] = []
    real = NativeSource.forward_layers

    def forward_layers(self, *args, **kwargs):
        refs: list[weakref.ref] = []
        for out in real(self, *args, **kwargs):
            seen.append(sum(ref() is not None for ref in refs))
            refs.append(weakref.ref(out.weights))
            yield out
            del out

    monkeypatch.setattr(NativeSource, "forward_layers", forward_layers)
    return seen


@pytest.fixture
def layers_alive(monkeypatch):
    return _count_alive_layers(monkeypatch)


def _texts(tmp_path, lines):
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_export_holds_one_layer_at_a_time(run_cli, tmp_path, layers_alive):
    r = run_cli("export", _texts(tmp_path, [TEXT, "A second, shorter text."]), "--out", str(tmp_path / "out"),
                "--formats", "npz,json", "--quiet")
    assert r.exit_code == 0, r.stderr
    assert len(layers_alive) == 6  # MiniLM's layers, one padded batch
    # Layer l is taken (statistics, the npz's bytes) on a thread of its own while l + 1 is computed, as the npz
    # writer always held it: never an earlier one.
    assert max(layers_alive) <= 1, f"earlier layers still alive when the next was computed: {layers_alive}"


def test_heads_and_rollout_hold_one_layer_at_a_time(run_cli, tmp_path, layers_alive):
    assert run_cli("heads", "--file", _texts(tmp_path, [TEXT, "Another one."]), "--format", "csv").exit_code == 0
    assert run_cli("rollout", TEXT, "--width", "80").exit_code == 0
    assert len(layers_alive) == 12 and max(layers_alive) == 0, layers_alive


def test_extract_keeps_no_batch_layer_once_stored(layers_alive):
    results = attnviz.extract_batch([TEXT, "Short."])
    assert results[0].attentions.shape[0] == 6
    assert max(layers_alive) == 0, layers_alive


def test_the_layer_check_can_fail(monkeypatch):
    """The instrument sees a consumer that keeps every layer (as the old pipeline did)."""
    from attnviz.sources.resolve import load_source

    seen = _count_alive_layers(monkeypatch)
    stream = load_source(None).stream_batch([TEXT])
    hoard = [parts[0].attentions for _, parts in stream]
    assert len(hoard) == 6 and seen[-1] == 5


@pytest.mark.parametrize("float16", [False, True])
def test_streamed_npz_is_byte_identical_to_save(tmp_path, float16):
    result = attnviz.extract(TEXT)
    whole = result.save(tmp_path / "whole.npz", float16=float16)
    writer = ResultWriter(tmp_path / "streamed.npz", result, result.n_layers, float16=float16)
    for layer in range(result.n_layers):
        writer.add(result.attentions[layer], result.value_norms[layer])
    streamed = writer.close()
    assert streamed.read_bytes() == whole.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] and not list(tmp_path.glob(".*tmp*"))
    loaded = AttentionResult.load(streamed)
    assert torch.allclose(loaded.attentions, result.attentions, atol=1e-3 if float16 else 0)


def test_an_aborted_writer_leaves_nothing(tmp_path):
    result = attnviz.extract(TEXT)
    writer = ResultWriter(tmp_path / "x.npz", result, result.n_layers)
    writer.add(result.attentions[0])
    with pytest.raises(ValueError, match="1 of 6 layers"):
        writer.close()
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_is_one_named_error_and_leaves_nothing(tmp_path):
    """A full disk met by the writer thread surfaces in the caller as ResultFileError; no file stays."""
    from attnviz.errors import ResultFileError

    result = attnviz.extract(TEXT)
    writer = ResultWriter(tmp_path / "x.npz", result, result.n_layers)
    real, calls = writer._open, []

    class FullDisk:
        def write(self, data):
            calls.append(len(data))
            if len(calls) > 1:  # the array header goes through; the first layer does not
                raise OSError(28, "No space left on device")
            return real.write(data)

        def close(self):
            real.close()

    writer._open = FullDisk()
    with pytest.raises(ResultFileError, match="No space left on device"):
        for layer in range(result.n_layers):
            writer.add(result.attentions[layer])
        writer.close()
    assert list(tmp_path.iterdir()) == [] and len(calls) == 2


def test_export_npz_equals_the_result_of_extract(run_cli, tmp_path):
    out = tmp_path / "out"
    assert run_cli("export", _texts(tmp_path, [TEXT]), "--out", str(out), "--formats", "npz", "--quiet").exit_code == 0
    exported = AttentionResult.load(next(out.glob("*.npz")))
    direct = attnviz.extract(TEXT)
    assert exported.tokens == direct.tokens
    assert torch.allclose(exported.attentions, direct.attentions, atol=1e-6)
    assert torch.allclose(exported.value_norms, direct.value_norms, atol=1e-5)


def test_streamed_head_table_equals_the_whole_one():
    from attnviz.api import head_table_of_texts
    from attnviz.sources.resolve import load_source

    texts = [TEXT, "Colorless green ideas sleep furiously.", "注意力机制很重要。"]
    source = load_source(None)
    streamed = head_table_of_texts(source, texts, batch_size=2)
    whole = head_table([source.extract(t) for t in texts])
    assert streamed.n_texts == 3
    for name, value in whole.stats.items():
        assert torch.allclose(streamed.stats[name], value, atol=1e-6), name


def test_streamed_rollout_equals_rollout_of_the_whole_result():
    from attnviz.api import rollout_of_text
    from attnviz.sources.resolve import load_source

    source = load_source(None)
    result = source.extract(TEXT)
    for fusion in ("mean", "max"):
        rolled, header = rollout_of_text(source, TEXT, layer=3, head_fusion=fusion)
        assert header.tokens == result.tokens
        assert torch.allclose(rolled, rollout(result.attentions, head_fusion=fusion)[3], atol=1e-9)


def _random_attention(shape, causal=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(*shape, generator=gen, dtype=torch.float64) * 3
    if causal:
        scores = scores.masked_fill(~torch.ones(shape[-2], shape[-1], dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(-1)


@pytest.mark.parametrize("causal", [False, True])
def test_statistics_of_float32_inputs_agree_with_float64(causal):
    """The statistics read float32 in place (rows summed in float32, accumulated in float64):
    they agree with the same definitions in float64 to 1e-6."""
    a64 = _random_attention((2, 3, 40, 40), causal=causal)
    a32 = a64.float()
    ids = [i % 7 for i in range(40)]
    for fn in (metrics.entropy, metrics.self_score, metrics.previous_token_mean, metrics.next_token_score,
               metrics.max_weight, metrics.mean_distance, metrics.first_token_score,
               lambda a: metrics.entropy_normalized(a, causal=causal),
               lambda a: metrics.attention_to(a, [i % 5 == 0 for i in range(40)]),
               lambda a: metrics.duplicate_token_score(a, ids), lambda a: metrics.induction_score(a, ids)):
        exact, fast = fn(a64), fn(a32)
        assert fast.dtype == torch.float64
        assert torch.allclose(fast, exact, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("exclude_bos", [False, True])
@pytest.mark.parametrize("exclude_current_token", [False, True])
def test_sparse_pattern_score_equals_transformerlens_dense_formula(exclude_bos, exclude_current_token):
    """TransformerLens detect_head, error_measure "mul", written out densely as it is there."""
    a = _random_attention((2, 2, 30, 30), causal=True, seed=3)
    ids = [i % 6 for i in range(30)]
    pattern = metrics.induction_pattern(ids)
    dense = a.clone()
    if exclude_bos:
        dense[..., 0] = 0
    if exclude_current_token:
        dense.diagonal(dim1=-2, dim2=-1).zero_()
    expected = (dense * pattern).sum((-2, -1)) / dense.sum((-2, -1))
    got = metrics.pattern_score(a, pattern, exclude_bos=exclude_bos, exclude_current_token=exclude_current_token)
    assert torch.allclose(got, expected, atol=1e-12)


def test_head_statistics_of_a_long_input_stay_small():
    """[1, 12, 1024, 1024] float32 (50 MB): the statistics never make a float64 copy of it
    (tracemalloc does not see torch's allocations, so the check is on torch's own allocator counters)."""
    a = _random_attention((1, 12, 1024, 1024), causal=True).float()
    tokens = [f"w{i % 50}" for i in range(1024)]
    result = AttentionResult(tokens=tokens, attentions=a, token_ids=[i % 50 for i in range(1024)], causal=True)
    from attnviz.analysis.heads import sep_keys, token_ids
    from attnviz.analysis.row_statistics import layer_row_statistics

    layer = layer_row_statistics(a[0], token_ids=token_ids(result), tokens=tokens, sep=sep_keys(result), causal=True)
    stats = {name: value[None] for name, value in layer.statistics().items()}
    assert set(stats) and all(v.shape == (1, 12) for v in stats.values())
    reference = metrics.entropy(a.double())
    assert np.allclose(stats["entropy"].numpy(), reference.numpy(), rtol=1e-6)


# --- issue 10, part 5: what an export tells and leaves behind -------------------------------------


def test_rerun_with_other_layers_removes_the_old_images(run_cli, tmp_path):
    out = tmp_path / "out"
    texts = _texts(tmp_path, ["The cat sat on the mat.", "A dog."])
    mine = out / "notes.txt"
    out.mkdir()
    mine.write_text("mine")  # not an export's file: never touched
    common = ["export", texts, "--out", str(out), "--formats", "png,json", "--style", "tiles", "--quiet"]
    assert run_cli(*common, "--layer", "0,1").exit_code == 0
    assert (out / "000000-the-cat-sat-on-the-mat.L1.png").exists()
    r = run_cli(*common, "--layer", "0")
    assert r.exit_code == 0, r.stderr
    assert not (out / "000000-the-cat-sat-on-the-mat.L1.png").exists() and not (out / "000001-a-dog.L1.png").exists()
    assert "removed 2 files of an earlier export" in r.stderr and "000000-the-cat-sat-on-the-mat.L1.png" in r.stderr
    listed = {name for line in (out / "manifest.jsonl").read_text().splitlines() for name in __import__("json").loads(line)["files"]}
    on_disk = {p.name for p in out.iterdir() if p.name.startswith("0000")}
    assert listed == on_disk and mine.read_text() == "mine"


def test_a_changed_text_leaves_no_file_of_the_old_one(run_cli, tmp_path):
    out = tmp_path / "out"
    common = ["--out", str(out), "--formats", "json", "--quiet"]
    assert run_cli("export", _texts(tmp_path, ["First text here.", "Second."]), *common).exit_code == 0
    assert run_cli("export", _texts(tmp_path, ["A changed first text.", "Second."]), *common).exit_code == 0
    assert sorted(p.name for p in out.glob("000000-*")) == ["000000-a-changed-first-text.stats.json"]


def test_plain_progress_lines_when_not_at_a_terminal(run_cli, tmp_path, monkeypatch):
    from attnviz.render import progress

    monkeypatch.setattr(progress, "PLAIN_INTERVAL", 0.0)  # a line for every item
    texts = _texts(tmp_path, ["One text.", "Two texts.", "Three texts."])
    r = run_cli("export", texts, "--out", str(tmp_path / "a"), "--formats", "json", "--batch-size", "1")
    assert r.exit_code == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert [line.split(" items")[0] for line in lines] == [f"attnviz: export {i}/3" for i in (1, 2, 3)]
    assert all("items/s, ETA" in line for line in lines) and lines[-1].endswith("ETA 0:00")
    quiet = run_cli("export", texts, "--out", str(tmp_path / "b"), "--formats", "json", "--quiet")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_plain_progress_waits_for_its_interval():
    import io

    from attnviz.render.progress import plain_progress

    now = [0.0]
    stream = io.StringIO()
    with plain_progress(stream, interval=30.0, clock=lambda: now[0]) as (start, advance):
        start(100, 10)
        for _ in range(20):  # 20 items in 20 s: nothing yet
            now[0] += 1.0
            advance()
        assert stream.getvalue() == ""
        now[0] += 10.0
        advance()  # 30 s, 21 items done this run: 0.70 items/s, 69 left
        assert stream.getvalue() == "attnviz: export 31/100 items (31%), 0.70 items/s, ETA 1:39\n"


# --- compare-heads on long inputs -------------------------------------------------------------------


def test_compare_heads_holds_one_layer_at_a_time(run_cli, layers_alive):
    assert run_cli("compare-heads", TEXT, "--width", "100").exit_code == 0
    assert len(layers_alive) == 6 and max(layers_alive) == 0, layers_alive


def test_head_distances_are_exact_within_the_budget():
    from attnviz.api import compare_heads_of_text
    from attnviz.sources.resolve import load_source

    source = load_source(None)
    overview = compare_heads_of_text(source, TEXT)
    exact = metrics.head_distance(source.extract(TEXT).attentions).numpy()
    assert np.allclose(overview.distance, exact, atol=1e-9)
    assert not any("estimated" in note for note in overview.notes)
    assert overview.display.shape[:2] == (6, 12) and overview.names[13] == "L1H1"


def test_past_the_budget_head_distances_use_evenly_spaced_rows_and_say_so(run_cli, monkeypatch):
    from attnviz.analysis import compare
    from attnviz.api import compare_heads_of_text
    from attnviz.sources.resolve import load_source

    monkeypatch.setattr(compare, "DISTANCE_BUDGET", 1000)
    monkeypatch.setattr(compare, "MIN_DISTANCE_ROWS", 6)
    source = load_source(None)
    attn = source.extract(TEXT).attentions[2:3]
    n = attn.shape[-1]
    rows = compare.distance_rows(12, n, n)
    assert rows is not None and rows[0] == 0 and rows[-1] == n - 1 and len(rows) < n
    overview = compare_heads_of_text(source, TEXT, layer=2)
    expected = metrics.head_distance(attn[:, :, rows]).numpy() * n / len(rows)
    assert np.allclose(overview.distance, expected, atol=1e-9)
    assert any(f"estimated from {len(rows)} of {n} query rows" in note for note in overview.notes)
    exact = compare_heads_of_text(source, TEXT, layer=2, all_rows=True)
    assert np.allclose(exact.distance, metrics.head_distance(attn).numpy(), atol=1e-9)
    r = run_cli("compare-heads", TEXT, "--layer", "2", "--width", "120")
    assert r.exit_code == 0 and "--all-rows for the exact sums" in r.stdout


def test_display_copies_are_max_pooled_for_long_inputs(monkeypatch):
    from attnviz.analysis import compare

    monkeypatch.setattr(compare, "THUMBNAIL_CELLS", 4)
    result = attnviz.extract(TEXT)  # 17 tokens: blocks of 5, 4 cells per axis
    overview = compare.overview_of_result(result, [0])
    n = len(result.tokens)
    assert overview.display.shape[-1] == -(-n // 5) == 4
    assert float(overview.display[0, 3, 0, 0]) == float(result.attentions[0, 3, :5, :5].max())
    assert overview.labels == result.tokens[::5] and any("max-pooled" in note for note in overview.notes)


def test_workers_never_outnumber_cpus_or_items():
    from attnviz.export.workers import worker_count

    assert worker_count(200, 3, cpus=2) == 2
    assert worker_count(200, 1, cpus=16) == 1
    assert worker_count(4, 100, cpus=16) == 4
    assert worker_count(1, 0, cpus=2) == 1


def test_export_says_when_it_starts_fewer_workers(run_cli, tmp_path):
    r = run_cli("export", _texts(tmp_path, ["One text only."]), "--out", str(tmp_path / "out"), "--layer", "0",
                "--formats", "png", "--jobs", "8", "--quiet")
    assert r.exit_code == 0, r.stderr
    assert "attnviz: warning: jobs = 8: drawing with 1 processes" in r.stderr and "1 items to draw" in r.stderr


@pytest.mark.parametrize("causal", [False, True])
def test_head_distance_equals_the_direct_jensen_shannon_sum(causal):
    """JS written out as Clark et al. define it (per row, after 0.999·A + 0.001/n, summed over rows),
    against the entropy form that skips all-zero columns and counts each pair once."""
    a = _random_attention((2, 3, 30, 30), causal=causal, seed=7)
    n = a.shape[-1]
    p = (0.999 * a + 0.001 / n).reshape(6, 30, 30)
    expected = torch.zeros(6, 6, dtype=torch.float64)
    for i in range(6):
        for j in range(6):
            m = (p[i] + p[j]) / 2
            expected[i, j] = (0.5 * (p[i] * (p[i] / m).log()).sum(-1) + 0.5 * (p[j] * (p[j] / m).log()).sum(-1)).sum()
    assert torch.allclose(metrics.head_distance(a), expected, atol=1e-12)
    assert torch.allclose(metrics.head_distance(a.float()), expected, atol=1e-5)


def test_drawing_processes_never_import_torch():
    """A drawing process imports only what render_task needs: matplotlib, not torch (faster start, less memory)."""
    import subprocess
    import sys

    code = ("import sys, pickle\nfrom attnviz.export.workers import render_task\npickle.loads(pickle.dumps(render_task))\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
