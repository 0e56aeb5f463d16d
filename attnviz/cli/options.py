"""Options shared by several commands, defined once, and the one helper that turns them into a source."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..defaults import BUDGETS
from ..errors import UsageError
from .common import LIVE_HELP

if TYPE_CHECKING:  # pragma: no cover
    from ..api import Engine
    from ..render.view import HeadChoice
    from ..render.view import Kind as ViewKind

MODEL_HELP = (
    "Model: a Hugging Face folder, a hub id (e.g. gpt2), a .toml config such as sample_configs/tiny.toml, or a "
    "saved result (.npz, shown as it was computed). Default: the embedded all-MiniLM-L6-v2, offline."
)


class Fit(str, Enum):
    downsample = "downsample"
    page = "page"


class Cmap(str, Enum):
    viridis = "viridis"
    magma = "magma"
    coolwarm = "coolwarm"


class EngineChoice(str, Enum):
    auto = "auto"
    native = "native"
    fused = "fused"
    hf = "hf"


class Dtype(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"
    mps = "mps"


class KindChoice(str, Enum):
    encoder = "encoder"
    decoder = "decoder"
    cross = "cross"


Model = typer.Option(None, "--model", "-m", help=MODEL_HELP, show_default=False)
GENERATING_MODEL = "sample_configs/causal.toml"
"""What ``generate`` runs without ``--model``: the embedded MiniLM is an encoder and cannot continue a text."""
GenerateModel = typer.Option(None, "--model", "-m", help=MODEL_HELP.split(" Default:")[0] + " Default: "
                             f"{GENERATING_MODEL}, a tiny causal config shipped with attnviz (offline; random "
                             "weights, so its words mean nothing: give e.g. gpt2 for real text).", show_default=False)
CausalModel = typer.Option(..., "--model", "-m", show_default=False,
                           help="A causal language model: a model organism such as "
                                "sample_configs/organism_needle.toml (offline, heads planted by hand), a Hugging Face "
                                "folder, or a hub id such as gpt2 or Qwen/Qwen2.5-0.5B-Instruct (required: the "
                                "embedded MiniLM is an encoder, and a config model's random words retrieve nothing).")
"""``--model`` of the commands that need a trained decoder (needle, kv, patterns): no default."""
ENGINE_HELP = ("native: attnviz's attention on the weights; fused: transformers with attnviz's attention function "
               "(fused kernel, weights from the queries and keys); hf: transformers' eager attention; auto: the first "
               "that runs the model, in that order.")
EngineOpt = typer.Option(EngineChoice.auto, "--engine", help=ENGINE_HELP)
Revision = typer.Option(None, "--revision", help="Hub branch, tag or commit of --model.", show_default=False)
DeviceOpt = typer.Option(Device.cpu, "--device", help="Where the model runs.")
DTYPE_HELP = ("The model's precision on the transformers engines (default: float32 on the CPU, the checkpoint's own "
              "elsewhere); the weights are computed in float32 either way.")
DtypeOpt = typer.Option(None, "--dtype", help=DTYPE_HELP, show_default=False)
DeviceMap = typer.Option(
    None, "--device-map", help="'auto' spreads a model too large for one device (transformers + accelerate).",
    show_default=False,
)
TrustRemoteCode = typer.Option(
    False, "--trust-remote-code", help="Let a hub model run its own Python code. Read that code first."
)
Verbose = typer.Option(False, "--verbose", "-v", help="Say which engine ran, on which device.")
Truncate = typer.Option(False, "--truncate", help="Cut a text longer than the model's maximum instead of failing.")
PAIR_HELP = "A second sentence (for every text): a sentence pair, its boundary marked."
HIDE_SPECIAL_HELP = "Drop [CLS], [SEP], BOS and other special tokens."
RENORMALIZE_HELP = "With --hide-special: rescale each row to sum to 1."
WORDS_HELP = "Aggregate pieces to words (sum to a word, mean from a word)."
CMAP_HELP = "Colormap: viridis, magma, or coolwarm (diverging, for signed values)."
Pair = typer.Option(None, "--pair", help=PAIR_HELP, show_default=False)
# How a file of many texts is read: the same three options on export, atlas and heads --file.
Field = typer.Option(None, "--field", help="JSONL: the field holding the text (default text; implies JSONL).",
                     show_default=False)
Column = typer.Option(None, "--column", help="CSV or Parquet: the column holding the text (default text; implies CSV "
                      "unless the file ends .parquet).", show_default=False)
InputFormat = typer.Option(None, "--input-format", help="auto (by extension), lines, jsonl, csv or parquet.",
                           show_default=False)
TextFile = typer.Option(None, "--text-file", help="Read the text from a UTF-8 file instead of TEXT: the whole file is "
                        "one text (a document, a long prompt); - reads standard input (as TEXT - does).",
                        show_default=False, metavar="<path>")
Target = typer.Option(
    None, "--target", help="Encoder-decoder models (T5, BART): the decoder's input text.", show_default=False
)
Causal = typer.Option(
    None, "--causal/--no-causal", help="Config models: force a causal mask on or off (default: the config's).",
    show_default=False,
)
Layer = typer.Option("all", "--layer", "-l", help="A layer number (from 0), or 'all': every layer.")
Kind = typer.Option(
    KindChoice.encoder, "--kind", help="Encoder-decoder models (T5, BART): encoder, decoder or cross attention."
)
HideSpecial = typer.Option(False, "--hide-special", help=HIDE_SPECIAL_HELP)
Renormalize = typer.Option(False, "--renormalize", help=RENORMALIZE_HELP)
Words = typer.Option(False, "--words", help=WORDS_HELP)
CmapOpt = typer.Option(Cmap.viridis, "--cmap", help=CMAP_HELP)
Width = typer.Option(None, "--width", min=20, help="Terminal width to fit (default: the terminal's).")
Budget = typer.Option(",".join(f"{b:g}" for b in BUDGETS), "--budget", "--budgets", help="Keys kept: per key/value head (kv) or per query row (patterns), "
                      "a number of keys or a fraction of the prompt's (0.25 or 25%); several, comma-separated, sweep "
                      "them.")
Retrieval = typer.Option(None, "--retrieval", help="A needle run (attnviz needle --out RUN.json, or its heads table as "
                         ".csv or .parquet): add each head's retrieval_score and reasoning_score, and the label "
                         "retrieval (score ≥ 0.1).", show_default=False)
def image_help(*, live: bool = False) -> str:
    """--image's help, its families from the layout records: the built-in ones as the app is built (no plugin loads
    for --help), every registered one (a plugin's too) when a command runs (``live``)."""
    from ..api import LAYOUTS, families

    def shown(language: bool) -> str:
        if live:
            return ", ".join(families(language=language))
        return ", ".join(dict.fromkeys(layout.shown for layout in dict.values(LAYOUTS) if layout.language == language))

    return ("A picture the model reads (PNG, JPEG or WebP): alone, an image encoder's patches ("
            f"{shown(False)}); beside TEXT, a vision-language model's ({shown(True)}; repeatable, each where TEXT "
            "names it with the image token, else before TEXT); the attention drawn as heat over the picture (--out "
            "x.png).")


LIVE_HELP.setdefault("*", {})["image"] = lambda: image_help(live=True)
def _example_pictures(pictures: list[Path]) -> list[Path]:
    """Each ``--image``, or for ``examples/NAME`` (the picture the README's commands read) missing here, the copy
    installed with attnviz, so those lines run from any folder, as ``--text-file examples/report.txt`` does."""
    from ..api import example_file

    return [example_file(picture) for picture in pictures or []]


def example_path(path: Path | None) -> Path | None:
    """A path, or for ``examples/NAME`` missing here the copy installed with attnviz (a clip, a corpus, a reference:
    the files the README's commands read), as :func:`_example_pictures` does for ``--image``."""
    from ..api import example_file

    return None if path is None else example_file(path)


ImageFiles = typer.Option([], "--image", help=image_help(), show_default=False, callback=_example_pictures)
AudioFile = typer.Option(None, "--audio", metavar="CLIP", help="A sound clip (WAV, FLAC, OGG or MP3) heard by --model: "
                         "a Whisper's decoder's cross-attention over the clip's time (30 s at most; TEXT "
                         "teacher-forced, else the model's own transcript), or a speech encoder's (wav2vec2, HuBERT, "
                         "WavLM) self-attention over its frames.", show_default=False,
                         callback=example_path)
def ray_options(what: str) -> tuple[Any, Any, Any]:
    """``--backend``, ``--jobs`` and ``--ray-address`` of a command whose ``what`` (e.g. "the clips") spread over
    Ray actors, one model each (needle's grid, align-heads' clips)."""
    backend = typer.Option("local", "--backend", help=f"local (this machine, one model) or ray ({what} on --jobs Ray "
                           "actors, one model each; needs Ray); the same results.")
    jobs = typer.Option(2, "--jobs", "-j", min=1, help="With --backend ray: how many actors (models) work at once.")
    address = typer.Option(None, "--ray-address", help="With --backend ray: an existing cluster (auto, or the head's "
                           "host:port); default: a local cluster with this machine's CPUs.", show_default=False)
    return backend, jobs, address


AllowOutsidePictures = typer.Option(
    False, "--allow-outside-pictures", help="A corpus's pictures (its image field or column) may lie outside its "
    "folder (../, an absolute path, a link pointing out); by default such a row is refused. Only for a corpus you "
    "trust.")
ExpandImages = typer.Option(False, "--expand-images", help="With --image: the matrices show every image token; "
                            "without it, each picture's tokens are one row and column (the sum of a row's weights on "
                            "them, the mean of their rows); on the page a box expands them.")
OutFiles = typer.Option(
    [], "--out", "-o", help="Write a file instead of drawing in the terminal (repeatable: one run, several files), its "
    "kind from its extension: an image (.png, .svg, .pdf), a page (.html), or the numbers (.npz, .json).",
    show_default=False,
)


def kind_name(kind: KindChoice) -> ViewKind:
    """The API's name for a --kind choice (the encoder's attention is ``self``)."""
    return _KIND_NAMES[kind]


_KIND_NAMES: dict[KindChoice, ViewKind] = {KindChoice.encoder: "self", KindChoice.decoder: "decoder",
                                       KindChoice.cross: "cross"}


def parse_budgets(text: str) -> list[int | float]:
    """--budget's list: numbers of keys (256) or fractions (0.25, 25%), comma-separated (the library's one check)."""
    from ..api import parse_budgets as parsed

    budgets: list[int | float] = parsed(text)
    return budgets


def reading(hide_special: bool, renormalize: bool, words: bool) -> Any:
    """The library's Reading for --hide-special, --renormalize and --words (one check, in the library)."""
    from ..api import Reading

    return Reading(hide_special=hide_special, renormalize=renormalize, words=words)


def parse_index_or_word(value: str, option: str, what: str, words: tuple[str, ...]) -> int | str:
    """``"3"`` → 3; one of ``words`` as it is; anything else (or a negative number) is a :class:`UsageError`."""
    text = value.strip().lower()
    if text in words:
        return text
    try:
        number = int(text)
    except ValueError:
        choices = ", ".join(repr(w) for w in words)
        raise UsageError(f"{option} {value!r} is not a {what}; give a number or {choices}") from None
    if number < 0:
        raise UsageError(f"{option} {number} is negative; {what}s are numbered from 0")
    return number


def parse_layer(value: str, option: str = "--layer") -> int | None:
    """``--layer``'s value, parsed once: a layer number, or None for ``all`` (every layer)."""
    layer = parse_index_or_word(value, option, "layer", ("all",))
    return None if layer == "all" else int(layer)


def parse_head(value: str) -> HeadChoice:
    """``"3"`` → 3, ``"all"`` / ``"mean"`` as they are."""
    head = parse_index_or_word(value, "--head", "head", ("all", "mean"))
    return head if isinstance(head, int) else "all" if head == "all" else "mean"


EXAMPLE = "The quick brown fox jumps over the lazy dog because it was tired of running."
"""The text every reading command shows when it is given none (said on stderr, so output stays data)."""


def text_from_file(text: str | None, path: Any) -> str | None:
    """``text``, or the contents of ``path`` (``--text-file``; ``-`` reads standard input) when given:
    one text, refused when both are given, when the file is missing, not a regular file, too large,
    empty or not UTF-8 (:func:`attnviz.inputs.read_text_file`). Read before any model loads."""
    from ..api import read_text_file

    if path is None:
        return read_text_file("-") if text == "-" else text  # TEXT "-": standard input, as everywhere
    if text is not None:
        raise UsageError(f"give TEXT or --text-file {path}, not both")

    return read_text_file(path)


def text_or_example(text: str | None, source: Any) -> str | None:
    """``text``, or the example sentence for a model that reads text (a matrices config or a saved
    result has its own input), with a note on stderr saying so."""
    if text is None and not source.capabilities.fixed_input:
        sys.stderr.write(f"attnviz: no TEXT given; using the example sentence {EXAMPLE!r}\n")
        return EXAMPLE
    return text


@dataclass(frozen=True)
class ModelOptions:
    """The options every command that loads a model shares (``--model``, ``--engine``, ``--causal``,
    ``--revision``, ``--device``, ``--device-map``, ``--trust-remote-code``, ``--verbose``), parsed once."""

    model: str | None
    engine: Engine = "auto"
    causal: bool | None = None
    revision: str | None = None
    device: str = "cpu"
    device_map: str | None = None
    trust_remote_code: bool = False
    verbose: bool = False
    dtype: str | None = None
    audio: Path | None = None  # a clip a speech encoder hears (set by a command's --audio)

    def load(self) -> Any:
        """The source, through :func:`attnviz.api.load`; with ``verbose``, say on stderr which engine runs it."""
        from ..api import load

        source = load(self.model, engine=self.engine, causal=self.causal, revision=self.revision,
                      device=self.device, device_map=self.device_map, trust_remote_code=self.trust_remote_code,
                      dtype=self.dtype, audio=self.audio)
        if self.verbose:
            from .common import note

            note(source.describe())
        return source


# The model options, declared here once: a command decorated with :func:`model_command` lists them in its --help
# and receives them as one ``options: ModelOptions``.
MODEL_PARAMETERS: dict[str, tuple[Any, Any]] = {
    "model": (str | None, Model),
    "engine": (EngineChoice, EngineOpt),
    "revision": (str | None, Revision),
    "device": (Device, DeviceOpt),
    "dtype": (Dtype | None, DtypeOpt),
    "device_map": (str | None, DeviceMap),
    "causal": (bool | None, Causal),
    "trust_remote_code": (bool, TrustRemoteCode),
    "verbose": (bool, Verbose),
}


def model_command(*, without: tuple[str, ...] = (), model: Any = Model) -> Any:
    """Give a command the model options of :data:`MODEL_PARAMETERS` (less ``without``, which it does not take;
    ``model``: another declaration of ``--model``, such as generate's). The command's own function takes
    ``options: ModelOptions`` in their place; its other parameters keep their order, the model options follow."""
    import functools
    import inspect

    unknown = set(without) - set(MODEL_PARAMETERS)
    if unknown:
        raise ValueError(f"no model option {sorted(unknown)}")

    def decorate(func: Any) -> Any:
        own = [p for p in inspect.signature(func).parameters.values() if p.name != "options"]
        taken = {name: (kind, model if name == "model" else default)
                 for name, (kind, default) in MODEL_PARAMETERS.items() if name not in without}
        added = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=kind)
                 for name, (kind, default) in taken.items()]

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            given = {name: kwargs.pop(name, None) for name in MODEL_PARAMETERS}
            options = ModelOptions(
                given["model"], _value(given["engine"], "auto"), given["causal"], given["revision"],
                _value(given["device"], "cpu"), given["device_map"], bool(given["trust_remote_code"]),
                bool(given["verbose"]), _value(given["dtype"], None))
            return func(options=options, **kwargs)

        arguments = [p for p in own if isinstance(p.default, typer.models.ArgumentInfo)]
        first = [p for p in added if p.name == "model"]  # --model first after the arguments, as users look for it
        rest = [p for p in own if p not in arguments]
        wrapper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # typeshed: functools' _Wrapped has no __signature__
            [*arguments, *first, *rest, *(p for p in added if p.name != "model")])
        wrapper.__annotations__ = {**{p.name: func.__annotations__.get(p.name) for p in own},
                                   **{name: kind for name, (kind, _) in taken.items()}}
        return wrapper

    return decorate


def _value(choice: Any, default: Any) -> Any:
    return default if choice is None else getattr(choice, "value", choice)
