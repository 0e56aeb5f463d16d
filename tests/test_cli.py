"""The CLI: a thin shell; errors are one line on stderr with a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import SEED, TINY, write_config

TEXT = "The cat sat on the mat"


def test_heatmap_terminal(run_cli):
    r = run_cli("heatmap", TEXT, "--model", TINY, "--width", "80", "--layer", "0")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("tiny · layer 0 · head 0") and r.stderr == ""
    r = run_cli("heatmap", TEXT, "--model", TINY, "--width", "80")  # the default: --head 0 in every layer
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("tiny · head 0 · every layer") and "L0" in r.stdout and "L1" in r.stdout


@pytest.mark.parametrize("head", ["all", "mean", "3"])
def test_heatmap_heads_and_layers(run_cli, head):
    r = run_cli("heatmap", TEXT, "--model", TINY, "--layer", "1", "--head", head, "--values")
    assert r.exit_code == 0, r.stderr
    assert "layer 1" in r.stdout


def test_heatmap_png(run_cli, tmp_path):
    out = tmp_path / "cat.png"
    r = run_cli("heatmap", TEXT, "--model", TINY, "--out", str(out))
    assert r.exit_code == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert r.stdout.strip() == f"wrote {out}"


def test_heatmap_of_the_seed_example(run_cli):
    r = run_cli("heatmap", "--model", SEED, "--head", "1", "--values")
    assert r.exit_code == 0, r.stderr
    assert "x1" in r.stdout and "1.0" in r.stdout


def test_causal_flag(run_cli):
    r = run_cli("heatmap", "a b c", "--model", TINY, "--causal", "--values", "--width", "60", "--layer", "0")
    assert r.exit_code == 0 and "causal" in r.stdout.splitlines()[0]
    first_row = next(line for line in r.stdout.splitlines() if line.startswith("a "))
    assert first_row.split()[1:] == ["1.0", "·", "·"]  # the future is masked: exactly 0, shown as ·


def test_builtin_config_found_from_anywhere(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_cli("heatmap", "a b", "--model", "sample_configs/tiny.toml")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["heatmap", TEXT, "--model", TINY, "--layer", "2"], 2, "--layer 2 is out of range; tiny has layers 0 to 1"),
        (["heatmap", TEXT, "--model", TINY, "--layer", "-1"], 2, "layers are numbered from 0"),
        (["heatmap", TEXT, "--model", TINY, "--head", "4"], 2, "--head 4 is out of range; tiny has heads 0 to 3"),
        (["heatmap", TEXT, "--model", TINY, "--head", "-2"], 2, "--head -2 is negative"),
        (["heatmap", TEXT, "--model", TINY, "--head", "first"], 2, "--head 'first' is not a head"),
        (["heatmap", "", "--model", TINY], 1, "the text is empty"),
        (["heatmap", "  \n ", "--model", TINY], 1, "the text is empty"),
        (["heatmap", TEXT, "--model", "missing.toml"], 1, "config file missing.toml does not exist"),
        (["heatmap", TEXT, "--model", "gpt2"], 1, "'gpt2' is not in the local Hugging Face cache and HF_HUB_OFFLINE=1"),
        (["heatmap", TEXT, "--model", "./nope"], 1, "folder ./nope does not exist"),
        (["heatmap", TEXT, "--model", TINY, "--out", "x.jpg"], 2, "unknown extension '.jpg'"),
        (["heatmap", TEXT, "--model", TINY, "--out", "no/such/dir/x.png"], 1, "folder no/such/dir does not exist"),
        (["heatmap", TEXT, "--model", TINY, "--vmax", "0"], 2, "--vmax 0.0 must be a positive number"),
    ],
)
def test_errors_are_one_line(run_cli, args, code, expected):
    r = run_cli(*args)
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert expected in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("attnviz: error: ")
    assert "Traceback" not in r.stderr + r.stdout


def test_bad_config_error_names_the_key(run_cli, tmp_path):
    path = write_config(tmp_path, "[model]\nn_heads = 5\n")
    r = run_cli("heatmap", TEXT, "--model", path)
    assert r.exit_code == 1
    assert "n_heads = 5 does not divide d_model = 32" in r.stderr


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_failed_image_leaves_no_file(run_cli, tmp_path, monkeypatch, suffix):
    from matplotlib.figure import Figure

    from attnviz.render import raster

    def half_then_full_disk(fname, *args, **kwargs):
        with open(fname, "wb") as fh:
            fh.write(b"\x89PNG half an image")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", lambda self, fname, **kwargs: half_then_full_disk(fname))
    monkeypatch.setattr(raster, "write_bytes", half_then_full_disk)
    out = tmp_path / f"x{suffix}"
    r = run_cli("heatmap", TEXT, "--model", TINY, "--out", str(out))
    assert r.exit_code == 1 and "No space left on device" in r.stderr
    assert list(tmp_path.iterdir()) == []  # neither the image nor its temporary file


def test_unexpected_errors_are_one_line_too(run_cli, monkeypatch):
    import attnviz.api

    def boom(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(attnviz.api, "load_source", boom)  # what api.load (the CLI's way in) calls
    r = run_cli("heatmap", TEXT, "--model", TINY)
    assert r.exit_code == 1
    assert "internal error (RuntimeError: kaboom); rerun with ATTNVIZ_DEBUG=1" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["heatmap", TEXT, "--layer", "two"], "--layer 'two' is not a layer"),
        (["heatmap", TEXT, "--fit", "bogus"], "--fit: 'bogus' is not one of downsample, page (see"),
        (["heatmap", TEXT, "--width", "5"], "--width: Input should be greater than or equal to 20"),
        (["heatmap", TEXT, "--no-such-flag"], "No such option: --no-such-flag"),
        (["nonsense"], "No such command 'nonsense'"),
    ],
)
def test_usage_errors_are_one_line_too(capsys, args, expected):
    from attnviz.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith("attnviz: error: ") and expected in err and len(err.strip().splitlines()) == 1


def test_bare_attnviz_prints_help(capsys):
    from attnviz.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 0 and "Usage: attnviz" in capsys.readouterr().out


def test_python_dash_m_and_version():
    out = subprocess.run([sys.executable, "-m", "attnviz", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("attnviz 0.")


def test_help_and_argument_errors_do_not_import_heavy_libraries():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from attnviz.cli import app\n"
        "r = CliRunner()\n"
        "for args in (['--help'], ['heatmap', '--help'], ['explain', '--help'], ['heatmap', 'x', '--layer', 'z'],\n"
        "             ['--show-completion', 'bash'], ['heatmap', 'x', '--head', 'foo'], ['heatmap', 'x', '--layer', '-1'],\n"
        "             ['heatmap', 'x', '--model', 'missing.toml'], ['heatmap', 'x', '--out', 'x.jpg'],\n"
        "             ['explain', '--walk-layer', '-2']):\n"
        "    r.invoke(app, args)\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'matplotlib', 'numpy') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_compare_heads_refuses_numbers_files_in_one_line(run_cli, tmp_path):
    """compare-heads draws a figure or a page; .npz/.json (the numbers of one view) is refused, not an internal error."""
    for suffix in (".npz", ".json"):
        done = run_cli("compare-heads", "The cat sat.", "--out", str(tmp_path / f"x{suffix}"))
        assert done.exit_code == 2 and f"not {suffix}; for the numbers use attnviz heads" in done.stderr, done.stderr
        assert not (tmp_path / f"x{suffix}").exists()
