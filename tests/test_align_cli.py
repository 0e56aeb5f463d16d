"""``attnviz align`` (issue 61 item 3) on the sound organism (sample_configs/organism_whisper.toml, whose alignment
head reads each word's declared time) and its clip (examples/organism_whisper.flac): the words printed with their
times, the declared times found to a frame (0.02 s), every --out kind written and read back (by the readers of
tests/test_subtitles.py) equal to the JSON's times; the heads from --heads, the checkpoint's alignment_heads or
openai-whisper's default (a tiny random Whisper without them); refusals in one line: a head outside the decoder, a
missing clip, an --out over the clip, an unknown extension."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("soundfile")
from audio_models import CLIP, ORGANISM, tiny_whisper
from test_subtitles import read_srt, read_textgrid, read_vtt

from attnviz.audio.organism_spec import read_sound_spec

ROOT = Path(__file__).resolve().parent.parent
FRAME = 0.02


def one_error_line(result, *words: str, code: int | None = None) -> None:
    assert result.exit_code != 0 and (code is None or result.exit_code == code), (result.exit_code, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("attnviz: error: "), result.stderr
    assert "Traceback" not in result.stderr and all(w in result.stderr for w in words), result.stderr


@pytest.fixture(scope="module")
def spec():
    return read_sound_spec(ORGANISM)


def declared(spec) -> list[tuple[str, float, float]]:
    return [(word, start, end) for word, start, end in zip(spec.tokens, spec.times[:-1], spec.times[1:], strict=True)]


def test_the_example_clip_is_short_mono_and_longer_than_the_organisms_last_word(spec):
    from attnviz.audio.read import audio_header

    header = audio_header(CLIP)
    assert header.channels == 1 and spec.times[-1] < header.seconds <= 3 and Path(CLIP).stat().st_size < 20_000


def test_align_prints_each_word_with_its_start_and_end(run_cli, spec):
    r = run_cli("align", CLIP, "--model", ORGANISM, "--width", "100")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("whisper-organism: 6 words in 2.00 s, en; heads L1H0 (the checkpoint's alignment_heads)")
    assert lines[1].split() == ["word", "start", "end", "probability"]
    rows = [line.split() for line in lines[2:]]
    assert [(w, float(a), float(b)) for w, a, b, _ in rows] == declared(spec)
    assert all(re.fullmatch(r"\d+\.\d\d", v) for row in rows for v in row[1:])  # seconds, 2 decimals
    plain = run_cli("align", CLIP, "--model", ORGANISM, "--width", "100", env={"NO_COLOR": "1"})
    assert plain.exit_code == 0 and plain.stdout == r.stdout and "\x1b" not in plain.stdout


def test_the_declared_times_are_found_to_a_frame_by_word_and_by_token(run_cli, spec):
    r = run_cli("align", CLIP, "--model", ORGANISM, "--format", "json")
    assert r.exit_code == 0, r.stderr
    document = json.loads(r.stdout)
    assert document["model"] == "whisper-organism" and document["heads"] == [[1, 0]]
    assert document["heads_from"] == "generation_config" and document["language"] == "en"
    assert document["text"] == " " + " ".join(spec.tokens)
    for kind, key in (("words", "word"), ("tokens", "text")):
        found = [(item[key].strip(), item["start"], item["end"]) for item in document[kind]]
        assert [w for w, _, _ in found] == list(spec.tokens)
        for (_, start, end), (_, want_start, want_end) in zip(found, declared(spec), strict=True):
            assert abs(start - want_start) <= FRAME and abs(end - want_end) <= FRAME
    tokens = run_cli("align", CLIP, "--model", ORGANISM, "--level", "token", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(tokens.stdout)))
    assert tokens.exit_code == 0 and list(rows[0]) == ["token", "id", "start", "end", "probability"]
    assert [(r["token"], float(r["start"]), float(r["end"])) for r in rows] == \
        [(t["text"], t["start"], t["end"]) for t in document["tokens"]]


def test_a_given_transcript_is_timed_alike(run_cli):
    own = run_cli("align", CLIP, "--model", ORGANISM, "--format", "json")
    given = run_cli("align", CLIP, "--model", ORGANISM, "--format", "json", "--text", "the cat sat on the mat",
                    "--language", "en")
    assert own.exit_code == given.exit_code == 0, given.stderr
    times = lambda r: [(w["word"], w["start"], w["end"]) for w in json.loads(r.stdout)["words"]]  # noqa: E731
    assert times(given) == times(own)


def test_every_out_kind_reads_back_as_the_jsons_times(run_cli, tmp_path):
    names = ["a.json", "a.csv", "a.srt", "a.vtt", "a.TextGrid"]
    r = run_cli("align", CLIP, "--model", ORGANISM, *[x for n in names for x in ("--out", str(tmp_path / n))])
    assert r.exit_code == 0, r.stderr
    assert [line for line in r.stdout.splitlines() if line.startswith("wrote ")] == \
        [f"wrote {tmp_path / n}" for n in names]
    document = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))
    words = [(w["word"].strip(), round(w["start"] * 1000), round(w["end"] * 1000)) for w in document["words"]]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "a.csv").read_text(encoding="utf-8"))))
    assert [(r["word"].strip(), round(float(r["start"]) * 1000), round(float(r["end"]) * 1000)) for r in rows] == words
    line = (words[0][1], words[-1][2], " ".join(w for w, _, _ in words))  # 22 characters in 1.8 s: one line
    assert read_srt((tmp_path / "a.srt").read_text(encoding="utf-8")) == [line]
    assert read_vtt((tmp_path / "a.vtt").read_text(encoding="utf-8")) == [line]
    grid_max, tiers = read_textgrid((tmp_path / "a.TextGrid").read_text(encoding="utf-8"))
    assert grid_max == document["duration"] == 2.0
    for tier, items, key in (("words", document["words"], "word"), ("tokens", document["tokens"], "text")):
        timed = [(t, round(a * 1000), round(b * 1000)) for a, b, t in tiers[tier] if t]
        assert timed == [(i[key].strip(), round(i["start"] * 1000), round(i["end"] * 1000)) for i in items]
    assert tiers["words"][-1] == (1.8, 2.0, "")  # the clip after the last word: an empty interval
    shown = run_cli("align", CLIP, "--model", ORGANISM, "--format", "json", "--out", str(tmp_path / "b.srt"))
    assert shown.exit_code == 0 and json.loads(shown.stdout) == document  # the document on stdout, the note on stderr
    assert shown.stderr == f"attnviz: wrote {tmp_path / 'b.srt'}\n"


def test_the_subtitle_limits_split_lines(run_cli, tmp_path):
    r = run_cli("align", CLIP, "--model", ORGANISM, "--line-chars", "8", "--out", str(tmp_path / "a.vtt"))
    assert r.exit_code == 0, r.stderr
    cues = read_vtt((tmp_path / "a.vtt").read_text(encoding="utf-8"))
    assert [text for _, _, text in cues] == ["the cat", "sat on", "the mat"]
    assert [(a, b) for a, b, _ in cues] == [(0, 600), (600, 1200), (1200, 1800)]
    r = run_cli("align", CLIP, "--model", ORGANISM, "--cue-seconds", "0.5", "--out", str(tmp_path / "a.srt"))
    assert r.exit_code == 0 and len(read_srt((tmp_path / "a.srt").read_text(encoding="utf-8"))) == 6


def test_heads_given_and_heads_refused(run_cli):
    r = run_cli("align", CLIP, "--model", ORGANISM, "--heads", "1:0,1:1", "--format", "json")
    assert r.exit_code == 0, r.stderr
    document = json.loads(r.stdout)
    assert document["heads"] == [[1, 0], [1, 1]] and document["heads_from"] == "given"
    one_error_line(run_cli("align", CLIP, "--model", ORGANISM, "--heads", "2:0"), "--heads", "layer 2, head 0",
                   "2 layers × 4 heads", code=2)
    one_error_line(run_cli("align", CLIP, "--model", ORGANISM, "--heads", "1:9"), "--heads", "head 9", code=2)
    one_error_line(run_cli("align", CLIP, "--model", ORGANISM, "--heads", "1:0,1:0"), "--heads", "named twice", code=2)
    for bad in ("x", "1", "1:-1", "1:0,,a:b", ","):
        one_error_line(run_cli("align", CLIP, "--model", ORGANISM, "--heads", bad), "--heads", code=2)


def test_the_default_heads_are_the_decoders_last_half(run_cli, tmp_path):
    folder = tiny_whisper(tmp_path / "whisper", alignment_heads=[])  # no alignment_heads in its generation config
    r = run_cli("align", CLIP, "--model", str(folder), "--text", "hello world", "--language", "en", "--format", "json")
    assert r.exit_code == 0, r.stderr
    document = json.loads(r.stdout)
    assert document["heads_from"] == "default" and document["heads"] == [[1, h] for h in range(4)]
    assert [w["word"] for w in document["words"]] == [" hello", " world"]
    assert all(0 <= w["start"] <= w["end"] <= 2.0 for w in document["words"])
    table = run_cli("align", CLIP, "--model", str(folder), "--text", "hello world", "--language", "en", "--width", "200")
    assert "(openai-whisper's default: the decoder's last half)" in table.stdout.splitlines()[0]


def test_refusals_are_one_line(run_cli, tmp_path, capsys):
    one_error_line(run_cli("align", str(tmp_path / "missing.wav"), "--model", ORGANISM), "missing.wav",
                   "does not exist")
    clip = tmp_path / "clip.wav"
    shutil.copy(CLIP, tmp_path / "clip.flac")
    import soundfile

    samples, rate = soundfile.read(tmp_path / "clip.flac")
    soundfile.write(clip, samples, rate)
    one_error_line(run_cli("align", str(clip), "--model", ORGANISM, "--out", str(clip)), "clip.wav",
                   "one of this command's inputs")
    one_error_line(run_cli("align", str(clip), "--model", ORGANISM, "--out", str(tmp_path / "x.txt")), "x.txt",
                   ".srt", ".textgrid")
    one_error_line(run_cli("align", str(clip), "--model", ORGANISM, "--text", "a", "--text-file", str(clip)),
                   "--text", "not both", code=2)
    one_error_line(run_cli("align", str(clip), "--model", str(ROOT / "sample_configs" / "tiny.toml")),
                   "not a Whisper checkpoint")
    from attnviz.cli import main

    with pytest.raises(SystemExit) as stopped:  # a value click refuses: one line as the console script says it
        main(["align", str(clip), "--model", ORGANISM, "--task", "dance"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err == ("attnviz: error: --task: 'dance' is not one of transcribe, translate (see attnviz align --help)\n")
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    one_error_line(run_cli("align", str(empty), "--model", ORGANISM), "empty")


def test_the_help_names_every_option_and_an_example_that_runs(run_cli, tmp_path, monkeypatch):
    from conftest import built_command

    from attnviz.cli import app

    r = run_cli("align", "--help")
    assert r.exit_code == 0 and "Example: attnviz align" in r.stdout
    command = built_command(app).commands["align"]
    example = re.search(r"^\s*Example: (attnviz align .+)$", command.help, re.MULTILINE).group(1)
    assert all(p.help for p in command.params), [p.name for p in command.params if not p.help]
    monkeypatch.chdir(tmp_path)  # from an empty folder: the example clip and organism are the installed ones
    words = example.split()[1:]
    ran = run_cli(*words)
    assert ran.exit_code == 0, ran.stderr
    assert read_srt((tmp_path / "words.srt").read_text(encoding="utf-8"))[0][2] == "the cat sat on the mat"
