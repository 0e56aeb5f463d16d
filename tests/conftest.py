"""Shared fixtures: paths of the sample configs, a CLI runner that keeps stderr apart, and one browser."""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from pathlib import Path

# Byte-compiled modules are kept (__pycache__, ignored by git) whatever the shell says: with
# PYTHONDONTWRITEBYTECODE set, every worker and every process a test starts would compile attnviz and
# re-write the test modules' assertions from source again (the suite took 164 s instead of 144 s).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Every test runs offline: the hub library reads this when it is first imported.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest
import typer.testing
from typer.testing import CliRunner

pytest_plugins = ["picture_models"]  # the pictures' tiny LLaVA fixture and helpers, for every picture test file

sys.dont_write_bytecode = False  # this process too (before the test modules are imported and rewritten)

if os.environ.get("PYTEST_XDIST_WORKER"):  # one of several workers sharing the cores: no oversubscription
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# typer's CliRunner builds the app's click command anew on every invoke: every command's parameters from its
# function's signature, about 35 ms, a ninth of the suite's CPU over its ~600 in-process runs. The app's commands are
# all declared when attnviz.cli is imported and never change, so each worker builds each app's command once. (A
# user's process builds it once too: `attnviz` runs one command.)
_BUILT: dict[int, tuple[object, object]] = {}
_build_command = typer.testing._get_command


def built_command(app):
    """``app``'s click command, built once in this process."""
    held = _BUILT.get(id(app))
    if held is None or held[0] is not app:
        held = _BUILT[id(app)] = (app, _build_command(app))
    return held[1]


typer.testing._get_command = built_command

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "sample_configs" / "tiny.toml")
SEED = str(ROOT / "sample_configs" / "seed_example.toml")


# Variables of the user's shell that change what rich, click or attnviz print. Tests set what they
# depend on themselves, so the suite passes whatever the newcomer's environment holds.
USER_ENVIRONMENT = ("NO_COLOR", "FORCE_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "COLUMNS", "LINES", "TTY_COMPATIBLE",
                    "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES", "ATTNVIZ_DEBUG", "TRANSFORMERS_OFFLINE")


# The quick loop (`python -m pytest -q -m "not slow"`, about 25 s) leaves out what starts real processes, a
# browser, Ray or the terminal app, reads long inputs, or runs the CLI over many cases: these files (the slowest by
# measured time), any test that asks for the browser or a Ray cluster, and tests marked slow where they are. The
# whole suite runs them all.
SLOW_FILES = {"test_readme_commands.py", "test_ray_backend.py", "test_page.py", "test_page_generation.py",
              "test_cli_models.py", "test_export.py", "test_hostile_export.py", "test_hostile_cli.py",
              "test_environment.py", "test_induction.py", "test_long_inputs.py", "test_serve.py",
              "test_serve_hostile.py", "test_reliability.py", "test_vocabulary.py", "test_engines.py",
              "test_hostile_export_and_signals.py", "test_cli_heads.py", "test_hostile_files.py", "test_bad_inputs.py",
              "test_render_image.py", "test_attribution.py", "test_saved_results.py", "test_cli.py",
              "test_render_figures.py", "test_generate_seq2seq.py", "test_generate.py", "test_doc_examples.py",
              "test_plugins.py", "test_terminal_safety_and_bounded_reading.py", "test_figure_layout.py", "test_tui.py",
              "test_checkpoint_diff.py", "test_serve_bounds.py", "test_needle_cli.py"}
SLOW_FIXTURES = {"browser", "ray_cluster", "cluster"}
# Every check of a page in chromium is heavy too (about 35 tests, 34 s of one worker, and chromium's own CPU beside it):
# the data each page hands its script (its contract, tests/test_page_schema.py) and its numbers are checked in the
# README's command without a browser.
HEAVY_FIXTURES = {"browser"}
# The longest checks, left out of the README's command (pyproject's addopts: -m 'not heavy') so it stays within its
# 150 s, and run by CI right after it (`python -m pytest -q -m heavy`, in .ci/run): whole files, or file::test.
HEAVY = {"test_organisms_long.py",  # a needle grid to 4,096 tokens on an organism (~45 s of one worker)
         # `attnviz tui` in a real terminal (tmux): keys, colours, the terminal left as it was (~7 s)
         "test_tui_tmux.py::test_the_real_command_answers_keys_and_leaves_the_terminal_as_it_was",
         "test_tui_tmux.py::test_with_no_color_the_real_command_draws_shades_and_exits_cleanly",
         "test_environment.py",  # the terminal tests again, in a pytest process of their own under a hostile shell (~4 s)
         "test_ray_backend.py",  # Ray's own cluster, started and stopped by the tests (~40 s)
         "test_needle.py::test_ray_and_local_give_identical_json",  # the needle grid on Ray actors (~8 s)
         "test_organisms_hostile.py::test_a_header_fifty_thousand_levels_deep_is_refused_in_one_line",  # (~8 s)
         # a 2 × 2 organism at 16,384 positions built in a process of its own, its peak memory measured (~5 s)
         "test_organisms_hostile.py::test_a_build_estimate_bounds_its_measured_peak_and_never_holds_a_positions_squared_matrix",
         "test_page_long.py",  # a page of 8,192 tokens: its views built (~5 s), then every tab driven in chromium (~7 s)
         # four real export processes: a reference run, one stopped by Ctrl-C, one killed, the rerun compared (~9 s)
         "test_export.py::test_ctrl_c_then_sigkill_then_rerun_is_byte_identical",
         # a real `attnviz serve --image` of the picture organism (transformers' LLaVA loaded) driven in chromium (~9 s)
         "test_images_page.py::test_in_the_browser_a_server_of_pictures_reads_each_typed_text_beside_them"}
# (and, marked where they are parametrized, test_readme_commands.py's README line that starts Ray's own cluster and
# its needle grids to 1,024 tokens on the organism, ~6 s each)


# The files that take longest, longest first (seconds of one worker, summed per file from --durations on the 2-core
# machine, 2026-11-28, its heavy checks left out). They run first: each worker takes the next file when it is done with
# one (--dist loadfile), so a long file left for the end would keep one worker busy while the other has nothing left
# (xdist's own order, files by number of tests, would put test_doc_examples.py near the end).
# test_organisms.py is second: it needs none of tiny_hf's models, which the first worker builds meanwhile for the
# README's lines (a second worker that asked for them would wait); test_audio_whisper.py, third, needs none either. A
# file not named here runs after these, files with more tests first.
# test_organisms_long.py (a needle grid to 4,096 tokens on an organism, ~40 s; heavy: in `-m heavy` runs) leads, and the
# heavy files follow the README's first ones: in a `-m heavy` run the long ones start first too.
LONGEST_FIRST = ("test_organisms_long.py", "test_readme_commands.py", "test_organisms.py", "test_audio_whisper.py",
                 "test_ray_backend.py", "test_page_in_browser.py", "test_page_long.py", "test_page_zoom.py",
                 "test_organisms_hostile.py", "test_images.py", "test_doc_examples.py", "test_figure_layout.py",
                 "test_cli_models.py", "test_serve.py", "test_needle_cli.py", "test_terminal_safety_and_bounded_reading.py",
                 "test_kv_windows.py", "test_heatmap_audio.py", "test_checkpoint_diff.py", "test_tui.py",
                 "test_pictures_hostile.py", "test_long_inputs.py", "test_serve_bounds.py", "test_needle.py", "test_kv.py",
                 "test_picture_outputs.py", "test_long_text_views.py", "test_vocabulary.py", "test_tui_tmux.py",
                 "test_hostile_export_and_signals.py", "test_cli_heads.py", "test_audio_openai.py", "test_export.py",
                 "test_imports.py", "test_engines.py", "test_live_tiles.py", "test_page.py", "test_environment.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.path.name in HEAVY or f"{item.path.name}::{item.originalname}" in HEAVY or \
                HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.heavy)
            item.add_marker(pytest.mark.slow)
        if RAY_FIXTURES & set(getattr(item, "fixturenames", ())) and item.path.name not in RAY_FILES:
            warnings.warn(f"{item.path.name} uses the Ray cluster: add it to RAY_FILES in tests/conftest.py, or "
                          "a second worker starts a cluster of its own", stacklevel=1)
    # Whole files move (a file's tests stay together and in their order); pyproject's --no-loadscope-reorder
    # has xdist hand the files out in this order.
    counts: dict[Path, int] = {}
    for item in items:
        counts[item.path] = counts.get(item.path, 0) + 1
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -counts[item.path], str(item.path)))


def pytest_collection_finish(session):
    """The cyclic garbage collector, tuned for a test run: what is alive once the tests are collected (torch,
    transformers, every test module: about a million objects) lives to the end, so it is frozen out of the
    collections; and the youngest generation is collected every 10,000 allocations, not 700, so a full collection
    (which scans every object the tests keep) comes 14 times less often. The workers spent 13 s of CPU in 8,200
    collections; now 5 s in 1,700. (Tests that need a collection, or none, say so: test_serve_bounds turns it off.)"""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


@pytest.fixture(scope="session")
def organism_cache(tmp_path_factory) -> Path:
    """One folder of built model organisms for the whole run, every worker (each built once, atomically)."""
    root = tmp_path_factory.getbasetemp()
    return (root.parent if root.name.startswith("popen-gw") else root) / "organism-cache"


@pytest.fixture(autouse=True)
def _independent_of_the_users_environment(monkeypatch, organism_cache):
    for name in USER_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("ATTNVIZ_CACHE", str(organism_cache))  # organisms built here, not in the user's cache


@pytest.fixture
def run_cli():
    """Invoke the attnviz CLI in-process; returns click's Result (stdout, stderr, exit_code)."""
    from attnviz.cli import app

    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None, input: str | None = None):
        return runner.invoke(app, list(args), env=env, input=input)

    return invoke


def write_config(tmp_path: Path, text: str, name: str = "model.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory, worker_id):
    """Folders of tiny random Hugging Face models (bert, gpt2, llama, mistral, qwen2, t5, …), built once
    per run: the first worker to ask builds them in the run's temporary folder, the others wait for it
    (a lock file) and read them."""
    from filelock import FileLock
    from tiny_models import BUILDERS

    base = tmp_path_factory.getbasetemp()
    root = (base if worker_id == "master" else base.parent) / "tiny_hf"
    with FileLock(f"{root}.lock"):
        done = root / "built"
        if not done.exists():
            folders = {name: str(build(root / name)) for name, build in BUILDERS.items()}
            done.write_text(json.dumps(folders))
    return json.loads(done.read_text())


HUB_MODELS = {"gpt2": "gpt2_long", "t5-small": "t5"}  # the README's hub ids: tiny_hf's models that stand in for them


@pytest.fixture(scope="session")
def hub_cache(tmp_path_factory, tiny_hf) -> Path:
    """A Hugging Face cache (models--ID/refs/main, snapshots/COMMIT/…) holding the README's hub ids: copies of
    tiny_hf's models (the docs' bash blocks in test_readme_commands.py, their Python blocks in
    test_doc_examples.py)."""
    cache = tmp_path_factory.mktemp("readme_hub") / "cache"
    commit = "0123456789abcdef0123456789abcdef01234567"
    for repo, name in HUB_MODELS.items():
        entry = cache / ("models--" + repo.replace("/", "--"))
        (entry / "refs").mkdir(parents=True)
        (entry / "refs" / "main").write_text(commit)
        shutil.copytree(tiny_hf[name], entry / "snapshots" / commit)
    return cache


PAGE_PATIENCE = 120_000
"""Milliseconds a page's wait (a selector, a function, a click's checks) may take before it fails, in place of
Playwright's 30 s: chromium on a loaded machine (every core busy) draws late, never wrongly. Page tests wait on
what the page sets when drawn, never a fixed pause."""


class _Patient:
    """The browser, whose pages wait :data:`PAGE_PATIENCE`."""

    def __init__(self, browser) -> None:
        self._browser = browser

    def new_page(self, *args, **kwargs):
        page = self._browser.new_page(*args, **kwargs)
        page.set_default_timeout(PAGE_PATIENCE)
        return page

    def __getattr__(self, name: str):
        return getattr(self._browser, name)


def chromium_path() -> str | None:
    """Debian's chromium for the page tests: its headless shell where installed (``chromium-headless-shell``, the
    same Blink and V8 build without the desktop browser around them: a third of the CPU a page costs, as
    docs/testing.md measures), else the browser itself; None without either."""
    return shutil.which("chromium-headless-shell") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium (:func:`chromium_path`), driven by Playwright, one for every page test (never
    ``playwright install``). Without chromium the page tests skip here, and fail under CI."""
    chromium = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        chromium = None
    if chromium is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium and the playwright package for the page tests")
        pytest.skip("no chromium or playwright here (CI installs both)")
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield _Patient(instance)
        instance.close()


def open_offline(browser, path: Path, requests: list[str], errors: list[str], ready: str = "#headview[data-drawn]",
                 init: str | None = None):
    """Open the page at ``path`` with every request but the page itself refused (and recorded in
    ``requests``, so none may even be tried), script errors in ``errors``; once ``ready`` is there
    (its head view drawn). ``init``: a script run before the page's own."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    if init:
        page.add_init_script(init)
    page.on("request", lambda r: requests.append(r.url))
    page.route("**/*", lambda route: route.continue_() if route.request.url == path.as_uri() else route.abort())
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    page.wait_for_selector(ready)
    return page


# The files whose tests use the local Ray cluster (the ray_cluster fixture, by name or through
# request.getfixturevalue). Under xdist they are one unit of work, so one worker starts the cluster, once.
RAY_FILES = ("test_readme_commands.py", "test_needle.py", "test_ray_backend.py")
RAY_FIXTURES = {"ray_cluster", "cluster"}


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, but the files of RAY_FILES go to one worker as one unit: a second worker starting its own
    cluster cost its start (4 s), its stop and its daemons' CPU while they idle."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class OneRayCluster(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return "ray" if file.rsplit("/", 1)[-1] in RAY_FILES else file

    return OneRayCluster(config, log)


def _last_ray_test(session) -> pytest.Item | None:
    users = [item for item in session.items if RAY_FIXTURES & set(getattr(item, "fixturenames", ()))]
    return users[-1] if users else None


@pytest.fixture
def ray_cluster(request):
    """One local Ray cluster of 2 CPUs, started on first use and kept for the next tests that use it (an
    export with --backend ray uses a running cluster and leaves it running); stopped after the last test
    that names this fixture (the tests run in collection order; see RAY_FILES), or at the end of the session."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    if request.node is _last_ray_test(request.session):
        ray.shutdown()


def pytest_sessionfinish(session):
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def refuse_import(monkeypatch, package: str) -> None:
    """Make ``import package`` (and its submodules) fail, as on a machine without that optional extra."""
    import builtins

    real = builtins.__import__

    def guarded(name, *args, **kwargs):
        if name == package or name.startswith(package + "."):
            raise ImportError(f"no {package} here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", guarded)
