"""Issue 26 (hostile inputs, round 3) on export, inputs, files and signals. Each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

from conftest import TINY

from attnviz.export.items import input_fingerprint, read_items
from attnviz.export.lock import folder_lock
from attnviz.export.settings import build_settings


def _export(run_cli, source: Path, out: Path, *extra: str):
    return run_cli("export", str(source), "--out", str(out), "--model", TINY, "--formats", "json", "--jobs", "1",
                   "--quiet", *extra)


def test_two_exports_of_different_inputs_never_share_a_folder(run_cli, tmp_path):
    """Same settings and the same number of texts, different texts: the second is refused while the first writes."""
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("the cat sat\na dog ran\n", encoding="utf-8")
    second.write_text("birds sing\nfish swim\n", encoding="utf-8")
    out = tmp_path / "o"
    out.mkdir()
    settings = build_settings(None, {"model": TINY, "formats": "json", "jobs": 1})
    with folder_lock(out, f"{settings.fingerprint()}/{input_fingerprint(read_items(str(first)))}"):
        r = _export(run_cli, second, out)
        assert r.exit_code == 1 and "another attnviz export" in r.stderr, r.stderr
        assert not (out / "manifest.jsonl").exists()
        r = _export(run_cli, first, out)  # a shard or a rerun of the same input may join
        assert r.exit_code == 0, r.stderr
    assert input_fingerprint(read_items(str(first))) != input_fingerprint(read_items(str(second)))


def test_a_huge_text_is_cut_or_refused_before_it_is_tokenized(tmp_path, monkeypatch):
    """A 40 MB cell once cost 11.5 GB: the whole text went to the tokenizer before its length was checked."""
    import tokenizers

    from attnviz import api
    from attnviz.errors import InputError
    from attnviz.limits import CHARS_PER_POSITION

    source = api.load()  # MiniLM: 512 positions
    seen: list[int] = []
    real = tokenizers.Tokenizer.encode
    monkeypatch.setattr(tokenizers.Tokenizer, "encode", lambda self, text, *a, **k: seen.append(len(text)) or real(self, text, *a, **k))
    huge = "word " * 2_000_000  # 10 M characters
    try:
        source.extract(huge)
    except InputError as exc:
        assert "characters long" in str(exc) and "truncate=True" in str(exc)
    else:
        raise AssertionError("a 10 M character text was accepted")
    assert seen == []  # refused before the tokenizer saw it
    cut = source.extract(huge, truncate=True)
    assert len(cut.tokens) == 512 and max(seen) <= 512 * CHARS_PER_POSITION
    assert cut.tokens == source.extract("word " * 600, truncate=True).tokens  # the cut changes no token kept
    config = api.load(TINY)
    try:
        config.extract("a " * 2_000_000)
    except InputError as exc:
        assert "characters long" in str(exc)
    else:
        raise AssertionError("a config model took a 4 M character text")


def test_config_files_are_read_bounded_and_regular(run_cli, tmp_path):
    """--model or --config at /dev/zero read 5.6 GB; a FIFO blocked forever; a deep TOML was an internal error."""
    import os

    fifo = tmp_path / "model.toml"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    big = tmp_path / "big.toml"
    with open(big, "wb") as fh:
        fh.truncate(65 << 20)  # sparse: 65 MiB of zeros without writing them
    texts = tmp_path / "t.txt"
    texts.write_text("a b\n", encoding="utf-8")
    for path in ("/dev/zero", str(fifo), str(deep), str(big)):
        for argv in (["heatmap", "a b", "--model", path], ["export", str(texts), "--out", str(tmp_path / "o"),
                                                          "--config", path]):
            r = run_cli(*argv)
            assert r.exit_code != 0 and r.stderr.startswith("attnviz: error:") and r.stderr.count("\n") == 1, (argv, r.stderr)
            assert "internal error" not in r.stderr, r.stderr
    r = run_cli("heatmap", "a b", "--model", str(deep))
    assert "nests" in r.stderr
    r = run_cli("heatmap", "a b", "--model", str(big))
    assert "64.0 MiB" in r.stderr


def test_heads_parquet_never_reads_a_manifest_through_a_link_or_fifo(run_cli, tmp_path):
    import os

    import pytest

    pytest.importorskip("pyarrow")
    texts = tmp_path / "t.txt"
    texts.write_text("a b\n", encoding="utf-8")
    for kind in ("link", "fifo"):
        out = tmp_path / kind
        out.mkdir()
        if kind == "link":
            (out / "manifest.jsonl").symlink_to("/dev/zero")
        else:
            os.mkfifo(out / "manifest.jsonl")
        r = run_cli("heads", "--file", str(texts), "--model", TINY, "--format", "parquet", "--out", str(out))
        assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.stderr
        assert ("symbolic link" if kind == "link" else "regular file") in r.stderr


def test_sizes_and_seeds_that_overflow_are_named(run_cli, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "1e308T")
    r = run_cli("heatmap", "a b", "--model", TINY)
    assert r.exit_code == 1 and "ATTNVIZ_MAX_MEMORY" in r.stderr and "internal error" not in r.stderr, r.stderr


def test_a_comment_opener_in_a_label_keeps_the_page_valid(run_cli, tmp_path):
    """`<!--` in a label was written `<\\!--`, which JSON.parse refuses: a blank page."""
    import json
    import re

    out = tmp_path / "p.html"
    text = "<!-- a </script> b & c \u2028 d"
    r = run_cli("view", text, "--model", TINY, "--page", str(out))
    assert r.exit_code == 0, r.stderr
    page = out.read_text(encoding="utf-8")
    payload = re.search(r'<script type="application/json" id="attnviz-data">(.*?)</script>', page, re.S).group(1)
    assert "<" not in payload and "\u2028" not in payload
    data = json.loads(payload)  # what the browser's JSON.parse reads
    assert "<!--" in "".join(data["kinds"]["self"]["rows"]) and "<!--" in data["title"]


# --- saved results ---------------------------------------------------------------------------------


def _saved(tmp_path: Path, name: str = "r.npz", **arrays):
    """A result file written as AttentionResult.save writes one, with ``arrays`` replacing its members."""
    import json

    import numpy as np
    import torch

    from attnviz.result import AttentionResult, write_npz

    good = AttentionResult(tokens=["a", "b", "c"], attentions=torch.rand(2, 2, 3, 3).softmax(-1))
    base = {**good.token_arrays(), "attentions": good.attentions.numpy(), "meta": good.meta_array()}
    meta = arrays.pop("meta", None)
    if meta is not None:
        base["meta"] = np.array(json.dumps({**json.loads(str(base["meta"])), **meta}))
    base.update(arrays)
    path = tmp_path / name
    write_npz(str(path), {k: v for k, v in base.items() if v is not None})
    return path


def test_saved_results_are_checked_as_untrusted_input(run_cli, tmp_path):
    """Each of these once filled memory, hung, drew a blank page, wrote NaN as JSON or raised an internal error."""
    import numpy as np

    bad_weights = np.random.rand(2, 2, 3, 3).astype(np.float32)
    bad_weights /= bad_weights.sum(-1, keepdims=True)
    cases = {
        "layers-huge": dict(meta={"metadata": {"layers": [0, 10**30]}}),
        "layers-type": dict(meta={"metadata": {"layers": "0,1"}}),
        "layers-length": dict(meta={"metadata": {"layers": [0]}}),
        "negative": dict(attentions=-bad_weights),
        "overflow": dict(attentions=bad_weights.astype(np.float64) * 1e300),  # finite in float64, inf as float32
        "rows-over-1": dict(attentions=bad_weights * 3),
        "no-layers": dict(attentions=np.zeros((0, 2, 3, 3), np.float32)),
        "no-heads": dict(attentions=np.zeros((2, 0, 3, 3), np.float32)),
        "no-tokens": dict(tokens=np.array([], dtype=np.str_), attentions=np.zeros((2, 2, 0, 0), np.float32),
                          token_ids=None, special=None, attention_mask=None, word_ids=None, segment_ids=None),
        "many-heads": dict(attentions=np.full((1, 20_000, 3, 3), 1 / 3, np.float32)),
        "cross-shape": dict(target_tokens=np.array(["x", "y"]), cross_attentions=np.full((2, 2, 3, 3), 1 / 3, np.float32)),
        "target-special": dict(target_tokens=np.array(["x", "y"]), target_special=np.array([True]),
                               cross_attentions=np.full((2, 2, 2, 3), 1 / 3, np.float32)),
        "decoder-no-target": dict(decoder_attentions=np.full((2, 2, 2, 2), 0.5, np.float32)),
        "prompt-length": dict(meta={"metadata": {"prompt_length": 99}}),
    }
    for case, arrays in cases.items():
        path = _saved(tmp_path, f"{case}.npz", **arrays)
        for argv in (["rollout", "--model", str(path)], ["heads", "--model", str(path), "--format", "json"],
                     ["view", "--model", str(path), "--page", str(tmp_path / "v.html")]):
            r = run_cli(*argv)
            assert r.exit_code == 1 and r.stderr.startswith("attnviz: error:") and r.stderr.count("\n") == 1, (case, argv, r.stderr)
            assert "internal error" not in r.stderr, (case, r.stderr)
    good = _saved(tmp_path, "good.npz")
    assert run_cli("heads", "--model", str(good), "--format", "json").exit_code == 0  # the control passes


def test_a_symlink_loop_is_a_result_file_error(tmp_path):
    import pytest

    from attnviz.errors import ResultFileError
    from attnviz.result import AttentionResult

    (tmp_path / "a.npz").symlink_to(tmp_path / "b.npz")
    (tmp_path / "b.npz").symlink_to(tmp_path / "a.npz")
    with pytest.raises(ResultFileError, match="cannot read"):
        AttentionResult.load(tmp_path / "a.npz")


def test_compare_heads_bounds_the_heads_it_pairs(tmp_path):
    import pytest
    import torch

    from attnviz.analysis.compare import MAX_COMPARED_HEADS, overview_of_result
    from attnviz.errors import UsageError
    from attnviz.result import AttentionResult

    heads = MAX_COMPARED_HEADS // 2 + 1
    result = AttentionResult(tokens=["a", "b"], attentions=torch.full((2, heads, 2, 2), 0.5))
    with pytest.raises(UsageError, match="pairs"):
        overview_of_result(result, [0, 1])
    small = AttentionResult(tokens=["a", "b"], attentions=torch.full((2, 3, 2, 2), 0.5))
    assert overview_of_result(small, [0, 1]).distance.shape == (6, 6)  # the control: a model's heads pass


# --- named errors for every bad value ------------------------------------------------------------


def test_sampling_values_that_overflow_are_named(run_cli, tmp_path):
    causal = str(Path(TINY).parent / "causal.toml")
    for extra, phrase in ((["--temperature", "1e-300"], "--temperature 1e-300 is so small"),
                          (["--seed", str(2**64 + 5)], "--seed 18446744073709551621 must be a whole number"),
                          (["--seed", "-1"], "must be a whole number from 0")):
        r = run_cli("generate", "the cat sat on the", "--model", causal, "-n", "3", "--sample", *extra)
        assert r.exit_code == 2 and phrase in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert run_cli("generate", "the cat sat on the", "--model", causal, "-n", "3", "--sample", "--temperature",
                   "0.01", "--seed", str(2**63 - 1)).exit_code == 0  # the edges themselves work
    config = tmp_path / "seed.toml"
    config.write_text(Path(TINY).read_text(encoding="utf-8").replace("seed = 0 ", f"seed = {2**64} ", 1),
                      encoding="utf-8")
    r = run_cli("heatmap", "a b", "--model", str(config))
    assert r.exit_code == 1 and "seed = 18446744073709551616 must be a whole number" in r.stderr, r.stderr


def test_a_very_long_token_label_fits_the_terminal_in_one_pass(run_cli):
    """A 125,000-character word took 75 s to fit (cut one character at a time, each cut measured again)."""
    from attnviz.render.terminal import _fit_label

    r = run_cli("heatmap", "cat " + "w" * 125_000 + " sat", "--model", TINY, "--layer", "0", "--width", "80",
                env={"NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    assert "w…" in r.stdout
    assert _fit_label("注意力" * 50_000, 7) == "注意力…" and _fit_label("ab", 4, left=True) == "ab  "


def test_explain_refuses_a_config_that_overflows_as_heatmap_does(run_cli, tmp_path):
    """explain printed tables of inf and NaN, and --json wrote Infinity and NaN (not JSON)."""
    config = tmp_path / "overflow.toml"
    config.write_text('[model]\ntype = "matrices"\nname = "big"\n[input]\ntokens = ["a", "b"]\n'
                      "x = [[1e200, 1.0], [1.0, 1e200]]\n[weights]\nw_q = [[1e200, 0.0], [0.0, 1.0]]\n"
                      "w_k = [[1e200, 0.0], [0.0, 1.0]]\nw_v = [[1.0, 0.0], [0.0, 1.0]]\n", encoding="utf-8")
    for argv in (["explain", "--model", str(config)], ["explain", "--model", str(config), "--format", "json"],
                 ["heatmap", "--model", str(config)]):
        r = run_cli(*argv)
        assert r.exit_code == 1 and "overflow" in r.stderr and r.stderr.count("\n") == 1, (argv, r.stderr)
        assert "Infinity" not in r.stdout and "NaN" not in r.stdout


def test_sigterm_during_a_write_leaves_no_temporary_file(tmp_path):
    """SIGTERM mid-write left a partial temporary file beside --out and printed nothing."""
    import subprocess
    import sys

    script = """
import os, signal, sys, time
from pathlib import Path
import torch
from attnviz import _entry
from attnviz.fileio import atomic_write
from attnviz.result import AttentionResult
from attnviz.result.writer import ResultWriter
_entry.install_handlers()
out = Path(sys.argv[1])
def write(tmp):
    Path(tmp).write_bytes(b"half a file")
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
if sys.argv[2] == "atomic":
    atomic_write(out / "x.png", write)
else:
    writer = ResultWriter(out / "x.npz", AttentionResult(tokens=["a"], attentions=torch.ones(1, 1, 1, 1)), 1)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
"""
    for how in ("atomic", "npz"):
        out = tmp_path / how
        out.mkdir()
        done = subprocess.run([sys.executable, "-c", script, str(out), how], capture_output=True, text=True, timeout=60)
        assert done.returncode == 143 and done.stderr == "attnviz: error: terminated\n", (how, done.returncode, done.stderr)
        assert list(out.iterdir()) == [], (how, list(out.iterdir()))


def test_attention_memory_is_estimated_before_it_is_allocated(run_cli, tmp_path, monkeypatch):
    """generate -n 4096 on a 10-line config asked for 34 GB; a 60,000-token matrices config for 28.8 GB."""
    causal = str(Path(TINY).parent / "causal.toml")
    rows = 3000
    config = tmp_path / "rows.toml"
    config.write_text('[model]\ntype = "matrices"\nname = "rows"\n[input]\nx = [' + ",".join(["[1.0, 0.0]"] * rows)
                      + "]\n[weights]\nw_q = [[1.0, 0.0], [0.0, 1.0]]\nw_k = [[1.0, 0.0], [0.0, 1.0]]\n"
                      "w_v = [[1.0, 0.0], [0.0, 1.0]]\n", encoding="utf-8")
    small = tmp_path / "small.toml"  # small weights, many heads: its rows, not its weights, pass the budget
    small.write_text('[model]\ntype = "transformer"\nname = "small"\nn_layers = 4\nn_heads = 8\nd_model = 16\n'
                     'd_ff = 16\nvocab_size = 64\nmax_positions = 512\ncausal = true\nvocab = ["the", "cat"]\n',
                     encoding="utf-8")
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "1M")  # the weights fit; 4 × 8 × 405² float32 (21 MB) do not
    r = run_cli("generate", "the cat sat on the", "--model", str(small), "-n", "400")
    assert r.exit_code == 1 and "keeping the attention of" in r.stderr and "ATTNVIZ_MAX_MEMORY" in r.stderr, r.stderr
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "100M")
    for command in ("explain", "heatmap"):
        r = run_cli(command, "--model", str(config))
        assert r.exit_code == 1 and "3,000 × 3,000 tokens" in r.stderr, (command, r.stderr)
    monkeypatch.delenv("ATTNVIZ_MAX_MEMORY")
    assert run_cli("generate", "the cat sat on the", "--model", causal, "-n", "3").exit_code == 0  # the control


def test_a_damaged_parquet_file_is_one_line(run_cli, tmp_path):
    import io

    import pytest

    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    raw = pa.array([b"the cat sat", b"bad \xff\xfe text"], type=pa.binary())
    not_utf8 = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())  # a string column holding other bytes
    pq.write_table(pa.table({"text": not_utf8}), tmp_path / "bytes.parquet")
    good = io.BytesIO()
    pq.write_table(pa.table({"text": [f"text number {i} " * 20 for i in range(300)]}), good, compression="zstd",
                   use_dictionary=False)
    damaged = bytearray(good.getvalue())
    for i in range(8, 48):  # the first page's header
        damaged[i] ^= 0x5A
    (tmp_path / "damaged.parquet").write_bytes(bytes(damaged))
    for name in ("bytes.parquet", "damaged.parquet"):
        r = run_cli("heads", "--file", str(tmp_path / name), "--model", TINY)
        assert r.exit_code == 1 and "cannot be read" in r.stderr and r.stderr.count("\n") == 1, (name, r.stderr)


def test_a_full_disk_fails_only_the_text_whose_file_it_stopped(run_cli, tmp_path, monkeypatch):
    """A full disk while one text's files were written failed every text of its batch, naming that
    text's file, and its leftover npz was reported as "files of an earlier export" removed."""
    import json

    from attnviz.errors import RenderError
    from attnviz.export import item_export

    real = item_export.atomic_write

    def full_for_the_second(path, write):
        if path.name.startswith("000001-"):
            raise RenderError(f"cannot write {path}: No space left on device; check free space and permissions")
        return real(path, write)

    monkeypatch.setattr(item_export, "atomic_write", full_for_the_second)
    source = tmp_path / "t.txt"
    source.write_text("the cat sat\na dog ran\nbirds sing\n", encoding="utf-8")
    out = tmp_path / "o"
    r = run_cli("export", str(source), "--out", str(out), "--model", TINY, "--formats", "npz,json", "--jobs", "1",
                "--batch-size", "3", "--quiet")
    assert r.exit_code == 1 and "1 of 3" in r.stderr and "removed" not in r.stderr, r.stderr
    entries = {e["index"]: e for e in map(json.loads, (out / "manifest.jsonl").read_text().splitlines())}
    assert [entries[i]["status"] for i in range(3)] == ["ok", "failed", "ok"]
    assert "000001-" in entries[1]["error"] and "000000-" not in entries[1]["error"]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("000001-")) == []  # its partial npz is gone
