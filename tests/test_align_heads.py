"""Finding a Whisper's alignment heads (issue 61 item 4: attnviz/audio/head_search.py, references.py,
head_outputs.py, attnviz align-heads) on the sound organism (sample_configs/organism_whisper.toml), whose alignment
head L1H0 reads each word's declared time, L1H1 the first frames, L1H2 every position alike (and L0H0-3, L1H3,
unplanted, every position alike too): its clip's reference is the organism's declared words and times."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile  # noqa: F401  (the sound extra: the test extra installs it; missing, these fail)
import torch
from audio_models import clip

from attnviz.audio.head_search import find_alignment_heads, write_config
from attnviz.audio.model import load_whisper
from attnviz.audio.organism_spec import read_sound_spec
from attnviz.audio.references import Clip, ReferenceWord, read_head_corpus, read_reference
from attnviz.audio.timing import align, token_timestamps
from attnviz.errors import InputError, UsageError

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_configs" / "organism_whisper.toml"
SPEC = read_sound_spec(SAMPLE)
WORDS = list(zip(SPEC.tokens, SPEC.times[:-1], SPEC.times[1:], strict=True))
PLANTED, FIRST_FRAMES, UNIFORM = (1, 0), (1, 1), (1, 2)


@pytest.fixture(scope="module")
def organism(organism_cache):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTNVIZ_CACHE", str(organism_cache))
        return load_whisper(str(SAMPLE))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A folder of two clips (2.5 s and 2 s), one with a CSV reference, one with a TextGrid, and a CSV corpus of
    them beside with a JSON reference."""
    folder = tmp_path_factory.mktemp("corpus")
    clip(folder / "a.wav", 2.5)
    clip(folder / "b.wav", 2.0, seed=1)
    (folder / "a.csv").write_text("word,start,end\n" + "".join(f"{w},{s},{e}\n" for w, s, e in WORDS),
                                  encoding="utf-8")
    (folder / "b.TextGrid").write_text(textgrid(WORDS), encoding="utf-8")
    (folder / "a_ref.json").write_text(json.dumps([{"word": w.upper(), "start": s, "end": e} for w, s, e in WORDS]),
                                       encoding="utf-8")
    (folder / "corpus.csv").write_text("audio,reference\na.wav,a_ref.json\nb.wav,b.TextGrid\n", encoding="utf-8")
    return folder


def textgrid(words) -> str:
    """Praat's long text format: a phones tier, then the words tier with a silence at the end."""
    end = words[-1][2] + 0.2
    intervals = [*words, ("", words[-1][2], end)]
    items = "".join(f'        intervals [{i}]:\n            xmin = {s}\n            xmax = {e}\n            text = "{w}"\n'
                    for i, (w, s, e) in enumerate(intervals, start=1))
    tier = ('    item [{n}]:\n        class = "IntervalTier"\n        name = "{name}"\n        xmin = 0\n'
            '        xmax = {end}\n        intervals: size = {size}\n')
    phones = tier.format(n=1, name="phones", end=end, size=1) + (
        f'        intervals [1]:\n            xmin = 0\n            xmax = {end}\n            text = "x"\n')
    return ('File type = "ooTextFile"\nObject class = "TextGrid"\n\nxmin = 0\nxmax = ' f"{end}\ntiers? <exists>\n"
            "size = 2\nitem []:\n" + phones + tier.format(n=2, name="words", end=end, size=len(intervals)) + items)


@pytest.fixture(scope="module")
def search(organism, corpus):
    return find_alignment_heads(corpus, organism)


def test_the_planted_head_is_ranked_first_to_a_frame_and_the_uniform_one_last(search):
    ranked = [(s.layer, s.head) for s in search.heads]
    assert ranked[0] == PLANTED and search.heads[0].error < 0.02 and search.heads[0].within == (1.0, 1.0, 1.0)
    errors = {(s.layer, s.head): s.error for s in search.heads}
    worst = max(errors.values())
    assert errors[UNIFORM] == worst  # last: tied only with the unplanted heads, which attend every position alike
    assert {h for h, e in errors.items() if e == worst} == {UNIFORM, (0, 0), (0, 1), (0, 2), (0, 3), (1, 3)}
    assert errors[FIRST_FRAMES] < worst
    assert search.labelled and search.clips == ["a.wav", "b.wav"]


def test_the_greedy_set_holds_the_planted_head_and_its_three_forms(search, organism):
    from attnviz.audio.heads_format import from_openai_mask, from_whisper_cpp

    assert search.chosen == (PLANTED,) and search.set_error == 0.0  # nothing lowers an error of 0
    forms = search.forms()
    assert forms["alignment_heads"] == [[1, 0]]
    assert from_openai_mask(forms["openai_mask"], 2, 4) == [PLANTED]
    assert from_whisper_cpp(forms["whisper_cpp"]) == [PLANTED]


def _error(found, words) -> tuple[float, list[float]]:
    errors = np.abs(np.concatenate([[w.start - s for w, (_, s, _) in zip(found.words, words, strict=True)],
                                    [w.end - e for w, (_, _, e) in zip(found.words, words, strict=True)]]))
    return float(errors.mean()), [float((errors <= t + 1e-9).mean()) for t in (0.02, 0.05, 0.1)]


def test_each_heads_score_is_align_run_alone_with_that_head(organism, corpus, search):
    """One pass for every head equals a pass per head: align(heads=[head]) on each clip, scored by hand."""
    text = " ".join(w for w, _, _ in WORDS)
    by_head = {(s.layer, s.head): s for s in search.heads}
    for head, score in by_head.items():
        per_clip = [_error(align(corpus / name, organism, text=text, heads=[head]), WORDS) for name in ("a.wav", "b.wav")]
        assert score.error == pytest.approx(np.mean([e for e, _ in per_clip]), abs=1e-12)
        assert score.within == pytest.approx(tuple(np.mean([w for _, w in per_clip], axis=0)), abs=1e-12)


def test_the_greedy_set_is_scored_as_align_scores_that_set(organism, corpus):
    """A set chosen with no tolerance and up to 3 heads: its error is align's over that set."""
    found = find_alignment_heads(corpus, organism, tolerance=0.0, max_heads=3)
    text = " ".join(w for w, _, _ in WORDS)
    assert found.chosen[0] == PLANTED and found.steps[0]["added"] == [1, 0]
    per_clip = [_error(align(corpus / n, organism, text=text, heads=list(found.chosen)), WORDS)[0]
                for n in ("a.wav", "b.wav")]
    assert found.set_error == pytest.approx(np.mean(per_clip), abs=1e-12)


def test_the_label_free_score_is_the_papers_sum_of_norms(search, corpus, organism):
    """arXiv 2509.09987's score of a head that attends every position alike, by hand: T rows over P positions,
    columns of norm √T / P (P of them) and rows of norm 1 / √P (T of them)."""
    rows = 4 + len(WORDS) + 1  # start of transcript, language, task, no-timestamps; the words; end of text
    by_head = {(s.layer, s.head): s.label_free for s in search.heads}
    expected = np.mean([math.sqrt(rows) + rows / math.sqrt(p) for p in (125, 100)])  # 2.5 s and 2 s, 50 a second
    assert by_head[UNIFORM] == pytest.approx(expected, rel=1e-5)
    assert max(by_head, key=lambda h: by_head[h]) == PLANTED
    blind = find_alignment_heads([Clip(corpus / "a.wav", None)], organism)  # no references: ranked by the score
    assert not blind.labelled and blind.heads[0].error is None
    assert (blind.heads[0].layer, blind.heads[0].head) == PLANTED and len(blind.chosen) == 2  # as many as layers


def test_the_written_config_loads_in_transformers_and_generate_reads_its_heads(organism, corpus, tmp_path, search):
    from transformers import GenerationConfig, WhisperForConditionalGeneration

    from attnviz.audio.hearing import hear
    from attnviz.audio.organism import sound_organism_folder
    from attnviz.audio.whisper import whisper_attention

    # a copy whose alignment_heads name the first-frames head, then a copy of that copy with the set found
    wrong = write_config(tmp_path / "wrong", str(SAMPLE), [FIRST_FRAMES])
    written = write_config(tmp_path / "aligned", str(wrong), search.chosen)
    assert GenerationConfig.from_pretrained(wrong).alignment_heads == [[1, 1]]
    assert GenerationConfig.from_pretrained(written).alignment_heads == [list(h) for h in search.chosen]
    heard = hear(corpus / "a.wav", organism)
    features = organism.features(heard.samples, sampling_rate=16_000, return_tensors="pt",
                                 return_attention_mask=True)

    def stamps(folder):
        network = WhisperForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
        with torch.no_grad():
            out = network.generate(features.input_features, attention_mask=features.attention_mask, language="en",
                                   task="transcribe", return_timestamps=False, return_token_timestamps=True,
                                   return_dict_in_generate=True)
        return out["token_timestamps"][0].numpy()

    result = whisper_attention(corpus / "a.wav", organism)
    found = stamps(written)
    np.testing.assert_allclose(found, token_timestamps(result.cross_attentions, list(search.chosen),
                                                       heard.positions, 4), atol=1e-6)
    np.testing.assert_allclose(found[4:], [0.0, *SPEC.times[2:], SPEC.times[-1]], atol=1e-6)  # the declared times
    assert not np.allclose(stamps(wrong), found)  # transformers read the heads written, not the model's
    with pytest.raises(UsageError, match="exists and is not empty"):
        write_config(written, str(SAMPLE), search.chosen)
    own = sound_organism_folder(SAMPLE)[0]
    with pytest.raises(UsageError, match="the model's own folder"):
        write_config(own, str(SAMPLE), search.chosen)
    assert not list(tmp_path.glob(".*"))  # no temporary folder left


def test_references_in_three_forms_read_alike(corpus):
    words = [(w.word.lower(), w.start, w.end) for w in read_reference(corpus / "a_ref.json")]
    assert words == WORDS
    assert [(w.word, w.start, w.end) for w in read_reference(corpus / "b.TextGrid")] == WORDS  # the silence dropped
    assert [(w.word, w.start, w.end) for w in read_reference(corpus / "a.csv")] == WORDS
    clips = read_head_corpus(corpus / "corpus.csv")
    assert [c.audio.name for c in clips] == ["a.wav", "b.wav"] and all(c.reference for c in clips)


def test_a_corpus_row_outside_its_folder_is_refused(corpus, tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "c.csv").write_text(f"audio,reference\n../x.wav,r.json\n{corpus / 'a.wav'},r.json\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"row 1: its clip '\.\./x\.wav' is outside the corpus's folder"):
        read_head_corpus(inner / "c.csv")
    (inner / "d.csv").write_text(f"audio,reference\n{corpus / 'a.wav'},{corpus / 'a.csv'}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"row 1: its clip .* is outside"):
        read_head_corpus(inner / "d.csv")


def test_a_reference_with_other_words_is_refused_by_name(organism, corpus):
    other = tuple(ReferenceWord(w if w != "sat" else "sits", s, e) for w, s, e in WORDS)
    with pytest.raises(InputError) as caught:
        find_alignment_heads([Clip(corpus / "a.wav", other, "the cat sat on the mat")], organism)
    assert "a.wav: its reference's word 3 is 'sits' where the transcript has 'sat'" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_command_prints_the_table_and_writes_each_kind(run_cli, corpus, tmp_path):
    outs = [tmp_path / f"heads.{kind}" for kind in ("json", "csv", "png", "html")]
    result = run_cli("align-heads", str(corpus), "--model", str(SAMPLE), *[a for p in outs for a in ("--out", str(p))],
                     "--write-config", str(tmp_path / "aligned"))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    first = next(line for line in lines if line.split()[:3] == ["1", "1", "0"])
    assert "0.000" in first and "100%" in first
    assert "generation_config.json alignment_heads: [[1, 0]]" in result.stdout
    assert "g_aheads_custom[] = { {1, 0} };" in result.stdout
    document = json.loads(outs[0].read_text(encoding="utf-8"))
    assert document["chosen"] == [[1, 0]] and document["heads"][0]["error"] == 0.0
    with outs[1].open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert (rows[0]["layer"], rows[0]["head"], rows[0]["chosen"]) == ("1", "0", "True") and len(rows) == 8
    assert outs[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = outs[3].read_text(encoding="utf-8")  # offline: the grid inline, the set's three forms, every head ranked
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "data:image/png;base64," in page
    assert "g_aheads_custom[] = { {1, 0} };" in page and "[[1, 0]]" in page and page.count("<tr>") >= 8 + 1
    assert json.loads((tmp_path / "aligned" / "generation_config.json").read_text())["alignment_heads"] == [[1, 0]]
    csv_out = run_cli("align-heads", str(corpus / "corpus.csv"), "--model", str(SAMPLE), "--format", "csv",
                      "--top", "2")
    assert csv_out.exit_code == 0 and len(csv_out.stdout.strip().splitlines()) == 3


def test_the_command_refuses_in_one_line(run_cli, corpus, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    result = run_cli("align-heads", str(corpus), "--model", str(SAMPLE), "--write-config", str(full))
    assert result.exit_code != 0 and "exists and is not empty" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = run_cli("align-heads", str(corpus), "--model", str(SAMPLE), "--out", str(tmp_path / "x.txt"))
    assert result.exit_code != 0 and len(result.stderr.strip().splitlines()) == 1
