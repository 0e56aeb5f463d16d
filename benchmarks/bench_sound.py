"""Sound (issue 61): ``attnviz align`` of a 30-s clip on a whisper-base-shaped model against transformers'
``generate(return_token_timestamps=True)`` on the same weights (goal: at most 1.5x), and ``attnviz align-heads`` over
100 clips against the floor of one teacher-forced transformers pass per clip with ``output_attentions=True`` (what
"one forward per clip" costs; every head is then scored from that pass).

The model is whisper-base's shape (6 + 6 layers of 8 heads, d=512, 80 mel bins, the multilingual 51,865-token
vocabulary: openai-whisper's own tokenizer, read from the installed openai-whisper as tests/audio_models.py does),
random weights saved locally. End of text is among its suppressed tokens, so both sides write the same number of
tokens (``--tokens``, 224 by default: align's and openai-whisper's limit) greedily, then read the timings: attnviz
one more teacher-forced pass, DTW and words; transformers its attentions kept at each step, DTW, token times. Each side
runs in a fresh process, timed whole (start-up, model load, the clip read, the work), medians of ``--runs``.

Run: python benchmarks/bench_sound.py [--runs 3] [--seconds 30] [--clips 100] [--only align,align-heads]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path

from _common import PY, offline_env, report, time_command

ROOT = Path(__file__).resolve().parent.parent

ALIGN_BASELINE = r"""
import sys, soundfile, torch
from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration
folder, clip, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = WhisperForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
features = WhisperFeatureExtractor.from_pretrained(folder)
samples, rate = soundfile.read(clip, dtype="float32")
inputs = features(samples, sampling_rate=rate, return_tensors="pt")
with torch.no_grad():
    out = model.generate(inputs.input_features, language="en", task="transcribe", return_token_timestamps=True,
                         return_timestamps=False, max_new_tokens=tokens, do_sample=False, num_beams=1)
print(out["sequences"].shape, out["token_timestamps"].shape)
"""

HEADS_BASELINE = r"""
import json, sys, soundfile, torch
from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizer
folder, listing = sys.argv[1], sys.argv[2]
model = WhisperForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
features = WhisperFeatureExtractor.from_pretrained(folder)
tokenizer = WhisperTokenizer.from_pretrained(folder)
tokenizer.set_prefix_tokens(language="en", task="transcribe", predict_timestamps=False)
for clip, text in json.load(open(listing)):
    samples, rate = soundfile.read(clip, dtype="float32")
    inputs = features(samples, sampling_rate=rate, return_tensors="pt")
    ids = torch.tensor([tokenizer(" " + text).input_ids])
    with torch.no_grad():
        out = model(input_features=inputs.input_features, decoder_input_ids=ids, output_attentions=True)
    assert len(out.cross_attentions) == model.config.decoder_layers
"""

WORDS = ("the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "ran", "far", "away")


def build(folder: Path) -> Path:
    """whisper-base's shape with random weights and openai-whisper's tokenizer, end of text suppressed."""
    import torch
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    sys.path.insert(0, str(ROOT / "tests"))
    from audio_models import openai_tokenizer

    tokenizer = openai_tokenizer()
    ids = tokenizer.convert_tokens_to_ids
    eot, sot = ids("<|endoftext|>"), ids("<|startoftranscript|>")
    config = WhisperConfig(vocab_size=51865, num_mel_bins=80, encoder_layers=6, decoder_layers=6,
                           encoder_attention_heads=8, decoder_attention_heads=8, d_model=512, encoder_ffn_dim=2048,
                           decoder_ffn_dim=2048, decoder_start_token_id=sot, pad_token_id=eot, bos_token_id=eot,
                           eos_token_id=eot, suppress_tokens=[], begin_suppress_tokens=[220, eot])
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot, max_length=448,
        is_multilingual=True, lang_to_id={f"<|{c}|>": ids(f"<|{c}|>") for c in LANGUAGES if ids(f"<|{c}|>")},
        task_to_id={"transcribe": ids("<|transcribe|>"), "translate": ids("<|translate|>")},
        no_timestamps_token_id=ids("<|notimestamps|>"), prev_sot_token_id=ids("<|startofprev|>"),
        suppress_tokens=[eot, *range(eot + 1, 51865)], begin_suppress_tokens=[220, eot],
        alignment_heads=[[3, 1], [4, 2], [4, 3], [4, 7], [5, 1], [5, 2], [5, 4], [5, 6]],  # whisper-base's count
        return_timestamps=False)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    WhisperFeatureExtractor(feature_size=80).save_pretrained(folder)
    return folder


def chirp(path: Path, seconds: float, seed: int = 0) -> Path:
    """A chirp under a little noise, 16 kHz mono."""
    import numpy as np
    import soundfile

    t = np.arange(round(seconds * 16_000)) / 16_000
    wave = 0.3 * np.sin(2 * np.pi * (200 * t + 600 * t**2 / seconds))
    wave += 0.02 * np.random.default_rng(seed).standard_normal(len(t))
    soundfile.write(path, wave.astype(np.float32), 16_000)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="the align clip's length")
    parser.add_argument("--tokens", type=int, default=224, help="tokens both sides write greedily")
    parser.add_argument("--clips", type=int, default=100, help="align-heads' corpus size")
    parser.add_argument("--clip-seconds", type=float, default=5.0, help="each corpus clip's length")
    parser.add_argument("--only", default="align,align-heads")
    args = parser.parse_args()
    only = set(args.only.split(","))
    env = offline_env()
    attnviz = [PY, "-m", "attnviz"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = build(Path(tmp) / "whisper-base-shaped")
        if "align" in only:
            clip = chirp(Path(tmp) / "clip.wav", args.seconds)
            base = time_command([PY, "-c", ALIGN_BASELINE, str(folder), str(clip), str(args.tokens)], args.runs, env)
            ours = time_command([*attnviz, "align", str(clip), "--model", str(folder), "--language", "en",
                                 "--format", "json"], args.runs, env)
            report(f"align: a {args.seconds:g}-s clip, whisper-base shape, {args.tokens} tokens greedy + timings",
                   "attnviz align", ours, "transformers generate(return_token_timestamps)", base, goal="<= 1.5x")
        if "align-heads" in only:
            corpus = Path(tmp) / "corpus"
            corpus.mkdir()
            rows, listing = [], []
            for k in range(args.clips):
                words = [WORDS[(k + 3 * i) % len(WORDS)] for i in range(8)]
                name = f"c{k}.wav"
                chirp(corpus / name, args.clip_seconds, seed=k)
                step = args.clip_seconds / len(words)
                reference = [{"word": w, "start": round(i * step, 3), "end": round((i + 1) * step, 3)}
                             for i, w in enumerate(words)]
                (corpus / f"c{k}.json").write_text(json.dumps(reference))
                rows.append({"audio": name, "reference": f"c{k}.json", "text": " ".join(words)})
                listing.append([str(corpus / name), " ".join(words)])
            with open(corpus / "corpus.csv", "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=["audio", "reference", "text"])
                writer.writeheader()
                writer.writerows(rows)
            (Path(tmp) / "listing.json").write_text(json.dumps(listing))
            base = time_command([PY, "-c", HEADS_BASELINE, str(folder), str(Path(tmp) / "listing.json")], args.runs,
                                env)
            ours = time_command([*attnviz, "align-heads", str(corpus / "corpus.csv"), "--model", str(folder),
                                 "--language", "en", "--format", "json"], args.runs, env)
            report(f"align-heads: {args.clips} clips of {args.clip_seconds:g} s, every one of 48 heads scored, a set "
                   "chosen", "attnviz align-heads", ours, "one transformers forward per clip (the floor)", base,
                   goal="a small multiple of one forward per clip")


if __name__ == "__main__":
    main()
