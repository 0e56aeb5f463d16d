"""Masks read a block of query rows at a time, whatever form a model gives them in.

:class:`~attnviz.attention.rows.AttentionRows` asks a mask two things: how many keys some rows may
see (``visible``) and which (``rows``). :class:`~attnviz.attention.rows.RowMask` answers for the
native engine's masks; here :class:`TensorMask` answers for a mask a model built whole (boolean, or
additive float), and :class:`FunctionMask` for transformers' mask *functions* of ``(batch, head, q, kv)``
indices (causal, sliding windows that differ per layer, chunked attention, padding, image blocks),
evaluated for the rows asked and never built as a ``[T, T]`` tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor


def _last_seen(mask: Tensor) -> int:
    """One past the last key any row of ``mask`` ``[..., rows, keys]`` may see (0 when none)."""
    seen = mask.reshape(-1, mask.shape[-1]).any(0)
    hits = torch.nonzero(seen)
    return 0 if hits.numel() == 0 else int(hits[-1]) + 1


@dataclass
class TensorMask:
    """A boolean mask given whole, ``[B or 1, 1, Tq, Tk]`` (True = may attend), read by rows."""

    mask: Tensor

    @property
    def t_q(self) -> int:
        return int(self.mask.shape[-2])

    @property
    def t_k(self) -> int:
        return int(self.mask.shape[-1])

    def visible(self, stop: int, first: int = 0) -> int:
        return _last_seen(self.rows(first, stop))

    def rows(self, first: int, stop: int, width: int | None = None) -> Tensor:
        """Rows ``first … stop − 1`` over the first ``width`` keys (a mask shared by every query: the same row)."""
        mask = self.mask if self.mask.shape[-2] > 1 else self.mask.expand(*self.mask.shape[:-2], stop, self.t_k)
        return mask[..., first:stop, : self.t_k if width is None else width]

    def dense(self) -> Tensor:
        return self.mask


@dataclass
class FunctionMask:
    """transformers' mask described: ``mask_function(batch, head, q, kv)`` (True = may attend) with the
    queries at positions ``q_offset + i`` and the keys at ``kv_offset + j``, and the tokenizer's padding
    ``[B, ≥ kv_offset + Tk]``; evaluated for the rows asked, as ``transformers.masking_utils.sdpa_mask``
    evaluates it for all of them (with ``use_vmap`` for functions that index tensors)."""

    batch: int
    t_q: int
    t_k: int
    q_offset: int
    kv_offset: int
    function: Callable[..., Tensor]
    padding: Tensor | None = None
    device: torch.device | str = "cpu"
    use_vmap: bool = False
    _last: list[tuple[int, int, Tensor]] = field(default_factory=list, repr=False, compare=False)
    _moved: dict[str, FunctionMask] = field(default_factory=dict, repr=False, compare=False)

    def _evaluate(self, first: int, stop: int, width: int) -> Tensor:
        from transformers.masking_utils import and_masks, padding_mask_function

        function = self.function
        if self.padding is not None:
            function = and_masks(function, padding_mask_function(self.padding))
        batch = torch.arange(self.batch, device=self.device)
        head = torch.arange(1, device=self.device)
        q = torch.arange(first, stop, device=self.device) + self.q_offset
        kv = torch.arange(width, device=self.device) + self.kv_offset
        if self.use_vmap:
            from transformers.masking_utils import TransformGetItemToIndex, _vmap_expansion_sdpa

            with TransformGetItemToIndex():
                return _vmap_expansion_sdpa(function)(batch, head, q, kv)
        out = function(batch[:, None, None, None], head[None, :, None, None], q[None, None, :, None],
                       kv[None, None, None, :])
        return out.expand(self.batch, 1, stop - first, width)

    def rows(self, first: int, stop: int, width: int | None = None) -> Tensor:
        """The mask of query rows ``first … stop − 1`` over the first ``width`` keys, ``[B, 1, rows, width]``."""
        width = self.t_k if width is None else width
        last = self._last[0] if self._last else None  # read once: another thread may replace it
        if last is not None and last[:2] == (first, stop) and last[2].shape[-1] >= width:
            return last[2][..., :width]  # just evaluated for :meth:`visible`
        return self._evaluate(first, stop, width)

    def on(self, device: torch.device | str) -> FunctionMask:
        """This mask evaluated on ``device`` (a layer placed on another device by a device map); kept per device."""
        if torch.device(device) == torch.device(self.device):
            return self
        moved = self._moved.get(str(device))
        if moved is None:
            padding = None if self.padding is None else self.padding.to(device)
            moved = self._moved[str(device)] = FunctionMask(self.batch, self.t_q, self.t_k, self.q_offset,
                                                            self.kv_offset, self.function, padding, device,
                                                            self.use_vmap)
        return moved

    def visible(self, stop: int, first: int = 0) -> int:
        """One past the last key rows ``first … stop − 1`` may see (the block's mask is kept for :meth:`rows`)."""
        mask = self._evaluate(first, stop, self.t_k)
        self._last[:] = [(first, stop, mask)]
        return _last_seen(mask)

    def dense(self) -> Tensor:
        return self._evaluate(0, self.t_q, self.t_k)
