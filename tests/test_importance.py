"""Head importance (issue 32): Michel et al.'s gradient importance against finite differences of the loss with
respect to a head gate, and ablation against transformers' own forward with that head's output removed. The
references gate heads their own way: a pre-hook on each layer's output projection scaling that head's slice
of its input, on an eager-attention copy of the model, with transformers' own loss."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from attnviz.attribution.importance import head_importance
from attnviz.errors import InputError, UsageError
from attnviz.sources.resolve import load_source

TEXTS = ["The cat sat on the mat.", "A dog chased the cat around the garden.", "Attention is all you need."]


@pytest.fixture(scope="module")
def lm(tiny_hf, tmp_path_factory):
    """A tiny LLaMA with its language-model head (random, seeded)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("importance") / "llama-lm"
    shutil.copytree(tiny_hf["llama"], folder)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).save_pretrained(folder)
    return str(folder)


def _reference(folder: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").double().eval()  # float64
    return model, model.config.hidden_size // model.config.num_attention_heads


def _gated_loss(model, width: int, ids: torch.Tensor, layer: int, head: int, change) -> float:
    """transformers' own loss with head ``head`` of ``layer`` changed by ``change`` (its slice of o_proj's input)."""
    def hook(module, args):
        x = args[0].clone()
        x[..., head * width : (head + 1) * width] = change(x[..., head * width : (head + 1) * width])
        return (x,)

    handle = model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(hook)
    try:
        return _loss(model, ids)
    finally:
        handle.remove()


def _loss(model, ids: torch.Tensor) -> float:
    """The next-token cross-entropy in float64 (transformers' own loss casts the logits to float32)."""
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1]
    return float(torch.nn.functional.cross_entropy(logits.double(), ids[0, 1:]))


def test_gradient_importance_equals_finite_differences_of_a_head_gate(lm):
    source = load_source(lm, engine="fused")
    found = head_importance(source, TEXTS, batch_size=2)  # batches padded: each text keeps its own gate
    model, width = _reference(lm)
    eps = 1e-4
    for layer, head in [(0, 0), (0, 3), (1, 2)]:
        slopes = []
        for text in TEXTS:
            ids = torch.tensor([source.encode(text).ids])
            up = _gated_loss(model, width, ids, layer, head, lambda x: x * (1 + eps))
            down = _gated_loss(model, width, ids, layer, head, lambda x: x * (1 - eps))
            slopes.append(abs(up - down) / (2 * eps))
        want = sum(slopes) / len(slopes)
        assert float(found.raw[layer, head]) == pytest.approx(want, rel=2e-3, abs=1e-7), (layer, head)
    norms = found.gradient.norm(dim=1)
    torch.testing.assert_close(norms, torch.ones_like(norms), rtol=0, atol=1e-5)  # normalised per layer (l2)
    torch.testing.assert_close(found.gradient, found.raw / found.raw.norm(dim=1, keepdim=True), rtol=1e-5, atol=0)
    losses = [_loss(model, torch.tensor([source.encode(t).ids])) for t in TEXTS]
    assert found.loss == pytest.approx(sum(losses) / len(losses), rel=1e-5)


@pytest.mark.parametrize("ablate", ["zero", "mean"])
def test_ablation_equals_transformers_with_the_head_removed(lm, ablate):
    source = load_source(lm, engine="fused")
    found = head_importance(source, TEXTS, ablate=ablate, batch_size=2)
    model, width = _reference(lm)
    encoded = [torch.tensor([source.encode(t).ids]) for t in TEXTS]
    base = sum(_loss(model, ids) for ids in encoded) / len(TEXTS)
    for layer, head in [(0, 1), (1, 3)]:
        mean = None
        if ablate == "mean":  # the head's output averaged over every token of the texts, taken by a hook
            seen: list[torch.Tensor] = []

            def take(module, args, seen=seen, head=head):
                seen.append(args[0][0, :, head * width : (head + 1) * width])

            hook = model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(take)
            with torch.no_grad():
                for ids in encoded:
                    model(input_ids=ids)
            hook.remove()
            mean = torch.cat(seen).mean(0)
        replace = (lambda x: torch.zeros_like(x)) if mean is None else (lambda x, m=mean: m.expand_as(x))
        removed = sum(_gated_loss(model, width, ids, layer, head, replace) for ids in encoded) / len(TEXTS)
        assert float(found.ablation[layer, head]) == pytest.approx(removed - base, abs=2e-5), (layer, head)
    assert found.ablate == ablate and found.ablation.shape == (2, 4)


def test_a_sentence_encoder_takes_a_similarity_objective():
    """MiniLM has no language-model head: with a second text the loss is 1 − cos of the mean-pooled embeddings;
    checked by finite differences on transformers' eager BertModel, gated on its attention output's dense input."""
    from transformers import BertModel

    from attnviz.sources.resolve import default_model_folder

    minilm = str(default_model_folder())
    source = load_source(minilm, engine="fused")
    with pytest.raises(UsageError, match="no masked-language-model head"):
        head_importance(source, TEXTS[:1])
    vs = "A dog ran in the park."
    found = head_importance(source, TEXTS[:2], vs=vs)
    model = BertModel.from_pretrained(minilm, attn_implementation="eager").double().eval()
    width = model.config.hidden_size // model.config.num_attention_heads

    def embed(text: str, layer: int = 0, head: int = 0, scale: float = 1.0) -> torch.Tensor:
        def hook(module, args):
            x = args[0].clone()
            x[..., head * width : (head + 1) * width] *= scale
            return (x,)
        handle = model.encoder.layer[layer].attention.output.dense.register_forward_pre_hook(hook)
        try:
            with torch.no_grad():
                return model(input_ids=torch.tensor([source.encode(text).ids])).last_hidden_state[0].mean(0)
        finally:
            handle.remove()

    other = embed(vs, scale=1.0)
    eps = 1e-4
    for layer, head in [(0, 0), (3, 7)]:
        slopes = []
        for text in TEXTS[:2]:
            up = 1 - torch.cosine_similarity(embed(text, layer, head, 1 + eps), other, dim=0)
            down = 1 - torch.cosine_similarity(embed(text, layer, head, 1 - eps), other, dim=0)
            slopes.append(abs(float(up - down)) / (2 * eps))
        assert float(found.raw[layer, head]) == pytest.approx(sum(slopes) / 2, rel=5e-3, abs=1e-7)


def test_bad_requests_are_one_line_errors(lm, tiny_hf):
    source = load_source(lm, engine="fused")
    with pytest.raises(InputError, match="no texts"):
        head_importance(source, [])
    with pytest.raises(UsageError, match="ablate='half' is unknown"):
        head_importance(source, TEXTS, ablate="half")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="attention function in transformers' registry"):
        head_importance(load_source(tiny_hf["llama"]), TEXTS)  # the native engine: no gates there


def test_the_heads_command_adds_the_columns(lm, run_cli, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    result = run_cli("heads", "--file", str(texts), "--model", lm, "--importance", "--ablate", "zero",
                     "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["importance"]["ablate"] == "zero" and "next-token" in doc["importance"]["objective"]
    found = head_importance(load_source(lm, engine="fused"), TEXTS, ablate="zero")
    for row in doc["heads"]:
        assert row["importance"] == pytest.approx(float(found.gradient[row["layer"], row["head"]]), abs=1e-5)
        assert row["ablation"] == pytest.approx(float(found.ablation[row["layer"], row["head"]]), abs=1e-5)
    csv = run_cli("heads", "--file", str(texts), "--model", lm, "--importance", "--format", "csv")
    assert csv.exit_code == 0 and "importance" in csv.stdout.splitlines()[0]
    table = run_cli("heads", "--file", str(texts), "--model", lm, "--importance", "--sort", "importance", "--top", "3",
                    "--width", "120")
    assert table.exit_code == 0 and "importance" in table.stdout and "next-token cross-entropy" in table.stdout
    for args, message in ((["--ablate", "zero"], "--ablate goes with --importance"),
                          (["--importance", "--sort", "ablation"], "--sort ablation needs --importance and --ablate")):
        bad = run_cli("heads", "--file", str(texts), "--model", lm, *args)
        assert bad.exit_code != 0 and message in bad.stderr


def test_parquet_gets_each_texts_importance_beside_heads_parquet(lm, run_cli, tmp_path):
    import pyarrow.parquet as pq

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "tables"
    result = run_cli("heads", "--file", str(texts), "--model", lm, "--importance", "--ablate", "zero",
                     "--format", "parquet", "--out", str(out))
    assert result.exit_code == 0, result.stderr
    table = pq.read_table(out / "importance.parquet").to_pylist()
    heads = pq.read_table(out / "heads.parquet").to_pylist()
    assert len(table) == len(heads) == len(TEXTS) * 2 * 4
    assert {(r["text_index"], r["layer"], r["head"]) for r in table} == \
        {(r["text_index"], r["layer"], r["head"]) for r in heads}  # joins heads.parquet row for row
    found = head_importance(load_source(lm, engine="fused"), TEXTS, ablate="zero")
    for row in table:
        assert row["importance"] == pytest.approx(float(found.per_text[row["text_index"], row["layer"], row["head"]]),
                                                  abs=1e-6)
    mean = torch.tensor([[sum(r["importance"] for r in table if (r["layer"], r["head"]) == (layer, head)) / len(TEXTS)
                          for head in range(4)] for layer in range(2)])
    torch.testing.assert_close(mean / mean.norm(dim=1, keepdim=True), found.gradient, rtol=1e-4, atol=1e-6)
    # the atlas reads it beside heads.parquet: each head's mean is its normalised importance, its ablation the mean
    atlas = run_cli("atlas", str(out), "--format", "json")
    assert atlas.exit_code == 0, atlas.stderr
    heads_doc = {(h["layer"], h["head"]): h for h in json.loads(atlas.stdout)["heads"]}
    for (layer, head), entry in heads_doc.items():
        assert entry["means"]["importance"] == pytest.approx(float(found.gradient[layer, head]), abs=1e-5)
        assert entry["means"]["ablation"] == pytest.approx(float(found.ablation[layer, head]), abs=1e-5)
        assert sum(entry["histograms"]["importance"]) == len(TEXTS)


def test_the_atlas_of_a_file_of_texts_computes_the_importance_itself(lm, run_cli, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    result = run_cli("atlas", str(texts), "--model", lm, "--importance", "--format", "json")
    assert result.exit_code == 0, result.stderr
    found = head_importance(load_source(lm, engine="fused"), TEXTS)
    for entry in json.loads(result.stdout)["heads"]:
        assert entry["means"]["importance"] == pytest.approx(float(found.gradient[entry["layer"], entry["head"]]),
                                                             abs=1e-5)
    alone = run_cli("atlas", str(texts), "--model", lm, "--ablate", "zero")
    assert alone.exit_code != 0 and "goes with --importance" in alone.stderr


def test_columns_name_importance_in_their_order(lm, run_cli):
    shown = run_cli("heads", TEXTS[0], "--model", lm, "--importance", "--columns", "importance,ent", "--width", "120")
    assert shown.exit_code == 0, shown.stderr
    header = next(line for line in shown.stdout.splitlines() if line.lstrip().startswith("L "))
    assert header.index("importance") < header.index("ent")
    bad = run_cli("heads", TEXTS[0], "--model", lm, "--columns", "ablation")
    assert bad.exit_code != 0 and "needs --importance and --ablate" in bad.stderr
