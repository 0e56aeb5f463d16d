"""The transformers engines: any model transformers can load, with its attention weights.

Two ways to get the weights from transformers:

- ``fused`` (the default where it works): the model runs with attnviz's attention function
  registered in transformers' ``AttentionInterface`` (:mod:`attnviz.sources.hf_attention`): each
  layer's output through torch's fused kernel, the weights made by attnviz from the queries and keys
  transformers hands over, only for the layers asked, and for long inputs a block of rows at a time.
  It is checked once, on a short padded batch, against eager attention; a family that does not route
  attention through the registry, or differs there, keeps eager.
- ``hf``: transformers' eager attention, which builds every layer's ``[B, H, T, T]`` itself.

Each layer's weights are taken as the forward computes them (:mod:`attnviz.sources.hf_layer_stream`), so
a long input holds about one layer's at a time; where that cannot be established for a model, it
asks for ``output_attentions=True`` and hands the layers on one at a time. Encoder-decoder models
(T5, BART) give three kinds of attention: the encoder's, the decoder's and the decoder's
cross-attention over the source.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypedDict

import torch
from torch import Tensor

from ..errors import ModelNotFoundError, UsageError
from ..result import AttentionResult
from .base import Capabilities, ExtractOptions
from .engine import Capture, LayerOut, ModelSource, given_texts
from .hf_layer_stream import LayerPlan, plan_layers, stream_layers
from .stream import ROWS_ASKED_FROM_TOKENS, ROWS_FROM_BYTES, LayerStream
from .tokens import TokenInfo, unknown_token_id

if TYPE_CHECKING:  # pragma: no cover
    from .contracts import ExplainInputs


class _LoadArguments(TypedDict):
    """How the model was loaded: a task's model (``masked-lm``, ``causal-lm``) loads the same way."""

    ref: str
    revision: str | None
    trust_remote_code: bool
    device_map: str | None
    local_files_only: bool


def _load(
    ref: str,
    *,
    revision: str | None,
    trust_remote_code: bool,
    device_map: str | None,
    name: str,
    local_files_only: bool,
    cpu: bool,
    precision: str | None = None,
    head: str | None = None,
) -> tuple[Any, Any]:
    import transformers
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    # attnviz speaks for itself: transformers' progress bars and advice would bury the one line that matters.
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    kwargs: dict[str, Any] = {
        "revision": revision, "trust_remote_code": trust_remote_code, "local_files_only": local_files_only,
    }
    # On the CPU, compute in float32 whatever the checkpoint's dtype (as the native engine does):
    # half precision there is slow, and its rounding would differ from the native engine's numbers.
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    dtype = {key: getattr(torch, precision or "float32")}
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(ref, **kwargs)  # an unknown architecture fails here, clearly, first
        tokenizer = AutoTokenizer.from_pretrained(ref, **kwargs)
        auto: Any = AutoModelForCausalLM if head == "causal-lm" else AutoModel
        model, info = auto.from_pretrained(
            ref, attn_implementation="eager", device_map=device_map, output_loading_info=True,
            **(dtype if cpu or precision else {}), **kwargs
        )
    except (ImportError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0]
        if "accelerate" in str(exc):
            raise UsageError(f"[[device_map]] needs the accelerate package: pip install accelerate ({name})") from None
        if isinstance(exc, ImportError):
            raise UsageError(f"loading {name} needs a package that is missing: {first}") from None
        if "trust_remote_code" in str(exc):
            raise ModelNotFoundError(
                f"{name} needs its own code from the hub; read it first, then pass [[trust_remote_code=True]]"
            ) from None
        raise ModelNotFoundError(f"no engine can load {name}: {first}") from None
    except OSError as exc:
        first = str(exc).strip().splitlines()[0]
        raise ModelNotFoundError(f"transformers could not load {name}: {first}") from None
    except pickle.UnpicklingError:
        raise ModelNotFoundError(
            f"{name}'s checkpoint is a pickle that safe loading (weights_only) refuses, because loading it could "
            "run code; use a .safetensors checkpoint"
        ) from None
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise ModelNotFoundError(f"{name} has only a slow tokenizer; attnviz needs a fast (tokenizers) one")
    missing = [key for key in info.get("missing_keys", []) if "lm_head" in key] if head else []
    if missing:  # transformers would fill it with random numbers: every token would be noise
        raise ModelNotFoundError(f"{name} has no language-model head ({missing[0]} is not in its weights), so it "
                                 "cannot generate; give the checkpoint of a ...ForCausalLM model")
    return tokenizer, model.eval()


class HFSource(ModelSource):
    """A model run by transformers itself."""

    def __init__(
        self,
        ref: str,
        *,
        name: str,
        revision: str | None = None,
        trust_remote_code: bool = False,
        device: str = "cpu",
        device_map: str | None = None,
        local_files_only: bool = False,
        attention: str = "auto",
        why: str | None = None,
        dtype: str | None = None,
        head: str | None = None,
    ) -> None:
        """``attention``: ``"auto"`` (attnviz's attention function where it gives eager's weights, else
        eager), ``"fused"`` (that function or an error) or ``"eager"``; ``why``: why no native engine.
        ``head="causal-lm"``: load the checkpoint once with its language-model head (``lm``, which decodes: the
        stepper, kv's cut caches), extraction running its base model (``model``)."""
        hf_tokenizer, loaded = _load(
            ref, revision=revision, trust_remote_code=trust_remote_code, device_map=device_map, name=name,
            local_files_only=local_files_only, cpu=device == "cpu" and device_map is None, precision=dtype,
            head=head,
        )
        if device_map is None:
            loaded.to(device)
        self.lm: Any = loaded if head == "causal-lm" else None
        self.model = loaded.base_model if self.lm is not None else loaded
        self._reload: _LoadArguments = {"ref": ref, "revision": revision, "trust_remote_code": trust_remote_code,
                        "device_map": device_map, "local_files_only": local_files_only}
        self._task_models: dict[str, Any] = {} if self.lm is None else {"causal-lm": self.lm}
        config = self.model.config
        self.encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        # streaming once each layer can be taken as it is computed (below)
        self.capabilities = Capabilities(pairs=True, cross=self.encoder_decoder, token_ids=not self.encoder_decoder,
                                         streaming=False)
        self.hf_tokenizer = hf_tokenizer
        limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        pad = hf_tokenizer.pad_token_id
        if pad is None or pad >= self.model.get_input_embeddings().num_embeddings:
            pad = 0  # a pad token added after training has no embedding; padded slots are masked anyway
        super().__init__(
            name=name, tokenizer=hf_tokenizer.backend_tokenizer, causal=False, max_positions=limit,
            family=config.model_type, device=str(self.model.device), pad_id=pad,
            bos_id=getattr(config, "bos_token_id", None),
            vocab_rows=self.model.get_input_embeddings().num_embeddings,
        )
        self.token_types = getattr(config, "type_vocab_size", 0) > 1
        self.why = (f"asked for ([[engine=hf]]); {why}" if why else "asked for ([[engine=hf]])") \
            if attention == "eager" else why
        if attention != "eager":
            self._try_fused(required=attention == "fused")
        self._plan: LayerPlan | None = None  # None: every layer from output_attentions=True at once
        if not self.encoder_decoder:
            with self._whole():
                inputs, attentions = self._probe()
                self.causal = self._reads_causal(attentions)
                self._plan = plan_layers(self.model, self.n_layers, inputs, attentions)
            if self._plan is not None:
                self.capabilities = replace(self.capabilities, streaming=True, queries_keys=self.fused)

    @property
    def fused(self) -> bool:
        """Whether the model runs on attnviz's attention function (:mod:`attnviz.sources.hf_attention`)."""
        from .hf_attention import is_fused

        return is_fused(self.model)

    @property
    def engine(self) -> str:
        return "fused" if self.fused else "hf"

    @engine.setter
    def engine(self, value: str) -> None:  # Source.engine is an attribute; here it follows the model
        raise AttributeError("an HFSource's engine follows its model: fused where switched to attnviz's attention")

    def describe(self) -> str:
        from ..errors import in_api_terms

        precision = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        how = ("transformers with attnviz's attention function (each layer's output through the fused kernel, its "
               "weights from the queries and keys; equal to eager attention on a probe)") if self.fused \
            else "transformers' eager attention"
        because = "" if not self.why else f"; {'not native' if self.fused else 'eager'}: {in_api_terms(self.why)}"
        return f"engine {self.engine} ({self.family}) on {self.device} in {precision}, model {self.name}: {how}{because}"

    def _try_fused(self, *, required: bool) -> None:
        """Switch the model to attnviz's attention function if it gives eager attention's weights on a short
        padded batch; else keep eager (or, ``required``, say why not)."""
        from .hf_attention import mark_fused, switch_to_fused

        reason = switch_to_fused(self.model, self._probe_batch(), family=self.family,
                                 encoder_decoder=self.encoder_decoder,
                                 folder=None if self._reload["device_map"] else self._reload["ref"])
        if reason is None:
            if self.lm is not None:  # its head's model runs the same layers, on the same config
                mark_fused(self.lm)
            return
        if required:
            raise ModelNotFoundError(f"the fused engine cannot run {self.name}: {reason}; use [[engine=hf]] or auto")
        self.why = reason

    def _probe_batch(self) -> dict[str, Tensor]:
        from .hf_attention import probe_inputs

        inputs = probe_inputs(self.model.get_input_embeddings().num_embeddings, self.model.device,
                              encoder_decoder=self.encoder_decoder)
        if self.token_types:
            inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
        return inputs

    def _whole(self) -> Any:
        """Where ``output_attentions=True`` is asked for: the fused engine's whole weights."""
        from .hf_attention import whole_weights

        return whole_weights(self.model)

    @contextmanager
    def eager_attention(self) -> Iterator[None]:
        """Run the model with eager attention meanwhile (gradients need the weights in the forward's graph)."""
        if not self.fused:
            yield
            return
        self.model.set_attn_implementation("eager")
        try:
            yield
        finally:
            self.model.set_attn_implementation("attnviz")

    @property
    def n_layers(self) -> int:
        config = self.model.config
        return getattr(config, "num_hidden_layers", None) or config.num_layers

    def explain_inputs(self, text: str | None, layer: int = 0) -> ExplainInputs:
        """Refused: explain reads a layer's input and module, which only the native engine exposes."""
        from .native import FAMILIES, family_names

        needs = f"explain needs the native engine ({family_names()} checkpoints)"
        if self.family in FAMILIES:
            raise UsageError(f"{needs}, and {self.name} runs on transformers here; pass [[engine=native]]")
        raise UsageError(f"{needs}, and {self.name} is a {self.family} model it cannot run; explain a checkpoint of "
                         "those families or a config model (.toml)")

    def task_model(self, task: str) -> Any | None:
        """The checkpoint with its head, for gradients of a logit (:mod:`attnviz.sources.gradients`):
        ``task`` ``"causal-lm"`` loads ``AutoModelForCausalLM``, ``"masked-lm"`` ``AutoModelForMaskedLM``,
        with eager attention. None where the checkpoint lacks the head (transformers would fill it
        with random weights: any missing key counts). Loaded on first use and kept; extraction never
        loads it (it runs the ``AutoModel`` loaded at start)."""
        if task not in self._task_models:
            import transformers

            auto = {"causal-lm": transformers.AutoModelForCausalLM, "masked-lm": transformers.AutoModelForMaskedLM}[task]
            a = self._reload
            key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
            dtype = {key: next(self.model.parameters()).dtype}  # the precision the model was loaded in
            try:
                model, info = auto.from_pretrained(
                    a["ref"], attn_implementation="eager", device_map=a["device_map"], revision=a["revision"],
                    trust_remote_code=a["trust_remote_code"], local_files_only=a["local_files_only"],
                    output_loading_info=True, **dtype)
            except (ValueError, KeyError, OSError):  # no such head for this architecture
                model, info = None, {}
            if model is not None and not info.get("missing_keys"):
                if a["device_map"] is None:
                    model.to(self.model.device)
                self._task_models[task] = model.eval()
            else:
                self._task_models[task] = None
        return self._task_models[task]

    def _inputs(self, ids: Tensor, mask: Tensor, types: Tensor) -> dict[str, Tensor]:
        return {"input_ids": ids, "attention_mask": mask, **({"token_type_ids": types} if self.token_types else {})}

    @torch.no_grad()
    def _attentions(self, ids: Tensor, mask: Tensor, types: Tensor) -> list[Tensor]:
        with self._whole():
            return list(self.model(**self._inputs(ids, mask, types), output_attentions=True).attentions)

    def _probe(self) -> tuple[dict[str, Tensor], list[Tensor]]:
        """A three-token forward pass: its inputs, and every layer's weights (``output_attentions=True``)."""
        ids = torch.arange(3, device=self.model.device)[None] % self.model.get_input_embeddings().num_embeddings
        mask, types = torch.ones_like(ids), torch.zeros_like(ids)
        return self._inputs(ids, mask, types), self._attentions(ids, mask, types)

    def _reads_causal(self, attentions: list[Tensor] | None = None) -> bool:
        """Causal or not, read off the weights of a three-token forward pass (:meth:`_probe`): every upper triangle is 0."""
        attentions = self._probe()[1] if attentions is None else attentions
        upper = torch.ones(3, 3, dtype=torch.bool, device=self.model.device).triu(1)
        return all(bool((a[..., upper] == 0).all()) for a in attentions)

    def forward_layers(self, ids: Tensor, mask: Tensor, types: Tensor, capture: Capture) -> Iterator[LayerOut]:
        """Each layer as transformers computes it (:func:`~attnviz.sources.hf_layer_stream.stream_layers`):
        the forward waits while the consumer works on a layer and stops after the last one wanted.
        Models where that cannot be established run whole (:meth:`_whole_layers`)."""
        if self._plan is None or capture.grad:
            return self._whole_layers(ids, mask, types, capture)
        if not self.fused:
            return stream_layers(self.model, self._plan, self._inputs(ids, mask, types), capture,
                                 whole=lambda: self._whole_layers(ids, mask, types, capture))
        return self._fused_layers(self._plan, ids, mask, types, capture)

    def _fused_layers(self, plan: LayerPlan, ids: Tensor, mask: Tensor, types: Tensor,
                      capture: Capture) -> Iterator[LayerOut]:
        """Each layer as row blocks on demand (the queries and keys), made whole where the consumer wants
        the whole weights (short inputs): only the layers wanted, never a ``[T, T]`` mask for long ones."""
        from .hf_attention import weights_mode

        batch, tokens = ids.shape
        config = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") \
            else self.model.config
        heads = getattr(config, "num_attention_heads", None) or 1
        # Past ROWS_ASKED_FROM_TOKENS a layer goes on as row blocks whoever reads it: statistics and pictures reduce
        # it a block at a time, and a consumer that needs every number builds it from the same blocks.
        as_rows = tokens > ROWS_ASKED_FROM_TOKENS or batch * heads * tokens**2 * 4 > ROWS_FROM_BYTES
        for out in stream_layers(self.model, plan, self._inputs(ids, mask, types), capture,
                                 whole=lambda: self._whole_layers(ids, mask, types, capture),
                                 around=lambda: weights_mode("rows")):
            if out.rows is not None and capture.values:
                out.values = out.rows.values
            if out.rows is not None and capture.queries_keys:
                groups = out.rows.n_heads // out.rows.keys.shape[1]
                out.queries, out.keys = out.rows.queries, out.rows.keys.repeat_interleave(groups, dim=1)
            if out.rows is not None and not as_rows:
                rows = out.rows
                out = LayerOut(layer=out.layer, weights=torch.stack([rows.dense(b) for b in range(batch)]),
                               queries=out.queries, keys=out.keys, values=out.values)
                del rows
            yield out

    def _whole_layers(self, ids: Tensor, mask: Tensor, types: Tensor, capture: Capture) -> Iterator[LayerOut]:
        """transformers builds every layer's attention at once (``output_attentions=True``); they are
        handed on one at a time and each is released once passed on."""
        if capture.grad:
            with self.eager_attention(), torch.enable_grad():
                attentions: list[Tensor | None] = list(
                    self.model(**self._inputs(ids, mask, types), output_attentions=True).attentions)
        else:
            attentions = list(self._attentions(ids, mask, types))
        for i in range(len(attentions)):
            weights, attentions[i] = attentions[i], None
            if capture.wants(i):
                yield LayerOut(layer=i, weights=weights)
            del weights

    def _extract_batch(self, texts: Sequence[str | None], pairs: list[str | None], options: ExtractOptions) -> list[AttentionResult]:
        """One padded forward pass; encoder-decoder models run one text at a time (results are the same)."""
        if not self.encoder_decoder:
            return super()._extract_batch(texts, pairs, options)
        layers = None if options.layers is None else self.check_layers(options.layers)
        return [self._seq2seq(self.encode(text, pair, truncate=options.truncate), options.target, options.truncate)
                .narrowed(layers, float16=options.float16) for text, pair in zip(given_texts(texts), pairs, strict=True)]

    def _stream_batch(self, texts: list[str], pairs: list[str | None], options: ExtractOptions) -> LayerStream:
        if not self.encoder_decoder:
            return super()._stream_batch(texts, pairs, options)
        return LayerStream.of_results(self._extract_batch(texts, pairs, options))  # with their cross-attentions

    @torch.no_grad()
    def _seq2seq(self, src: TokenInfo, target: str | None, truncate: bool) -> AttentionResult:
        """Encoder, decoder and cross-attention; the decoder reads ``target`` as it is tokenized (as bertviz does)."""
        if target is not None:
            tgt = self.encode(target, truncate=truncate, what="[[target]]")
        else:
            start = self.model.config.decoder_start_token_id
            if start is None:
                raise UsageError(f"{self.name} needs [[target]], the decoder's input text")
            label = self.hf_tokenizer.convert_ids_to_tokens(start)
            tgt = TokenInfo(ids=[start], labels=[label], special=[True], word_ids=[-1], segment_ids=[0])
        check_seq2seq_memory(self.model.config, len(src.ids), len(tgt.ids), self.name,
                             cut=self.max_positions is not None)
        dev = self.model.device
        with self._whole():
            out = self.model(
                input_ids=torch.tensor([src.ids], device=dev),
                attention_mask=torch.ones(1, len(src.ids), dtype=torch.long, device=dev),
                decoder_input_ids=torch.tensor([tgt.ids], device=dev),
                output_attentions=True,
            )

        def stack(layers: tuple[Tensor, ...]) -> Tensor:
            return torch.stack([a[0] for a in layers]).float().cpu()

        return AttentionResult(
            tokens=src.labels, token_ids=src.ids, special=src.special, word_ids=src.word_ids,
            segment_ids=src.segment_ids, attentions=stack(out.encoder_attentions), causal=False,
            model_name=self.name, decoder_attentions=stack(out.decoder_attentions),
            cross_attentions=stack(out.cross_attentions), target_tokens=tgt.labels, target_special=tgt.special,
            metadata={"engine": self.engine, "family": self.family, "device": self.device, "target_ids": tgt.ids,
                      **({"unk_token_id": unk} if (unk := unknown_token_id(self.tokenizer)) is not None else {})},
        )



def check_seq2seq_memory(config: Any, source: int, target: int, name: str, *, cut: bool) -> None:
    """An encoder-decoder's attention is computed whole (transformers returns every layer at once): the
    encoder's ``[L, H, S, S]``, the decoder's ``[L, H, T, T]`` and the cross ``[L, H, T, S]``, each held
    about three times over (the model's output, the stack, the copy it is read into). Refused before the
    model runs when that would not fit (a 120 kB text on T5, which has no position limit, asked for 24 GB)."""
    from ..errors import ResourceError
    from ..limits import MEMORY_ENV, human, memory_budget

    heads = int(getattr(config, "num_heads", 0) or getattr(config, "encoder_attention_heads", 1))
    enc = int(getattr(config, "num_layers", 0) or getattr(config, "encoder_layers", 1))
    dec = int(getattr(config, "num_decoder_layers", None) or getattr(config, "decoder_layers", None) or enc)
    needed = 3 * 4 * heads * (enc * source * source + dec * (target * target + target * source))
    budget = memory_budget()
    if needed > budget:
        or_cut = ", or pass [[truncate=True]]" if cut else ""
        raise ResourceError(f"the attention of a {source:,}-token text and a {target:,}-token [[target]] on {name} "
                            f"({enc} + {dec} layers × {heads} heads) needs about {human(needed)}, more than the "
                            f"{human(budget)} this machine has; shorten the text or [[target]]{or_cut} (or set "
                            f"{MEMORY_ENV} to try anyway)")
