"""Model organisms against hostile inputs and a hostile cache (issue 58, B10, C15, D20): a build's memory is
estimated and refused before it starts; the cache survives half-built, truncated, foreign and stale folders, a
SIGTERM mid-build and a folder it cannot make; --out refuses what it cannot write into in one line; an organism's
[[head]] table is named as a TOML table, never as a flag; a file that cannot be read says why; unknown tables, keys
and deep nesting are refused; organism_duo's retrieval head finds its needle."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from attnviz.errors import AttnvizWarning, ConfigError

ROOT = Path(__file__).resolve().parent.parent
DUO = str(ROOT / "sample_configs" / "organism_duo.toml")
SMALL = '[model]\ntype = "organism"\nname = "{name}"\nlayers = 1\nheads = 1\npositions = 4096\nseed = {seed}\n'


def _small(folder: Path, name: str = "small", seed: int = 0, heads: str = "") -> str:
    """A one-layer, one-head organism (its build: about 2 s, 60 MB of weights)."""
    path = folder / f"{name}.toml"
    path.write_text(SMALL.format(name=name, seed=seed) + heads, encoding="utf-8")
    return str(path)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache of this test's own (the suite's shared one is left alone)."""
    monkeypatch.setenv("ATTNVIZ_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "organisms"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[str, Path]:
    """The small organism's TOML and a copy of its built folder, for each test to corrupt a fresh copy of."""
    folder = tmp_path_factory.mktemp("built")
    spec = _small(folder)
    before = os.environ.get("ATTNVIZ_CACHE")
    os.environ["ATTNVIZ_CACHE"] = str(folder / "cache")
    try:
        from attnviz.organisms import organism_folder

        made, _ = organism_folder(spec)
    finally:
        if before is None:
            del os.environ["ATTNVIZ_CACHE"]
        else:
            os.environ["ATTNVIZ_CACHE"] = before
    return spec, made


def _copy_into(cache: Path, made: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copytree(made, cache / made.name)
    return cache / made.name


def _one_line_error(result, *needles: str) -> str:
    """The CLI's failure: one error line (beside its notes), no traceback or internal error, holding each of
    ``needles``."""
    assert result.exit_code not in (0, None), result.stdout
    assert all(line.startswith("attnviz: ") for line in result.stderr.strip().splitlines()), result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("attnviz: error:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _fingerprint_in(folder: Path) -> str:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))["attnviz_organism"]["fingerprint"]


# B10: a build's cost, estimated first --------------------------------------------------------------------------------

def test_a_build_past_the_memory_budget_is_refused_in_one_line_naming_its_estimate_and_what_to_shrink(
        tmp_path, cache, run_cli, monkeypatch):
    from attnviz.limits import human
    from attnviz.organisms import read_spec
    from attnviz.organisms.weights import build_bytes

    spec = _small(tmp_path)
    needed = build_bytes(read_spec(spec))
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", str(needed // 2))
    for args in (("heads", "the cat", "--model", spec), ("organism", spec, "--out", str(tmp_path / "ck"))):
        line = _one_line_error(run_cli(*args), human(needed), "fewer heads", "layers or positions",
                               "ATTNVIZ_MAX_MEMORY")
        assert "1 layers × 1 heads, 4,096 positions" in line
    assert not (tmp_path / "ck").exists() and not (cache.exists() and any(cache.iterdir()))  # nothing was built
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", str(2 * needed))  # within the budget: built
    assert run_cli("organism", spec, "--out", str(tmp_path / "ck")).exit_code == 0


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="a process's peak memory read from /proc")
def test_a_build_estimate_bounds_its_measured_peak_and_never_holds_a_positions_squared_matrix(tmp_path):
    """The issue's 2 × 2 organism at 16,384 positions, built in a process of its own: its peak resident memory is
    below the estimate the build is refused by, the estimate within twice of it, and the peak far below the
    [positions, positions] overlap matrix the build once held (1 GiB of float32)."""
    from attnviz.organisms import read_spec
    from attnviz.organisms.weights import build_bytes

    spec = tmp_path / "wide.toml"
    spec.write_text('[model]\ntype = "organism"\nname = "wide"\nlayers = 2\nheads = 2\npositions = 16384\n'
                    '[[head]]\nkind = "previous_token"\nlayer = 0\nhead = 0\n', encoding="utf-8")
    # VmHWM, the peak of this process's own memory: ru_maxrss would count the pytest process it was forked from
    script = textwrap.dedent(f"""
        import re
        from attnviz.organisms import organism_folder
        organism_folder({str(spec)!r})
        status = open("/proc/self/status").read()
        print(int(re.search(r"VmHWM:\\s*(\\d+) kB", status).group(1)) * 1024)
    """)
    env = {**os.environ, "ATTNVIZ_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    peak, estimate = int(done.stdout.split()[-1]), build_bytes(read_spec(spec))
    assert peak < estimate < 2 * peak, (peak, estimate)
    assert peak < 4 * 16384**2, peak


# B10: the cache ------------------------------------------------------------------------------------------------------

def test_a_half_built_cache_folder_is_built_again_with_a_one_line_warning(built, cache, run_cli):
    spec, made = built
    folder = cache / made.name
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"half")  # what a build that never finished might leave
    result = run_cli("heads", "the cat", "--model", spec, "--format", "json")
    assert result.exit_code == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if str(folder) in line]
    assert len(warned) == 1 and warned[0].startswith("attnviz: warning:") and "half-built" in warned[0], result.stderr
    from attnviz.organisms import read_spec
    from attnviz.organisms.checkpoint import problem

    assert problem(folder, read_spec(spec)) is None


def test_a_truncated_checkpoint_is_built_again_and_then_runs(built, cache):
    from attnviz.api import extract

    spec, made = built
    folder = _copy_into(cache, made)
    weights = folder / "model.safetensors"
    with open(weights, "r+b") as handle:
        handle.truncate(weights.stat().st_size // 2)
    with pytest.warns(AttnvizWarning, match=str(folder)):
        result = extract("the cat sat on the mat", model=spec)
    assert result.attentions.shape[0] == 1
    assert weights.stat().st_size == (made / "model.safetensors").stat().st_size


def test_another_organisms_weights_copied_into_the_cache_are_not_used(built, cache, tmp_path):
    from attnviz.organisms import organism_folder, read_spec
    from attnviz.organisms.weights import fingerprint

    spec, made = built
    other = _small(tmp_path, name="small", seed=1)  # the same name and shapes, other codes
    assert fingerprint(read_spec(other)) != fingerprint(read_spec(spec))
    copied = _copy_into(cache, made)
    mine = copied.with_name(f"small-{fingerprint(read_spec(other))}")
    copied.rename(mine)  # another organism's whole folder under this one's name
    with pytest.warns(AttnvizWarning, match="another organism"):
        found, described = organism_folder(other)
    assert found == mine and _fingerprint_in(found) == fingerprint(described)
    # only the weights copied over this one's: refused too
    shutil.copy(made / "model.safetensors", found / "model.safetensors")
    with pytest.warns(AttnvizWarning, match=str(found)):
        organism_folder(other)
    from safetensors import safe_open

    with safe_open(str(found / "model.safetensors"), "pt") as handle:
        assert handle.metadata()["attnviz_organism"] == fingerprint(described)


def test_a_killed_builds_temporary_folder_goes_with_the_next_build_a_live_ones_stays(built, cache):
    from attnviz.organisms import organism_folder

    spec, made = built
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    cache.mkdir(parents=True)
    stale, live = cache / f"{made.name}.tmp{gone.pid}", cache / f"other.tmp{os.getppid()}"
    for folder in (stale, live):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"\0" * 1024)
    organism_folder(spec)
    assert not stale.exists() and live.exists()
    assert sorted(p.name for p in cache.iterdir()) == sorted([made.name, live.name])


def test_sigterm_mid_build_removes_its_temporary_folder(tmp_path):
    """A build stopped by SIGTERM once its weights are written (the config is next): the process exits 143 with one
    line, and nothing of the build is left in the cache."""
    spec = _small(tmp_path)
    ready = tmp_path / "ready"
    script = textwrap.dedent(f"""
        import pathlib, time
        from attnviz import interrupts
        interrupts.install_handlers()
        write_text = pathlib.Path.write_text
        def slow(self, *args, **kwargs):
            if self.name == "config.json":
                pathlib.Path({str(ready)!r}).write_text("")
                time.sleep(60)
            return write_text(self, *args, **kwargs)
        pathlib.Path.write_text = slow
        from attnviz.organisms import organism_folder
        organism_folder({spec!r})
    """)
    env = {**os.environ, "ATTNVIZ_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), process.communicate()[1] if process.poll() is not None else "no build started"
    cache = tmp_path / "cache" / "organisms"
    assert any(".tmp" in p.name for p in cache.iterdir())  # mid-build: its temporary folder is there
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "terminated" in stderr and "Traceback" not in stderr
    assert list(cache.iterdir()) == []


def test_a_cache_folder_that_cannot_be_made_is_one_line_naming_it(tmp_path, run_cli, monkeypatch):
    spec = _small(tmp_path)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    for where in (str(dangling), "/proc/self"):
        monkeypatch.setenv("ATTNVIZ_CACHE", where)
        _one_line_error(run_cli("heads", "the cat", "--model", spec), where, "ATTNVIZ_CACHE")
    monkeypatch.setenv("ATTNVIZ_CACHE", str(dangling))
    assert "link to nothing" in run_cli("heads", "the cat", "--model", spec).stderr


# B10: --out ----------------------------------------------------------------------------------------------------------

def test_out_under_a_file_in_proc_or_a_link_is_one_line_naming_the_given_path(tmp_path, run_cli, cache):
    spec = _small(tmp_path)
    (tmp_path / "f").write_text("a file", encoding="utf-8")
    line = _one_line_error(run_cli("organism", spec, "--out", str(tmp_path / "f" / "ck")), str(tmp_path / "f"))
    assert "not a folder" in line
    _one_line_error(run_cli("organism", spec, "--out", "/proc/attnviz-organism"), "/proc/attnviz-organism")
    link = tmp_path / "ck"
    link.symlink_to(tmp_path / "nowhere")
    line = _one_line_error(run_cli("organism", spec, "--out", str(link)), str(link), "link")
    assert ".tmp" not in line and not (tmp_path / "nowhere").exists()
    assert not any(".tmp" in p.name for p in tmp_path.iterdir())


def test_out_dot_writes_into_the_empty_current_folder(tmp_path, run_cli, cache, monkeypatch):
    spec = _small(tmp_path)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    result = run_cli("organism", spec, "--out", ".")
    assert result.exit_code == 0, result.stderr
    written = {p.name for p in here.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "attnviz-organism.done"} <= written
    assert not any(".tmp" in name for name in written)
    again = run_cli("organism", spec, "--out", ".")  # no longer empty: refused, nothing touched
    _one_line_error(again, "not an empty folder")
    assert {p.name for p in here.iterdir()} == written


# C15: the [[head]] table is a TOML table ------------------------------------------------------------------------------

def test_a_head_table_is_named_as_a_toml_table_never_as_a_flag(tmp_path, run_cli, cache):
    from attnviz.organisms import read_spec

    spec = _small(tmp_path, heads='[[head]]\nkind = "local"\nlayer = 0\nhead = 0\nwindow = 1\n')
    with pytest.raises(ConfigError) as raised:
        read_spec(spec)
    assert "[[head]] #1: window must be" in str(raised.value)
    for command in (("heads", "the cat"), ("generate", "the cat")):  # generate's --head is --only-head
        line = _one_line_error(run_cli(*command, "--model", spec), "[[head]] #1: window must be")
        assert "--head" not in line and "--only-head" not in line
    not_tables = tmp_path / "flat.toml"
    not_tables.write_text("head = 3\n" + SMALL.format(name="flat", seed=0), encoding="utf-8")
    line = _one_line_error(run_cli("organism", str(not_tables)), "each planted head is a [[head]] table")
    assert "--head" not in line
    # options are still flags, beside a table
    from attnviz.errors import in_cli_terms, toml_table

    assert in_cli_terms(f"{toml_table('head')} #2 and [[head=3]]", {"head": "--only-head"}) == \
        "[[head]] #2 and --only-head 3"


# C15: the organism command says what is wrong with the file -----------------------------------------------------------

def _hostile(tmp_path: Path, case: str) -> Path:
    path = tmp_path / f"{case}.toml"
    good = SMALL.format(name="x", seed=0)
    if case == "duplicate":
        path.write_text(good + "layers = 2\n", encoding="utf-8")
    elif case == "utf8":
        path.write_bytes(good.encode() + b'question = "\xff\xfe"\n')
    elif case == "nul":
        path.write_bytes(good.encode() + b"# \x00\n")
    elif case == "fifo":
        os.mkfifo(path)
    elif case == "folder":
        path.mkdir()
    elif case == "loop":
        path.symlink_to(path)
    elif case == "huge":
        with open(path, "wb") as handle:
            handle.write(good.encode())
            handle.truncate(100 << 20)  # sparse: 100 MB that take no disk
    elif case == "deep":
        path.write_text(good + "a = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(("case", "reason"), [
    ("duplicate", "not valid TOML"), ("utf8", "not UTF-8"), ("nul", "not valid TOML"),
    ("fifo", "not a regular file"), ("folder", "a folder"), ("loop", "cannot read"), ("huge", "more than the"),
    ("deep", "too deeply"),
])
def test_the_organism_command_gives_the_files_real_fault_as_model_does(tmp_path, run_cli, cache, case, reason):
    path = _hostile(tmp_path, case)
    line = _one_line_error(run_cli("organism", str(path)), str(path), reason)
    assert "is not a model organism" not in line
    assert reason in _one_line_error(run_cli("heads", "the cat", "--model", str(path)))


def test_a_file_that_is_read_but_is_no_organism_is_still_said_to_be_none(run_cli, cache):
    _one_line_error(run_cli("organism", str(ROOT / "sample_configs" / "tiny.toml")), "is not a model organism")


# C15: unknown tables, keys and deep nesting --------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "message"), [
    ('[[heads]]\nkind = "local"\nlayer = 0\nhead = 0\n', "unknown [[heads]] (nothing would read it); did you mean [[head]]?"),
    ('[modle]\nlayers = 2\n', "unknown [modle] (nothing would read it); did you mean [model]?"),
    ('[[head]]\nkind = "local"\nlayer = 0\nhead = 0\nwindw = 8\n', "not 'windw'; did you mean 'window'?"),
])
def test_unknown_tables_and_keys_are_refused_naming_the_nearest_known_one(tmp_path, run_cli, cache, extra, message):
    spec = _small(tmp_path, heads=extra)
    with pytest.raises(ConfigError, match=re.escape(message)):
        from attnviz.organisms import read_spec

        read_spec(spec)
    line = _one_line_error(run_cli("organism", spec), message)
    assert "--head" not in line


def test_an_unknown_model_key_names_the_nearest(tmp_path, run_cli, cache):
    path = tmp_path / "typo.toml"
    path.write_text('[model]\ntype = "organism"\nlayer = 1\n', encoding="utf-8")
    _one_line_error(run_cli("organism", str(path)), "unknown key 'layer'; did you mean 'layers'?")


def test_a_header_fifty_thousand_levels_deep_is_refused_in_one_line(tmp_path, run_cli, cache):
    path = tmp_path / "deep.toml"
    path.write_text(SMALL.format(name="deep", seed=0) + "[" + ".".join(["a"] * 50_000) + "]\nb = 1\n",
                    encoding="utf-8")
    for args in (("organism", str(path)), ("heads", "the cat", "--model", str(path))):
        line = _one_line_error(run_cli(*args), "nests tables or arrays more than")
        assert len(line) < 400
    assert not cache.exists() or not any(cache.iterdir())


# D20: organism_duo's needle ------------------------------------------------------------------------------------------

def test_needle_on_organism_duo_with_its_defaults_finds_its_retrieval_head():
    """needle's own needle and question (none given): organism_duo declares one its induction head can find, so its
    retrieval head, L1H0 (its comment says so), ranks first, well clear of every other head."""
    from attnviz.api import needle
    from attnviz.organisms import read_spec

    result = needle(DUO, lengths=[512], depths=[0.0, 1.0])
    heads = result.heads()
    assert (heads[0]["layer"], heads[0]["head"]) == (1, 0) and heads[0]["retrieval_score"] > 0.1, heads[:2]
    assert heads[1]["retrieval_score"] < heads[0]["retrieval_score"] / 2
    assert any(run.retrieved for run in result.runs)
    assert result.needle == read_spec(DUO).needle  # its own, declared
