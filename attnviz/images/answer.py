"""A vision-language model's answer, chosen on the one decoding loop (:func:`attnviz.sources.decoding.decode`) as
``generate`` chooses a causal model's: greedy, or sampled with the same settings and seed
(:class:`~attnviz.sources.sampling.Sampling`). Only those settings choose tokens: the checkpoint's
``generation_config.json`` names the end tokens, and nothing else of it (beams, penalties, its own sampling) applies.

:class:`PictureStepper` is the model as a :class:`~attnviz.sources.stepping.Stepper`: its first feed is the prompt the
processor made, pictures and all, every later one a chosen token on the key/value cache, at the position the model
itself computes from the cache (M-RoPE's offsets after the pictures, PaliGemma's 1-based positions): what
transformers' ``generate`` feeds it. It hands back logits only; the answer's attention is read afterwards in one
forward over the whole sequence (:func:`attnviz.images.vlm.vlm_attention`).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from ..sources.sampling import Sampling
    from ..sources.stepping import Rows


class PictureStepper:
    """A vision-language model decoding on its key/value cache after ``inputs`` (the processor's: ids, pixels and
    whatever the family adds), which its first feed must be (see the module)."""

    def __init__(self, network: Any, inputs: dict[str, Any], *, name: str, engine: str, layers: int, heads: int,
                 max_positions: int | None) -> None:
        self.network, self.inputs, self.name, self.engine = network, dict(inputs), name, engine
        self.prompt = [int(i) for i in inputs["input_ids"][0]]
        self.n_layers, self.n_heads, self.max_positions = layers, heads, max_positions
        # the last position's logits only, where the model can: a vocabulary of 262,144 over 10,000 prompt tokens
        # would be 10 GB
        self.last = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(network.forward).parameters else {}
        self.past: Any = None
        self.length = 0

    def reset(self) -> None:
        self.past, self.length = None, 0

    @torch.no_grad()
    def feed(self, ids: list[int], *, rows: Rows = "none", every_logit: bool = False) -> tuple[torch.Tensor, None]:
        from ..sources.cache import cache_of, with_cache
        from ..sources.hf_attention import weights_mode

        if rows != "none" or every_logit:
            raise UsageError(f"{self.name}: a picture model's steps give the next token's logits only")
        if self.past is None and ids != self.prompt:
            raise ValueError("a PictureStepper's first feed is the prompt its pictures were processed with")
        with weights_mode("none"):
            if self.past is None:
                out = self.network(**self.inputs, use_cache=True, **self.last)
            else:
                out = self.network(input_ids=torch.tensor([ids], device=self.network.device), use_cache=True,
                                   **with_cache(self.network, self.past), **self.last)
        self.past, self.length = cache_of(out), self.length + len(ids)
        return out.logits[0, -1].float().cpu(), None


def answer(stepper: PictureStepper, *, max_new_tokens: int, sampling: Sampling | None, image_token: int) -> list[int]:
    """The prompt's ids then up to ``max_new_tokens`` chosen ones (``sampling``: greedy when None), stopping after the
    model's end token (its ``generation_config``'s, as transformers reads it). The image token is never chosen: it
    stands only where a picture's features go, and the answer is read again with the pictures (transformers would
    choose it, then fail on more image tokens than pictures' features)."""
    from ..sources.decoding import decode

    eos = getattr(stepper.network.generation_config, "eos_token_id", None)
    eos_ids = [int(i) for i in (eos if isinstance(eos, list) else [eos]) if i is not None]
    done = decode(stepper, stepper.prompt, max_new_tokens=max_new_tokens, sampling=sampling, eos_ids=eos_ids,
                  never=[image_token])
    stepper.reset()  # the cache is let go before the whole sequence runs again
    return done.ids
