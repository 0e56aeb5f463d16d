"""Model organisms (issue 52): each planted head's attention is its documented pattern on random texts; the saved
checkpoint equals attnviz's own run on every engine; the commands find what was planted."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from attnviz.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
NEEDLE_ORGANISM = str(ROOT / "sample_configs" / "organism_needle.toml")
WORDS = ["cat", "dog", "sat", "mat", "ran", "far", "hill", "home", "sleep", "ball", "river", "bird", "tree", "day", "long", "green", "small", "house", "road", "lake", "stone", "cloud", "rain", "wind", "boat", "door", "wall", "book", "lamp", "chair", "table", "apple", "bread", "milk", "salt", "gold", "iron", "glass", "paper"]


def _organism(tmp_path: Path, heads: str, layers: int = 2) -> str:
    path = tmp_path / "organism.toml"
    path.write_text(f'[model]\ntype = "organism"\nname = "t"\nlayers = {layers}\nheads = 4\n{heads}', encoding="utf-8")
    return str(path)


def _text(rng: random.Random, n: int, dots: bool = False) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    if dots:
        for i in range(5, n, rng.randrange(5, 9)):
            words[i] = "."
    return " ".join(words)


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory):
    heads = "".join(f'[[head]]\n{body}\n' for body in (
        'kind = "previous_token"\nlayer = 0\nhead = 0', 'kind = "previous_token"\nlayer = 0\nhead = 1\noffset = 2',
        'kind = "first_token"\nlayer = 0\nhead = 2', 'kind = "local"\nlayer = 0\nhead = 3\nwindow = 8',
        'kind = "induction"\nlayer = 1\nhead = 0\nmatch = 2', 'kind = "token"\nlayer = 1\nhead = 1\ntoken = "."',
        'kind = "induction"\nlayer = 1\nhead = 2\nties = "earliest"', 'kind = "uniform"\nlayer = 1\nhead = 3'))
    return _organism(tmp_path_factory.mktemp("kinds"), heads)


# Each kind's pattern is checked against what its record declares: tests/test_organism_kinds.py.


def test_the_saved_checkpoint_equals_attnvizs_own_run_on_every_engine(every_kind, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attnviz.api import extract
    from attnviz.organisms import save_organism

    folder = save_organism(every_kind, tmp_path / "checkpoint")
    text = _text(random.Random(1), 40, dots=True)
    own = extract(text, model=every_kind)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    ids = AutoTokenizer.from_pretrained(folder)(text)["input_ids"]
    assert ids == own.token_ids and ids[0] == 101  # [CLS] first, no [SEP] after: a causal encoding
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    torch.testing.assert_close(own.attentions, torch.stack([x[0] for x in out.attentions]), atol=1e-5, rtol=1e-5)
    for engine in ("fused", "hf"):
        other = extract(text, model=str(folder), engine=engine)
        assert other.metadata["engine"] == engine
        torch.testing.assert_close(other.attentions, own.attentions, atol=1e-5, rtol=1e-5)
    from attnviz.sources.causal import load_causal
    from attnviz.sources.stepping import prefill, step

    native = load_causal(every_kind).stepper
    prefill(native, ids[:-1])
    logits, _ = step(native, ids[-1])
    reference = out.logits[0, -1]
    scale = float(reference.abs().max())  # logits in the hundreds: 1e-5 of their scale (float32 sums of 1,552 terms)
    assert float((logits - reference).abs().max()) <= 1e-5 * scale and int(logits.argmax()) == int(reference.argmax())
    with pytest.raises(Exception, match="not an empty folder"):
        save_organism(every_kind, folder)


def test_an_organism_generates_by_copying(tmp_path):
    import attnviz

    rng = random.Random(2)
    segment = [rng.choice(WORDS) for _ in range(12)]
    prompt = " ".join([rng.choice(WORDS) for _ in range(6)] + segment + ["."] + segment[:3])
    result = attnviz.generate(prompt, model=NEEDLE_ORGANISM, max_new_tokens=8)
    new = result.tokens[result.metadata["prompt_length"]:]
    assert new == segment[3:11]


def test_needle_finds_the_needle_and_ranks_the_planted_retrieval_head_first():
    from attnviz.api import needle

    result = needle(NEEDLE_ORGANISM, lengths=[512], depths=[0.0, 0.5, 1.0], max_new_tokens=12)
    assert result.needle.startswith("Answer: eat a sandwich")  # the organism's own needle, picked up
    assert all(run.retrieved for run in result.runs)
    top = result.heads()[0]
    assert (top["layer"], top["head"]) == (1, 0) and top["retrieval_score"] >= 0.5


def _needle_context() -> tuple[str, str]:
    from attnviz.needle.haystack import prose

    words = prose(60, seed=3).split()
    needle = "Answer: eat a sandwich and sit in Dolores Park until sunset."
    return " ".join(words[: len(words) // 3]) + " " + needle + " " + " ".join(words[len(words) // 3 :]), "Answer:"


def test_kv_streaming_loses_the_needle_snapkv_with_the_question_keeps_it():
    from attnviz.api import kv

    context, question = _needle_context()
    result = kv(NEEDLE_ORGANISM, context, policies=["streaming", "snapkv", "oracle"], budgets=[48],
                question=question, answer_tokens=6, question_window=True)
    assert result.full_answer.split()[:4] == ["eat", "a", "sandwich", "and"]
    runs = {run.policy: run for run in result.runs}
    assert runs["streaming"].changed is True and not {"eat", "sandwich"} & set(runs["streaming"].answer.split())
    # SnapKV keeps what the question's rows attend (the needle's start, pooled): the answer's first words survive;
    # the rest of the needle, which only later answer steps read, was not among them (a known truth of the method)
    assert runs["snapkv"].answer.split()[:3] == ["eat", "a", "sandwich"]
    retrieval = {p: next(h for h in run.heads if (h.layer, h.kv_head) == (1, 0)) for p, run in runs.items()}
    assert retrieval["snapkv"].recall > 0.75 and retrieval["streaming"].recall < retrieval["snapkv"].recall - 0.5
    assert all(h.recall <= retrieval["oracle"].recall + 1e-9 for h in retrieval.values())


def test_patterns_class_sinks_and_local_heads_streaming_and_the_copy_head_not():
    from attnviz.api import patterns

    text = (ROOT / "examples" / "report.txt").read_text(encoding="utf-8")
    text = " ".join([text] * 4)
    result = patterns(str(ROOT / "sample_configs" / "organism_duo.toml"), text, budgets=[64])
    full = result.full_attention
    assert full[1][0] is True and full[1][3] is True  # induction, every full stop: full attention
    assert full[1][1] is False and full[1][2] is False  # local, sink: streaming
    winners = {(h.layer, h.head): h.winner for h in result.heads[64]}
    assert winners[(0, 2)] == "a_shape" and winners[(1, 1)] == "a_shape"  # local heads


@pytest.mark.parametrize(("body", "message"), [
    ('[[head]]\nkind = "induction"\nlayer = 1\nhead = 0', "previous_token head with offset = 1"),
    ('[[head]]\nkind = "previous_token"\nlayer = 0\nhead = 0\n[[head]]\nkind = "induction"\nlayer = 0\nhead = 1',
     "earlier layer"),
    ('[[head]]\nkind = "sideways"\nlayer = 0\nhead = 0', "kind must be one of"),
    ('[[head]]\nkind = "local"\nlayer = 2\nhead = 0', "layer must be"),
    ('[[head]]\nkind = "local"\nlayer = 0\nhead = 0\n[[head]]\nkind = "uniform"\nlayer = 0\nhead = 0', "twice"),
    ('[[head]]\nkind = "local"\nlayer = 0\nhead = 0\ntoken = "x"', "takes"),
    ('tokenizer = "gpt2"', "embedded"),
    ('needle = "answer \\u001b[2J"', "printable"),
])
def test_a_wrong_description_is_one_line_naming_what_to_fix(tmp_path, run_cli, body, message):
    path = _organism(tmp_path, body)
    with pytest.raises(ConfigError, match=message):
        from attnviz.organisms import read_spec

        read_spec(path)
    result = run_cli("heads", "the cat", "--model", path)
    assert result.exit_code != 0 and message.split()[0] in result.stderr and "Traceback" not in result.stderr


def test_a_token_that_is_not_one_wordpiece_is_refused(tmp_path, run_cli):
    path = _organism(tmp_path, '[[head]]\nkind = "token"\nlayer = 0\nhead = 0\ntoken = "sandwiches!"')
    result = run_cli("heads", "the cat", "--model", path)
    assert result.exit_code != 0 and "not one token" in result.stderr


def test_a_saved_checkpoint_declares_its_needle():
    from attnviz.organisms import declared_needle, organism_folder

    folder, _ = organism_folder(NEEDLE_ORGANISM)  # written as save_organism writes a checkpoint
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["attnviz_organism"]["name"] == "needle-organism"
    assert declared_needle(str(folder)) == declared_needle(NEEDLE_ORGANISM) != (None, None)


def test_the_organism_command_describes_and_writes_the_checkpoint(run_cli, tmp_path):
    result = run_cli("organism", NEEDLE_ORGANISM, "--format", "json")
    assert result.exit_code == 0, result.stderr
    described = json.loads(result.stdout)
    kinds = {(row["layer"], row["head"]): row["kind"] for row in described["planted"]}
    assert kinds[(1, 0)] == "induction" and kinds[(0, 0)] == "previous_token" and kinds[(1, 3)] == "zero"
    assert described["needle"].startswith("Answer:")
    written = run_cli("organism", NEEDLE_ORGANISM, "--out", str(tmp_path / "ckpt"))
    assert written.exit_code == 0, written.stderr
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= {p.name for p in (tmp_path / "ckpt").iterdir()}
    refused = run_cli("organism", str(ROOT / "sample_configs" / "tiny.toml"))
    assert refused.exit_code != 0 and "not a model organism" in refused.stderr


def test_a_save_copies_the_built_checkpoint_byte_for_byte_and_builds_only_without_one(tmp_path, monkeypatch):
    """Saving an organism the cache holds copies the files its mark lists (a build is seeded: they are what a build
    writes), nothing the folder gained since; a description whose needle differs (not in the fingerprint: the same
    folder) is built; with an empty cache, the save builds, and writes the same bytes."""
    import attnviz.organisms.checkpoint as checkpoint
    from attnviz.api import save_organism
    from attnviz.organisms import organism_folder

    def spec(name: str, needle: str) -> Path:  # one layer, one head: 112 MB (the smallest organism)
        path = tmp_path / name
        path.write_text('[model]\ntype = "organism"\nname = "small"\nlayers = 1\nheads = 1\npositions = 4096\n'
                        f'needle = "{needle}"\nquestion = "What fruit?"\n\n'
                        '[[head]]\nkind = "previous_token"\nlayer = 0\nhead = 0\n', encoding="utf-8")
        return path

    apples, bananas = spec("a.toml", "Answer: apples."), spec("b.toml", "Answer: bananas.")
    built, _ = organism_folder(apples)
    files = sorted(p.name for p in built.iterdir())
    (built / "stray.txt").write_text("not the checkpoint's")
    (built / "inside").mkdir()
    with monkeypatch.context() as patched:
        patched.setattr(checkpoint, "build_state", lambda *a: pytest.fail("a save of a built organism built it"))
        copied = save_organism(apples, tmp_path / "copied")
        with pytest.raises(pytest.fail.Exception, match="built it"):  # its own needle: built, not copied
            save_organism(bananas, tmp_path / "other")
    assert not (tmp_path / "other").exists()  # the stopped save left nothing
    monkeypatch.setenv("ATTNVIZ_CACHE", str(tmp_path / "empty-cache"))
    fresh = save_organism(apples, tmp_path / "fresh")
    assert not (tmp_path / "empty-cache").exists()  # a save does not fill the cache
    for folder in (copied, fresh):
        assert sorted(p.name for p in folder.iterdir()) == files
        for name in files:
            assert (folder / name).read_bytes() == (built / name).read_bytes(), (folder, name)


def test_heads_labels_the_planted_heads_and_transformerlens_detectors_agree():
    """attnviz's labels, and TransformerLens's detect_head (error_measure="mul": the share of the attention mass on
    the detection pattern) written out here from its definition, on the induction probe."""
    from attnviz.api import heads_of, load

    source = load(NEEDLE_ORGANISM)
    table = heads_of(source, probe="induction")
    assert "previous-token" in table.labels(0, 0) and "induction" in table.labels(1, 0)
    assert "first-token" in table.labels(0, 2)
    from attnviz.api import extract

    rng = random.Random(5)
    segment = " ".join(rng.choice(WORDS) for _ in range(40))
    result = extract(f"{segment} {segment}", model=NEEDLE_ORGANISM)
    a = result.attentions.double()
    ids = result.token_ids
    n = len(ids)
    previous = torch.zeros(n, n)
    previous[torch.arange(1, n), torch.arange(n - 1)] = 1
    induction = torch.zeros(n, n)
    for p in range(n):
        for j in range(p):
            if ids[j] == ids[p] and j + 1 <= p:
                induction[p, j + 1] = 1

    def detect(pattern: torch.Tensor, layer: int, head: int) -> float:
        return float((a[layer, head] * pattern).sum() / a[layer, head].sum())

    scores = {(layer, head): (detect(previous, layer, head), detect(induction, layer, head))
              for layer in range(2) for head in range(4)}
    assert max(scores, key=lambda k: scores[k][0]) == (0, 0) and scores[(0, 0)][0] > 0.95
    assert max(scores, key=lambda k: scores[k][1]) == (1, 0) and scores[(1, 0)][1] > 0.4


def test_streamingllm_loses_nothing_the_streaming_organism_reads_and_patterns_class_it_streaming():
    from attnviz.api import kv, patterns

    organism = str(ROOT / "sample_configs" / "organism_streaming.toml")
    text = " ".join([(ROOT / "examples" / "report.txt").read_text(encoding="utf-8")] * 2)
    result = kv(organism, text, policies=["streaming", "h2o"], budgets=[72], question="what changed ?",
                answer_tokens=4)
    streaming = next(run for run in result.runs if run.policy == "streaming")
    assert all(h.recall > 1 - 1e-5 for h in streaming.heads) and streaming.changed is False
    assert streaming.kl < 1e-6
    found = patterns(organism, text, budgets=[160])  # a band of 96 ≥ every window (64)
    assert all(not full for layer in found.full_attention for full in layer)  # every head streams
    assert {h.winner for h in found.heads[160]} == {"a_shape"}


def test_the_atlas_finds_the_planted_heads_across_a_corpus(run_cli, tmp_path):
    rng = random.Random(6)
    lines = []
    for _ in range(6):
        segment = " ".join(rng.choice(WORDS) for _ in range(15))
        lines.append(f"{' '.join(rng.choice(WORDS) for _ in range(5))} {segment} {segment}")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_cli("atlas", str(corpus), "--model", NEEDLE_ORGANISM, "--format", "json")
    assert result.exit_code == 0, result.stderr
    heads = {(h["layer"], h["head"]): h for h in json.loads(result.stdout)["heads"]}

    def best(statistic: str) -> tuple[int, int]:
        return max(heads, key=lambda k: heads[k]["means"][statistic])

    assert best("prev_score") == (0, 0) and heads[(0, 0)]["labels"].get("previous-token") == 1.0
    assert best("induction") == (1, 0) and heads[(1, 0)]["labels"].get("induction") == 1.0
    assert heads[(0, 2)]["means"]["first"] > 0.99 and heads[(0, 2)]["labels"].get("first-token") == 1.0
