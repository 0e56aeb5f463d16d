"""A vision-language model's attention over a text and a picture: the processor puts the picture's tokens in the
prompt (its image token expanded), the language model attends over all of them, and the family's patch layout
(:mod:`.layouts`) says which row and column, and which box of the picture, each image token is. The token count
is the processor's own, checked against the layout's."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError, ModelNotFoundError, UsageError
from ..result import AttentionResult
from ..result.placement import PatchGrid, Placement, Tiles
from .layouts import boxes

if TYPE_CHECKING:  # pragma: no cover
    from ..sources.sampling import Sampling
    from .forward import LayerConsumer


def vlm_attention(text: str, pictures: str | Path | Sequence[str | Path], model: str, *, device: str = "cpu",
                  revision: str | None = None, trust_remote_code: bool = False, max_new_tokens: int = 0,
                  sampling: Sampling | None = None, engine: str = "fused", rows: str = "all") -> AttentionResult:
    """Every layer's and head's attention of a vision-language ``model`` over ``text`` and ``pictures`` (one path or
    several, each where the text puts the processor's image token, in order, else all before the text).
    ``max_new_tokens``: first let the model answer (up to that many tokens, stopping at its end token), greedily or
    as ``sampling`` says (:class:`~attnviz.sources.sampling.Sampling`: its seed gives the same tokens again), on the
    one decoding loop ``generate`` runs (:mod:`.answer`: the checkpoint's ``generation_config.json`` names the end
    tokens and chooses nothing); the result then holds every row of the prompt and the answer, each answer token's
    row the attention with which it was read (one forward over the whole sequence, the pictures included: the rows a
    step-by-step decoding computes), ``metadata["prompt_length"]`` where the answer starts (and, sampled,
    ``metadata["sampling"]``). ``metadata["images"]`` places every picture's tokens.

    ``engine``: ``"fused"`` (the language model on attnviz's attention function where a probe shows it equal to
    eager's, else eager) or ``"hf"`` (transformers' eager attention); either way a layer at a time
    (:mod:`.forward`). ``rows``: ``"all"`` (``attentions`` is ``[L, H, T, T]``) or ``"text"``: the rows of the
    text's tokens only (``[L, H, Q, T]``, ``metadata["rows"]`` their positions): what an overlay of a word, the
    heads' statistics and an answer read, in a small part of the memory for thousands of image tokens. Reading
    many texts, load once: :func:`load_vlm`, then its ``read``."""
    loaded = load_vlm(model, device=device, revision=revision, trust_remote_code=trust_remote_code, engine=engine)
    return loaded.read(text, pictures, max_new_tokens=max_new_tokens, sampling=sampling, rows=rows)


@dataclass
class VisionLanguageModel:
    """A vision-language model loaded once (its processor, the network on the engine chosen, its layout)."""

    found: Any
    processor: Any
    network: Any
    engine: str
    refused: str | None  # why the fused engine was not used, where it was asked
    device: str

    @property
    def name(self) -> str:
        return str(self.found.place.name)

    def read(self, text: str, pictures: str | Path | Sequence[str | Path], *, max_new_tokens: int = 0,
             sampling: Sampling | None = None, rows: str = "all") -> AttentionResult:
        """``text`` and ``pictures`` read (see :func:`vlm_attention`)."""
        return _read(self, text, pictures, max_new_tokens, rows, sampling)

    def stream(self, text: str, pictures: str | Path | Sequence[str | Path]) -> PictureStream:
        """``text`` and ``pictures`` made ready to run, each layer then handed on as it is computed and none kept
        (:class:`PictureStream`): what a page of a long prompt reads, a block of rows at a time (thousands of
        image tokens: a layer's ``[H, T, T]`` alone is gigabytes)."""
        return _stream(self, text, pictures)


def load_vlm(model: str, *, device: str = "cpu", revision: str | None = None, trust_remote_code: bool = False,
             engine: str = "fused") -> VisionLanguageModel:
    """The model, its processor and layout, loaded once (refused by name where attnviz knows no layout)."""
    import torch
    import transformers

    from .picture_models import locate
    from .processors import load_processor

    if engine not in ("fused", "hf"):
        raise UsageError(f"engine {engine!r}: a vision-language model runs on the fused engine or hf")
    found = locate(model, language=True, device=device, revision=revision, trust_remote_code=trust_remote_code)
    try:
        processor = load_processor(found.place.ref, found.options)
        auto: Any = transformers.AutoModelForImageTextToText
        network = auto.from_pretrained(found.place.ref, attn_implementation="eager", dtype=torch.float32,
                                       **found.options)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ModelNotFoundError(f"{found.place.name}: cannot load its processor and model ({first})") from None
    network = network.to(device).eval()
    from .forward import use_fused

    refused = use_fused(network, found.config, device) if engine == "fused" else None
    return VisionLanguageModel(found, processor, network, engine, refused, device)


@dataclass
class _Processed:
    """A text and its pictures as the processor made them: the inputs, their ids, where the image tokens are and
    each picture placed."""

    inputs: Any
    ids: list[int]
    where: list[int]
    placed: list[Placement]
    paths: list[str | Path]
    whose: str
    layers: int
    heads: int


def _process(loaded: VisionLanguageModel, text: str, pictures: str | Path | Sequence[str | Path],
             max_new_tokens: int) -> _Processed:
    """The pictures read, the prompt made and processed, its length checked and each picture placed."""
    paths = [pictures] if isinstance(pictures, (str, Path)) else list(pictures)
    if not paths:
        raise UsageError("no picture given: a vision-language model reads a text beside at least one picture")
    place, config, layout = loaded.found.place, loaded.found.config, loaded.found.layout
    processor, network, device = loaded.processor, loaded.network, loaded.device
    images = _pictures(paths, processor, place.name)
    prompt = _prompt(text, len(images), processor, layout, config)
    with warnings.catch_warnings():  # a processor's own deprecation notes (numpy's copy keyword) are not the user's
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="transformers")
        try:  # never cut: a tokenizer saved to truncate would drop the text's end, or some image tokens
            inputs = processor(text=prompt, images=images, return_tensors="pt", truncation=False).to(device)
        except ValueError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            raise InputError(f"{place.name}: its processor cannot read this text beside "
                             f"{', '.join(str(p) for p in paths)} ({first})") from None
    inputs.pop("labels", None)  # PaliGemma's processor adds a suffix's labels: no loss is wanted
    ids = [int(i) for i in inputs["input_ids"][0]]
    token_id = config.get("image_token_id", config.get("image_token_index"))
    where = [i for i, t in enumerate(ids) if t == token_id]
    if not where:
        raise ModelNotFoundError(f"{place.name}: the processor put no image token (id {token_id}) in the prompt")
    from ..sources.tokens import check_length

    whose = "the pictures'" if len(images) > 1 else "the picture's"
    asked = f" and [[max_new_tokens={max_new_tokens}]]" if max_new_tokens else ""
    check_length(len(ids) + max_new_tokens, positions_of(network), place.name,
                 what=f"text with {whose} {len(where):,} tokens{asked}",
                 fix="shorten the text, give fewer or smaller pictures" + (", or ask for fewer tokens" if asked else ""))
    placed = _place(place.name, layout, config, processor, inputs, where, images)
    del images  # their sizes are placed: the pixels are not held while the model runs
    text_config = config.get("text_config") or {}
    layers = int(text_config.get("num_hidden_layers") or 32)
    heads = int(text_config.get("num_attention_heads") or 32)
    return _Processed(inputs, ids, where, placed, paths, whose, layers, heads)


def _read(loaded: VisionLanguageModel, text: str, pictures: str | Path | Sequence[str | Path], max_new_tokens: int,
          rows: str, sampling: Sampling | None = None) -> AttentionResult:
    import torch

    from .forward import run_layers

    if rows not in ("all", "text"):
        raise UsageError(f"rows {rows!r}: all, or text (the text's rows only)")
    if sampling is not None:
        sampling.check()
        if sampling.sample and not max_new_tokens:
            raise UsageError("[[sampling]] chooses the answer's tokens; give [[max_new_tokens]] for the model to answer")
    read = _process(loaded, text, pictures, max_new_tokens)
    network, inputs, ids, where = loaded.network, read.inputs, read.ids, read.where
    layers, heads = read.layers, read.heads
    from ..limits import check_memory

    kept = len(ids) - len(where) if rows == "text" else len(ids)
    # The rows kept of every layer, and one layer's weights as it is computed (twice: scores, then weights).
    check_memory(4 * layers * heads * kept * len(ids) + 2 * 4 * heads * len(ids) ** 2,
                 f"the attention of {len(ids):,} tokens ({len(where):,} of them {read.whose}) in {layers} layers × "
                 f"{heads} heads")
    prompt_length = len(ids)
    if max_new_tokens:
        from .answer import PictureStepper, answer

        stepper = PictureStepper(network, inputs, name=loaded.name, engine=_engine(loaded), layers=layers,
                                 heads=heads, max_positions=positions_of(network))
        ids = answer(stepper, max_new_tokens=max_new_tokens, sampling=sampling, image_token=ids[where[0]])
        del stepper  # its cache
        sequence = torch.tensor(ids, device=inputs["input_ids"].device)
        added = len(ids) - prompt_length
        inputs["input_ids"] = sequence[None]
        inputs["attention_mask"] = torch.ones_like(sequence)[None]
        for key in ("token_type_ids", "mm_token_type_ids"):  # PaliGemma: the answer is the suffix; Qwen: text
            if key in inputs:
                inputs[key] = torch.cat([inputs[key], torch.full((1, added), 1 if key == "token_type_ids" else 0,
                                                                 dtype=inputs[key].dtype)], dim=1)
        kept = len(ids) - len(where) if rows == "text" else len(ids)
        check_memory(4 * layers * heads * kept * len(ids) + 2 * 4 * heads * len(ids) ** 2,
                     f"the attention of {len(ids):,} tokens with the answer")
    image_rows = set(where)
    held = None if rows == "all" else [i for i in range(len(ids)) if i not in image_rows]
    attentions = run_layers(network, dict(inputs), held, loaded.name)  # [L, H, T or Q, T]
    from ..sources.decoding import sampling_metadata

    sampled = {"sampling": sampling_metadata(sampling)} if sampling is not None and sampling.sample else {}
    extra = {"generation": True, "prompt_length": prompt_length, **sampled} if max_new_tokens else {}
    return _result(loaded, read, ids, attentions, causal=_causal(attentions, held), held=held, extra=extra)


def _result(loaded: VisionLanguageModel, read: _Processed, ids: list[int], attentions: Any, *, causal: bool,
            held: list[int] | None, extra: dict[str, Any]) -> AttentionResult:
    """The result of ``ids`` (the prompt's, or with an answer) with ``attentions`` (``[0, 0, T, T]``: a header,
    whose layers are handed on as they are computed)."""
    from ..sources.tokens import label_from_piece

    processor, placed = loaded.processor, read.placed
    pieces = processor.tokenizer.convert_ids_to_tokens(ids)
    at: dict[int, str] = {}
    for number, picture in enumerate(placed, start=1):
        prefix = "" if len(placed) == 1 else f"{number} "
        at.update({position: f"<img {prefix}{name}>" for position, name in zip(picture.image_positions, picture.names,
                                                                               strict=True)})
    labels = [at.get(i) or label_from_piece(piece or f"<{t}>") for i, (t, piece) in enumerate(zip(ids, pieces,
                                                                                                  strict=True))]
    special = set(getattr(processor.tokenizer, "all_special_ids", []) or [])
    engine, refused = loaded.engine, loaded.refused
    return AttentionResult(
        # causal as the weights are: PaliGemma's image and prompt attend to each other (a prefix), LLaVA's do not
        tokens=labels, attentions=attentions, token_ids=ids, special=[t in special for t in ids],
        causal=causal, model_name=loaded.name,
        metadata={"engine": _engine(loaded),
                  **({"fused_refused": refused} if engine == "fused" and refused else {}),
                  **({"rows": held} if held is not None else {}), "images": [picture.with_path(str(path)).to_dict()
                                                                   for path, picture in zip(read.paths, placed,
                                                                                            strict=True)],
                  **extra},
    )


@dataclass
class PictureStream:
    """A text and its pictures ready to run, their layers handed on one at a time (:meth:`VisionLanguageModel.stream`):
    ``header`` (the result's tokens, ids and pictures, no weights: ``[0, 0, T, T]``), ``layers`` (how many the
    language model has). :meth:`run` runs the model once."""

    header: AttentionResult
    layers: int
    heads: int
    _run: Callable[[LayerConsumer], int]

    def run(self, each: LayerConsumer) -> None:
        """The model run over the text and pictures, each layer handed to ``each(number, layer, causal)`` as it is
        computed (see :func:`attnviz.images.forward.stream_layers`); ``header.causal`` then says whether every
        layer was."""
        causal: list[bool] = []

        def take(number: int, layer: Any, is_causal: bool) -> None:
            causal.append(is_causal)
            each(number, layer, is_causal)

        self._run(take)
        self.header.causal = all(causal)


def _stream(loaded: VisionLanguageModel, text: str, pictures: str | Path | Sequence[str | Path]) -> PictureStream:
    import torch

    from ..limits import check_memory
    from .forward import attention_modules, language_model, stream_layers

    read = _process(loaded, text, pictures, 0)
    total = len(read.ids)
    if loaded.engine == "hf" or loaded.refused:  # eager attention builds each layer whole (scores, then weights)
        check_memory(2 * 4 * read.heads * total**2, f"one layer's attention of {total:,} tokens "
                     f"({len(read.where):,} of them {read.whose}) × {read.heads} heads, as eager attention builds it")
    header = _result(loaded, read, read.ids, torch.zeros(0, 0, total, total), causal=False, held=None, extra={})
    network, inputs = loaded.network, dict(read.inputs)
    layers = len(attention_modules(language_model(network, loaded.name), loaded.name))
    return PictureStream(header, layers, read.heads, lambda each: stream_layers(network, inputs, loaded.name, each))


def _engine(loaded: VisionLanguageModel) -> str:
    """The engine the language model runs on: ``fused`` where it was asked and taken, else ``hf``."""
    return "hf" if loaded.engine == "hf" or loaded.refused else "fused"


def positions_of(network: Any) -> int | None:
    """The positions the language model of ``network`` takes (its text config's ``max_position_embeddings``)."""
    config = network.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    found = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)
    return int(found) if isinstance(found, int) and found > 0 else None


def _pictures(paths: list[str | Path], processor: Any, name: str) -> list[Any]:
    """The pictures at ``paths`` decoded, once their headers are checked, what the processor makes of each
    (:func:`~attnviz.images.sizes.check_processed`) and the memory of both (with the processor's copies)."""
    from .files import check_picture_memory, picture_header, read_image
    from .sizes import check_processed, pictures_memory

    headers = [picture_header(path) for path in paths]
    processed = check_processed(headers, getattr(processor, "image_processor", processor), name)
    total = sum(header.pixels for header in headers)
    check_picture_memory(pictures_memory(headers, processed),
                 f"{len(headers)} picture{'s' if len(headers) > 1 else ''} of {total:,} pixels, decoded and processed")
    return [read_image(path) for path in paths]


def _causal(attentions: Any, held: list[int] | None) -> bool:
    """Whether no row attends to a key after it (read off the weights: PaliGemma's prefix is not causal), a head
    at a time (a 10,000-token prompt's every layer is not gathered twice)."""
    import torch

    positions = torch.arange(attentions.shape[-1])
    queries = positions[: attentions.shape[-2]] if held is None else torch.tensor(held)
    later = positions[None, :] > queries[:, None]
    return all(bool((attentions[layer, head][later] == 0).all()) for layer in range(attentions.shape[0])
               for head in range(attentions.shape[1]))


def _prompt(text: str, count: int, processor: Any, layout: Any, config: dict[str, Any] | None = None) -> str:
    """The text with one image marker per picture: as the user placed them, else all before the text (PaliGemma's
    processor expands its marker in place, before its BOS; LLaVA's wants it as a word of the prompt; a layout's
    ``around`` puts it between two of the config's tokens: Qwen's vision start and end)."""
    marker = getattr(processor, "image_token", "<image>")
    placed = text.count(marker)
    if placed == count:
        return text
    if placed:
        raise UsageError(f"the text names {placed} pictures ({marker}) but {count} were given: name each picture once, "
                         "or none (they then come before the text)")
    one = marker
    if layout.around is not None and config:
        start, end = (processor.tokenizer.convert_ids_to_tokens(int(config[key])) if config.get(key) is not None else ""
                      for key in layout.around)
        one = f"{start}{marker}{end}"
    return one * count + text if layout.inserts else " ".join([one] * count + [text])


def _place(name: str, layout: Any, config: dict[str, Any], processor: Any, inputs: Any, where: list[int],
           images: list[Any]) -> list[Placement]:
    """Each picture's tokens, in order: its share of ``where`` (the prompt's image tokens), its labels, grids and
    boxes, by the family's layout; the counts checked against the processor's."""
    out = []
    left = list(where)
    for index, image in enumerate(images):
        if layout.place is not None:  # several grids (tiles), placed by the family's own function
            import inspect

            from ..records import resolve

            found = resolve(layout.place, f"patch layout {layout.name}")
            # the picture itself to a function that asks for it (its size: boxes where the inputs do not say)
            extra = {"picture": image} if "picture" in inspect.signature(found).parameters else {}
            placed: Tiles = found(config, processor, inputs, left, index, **extra)
            names, grids, specials, patch = list(placed.labels), placed.grids, placed.specials, placed.patch
            count = len(names)
        else:
            pixels = inputs["pixel_values"][index]
            grid = layout.grid_of(config, int(pixels.shape[-2]), int(pixels.shape[-1]))
            count, names, specials, patch = grid.n_tokens, grid.labels(), len(grid.specials), grid.patch
            grids = (PatchGrid.of("patches", grid.rows, grid.cols, left[specials:count],
                                  boxes(grid, processor.image_processor, image.size)),)
        mine = left[:count]
        if len(mine) != count or (layout.place is None and mine != list(range(mine[0], mine[0] + count))):
            raise ModelNotFoundError(f"{name}: the processor put {len(where)} image tokens in the prompt; the "
                                     f"{layout.name} layout gives {count} for picture {index + 1}")
        left = left[count:]
        # the finest grid last: what the overlay draws and the statistics read
        out.append(Placement(layout.name, (int(image.size[0]), int(image.size[1])), mine[0], specials, patch,
                             tuple(mine), tuple(grids), tuple(names)))
    if left:
        raise ModelNotFoundError(f"{name}: the processor put {len(where)} image tokens in the prompt; the "
                                 f"{layout.name} layout places {len(where) - len(left)} for {len(images)} pictures")
    return out
