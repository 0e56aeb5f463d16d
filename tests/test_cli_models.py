"""The CLI on real model folders: the offline default, engines, pairs, encoder-decoders, the hub cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from processes import run_each

ROOT = Path(__file__).resolve().parent.parent


def test_default_model_heatmap(run_cli):
    r = run_cli("heatmap", "The cat sat on the mat.", "--width", "80", "--verbose", "--layer", "0")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("all-MiniLM-L6-v2 · layer 0 · head 0")
    assert "[CLS]" in r.stdout and "attnviz: engine native (bert) on cpu" in r.stderr


def test_engine_hf_and_hide_special_and_words(run_cli):
    r = run_cli("heatmap", "Unbelievably good.", "--engine", "hf", "--verbose", "--hide-special", "--words")
    assert r.exit_code == 0, r.stderr
    assert "engine hf (bert)" in r.stderr and "[CLS]" not in r.stdout and "Unbelievably" in r.stdout


def test_renormalize_needs_hide_special(run_cli):
    r = run_cli("heatmap", "x", "--renormalize")
    assert r.exit_code == 2 and "add --hide-special" in r.stderr


def test_pair_boundary_is_marked(run_cli):
    r = run_cli("heatmap", "The cat sat.", "--pair", "It was tired.", "--width", "80", "--layer", "0")
    assert r.exit_code == 0, r.stderr
    assert "│" in r.stdout and "───" in r.stdout


def test_t5_cross_attention_renders(run_cli, tiny_hf, tmp_path):
    args = ["heatmap", "Der Hund jagt die Katze.", "--model", tiny_hf["t5"], "--target", "The dog chased the cat."]
    r = run_cli(*args, "--kind", "cross", "--values", "--width", "120", "--layer", "0")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "· cross · layer 0" in lines[0]
    value = re.compile(r"\.\d\d|1\.0")
    rows = [ln.split()[0] for ln in lines if len(ln.split()) > 3 and all(value.fullmatch(v) for v in ln.split()[1:])]
    assert len(rows) == len(["The", "dog", "chased", "the", "cat", ".", "</s>"])
    assert rows[:3] == ["The", "dog", "chased"]  # target tokens on the query axis
    out = tmp_path / "cross.png"
    assert run_cli(*args, "--kind", "cross", "--out", str(out)).exit_code == 0 and out.exists()
    r = run_cli("heatmap", "x", "--kind", "cross")
    assert r.exit_code == 2 and "needs an encoder-decoder model" in r.stderr


def test_text_too_long(run_cli, tiny_hf):
    text = " ".join(["cat"] * 100)
    r = run_cli("heatmap", text, "--model", tiny_hf["bert"])
    assert r.exit_code == 1 and "takes at most 64" in r.stderr
    assert run_cli("heatmap", text, "--model", tiny_hf["bert"], "--truncate").exit_code == 0


def _fake_hub_cache(cache: Path, repo: str, folder: str) -> None:
    """The layout huggingface_hub uses: models--org--name/{refs/main, snapshots/<commit>/…}."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = cache / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    shutil.copytree(folder, root / "snapshots" / commit)


def test_hub_id_from_the_cache_offline(tiny_hf, tmp_path, run_cli, monkeypatch):
    """In this process (huggingface_hub reads its cache folder at call time; conftest sets HF_HUB_OFFLINE=1):
    the subprocess tests below hold that nothing is fetched from the network."""
    from huggingface_hub import constants

    _fake_hub_cache(tmp_path, "someone/tiny-bert", tiny_hf["bert"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    r = run_cli("heatmap", "The cat sat.", "--model", "someone/tiny-bert", "--revision", "main", "--verbose")
    assert r.exit_code == 0, r.stderr
    assert "engine native (bert)" in r.stderr and "[CLS]" in r.stdout
    r = run_cli("heatmap", "The cat sat.", "--model", "someone/tiny-bert", "--engine", "hf", "--verbose")
    assert r.exit_code == 0, r.stderr
    assert "engine hf (bert)" in r.stderr


def test_unknown_hub_id_offline_is_one_line(run_cli, tmp_path, monkeypatch):
    """In this process, which conftest keeps offline (HF_HUB_OFFLINE=1), with an empty cache."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    r = run_cli("heatmap", "x", "--model", "nobody/nothing")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines() == [
        "attnviz: error: 'nobody/nothing' is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 is set; "
        "on a machine with network, run `hf download nobody/nothing` once, or pass a local model folder; offline "
        "now: leave out --model (the embedded encoder), or a causal model organism: "
        "--model sample_configs/organism_needle.toml"
    ]


def test_remote_code_never_runs_unless_asked(run_cli, tiny_hf, tmp_path):
    import json

    folder = tmp_path / "remote"
    shutil.copytree(tiny_hf["bert"], folder)
    marker = tmp_path / "ran"
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="custom-x", auto_map={"AutoConfig": "configuration_x.XConfig", "AutoModel": "modeling_x.XModel"})
    (folder / "config.json").write_text(json.dumps(config))
    for name in ("configuration_x.py", "modeling_x.py"):
        (folder / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    r = run_cli("heatmap", "x", "--model", str(folder))
    assert r.exit_code == 1 and "pass --trust-remote-code" in r.stderr
    assert not marker.exists()


def test_unavailable_device_and_device_map(run_cli, tiny_hf):
    import torch

    if not torch.cuda.is_available():
        r = run_cli("heatmap", "x", "--device", "cuda")
        assert r.exit_code == 2 and "--device cuda is not available" in r.stderr
    r = run_cli("heatmap", "x", "--model", tiny_hf["bert"], "--device-map", "auto", "--engine", "native")
    assert r.exit_code == 2 and "--device-map is for --engine hf" in r.stderr


def test_explain_refuses_what_it_cannot_walk_through(run_cli, tiny_hf):
    r = run_cli("explain", "--model", tiny_hf["bert"])
    assert r.exit_code == 1 and "the text is empty" in r.stderr
    r = run_cli("explain", "a b", "--model", tiny_hf["t5"])
    assert r.exit_code == 2 and "config model (.toml)" in r.stderr


def _no_network(folder: Path) -> dict[str, str]:
    """Environment for a subprocess in which name lookups and connections fail, as on a plane, and which is not
    told to stay offline (HF_HUB_OFFLINE=0): it must anyway."""
    guard = folder / "guard"
    guard.mkdir(exist_ok=True)
    (guard / "sitecustomize.py").write_text(
        "import socket\n"
        "def _refuse(*a, **k):\n"
        "    raise socket.gaierror(-2, 'Name or service not known')\n"
        "socket.getaddrinfo = _refuse\n"
        "socket.socket.connect = _refuse\n"
        "socket.create_connection = _refuse\n"
    )
    return {"PYTHONPATH": str(guard), "HF_HUB_OFFLINE": "0", "HF_HUB_CACHE": str(folder / "cache")}


# The commands of the no-network tests below, run one after the other in one fresh process without a network
# (one start-up of torch and transformers, not three): the embedded default first, before anything has imported
# transformers; then a hub id the cache lacks and one it holds, each on the auto and the hf engine.
OFFLINE_COMMANDS = {
    "default": ["heatmap", "The cat sat on the mat.", "--width", "80"],
    **{f"gpt2 {engine}": ["heatmap", "x", "--model", "gpt2", "--engine", engine] for engine in ("auto", "hf")},
    **{f"cached {engine}": ["heatmap", "The cat", "--model", "someone/tiny-gpt2", "--engine", engine, "--verbose"]
       for engine in ("auto", "hf")},
}


@pytest.fixture(scope="module")
def without_network(tiny_hf, tmp_path_factory) -> dict[str, tuple[int, str, str]]:
    """(exit code, stdout, stderr) of each of OFFLINE_COMMANDS, by name."""
    folder = tmp_path_factory.mktemp("no_network")
    env = _no_network(folder)
    _fake_hub_cache(Path(env["HF_HUB_CACHE"]), "someone/tiny-gpt2", tiny_hf["gpt2"])
    return dict(zip(OFFLINE_COMMANDS, run_each(list(OFFLINE_COMMANDS.values()), env), strict=True))


def test_default_model_needs_no_network(without_network):
    """Every socket connection fails; the embedded default still draws (and nothing tries the hub)."""
    code, out, err = without_network["default"]
    assert code == 0, err
    assert out.startswith("all-MiniLM-L6-v2")


def test_no_network_without_offline_flag_fails_fast_in_one_line(without_network):
    for engine in ("auto", "hf"):
        code, _, err = without_network[f"gpt2 {engine}"]
        assert code == 1
        assert err.strip().splitlines() == [
            "attnviz: error: 'gpt2' is not in the local Hugging Face cache and the hub cannot be reached "
            "(no network?); on a machine with network, run `hf download gpt2` once, or pass a local model folder; "
            "offline now: leave out --model (the embedded encoder), or a causal model organism: "
            "--model sample_configs/organism_needle.toml"
        ]


def test_no_network_still_uses_the_cache(without_network):
    for engine, used in (("auto", "native"), ("hf", "hf")):
        code, out, err = without_network[f"cached {engine}"]
        assert code == 0, err
        assert "tiny-gpt2" in out.splitlines()[0] and f"engine {used} (gpt2)" in err


def test_bart_kinds_on_the_cli(run_cli, tiny_hf):
    base = ["heatmap", "Der Hund jagt die Katze.", "--model", tiny_hf["bart"], "--target", "The dog chased the cat."]
    for kind, marker in (("encoder", "bart · layer 0"), ("decoder", "bart · decoder · layer 0"), ("cross", "bart · cross")):
        r = run_cli(*base, "--kind", kind, "--words", "--hide-special", "--width", "100", "--layer", "0")
        assert r.exit_code == 0, r.stderr
        assert r.stdout.startswith(marker)


def test_native_path_never_imports_transformers(tmp_path):
    code = (
        "import sys, attnviz\n"
        "from attnviz.generation import generate\n"
        "attnviz.extract('The cat sat on the mat.')\n"
        f"generate('the cat sat', {str(ROOT / 'sample_configs' / 'organism_needle.toml')!r}, max_new_tokens=2)\n"
        "print('transformers' in sys.modules, 'sentence_transformers' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "0"})
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--model", "bad id!!"], "is neither a folder nor a valid hub id"),
        (["--revision", "v2"], "--revision applies to hub ids; the embedded default is not one"),
    ],
)
def test_model_errors_are_one_line(run_cli, args, expected):
    r = run_cli("heatmap", "x", *args)
    assert r.exit_code in (1, 2) and expected in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_broken_model_folders(run_cli, tiny_hf, tmp_path):
    import json

    listed = tmp_path / "listed"
    shutil.copytree(tiny_hf["gpt2"], listed)
    (listed / "config.json").write_text("[1, 2]")
    r = run_cli("heatmap", "x", "--model", str(listed))
    assert r.exit_code == 1 and "holds a list, not a JSON object" in r.stderr
    missing = tmp_path / "missing"
    shutil.copytree(tiny_hf["gpt2"], missing)
    config = json.loads((missing / "config.json").read_text())
    del config["n_head"]
    (missing / "config.json").write_text(json.dumps(config))
    r = run_cli("heatmap", "x", "--model", str(missing), "--engine", "native")
    assert r.exit_code == 1 and "config.json and the weights do not fit together (KeyError: 'n_head')" in r.stderr
