"""KV-cache policies as records (issue 51, item 3): a policy added from outside the package — kvpress's key-norm
press, as docs/development.md shows it — runs in kv end to end, its kept keys the ones transformers' own keys say,
and `attnviz kv --help` lists it once its distribution is installed."""

from __future__ import annotations

import json

import pytest
import torch
from test_kv import QUESTION, TEXT
from test_plugins import install

from attnviz.analysis.policies import BUILT_IN, POLICIES, Policy
from attnviz.errors import PluginError
from attnviz.kv import kv

KNORM = '''
from attnviz.analysis.policies import Policy, register


def knorm_scores(inputs):
    return -inputs.keys.double().norm(dim=-1)  # [key/value heads, keys]: the smaller a key's norm, the higher


register(Policy("knorm", "keys of small norm", "kvpress KnormPress (Devoto et al. 2024)", knorm_scores,
                reads=("keys",)))
'''


def knorm_scores(inputs):
    return -inputs.keys.double().norm(dim=-1)


@pytest.fixture(scope="module")
def llama(tiny_hf, tmp_path_factory):
    from tiny_models import causal_lm  # test_kv's seeded GQA model

    return causal_lm(tiny_hf["llama"], tmp_path_factory.mktemp("policy_plugin") / "llama", positions=512)


def _key_norms(folder: str, text: str) -> list[torch.Tensor]:
    """Each layer's ``[Hkv, T]`` key norms from transformers' own ``k_proj`` (RoPE rotates pairs: it keeps norms)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    ids = AutoTokenizer.from_pretrained(folder)(text, return_tensors="pt")["input_ids"]
    config = model.config
    found: list[torch.Tensor] = []
    hooks = [layer.self_attn.k_proj.register_forward_hook(
        lambda _m, _i, out: found.append(out[0].view(out.shape[1], config.num_key_value_heads, -1).norm(dim=-1).T))
        for layer in model.model.layers]
    with torch.no_grad():
        model(ids)
    for hook in hooks:
        hook.remove()
    return found


@pytest.mark.parametrize("engine", ["native", "fused"])
def test_a_registered_policy_runs_end_to_end_and_keeps_what_the_key_norms_say(llama, engine):
    with POLICIES.registered(Policy("knorm", "keys of small norm", "kvpress KnormPress", knorm_scores,
                                    reads=("keys",))):
        result = kv(llama, TEXT, policies=["knorm", "snapkv"], budgets=[5], question=QUESTION, answer_tokens=2,
                    engine=engine, keep_sets=True)
    knorm = next(run for run in result.runs if run.policy == "knorm")
    norms = _key_norms(llama, TEXT)
    for layer, kept in enumerate(knorm.kept):
        context = norms[layer][:, : result.n_context]
        for head, positions in enumerate(kept):
            # The 5 smallest norms (a token repeated has the same key before RoPE, so ties are compared by norm)
            smallest = torch.sort(context[head]).values[:5]
            torch.testing.assert_close(torch.sort(context[head, positions]).values, smallest, atol=1e-5, rtol=1e-5)
            assert len(positions) == 5
    assert knorm.kl is not None and knorm.kl > 0  # the cut ran on a real cache
    assert "knorm" not in POLICIES and set(BUILT_IN) <= set(POLICIES)


def test_a_policy_record_is_checked():
    for bad in ("Knorm", "all", "k norm", ""):
        with pytest.raises(ValueError):
            Policy(bad, "x", "y", knorm_scores)
    with pytest.raises(TypeError, match="pyramidkv is one of attnviz's own policies"):
        POLICIES["pyramidkv"] = POLICIES["snapkv"]  # type: ignore[assignment]


def test_a_score_function_of_the_wrong_shape_is_named(llama):
    wrong = Policy("flat", "one score", "none", lambda inputs: torch.zeros(3))
    with POLICIES.registered(wrong), pytest.raises(PluginError, match="policy flat's score function gave"):
        kv(llama, TEXT, policies=["flat"], budgets=[4], question=QUESTION, end_to_end=False)


def test_an_installed_plugins_policy_shows_in_help_and_runs(run_cli, llama, monkeypatch, tmp_path):
    """A distribution on the path (an entry point in attnviz.plugins, its module outside the package): `kv --help`
    lists its policy and `kv --policy knorm` runs it, in a process whose plugins load afresh."""
    from attnviz import plugins

    install(tmp_path, "knormplug", "knormplug_r5", KNORM, "knorm = knormplug_r5")
    monkeypatch.setattr(plugins, "_started", False)
    monkeypatch.setattr(plugins, "LOADED", [])
    monkeypatch.setattr(plugins, "MODULES", {})
    monkeypatch.delenv(plugins.NO_PLUGINS_ENV, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        shown = run_cli("kv", "--help")
        assert shown.exit_code == 0 and "knorm (keys of small norm)" in " ".join(shown.stdout.split())
        done = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--policy", "knorm", "--budget", "4",
                       "-n", "2", "--format", "json", "--engine", "fused")
        assert done.exit_code == 0, done.stderr
        doc = json.loads(done.stdout)
        assert [run["policy"] for run in doc["runs"]] == ["knorm"] and doc["runs"][0]["keys"] == [4] * doc["n_layers"]
        assert plugins.LOADED == ["knorm (knormplug)"]
    finally:
        if "knorm" in dict.keys(POLICIES):
            POLICIES.unregister("knorm")
        run_cli("kv", "--help")  # the worker's built command says the registry as it is again
