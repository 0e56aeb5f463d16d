"""Issue 41 (round 4: a newcomer and an adversary): terminal safety, bounded reading, a newcomer's first
errors. Each test failed before its fix."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import pytest
from conftest import TINY
from processes import interruptible

EVIL = "a\x1b]52;c;cHduZWQ=\x07b\u202e\u2028\x85"  # OSC 52 (writes the clipboard), BEL, bidi override, LS, NEL


def unsafe(text: str) -> list[str]:
    """The characters of ``text`` a terminal must not be given raw."""
    return sorted({f"U+{ord(ch):04X}" for ch in text if (ord(ch) < 0x20 and ch not in "\n\t") or 0x7F <= ord(ch) < 0xA0
                   or unicodedata.category(ch) in ("Cf", "Cs", "Zl", "Zp")})


@pytest.mark.parametrize("args", [
    ("view", "The cat sat.", "--page", f"{EVIL}.html"),
    ("heatmap", "The cat sat.", "--out", f"{EVIL}.html"),
    ("compare-heads", "The cat sat.", "--out", f"{EVIL}.html"),
    ("heatmap", "The cat sat.", "--model", f"./{EVIL}"),
    ("heatmap", "--text-file", f"{EVIL}.txt"),
])
def test_names_from_the_user_reach_the_terminal_escaped(run_cli, tmp_path, monkeypatch, args):
    """`view --out $'a\\e]52;…'` printed `wrote a␛]52;…` with the escape intact: OSC 52 writes the clipboard."""
    monkeypatch.chdir(tmp_path)
    done = run_cli(*args, "--model", TINY) if "--model" not in args else run_cli(*args)
    said = done.stdout + done.stderr
    assert unsafe(said) == [], (args, said)
    assert "\\x1b]52" in said or "\\u202e" in said, said  # shown, escaped, so the user sees what the name holds


def test_a_model_folder_name_under_verbose_is_escaped(run_cli, tmp_path):
    import shutil

    folder = tmp_path / f"m{EVIL}"
    shutil.copytree(Path(__file__).parent.parent / "sample_configs", tmp_path / "configs")
    folder.mkdir()
    done = run_cli("heatmap", "hi", "--model", str(tmp_path / "configs" / "tiny.toml"), "--verbose")
    assert done.exit_code == 0, done.stderr
    done = run_cli("heatmap", "hi", "--model", str(folder), "--verbose")  # an empty folder: refused, named
    assert done.exit_code != 0 and unsafe(done.stdout + done.stderr) == [], done.stderr


@pytest.mark.parametrize("args", [("heads", f"The {EVIL} cat", "--format", "json"),
                                  ("explain", f"The {EVIL} cat", "--format", "json")])
def test_json_output_escapes_bidi_c1_and_line_separators(run_cli, args):
    """`heads --format json` and `explain --json` passed U+202E, U+0085 and U+2028 through raw."""
    done = run_cli(*args, "--model", TINY)
    assert done.exit_code == 0, done.stderr
    assert unsafe(done.stdout) == [], done.stdout[:300]
    assert "\\u202e" in done.stdout
    parsed = json.loads(done.stdout)  # the same document: the characters come back when it is read
    assert "\u202e" in json.dumps(parsed, ensure_ascii=False)


def test_json_text_means_the_same_document():
    from attnviz.labels import json_text

    value = {"t": f"{EVIL} 你好 👍🏽 \ud800", "n": [1, 2.5]}
    text = json_text(value, indent=1)
    assert unsafe(text) == [] and json.loads(text) == value and "你好 👍🏽" in text


def test_a_token_with_a_bidi_override_reaches_the_tui_escaped():
    from rich.text import Text

    from attnviz.tui.widgets import Pane

    lines = Pane.strips(Text(f"token {EVIL}"), 60)
    shown = "".join(segment.text for line in lines for segment in line)
    assert unsafe(shown) == [] and "token a" in shown


# --- bounded reading ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [("heatmap", "--text-file", "/dev/zero"), ("view", "--text-file", "/dev/urandom"),
                                  ("heads", "--file", "/dev/zero"), ("export", "/dev/zero", "--out", "{tmp}/o"),
                                  ("atlas", "/dev/zero", "--out", "{tmp}/a.html")])
def test_a_device_is_refused_before_it_is_read(run_cli, tmp_path, args):
    """`heatmap --text-file /dev/zero` read 5.9 GB, then 'internal error'."""
    done = run_cli(*(a.replace("{tmp}", str(tmp_path)) for a in args), "--model", TINY)
    assert done.exit_code == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "not a regular file" in done.stderr and "internal" not in done.stderr


def test_a_missing_text_file_is_one_line_naming_it(run_cli, tmp_path, monkeypatch):
    """`heatmap --text-file nosuch.txt` was 'internal error (FileNotFoundError …); report it'."""
    monkeypatch.chdir(tmp_path)
    for command in ("heatmap", "view", "tui"):
        done = run_cli(command, "--text-file", "nosuch.txt", "--model", TINY)
        assert done.exit_code == 1, (command, done.stderr)
        assert done.stderr == "attnviz: error: nosuch.txt does not exist; check the path\n", done.stderr


def test_a_text_file_too_large_is_refused_before_it_is_read(run_cli, tmp_path, monkeypatch):
    from attnviz import limits

    monkeypatch.setattr(limits, "MAX_TEXT_FILE", 1000)
    big = tmp_path / "big.txt"
    big.write_text("word " * 1000, encoding="utf-8")
    done = run_cli("heatmap", "--text-file", str(big), "--model", TINY)
    assert done.exit_code == 1 and "larger than the 1000 bytes" in done.stderr, done.stderr


def test_standard_input_is_read_within_the_limit(monkeypatch):
    import io
    import sys

    from attnviz.errors import InputError
    from attnviz.inputs import read_stdin

    class Endless(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            buffer[:] = b"y" * len(buffer)
            return len(buffer)

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(Endless())))
    with pytest.raises(InputError, match=r"more than the 1\.0 KiB"):
        read_stdin(1024, "one text")


def test_a_parquet_bomb_is_refused_before_it_unpacks(tmp_path, monkeypatch):
    """A small Parquet file that unpacks to gigabytes took 3.4 GB in export and atlas."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from attnviz.errors import InputError
    from attnviz.inputs import read_texts

    path = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"text": ["a" * 10_000] * 2_000}), path, compression="zstd")  # 20 MB unpacked
    assert path.stat().st_size < 200_000
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", str(64 << 20))  # 8 MiB for a file of texts
    with pytest.raises(InputError, match="unpacks to more than"):
        read_texts(path)
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", str(1 << 30))
    assert len(read_texts(path)) == 2_000  # within the limit it is read


def test_a_fifo_in_a_model_folder_is_refused_not_waited_on(run_cli, tiny_hf, tmp_path):
    """A model folder whose model.safetensors is a FIFO hung forever."""
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(tiny_hf["gpt2"], folder)
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")
    for engine in ("auto", "hf"):
        done = run_cli("heatmap", "hi", "--model", str(folder), "--engine", engine)
        assert done.exit_code == 1 and "model.safetensors is not a regular file" in done.stderr, done.stderr


# --- the target side of encoder-decoders ---------------------------------------------------------------------

def test_an_encoder_decoder_is_refused_before_its_attention_outgrows_memory(run_cli, tiny_hf, tmp_path, monkeypatch):
    """A 120 kB text on T5 (no position limit) ended in 'internal error' or 24 GB, as source and as --target."""
    from attnviz import api
    from attnviz.errors import InputError, ResourceError

    source = api.load(tiny_hf["t5"])
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "64M")
    long = "word " * 2000  # 4,002 tokens in this tokenizer: 4 heads × 2 layers × S² × 4 bytes × 3 > 64 MiB
    with pytest.raises(ResourceError, match="4,002-token text and a 3-token target on"):
        source.extract(long, target="hi")
    with pytest.raises(ResourceError, match="4,002-token target"):
        source.extract("hi", target=long)
    assert source.extract("the cat", target="a dog").cross_attentions is not None  # small ones still run
    with pytest.raises(InputError, match="the target is 10,000,000 characters long"):
        source.extract("hi", target="a" * 10_000_000)
    text = tmp_path / "long.txt"
    text.write_text(long, encoding="utf-8")
    done = run_cli("heads", "hi", "--target", long[:20_000], "--model", tiny_hf["t5"])
    assert done.exit_code == 1 and "--target on" in done.stderr and "internal" not in done.stderr, done.stderr
    done = run_cli("view", "--text-file", str(text), "--target", "hi", "--model", tiny_hf["t5"], "--page",
                   str(tmp_path / "v.html"))
    assert done.exit_code == 1 and "more than the 64.0 MiB" in done.stderr, done.stderr


# --- options that do what they say ---------------------------------------------------------------------------

def test_dtype_reaches_the_parquet_tables_and_a_config_model_refuses_it(run_cli, tiny_hf, tmp_path):
    """`heads --format parquet --dtype float16` wrote the float32 table byte for byte, and took a config model."""
    import numpy as np
    import pyarrow.parquet as pq

    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat on the mat\na dog ran in the park\n", encoding="utf-8")
    tables = {}
    for dtype in ("float32", "float16"):
        out = tmp_path / dtype
        done = run_cli("heads", "--file", str(texts), "--format", "parquet", "--out", str(out), "--model",
                       tiny_hf["gpt2"], "--engine", "hf", "--dtype", dtype)
        assert done.exit_code == 0, done.stderr
        tables[dtype] = pq.read_table(out / "heads.parquet").column("entropy").to_numpy()
    change = np.abs(tables["float16"] - tables["float32"]).max()
    assert 0 < change < 1e-2, change  # computed in half precision: near, not equal
    for command in (("heads", "--file", str(texts), "--format", "parquet", "--out", str(tmp_path / "c")),
                    ("atlas", str(texts), "--format", "json")):
        done = run_cli(*command, "--model", TINY, "--dtype", "float16")
        assert done.exit_code == 2 and "--dtype is for models transformers runs" in done.stderr, done.stderr


def test_every_npz_attnviz_writes_loads_with_model_or_says_which_command_makes_one(run_cli, tiny_hf, tmp_path):
    """`heatmap … --out x.npz` then `--model x.npz` said "read it with numpy.load": Python, not a command."""
    import re
    import shlex

    view = tmp_path / "view.npz"
    assert run_cli("heatmap", "the cat sat", "--model", TINY, "--out", str(view)).exit_code == 0
    done = run_cli("heatmap", "--model", str(view))
    assert done.exit_code == 1, done.stderr
    command = re.search(r"run: attnviz (export FILE [^(]*)\(", done.stderr)
    assert command, done.stderr
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat\n", encoding="utf-8")
    args = shlex.split(command.group(1).replace("FILE", str(texts)).replace("DIR", str(tmp_path / "o")))
    assert run_cli(*args, "--model", TINY, "--quiet").exit_code == 0
    (saved,) = (tmp_path / "o").glob("*.npz")
    done = run_cli("heatmap", "--model", str(saved), "--layer", "0")
    assert done.exit_code == 0 and "the" in done.stdout, done.stderr
    generated = tmp_path / "g.npz"
    assert run_cli("generate", "the cat", "--model", tiny_hf["gpt2"], "-n", "2", "--out", str(generated)).exit_code == 0
    done = run_cli("heatmap", "--model", str(generated), "--layer", "0")
    assert done.exit_code == 0, done.stderr


# --- signals ---------------------------------------------------------------------------------------------------

_STOPPED_AT = """
import os, signal, sys
import attnviz.{module} as where
real = where.{function}
def stop(*args, **kwargs):
    {before}
    os.kill(os.getpid(), signal.SIG{signal})
    return real(*args, **kwargs)
where.{function} = stop
sys.argv = ["attnviz", *sys.argv[1:]]
from attnviz._entry import main
main()
"""


def _stopped(tmp_path: Path, signal: str, module: str, function: str, *args: str, before: str = "pass"):
    """Run attnviz ``args`` in a process of its own that sends itself ``signal`` when ``module.function`` is
    reached (the work stopped at a known point, whatever the machine's speed)."""
    import subprocess
    import sys

    script = _STOPPED_AT.format(module=module, function=function, signal=signal, before=before)
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "HF_HUB_OFFLINE": "1"}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=300,
                          preexec_fn=interruptible)  # SIGINT caught, as a terminal's shell leaves it


LONGER = "the cat sat on the mat by the door of the old house\na dog ran in the park near the river all day long\n"


@pytest.mark.parametrize("signal", ["TERM", "INT"])
def test_a_stopped_atlas_leaves_no_temporary_export(tmp_path, signal):
    """`atlas` killed by SIGTERM left its temporary export (35 files) in $TMPDIR."""
    texts = tmp_path / "t.txt"
    texts.write_text(LONGER, encoding="utf-8")
    done = _stopped(tmp_path, signal, "export.atlas_data", "atlas_data", "atlas", str(texts), "--model", TINY,
                    "--format", "json")
    assert done.returncode == (143 if signal == "TERM" else 130), done.stderr
    assert done.stderr.strip() in ("attnviz: error: terminated", "attnviz: error: interrupted"), done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_scratch_folder_left_by_a_killed_run_is_removed_by_the_next(tmp_path, run_cli, monkeypatch):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / "tmp" / f"attnviz-atlas-{int(dead.stdout)}-x1"
    (left / "parts").mkdir(parents=True)
    alive = tmp_path / "tmp" / f"attnviz-atlas-{os.getppid()}-x2"  # a process that is running: left alone
    alive.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat\n", encoding="utf-8")
    assert run_cli("atlas", str(texts), "--model", TINY, "--format", "json").exit_code == 0
    assert not left.exists() and alive.exists()


@pytest.mark.parametrize("signal", ["TERM", "INT"])
def test_a_stopped_parquet_export_releases_its_lock_and_says_how_to_resume(tmp_path, signal, run_cli):
    """`heads --importance --format parquet` stopped by SIGINT or SIGTERM left its writer lock in --out, silently."""
    texts = tmp_path / "t.txt"
    texts.write_text(LONGER + "the birds sing in the tall trees every morning before the sun rises\n", encoding="utf-8")
    out = tmp_path / "o"
    args = ("heads", "--file", str(texts), "--format", "parquet", "--out", str(out), "--model", TINY)
    done = _stopped(tmp_path, signal, "export.table", "assemble", *args)
    assert done.returncode == (143 if signal == "TERM" else 130), done.stderr
    assert f"what is finished is kept in {out}; rerun the same command to resume" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1
    assert not list(out.glob(".attnviz.*")), list(out.iterdir())  # no writer lock, no temporary file
    assert list(out.glob("heads-*.parquet"))  # the parts are kept
    again = run_cli(*args)
    assert again.exit_code == 0 and "3 texts (0 now, 3 already done)" in again.stdout, again.stdout + again.stderr


def test_serve_refuses_an_encoder_decoder_text_too_large_with_a_422(tiny_hf, monkeypatch):
    """`serve` with T5 tried to allocate 18 GB and answered 500."""
    from starlette.testclient import TestClient

    from attnviz import api
    from attnviz.serve import create_app

    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "64M")
    client = TestClient(create_app(api.load(tiny_hf["t5"])), base_url="http://127.0.0.1:8000")
    for endpoint in ("/api/page", "/api/attention"):
        for fields in ({"text": "word " * 2000, "target": "hi"}, {"text": "hi", "target": "word " * 2000}):
            answer = client.post(endpoint, json=fields)
            assert answer.status_code == 422 and "more than the 64.0 MiB" in answer.json()["error"], answer.text
