"""What a plugin's record returns is checked, and its failures are its own (issue 58, A3 and B13): a result-format
writer writes through a temporary file (an existing file survives a writer that fails or writes nothing, and the
writer is named); a policy's NaN scores, a list for a tensor, a NaN budget, a pattern's recall of 5, -1 or NaN and a
writer module that is missing are the plugin's error in one line, never an internal error or a normal run."""

from __future__ import annotations

import math

import pytest
import torch
from test_kv import QUESTION, TEXT

from attnviz import result_formats
from attnviz.analysis.patterns_registry import Pattern
from attnviz.analysis.patterns_registry import registered as pattern_registered
from attnviz.analysis.policies import POLICIES, Policy
from attnviz.errors import PluginError, RenderError
from attnviz.kv import kv
from attnviz.result_formats import RESULT_FORMATS, ResultFormat


@pytest.fixture(scope="module")
def llama(tiny_hf, tmp_path_factory):
    from tiny_models import causal_lm

    return causal_lm(tiny_hf["llama"], tmp_path_factory.mktemp("plugin_values") / "llama", positions=512)


# -- result-format writers ------------------------------------------------------------------------------------------

def half_then_full_disk(result, path):
    with open(path, "w", encoding="utf-8") as f:
        f.write("half a file")
    raise OSError(28, "No space left on device")


def writes_nothing(result, path):
    return None


def raises_its_own(result, path):
    raise KeyError("a bug of the plugin's")


@pytest.mark.parametrize(("writer", "says"), [
    (f"{__name__}:half_then_full_disk", "No space left on device"),
    (f"{__name__}:writes_nothing", "wrote nothing"),
    (f"{__name__}:raises_its_own", "KeyError"),
    ("no_such_plugin_module_xyz:write", "cannot be loaded"),
    (f"{__name__}:no_such_function", "cannot be loaded"),
])
def test_a_writer_that_fails_leaves_the_file_and_is_named(tmp_path, writer, says):
    target = tmp_path / "result.foo"
    target.write_text("the earlier result\n", encoding="utf-8")
    with RESULT_FORMATS.registered(ResultFormat("kv", ".foo", writer, "a plugin's format")), \
            pytest.raises((RenderError, PluginError)) as caught:
        result_formats.save("kv", object(), target)
    message = str(caught.value)
    assert says in message and writer in message, message
    assert target.read_text(encoding="utf-8") == "the earlier result\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.foo"]  # no temporary file left


def test_a_writer_that_writes_replaces_the_file_whole(tmp_path):
    target = tmp_path / "result.foo"
    target.write_text("old\n", encoding="utf-8")

    def write(result, path):
        assert path != target  # it writes a temporary file, renamed onto the target once it is whole
        path.write_text(f"{result}\n", encoding="utf-8")

    with RESULT_FORMATS.registered(ResultFormat("kv", ".foo", write, "inline")):  # type: ignore[arg-type]
        result_formats.save("kv", "new", target)
    assert target.read_text(encoding="utf-8") == "new\n"


@pytest.mark.parametrize("suffix", [".js\x1b[31m", ".a\nb", ".\u202ehtml", ". x", ".", "json"])
def test_a_suffix_with_control_characters_is_refused(suffix):
    with pytest.raises(ValueError, match="suffix"):
        result_formats.register(ResultFormat("kv", suffix, "m:f"))


# -- policies -------------------------------------------------------------------------------------------------------

def _run(llama, policy: Policy) -> None:
    with POLICIES.registered(policy):
        kv(llama, TEXT, policies=[policy.name], budgets=[4], question=QUESTION, end_to_end=False)


@pytest.mark.parametrize(("name", "policy", "says"), [
    ("nans", lambda name: Policy(name, "x", "y", lambda inputs: torch.full(
        (inputs.n_kv_heads, inputs.rows.n_keys), math.nan)), "NaN"),
    ("listed", lambda name: Policy(name, "x", "y", lambda inputs: [[0.0] * inputs.rows.n_keys]), "a list"),
    ("complex", lambda name: Policy(name, "x", "y", lambda inputs: torch.zeros(
        (inputs.n_kv_heads, inputs.rows.n_keys), dtype=torch.complex64)), "real tensor"),
    ("nanbudget", lambda name: Policy(name, "x", "y", "attnviz.analysis.kv_policies:h2o_policy",
                                      budget=lambda count, layer, n_layers, n_keys: math.nan), "budget"),
    ("gone", lambda name: Policy(name, "x", "y", "no_such_plugin_module_xyz:score"), "cannot be loaded"),
])
def test_a_policy_that_returns_what_it_should_not_is_named(llama, name, policy, says):
    with pytest.raises(PluginError, match=f"policy {name}") as caught:
        _run(llama, policy(name))
    assert says in str(caught.value), str(caught.value)


# -- patterns -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [5.0, -1.0, math.nan, math.inf])
def test_a_pattern_recall_outside_zero_to_one_is_named(llama, value):
    from attnviz.kv.patterns import patterns

    def recall(rows, budget):
        return torch.full((rows.n_heads,), value, dtype=torch.float64)

    with pattern_registered(Pattern("odd", "an odd recall", "a test", recall=recall)), \
            pytest.raises(PluginError, match=r"pattern odd's recall function gave .*outside 0 to 1"):
        patterns(llama, TEXT, budgets=[6])


def test_a_pattern_plugin_error_is_one_line_before_any_file_is_written(run_cli, llama, tmp_path):
    def recall(rows, budget):
        return torch.full((rows.n_heads,), math.nan, dtype=torch.float64)

    minference = tmp_path / "minference.json"
    with pattern_registered(Pattern("odd", "an odd recall", "a test", recall=recall)):
        r = run_cli("patterns", TEXT, "--model", llama, "--budget", "6", "--minference", str(minference))
    errors = [line for line in r.stderr.splitlines() if line.startswith("attnviz: error:")]
    assert r.exit_code != 0 and len(errors) == 1 and "pattern odd" in errors[0], r.stderr
    assert "Traceback" not in r.stderr
    assert "internal error" not in r.stderr
    assert not minference.exists()
