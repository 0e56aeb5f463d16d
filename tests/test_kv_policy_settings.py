"""A KV-cache policy's settings live on its record (issue 60, item 2; kvpress's habit: a press is a dataclass with
its fields): the API takes them by name, the command line as --set NAME=VALUE with its help from the registry, and a
plugin's policy declares and reads its own, with no other place to touch."""

from __future__ import annotations

import pytest
import torch
from test_kv import QUESTION, TEXT

from attnviz.analysis.policies import POLICIES, Policy, Setting, chosen_settings, parse_settings, settings_help
from attnviz.errors import UsageError
from attnviz.kv import kv


@pytest.fixture(scope="module")
def llama(tiny_hf, tmp_path_factory):
    from tiny_models import causal_lm

    return causal_lm(tiny_hf["llama"], tmp_path_factory.mktemp("policy_settings") / "llama", positions=512)


def test_streaming_keeps_as_many_sinks_as_its_setting_says(llama):
    for sinks in (1, 8):
        result = kv(llama, TEXT, policies=["streaming"], budgets=[12], question=QUESTION, end_to_end=False,
                    keep_sets=True, settings={"n_sink": sinks})
        for layer in result.runs[0].kept:
            for kept in layer:
                n = result.n_context
                assert kept == sorted({*range(sinks), *range(n - (12 - sinks), n)}), (sinks, kept)


def test_a_setting_is_checked_and_must_be_read_by_a_chosen_policy():
    assert chosen_settings(["snapkv"], {"window": "32"})["window"] == 32
    assert chosen_settings(["snapkv"], {})["kernel"] == 5  # the record's default
    with pytest.raises(UsageError, match="only streaming read it"):
        chosen_settings(["h2o"], {"n_sink": 8})
    with pytest.raises(UsageError, match="no policy has it"):
        chosen_settings(["h2o"], {"nosuch": 1})
    with pytest.raises(UsageError, match="from 1 to"):
        chosen_settings(["snapkv"], {"window": "0"})
    with pytest.raises(UsageError, match="layer or group"):
        chosen_settings(["tova"], {"tova_across": "row"})
    with pytest.raises(UsageError, match="NAME=VALUE"):
        parse_settings(["window"])
    with pytest.raises(UsageError, match="given twice"):
        parse_settings(["window=3", "window=4"])


def test_the_command_line_sets_and_refuses_in_one_line(run_cli, llama):
    done = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--policy", "streaming", "--budget", "12",
                   "--set", "n_sink=8", "--no-end-to-end", "--format", "json")
    assert done.exit_code == 0, done.stderr
    refused = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--policy", "h2o", "--set", "n_sink=8")
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1 and "--set n_sink" in refused.stderr, refused.stderr
    both = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--continue", "4")
    assert both.exit_code == 2 and "--question and --continue are two futures" in both.stderr, both.stderr
    shown = run_cli("kv", "--help")
    assert "n_sink=4" in " ".join(shown.stdout.split())


def test_a_plugin_policy_declares_and_reads_its_own_setting(llama):
    def recent_only(inputs):
        n = inputs.rows.n_keys
        skip = inputs.setting("skip_last")  # its own setting, declared on its record
        scores = torch.arange(n, dtype=torch.float64)
        scores[n - skip :] = -1.0
        return scores.expand(inputs.n_kv_heads, n).clone()

    policy = Policy("recent_skip", "recent, skipping the last few", "a test", recent_only,
                    settings=(Setting("skip_last", 0, "the last keys never kept", 0, 64),))
    with POLICIES.registered(policy):
        result = kv(llama, TEXT, policies=["recent_skip"], budgets=[5], question=QUESTION, end_to_end=False,
                    keep_sets=True, settings={"skip_last": 3})
        n = result.n_context
        assert all(kept == list(range(n - 8, n - 3)) for layer in result.runs[0].kept for kept in layer)
        assert "skip_last=0" in " ".join(settings_help().split())
