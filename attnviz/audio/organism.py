"""A sound organism built (issue 61 item 5): the tiny Whisper an organism's TOML describes (:mod:`.organism_spec`),
every weight written by hand, saved as a transformers checkpoint with its processor (a byte-level tokenizer made
offline: the 256 bytes, a merge for each of the text's tokens, Whisper's special tokens in their order; transformers'
feature extractor) and a generation config naming its alignment heads, so transformers' own
``generate(return_token_timestamps=True)`` runs it. Built once into attnviz's cache folder, named by a fingerprint of
the description.

Why its heads do what they say, whatever the clip (d_model = 128; every weight not named here is 0, so no attention
layer and no MLP writes anything and each unplanted head spreads evenly):

- the encoder hears nothing: its convolutions are 0, so its output at position p is its position embedding, made of
  two ones: the slot of p (token i where ``times[i] <= 0.02 p < times[i + 1]``, "after" past the last end, "before"
  ahead of the first start) and whether p is among the first positions; its final layer norm, whose statistics are
  the same at every position, is undone by its bias, leaving that code over a constant;
- the decoder's input at position t is a code of its slot (the row that predicts token i, from no-timestamps on,
  has token i's slot; the rest of the prompt its own) plus, in other numbers, its token's embedding and four times
  the embedding of the token after it (the prompt's next token too: the language it "hears" is its own), each a
  pair (+1, −1)/√2, so its mean is 0; the cross-attention's layer norm keeps only the slot's numbers;
- an alignment head's query is its slot's unit vector and the encoder's key its slot's, so row t reads the
  positions of its token's time; a first-frames head's query is the same for every row, and its key is set on the
  first positions; the scores are about 30 apart, so each row's weight is spread evenly over what it reads;
- the logits (the output projection is the token embedding) are largest for the token after: the organism says its
  text, and ends it."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .organism_spec import SoundSpec, read_sound_spec

VERSION = 3  # 3: the encoder as deep as the decoder (its layers write nothing: one head each), so every layer
# number is both's
"""The builder's version, in the fingerprint: a folder built by another version is rebuilt."""
D_MODEL = 128
GAIN = 3.0
"""The size of a planted query's and key's slot vectors: scores about 34 apart."""
NEXT = 4.0
"""The weight of the next token's embedding in a decoder position: it outweighs the token's own."""
MARK = "attnviz_sound_organism.json"


def sound_organism_folder(path: str | Path) -> tuple[Path, SoundSpec]:
    """The built checkpoint of the sound organism described at ``path`` (built on first use, rebuilt when its
    fingerprint or mark does not match), and its description."""
    from ..organisms.cache import cache_root

    spec = read_sound_spec(path)
    fingerprint = _fingerprint(spec)
    folder = cache_root() / f"whisper-{_safe(spec.name)}-{fingerprint[:16]}"
    mark = folder / MARK
    try:
        if json.loads(mark.read_text(encoding="utf-8")).get("fingerprint") == fingerprint:
            return folder, spec
    except (OSError, ValueError):
        pass
    temporary = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        build(spec, temporary)
        (temporary / MARK).write_text(json.dumps({"fingerprint": fingerprint, "version": VERSION}), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        temporary.rename(folder)
    except OSError as exc:
        shutil.rmtree(temporary, ignore_errors=True)
        raise ConfigError(f"{path}: the organism cannot be built in {folder.parent} ({exc.strerror or exc}); set "
                          "ATTNVIZ_CACHE to a writable folder") from None
    return folder, spec


def build(spec: SoundSpec, folder: Path) -> Path:
    """The organism ``spec`` saved in ``folder`` (made): model, tokenizer, feature extractor, generation config."""
    import torch
    import transformers
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    transformers.logging.disable_progress_bar()  # no "Writing model shards" bar on a user's stderr
    tokenizer = organism_tokenizer(spec)
    ids = tokenizer.convert_tokens_to_ids
    eot, sot = ids("<|endoftext|>"), ids("<|startoftranscript|>")
    config = WhisperConfig(vocab_size=len(tokenizer), num_mel_bins=spec.mels, encoder_layers=spec.layers,
                           decoder_layers=spec.layers, encoder_attention_heads=1,
                           decoder_attention_heads=spec.per_layer, d_model=D_MODEL, encoder_ffn_dim=2 * D_MODEL,
                           decoder_ffn_dim=2 * D_MODEL, decoder_start_token_id=sot, pad_token_id=eot, bos_token_id=eot,
                           eos_token_id=eot, suppress_tokens=[], begin_suppress_tokens=[ids("Ġ"), eot])
    if D_MODEL % spec.per_layer:
        raise ConfigError(f"{spec.name}: heads = {spec.per_layer} does not divide the organism's {D_MODEL} numbers; "
                          "give 1, 2, 4 or 8")
    torch.manual_seed(spec.seed)
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        for value in model.parameters():
            value.zero_()
        _write(model, spec, tokenizer)
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot, max_length=448,
        is_multilingual=True, lang_to_id={f"<|{c}|>": ids(f"<|{c}|>") for c in LANGUAGES},
        task_to_id={"transcribe": ids("<|transcribe|>"), "translate": ids("<|translate|>")},
        no_timestamps_token_id=ids("<|notimestamps|>"), prev_sot_token_id=ids("<|startofprev|>"),
        suppress_tokens=[], begin_suppress_tokens=[ids("Ġ"), eot], return_timestamps=False,
        alignment_heads=[[h.layer, h.head] for h in spec.heads if h.kind == "alignment"])
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    WhisperFeatureExtractor(feature_size=spec.mels).save_pretrained(folder)
    return folder


def organism_tokenizer(spec: SoundSpec) -> Any:
    """A WhisperTokenizer in which each of the organism's tokens (after a space, for languages written with spaces)
    is one token (:func:`byte_tokenizer`), each checked to be one token."""
    from .languages import NO_SPACES

    space = spec.language not in NO_SPACES
    forms = [(" " if space else "") + token for token in spec.tokens]
    tokenizer = byte_tokenizer(forms)
    for form in forms:
        if len(tokenizer(form, add_special_tokens=False)["input_ids"]) != 1:
            raise ConfigError(f"{spec.name}: {form.strip()!r} is not one token of the organism's vocabulary; write "
                              "its text as words (or characters) without punctuation")
    return tokenizer


def byte_tokenizer(forms: Sequence[str]) -> Any:
    """A WhisperTokenizer made offline: the 256 bytes (GPT-2's byte-level alphabet, as transformers writes it), the
    merges that make each of ``forms`` one token, in order, and Whisper's special tokens after them."""
    from tokenizers import AddedToken
    from transformers import WhisperTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = bytes_to_unicode()
    vocab = {ch: i for i, ch in enumerate(alphabet[b] for b in range(256))}
    merges: list[tuple[str, str]] = []
    for form in forms:
        pieces = [alphabet[b] for b in form.encode("utf-8")]
        while len(pieces) > 1:
            pair = (pieces[0], pieces[1])
            if pair not in merges:
                merges.append(pair)
            pieces = [pieces[0] + pieces[1], *pieces[2:]]
            vocab.setdefault(pieces[0], len(vocab))
    specials = whisper_specials()
    for token in specials:
        vocab[token] = len(vocab)
    tokenizer = WhisperTokenizer(vocab=vocab, merges=merges)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in specials], special_tokens=True)
    return tokenizer


def _write(model: Any, spec: SoundSpec, tokenizer: Any) -> None:
    """Every weight the module names (the rest are 0)."""
    import torch

    from .languages import NO_SPACES

    n = len(spec.tokens)
    spoken = ("" if spec.language in NO_SPACES else " ") + spec.text
    text_ids = tokenizer(spoken, add_special_tokens=False)["input_ids"]
    ids = tokenizer.convert_tokens_to_ids
    eot = ids("<|endoftext|>")
    # the prompt: start of transcript, then the language, the task and no-timestamps, each what the row before says
    prompt_ids = [ids("<|startoftranscript|>"), ids(f"<|{spec.language}|>"), ids("<|transcribe|>"),
                  ids("<|notimestamps|>")]
    prompt = len(prompt_ids)
    # the residual's numbers: each slot a pair (the decoder) or a one (the encoder); then each token's pair
    after, before = n, n + 1  # slots: token i (i < n), after the last end, before the first start (encoder only)
    prompt_slot = n + 1  # the decoder's rows ahead of no-timestamps
    flags = n + 2  # the encoder's two first-positions flags: n + 2 (among the first), n + 3 (not)
    embedded = sorted(set(text_ids) | {eot} | set(prompt_ids[1:]))
    token_pair = {t: 2 * (n + 2) + 2 * k for k, t in enumerate(embedded)}
    if 2 * (n + 2) + 2 * len(embedded) > D_MODEL:  # pragma: no cover (MAX_TOKENS keeps it inside)
        raise ConfigError(f"{spec.name}: {n} tokens do not fit the organism's {D_MODEL} numbers")
    root = 1 / math.sqrt(2)

    def pair(at: int) -> Any:
        vector = torch.zeros(D_MODEL)
        vector[at], vector[at + 1] = root, -root
        return vector

    encoder, decoder = model.model.encoder, model.model.decoder
    # the encoder: its output at p is LN(one of its slot + one of its flag), the norm undone by the bias
    step = 0.02
    positions = int(encoder.embed_positions.weight.shape[0])
    first = max((h.positions for h in spec.heads if h.kind == "first_frames"), default=0)
    table = torch.zeros(positions, D_MODEL)
    for p in range(positions):
        time = p * step
        slot = before if time < spec.times[0] - 1e-9 else after if time >= spec.times[-1] - 1e-9 else \
            max(i for i in range(n) if spec.times[i] <= time + 1e-9)
        table[p, slot] = 1.0
        table[p, flags if p < first else flags + 1] = 1.0
    encoder.embed_positions.weight.copy_(table)
    _undo_norm(encoder.layer_norm, used=range(flags + 2), ones=2)
    for layer in encoder.layers:  # the norms before the planted-nothing layers: any finite values do
        layer.self_attn_layer_norm.weight.fill_(1.0)
        layer.final_layer_norm.weight.fill_(1.0)
    # the decoder: position t = its slot's pair + NEXT × the next token's pair; token j's embedding its pair
    sequence = [None, *prompt_ids[1:], *text_ids, eot]  # what each position reads (start of transcript: given)
    rows = int(decoder.embed_positions.weight.shape[0])
    codes = torch.zeros(rows, D_MODEL)
    for t in range(rows):
        k = t - (prompt - 1)  # the text token row t predicts
        slot = prompt_slot if k < 0 else min(k, after)
        codes[t] += pair(2 * slot)
        following = sequence[t + 1] if t + 1 < len(sequence) else eot
        if following is not None:
            codes[t] += NEXT * pair(token_pair[following])
    decoder.embed_positions.weight.copy_(codes)
    for token, at in token_pair.items():
        decoder.embed_tokens.weight[token] = pair(at)
    decoder.layer_norm.weight.fill_(1.0)
    size = D_MODEL // spec.per_layer
    if n + 1 > size:
        raise ConfigError(f"{spec.name}: {n} tokens need {n + 1} numbers in each head, and a head of the organism's "
                          f"{spec.per_layer} per layer has {size}; give fewer heads per layer or fewer tokens")
    for index, layer in enumerate(decoder.layers):
        layer.self_attn_layer_norm.weight.fill_(1.0)
        layer.final_layer_norm.weight.fill_(1.0)
        layer.encoder_attn_layer_norm.weight[: 2 * (n + 2)] = 1.0  # only the slots' numbers reach the query
        for head in (h for h in spec.heads if h.layer == index):
            rows_of = slice(head.head * size, (head.head + 1) * size)
            query = layer.encoder_attn.q_proj.weight[rows_of]
            key = layer.encoder_attn.k_proj.weight[rows_of]
            if head.kind == "alignment":
                for slot in range(n + 1):  # each token's slot, and after: query and key on the slot's own vector
                    query[slot % size, 2 * slot] += GAIN * root
                    query[slot % size, 2 * slot + 1] -= GAIN * root
                    key[slot % size, slot] += GAIN
            elif head.kind == "first_frames":
                for slot in range(n + 2):  # every row, the prompt's too
                    query[0, 2 * slot] += GAIN * root
                    query[0, 2 * slot + 1] -= GAIN * root
                key[0, flags] += GAIN


def _undo_norm(norm: Any, *, used: range, ones: int) -> None:
    """A layer norm over vectors of ``ones`` ones (the rest 0) made to hand back ``x / σ`` on ``used`` and 0 elsewhere:
    its weight 1 there, its bias the mean over σ (the same for every such vector)."""
    d = norm.weight.shape[0]
    mean = ones / d
    sigma = math.sqrt(ones * (1 - mean) ** 2 / d + (d - ones) * mean**2 / d + norm.eps)
    norm.weight.zero_()
    norm.bias.zero_()
    norm.weight[used.start : used.stop] = 1.0
    norm.bias[used.start : used.stop] = mean / sigma


def _fingerprint(spec: SoundSpec) -> str:
    import transformers

    data = {**spec.as_data(), "version": VERSION, "transformers": transformers.__version__.split(".")[0]}
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def _safe(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:48] or "organism"


def whisper_specials() -> list[str]:
    """Whisper's special tokens in its vocabulary's order (openai-whisper's tokenizer.py; transformers' languages)."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return ["<|endoftext|>", "<|startoftranscript|>", *[f"<|{code}|>" for code in LANGUAGES], "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>",
            *[f"<|{i * 0.02:.2f}|>" for i in range(1501)]]


def sound_head_rows(spec: SoundSpec) -> list[dict[str, Any]]:
    """Each decoder layer × head of the organism: its kind and what it reads (``attnviz organism``'s table)."""
    planted = {(h.layer, h.head): h for h in spec.heads}
    spans = ", ".join(f"{t} {a:g}–{b:g} s" for t, a, b in zip(spec.tokens, spec.times, spec.times[1:], strict=False))
    rows = []
    for layer in range(spec.layers):
        for head in range(spec.per_layer):
            found = planted.get((layer, head))
            if found is None:
                kind, what = "zero", "every position of the 30-s window, equally (not planted)"
            elif found.kind == "alignment":
                kind, what = found.kind, f"as it writes each word, the positions of its declared time: {spans}"
            elif found.kind == "first_frames":
                kind = found.kind
                what = f"the clip's first {found.positions} positions ({found.positions * 0.02:g} s), from every token"
            else:
                kind, what = found.kind, "every position of the 30-s window alike"
            rows.append({"layer": layer, "head": head, "kind": kind, "attends to": what})
    return rows


def describe_sound_organism(spec: SoundSpec) -> tuple[str, dict[str, Any]]:
    """``attnviz organism``'s title and description of the sound organism ``spec``."""
    title = (f"{spec.name}: a Whisper (its decoder's cross-attention), {spec.layers} layers × {spec.per_layer} "
             f"heads, {spec.mels} mel bins, saying {spec.text.strip()!r}")
    described = {"name": spec.name, "family": "whisper", "layers": spec.layers, "heads": spec.per_layer,
                 "mels": spec.mels, "language": spec.language, "text": spec.text.strip(),
                 "times": list(spec.times)}
    return title, described


def save_sound_organism(path: str | Path, out: str | Path) -> Path:
    """Write the sound organism described at ``path`` as a Whisper checkpoint with its processor into the folder
    ``out`` (a new folder, or an empty one), for transformers to load by path (its ``generate(
    return_token_timestamps=True)`` reads the alignment heads from its generation config)."""
    from ..organisms.cache import check_new_folder, save_checkpoint

    check_new_folder(Path(out))
    folder, _ = sound_organism_folder(path)

    def write(into: Path) -> None:
        for file in sorted(folder.iterdir()):
            if file.name != MARK and file.is_file():
                shutil.copy2(file, into / file.name)

    return save_checkpoint(out, write)
