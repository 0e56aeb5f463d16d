"""An organism's weights, written by hand from its description: a GPT-2 checkpoint (attention only: the MLPs are
zero) that attnviz's native engine runs and transformers loads, with the embedded MiniLM's WordPiece tokenizer.

**The residual stream** is a sum of named subspaces, each holding a balanced ±1 code (half +1, half −1, so every
residual vector has mean 0 and LayerNorm only divides it by one known scale, ``s`` of each layer, the same at every
position):

- ``TOK``: the token's code ``e_t`` (``T = 192`` dims; random, seeded: two tokens' codes mostly overlap by ~1/16);
- ``PREV1``, ``PREV2``: the token 1 (2) back, written by a previous-token head with that offset;
- ``PK``: the position's code ``c_p`` (``C = 192`` dims); ``PQ1``, ``PQ2``: ``c_{p−1}``, ``c_{p−2}`` (the first
  position's where there is none): what a previous-token head's query reads;
- ``POS``: ``(u, −u, v, −v)`` with ``u = p / (P − 1)`` and ``u² + v² = 1``: a position as a number, at a fixed norm.

The language-model head is the token embedding (tied): a token's logit is its code's dot product with the residual.

**Each planted head's pattern** (scores in nats, after GPT-2's ``1/√d_head``; ``s`` folded into the weights):

- ``previous_token`` (offset o): query ``c_{p−o}``, key ``c_k``: 60 where ``k = p − o``, below 30 elsewhere
  (two position codes overlap by < 1/2, checked when built; ≤ 26 for seed 0): each row's weight on ``p − o`` is 1
  to ~1e-14. It
  writes the attended token's code into ``PREVo``.
- ``induction`` (match m): query ``e_{t_p}`` (and ``PREV1_p`` for m = 2), key ``PREV1_k`` (and ``PREV2_k``): 60 per
  matched token (another token's code adds well under half of that), so a key whose previous token(s) equal the
  query's current (last two) outscores one that matches fewer; plus
  ``±12·u_k`` so that among equal matches the latest (``ties = "latest"``) or earliest wins. It writes ten times
  the attended token's code into ``TOK``: the model says the token that followed the earlier occurrence (copies).
- ``first_token``: query a constant ``c_0``, key ``c_k``: 60 on position 0 (an attention sink), below 30 elsewhere.
- ``local`` (window W): query a constant, key ``u_k``: the score rises by ``16/W`` per position, so the weights
  fall by ``e^{−16/W}`` per token back and the last W tokens hold all but ~1e-7 of each row (a softmax over scores
  linear in position cannot cut off: the window is exponential; half of a row lies within its last W/23 tokens).
- ``token`` (word x): query a constant ``e_x`` (60 on every occurrence of x, equally) and the code of the first
  token, ``[CLS]``, at half strength (30 on it): every earlier x, or the first token where there is none.
- ``uniform``, ``zero`` (and every head not planted): all weights 0, so each row spreads evenly over every token so
  far; it writes nothing.

Only previous-token and induction heads write; the others are patterns to find.
"""

from __future__ import annotations

import hashlib
import json
import math

import torch
from torch import Tensor

from ..errors import ConfigError
from .planting import COPY, LOCAL, MATCH, TIE, C, T  # noqa: F401 - the constants, where the docstring says
from .spec import OrganismSpec

VERSION = 4  # of this construction and its files (4: a fingerprint in each): a new one builds new folders
EPS = 1e-5  # GPT-2's LayerNorm epsilon


def _balanced(rows: int, dims: int, generator: torch.Generator) -> Tensor:
    """``[rows, dims]`` of ±1, half of each row +1 (mean 0), random."""
    order = torch.rand(rows, dims, generator=generator).argsort(dim=1)
    return torch.where(order < dims // 2, 1.0, -1.0)


class Layout:
    """Where each subspace sits in the residual, the head size, and each layer's LayerNorm scale."""

    def __init__(self, spec: OrganismSpec) -> None:
        from .kinds import KINDS

        two = any(name in ("PREV2", "PQ2") for h in spec.planted for name in KINDS[h.kind].subspaces(h))
        at = 0
        self.slot: dict[str, int] = {}
        for name, size in (("TOK", T), ("PREV1", T), ("PREV2", T if two else 0), ("PK", C), ("PQ1", C),
                           ("PQ2", C if two else 0), ("POS", 4)):
            self.slot[name] = at
            at += size
        used = at
        self.d_head = max(2 * max(T, C) + 4, -(-used // spec.heads))
        self.d_model = spec.heads * self.d_head
        self.two = two
        # Squared norm of the residual entering each layer: embeddings, then what the previous-token heads wrote.
        base = T + C + C + (C if two else 0) + 2
        self.scales = []
        for layer in range(spec.layers):
            written = sum(KINDS[h.kind].writes(h) for h in spec.planted if h.layer < layer)
            self.scales.append(math.sqrt((base + written) / self.d_model + EPS))


def build_state(spec: OrganismSpec, vocab_size: int, token_ids: dict[str, int]) -> tuple[dict[str, Tensor], Layout]:
    """Every weight of the GPT-2 checkpoint (keys as ``GPT2LMHeadModel`` saves them)."""
    from .kinds import KINDS
    from .planting import Planting

    lay = Layout(spec)
    d, p_count = lay.d_model, spec.positions
    g = torch.Generator().manual_seed(spec.seed)
    tokens = _balanced(vocab_size, T, g)
    codes = _balanced(p_count, C, g)
    if closest_codes(codes) >= 0.5 * C:  # pragma: no cover - a seed whose codes collide
        raise ConfigError(f"seed {spec.seed} gives two position codes too alike; choose another seed")
    state: dict[str, Tensor] = {}
    wte = torch.zeros(vocab_size, d)
    wte[:, lay.slot["TOK"] : lay.slot["TOK"] + T] = tokens
    wpe = torch.zeros(p_count, d)
    wpe[:, lay.slot["PK"] : lay.slot["PK"] + C] = codes
    back = torch.arange(p_count)
    wpe[:, lay.slot["PQ1"] : lay.slot["PQ1"] + C] = codes[(back - 1).clamp(min=0)]
    if lay.two:
        wpe[:, lay.slot["PQ2"] : lay.slot["PQ2"] + C] = codes[(back - 2).clamp(min=0)]
    u = back.double() / (p_count - 1)
    v = (1 - u * u).clamp(min=0).sqrt()
    pos = lay.slot["POS"]
    wpe[:, pos : pos + 4] = torch.stack([u, -u, v, -v], dim=1).float()
    state["transformer.wte.weight"], state["transformer.wpe.weight"] = wte, wpe
    for layer in range(spec.layers):
        prefix = f"transformer.h.{layer}."
        c_attn, bias, c_proj = torch.zeros(d, 3 * d), torch.zeros(3 * d), torch.zeros(d, d)
        for h in spec.planted:
            if h.layer == layer:
                KINDS[h.kind].planted_by(Planting(h, lay, c_attn, bias, c_proj, tokens, codes, token_ids,
                                                  lay.scales[layer], math.sqrt(lay.d_head)))
        state[prefix + "attn.c_attn.weight"], state[prefix + "attn.c_attn.bias"] = c_attn, bias
        state[prefix + "attn.c_proj.weight"], state[prefix + "attn.c_proj.bias"] = c_proj, torch.zeros(d)
        for norm in ("ln_1", "ln_2"):
            state[prefix + norm + ".weight"], state[prefix + norm + ".bias"] = torch.ones(d), torch.zeros(d)
        state[prefix + "mlp.c_fc.weight"], state[prefix + "mlp.c_fc.bias"] = torch.zeros(d, 4), torch.zeros(4)
        state[prefix + "mlp.c_proj.weight"], state[prefix + "mlp.c_proj.bias"] = torch.zeros(4, d), torch.zeros(d)
    state["transformer.ln_f.weight"], state["transformer.ln_f.bias"] = torch.ones(d), torch.zeros(d)
    return state, lay


BLOCK = 512  # rows of position codes compared at a time: BLOCK × positions × 4 bytes (32 MiB at 16,384)


def closest_codes(codes: Tensor) -> float:
    """The largest overlap (dot product) of two different codes, a block of rows at a time against the rows from
    there on (each pair once): never the whole ``[P, P]`` matrix (1 GiB at 16,384 positions)."""
    most = 0.0
    for start in range(0, codes.shape[0], BLOCK):
        overlap = codes[start : start + BLOCK] @ codes[start:].T
        rows = torch.arange(overlap.shape[0])
        overlap[rows, rows] = 0  # a code with itself
        most = max(most, float(overlap.max()), -float(overlap.min()))
    return most


def shapes(spec: OrganismSpec, vocab_size: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint and its shape, before any is built (what :func:`build_state` returns)."""
    d = Layout(spec).d_model
    found: dict[str, tuple[int, ...]] = {"transformer.wte.weight": (vocab_size, d),
                                         "transformer.wpe.weight": (spec.positions, d)}
    for layer in range(spec.layers):
        prefix = f"transformer.h.{layer}."
        found.update({prefix + "attn.c_attn.weight": (d, 3 * d), prefix + "attn.c_attn.bias": (3 * d,),
                      prefix + "attn.c_proj.weight": (d, d), prefix + "attn.c_proj.bias": (d,),
                      prefix + "ln_1.weight": (d,), prefix + "ln_1.bias": (d,), prefix + "ln_2.weight": (d,),
                      prefix + "ln_2.bias": (d,), prefix + "mlp.c_fc.weight": (d, 4), prefix + "mlp.c_fc.bias": (4,),
                      prefix + "mlp.c_proj.weight": (4, d), prefix + "mlp.c_proj.bias": (d,)})
    found["transformer.ln_f.weight"], found["transformer.ln_f.bias"] = (d,), (d,)
    return found


VOCAB = 30_522  # tokens of the embedded MiniLM's WordPiece vocabulary, the organisms' tokenizer
BASE = 350 << 20  # bytes of a build's process besides its weights: Python, torch, the tokenizer (measured: ~290 MiB)


def build_bytes(spec: OrganismSpec, vocab_size: int = VOCAB) -> int:
    """About the peak memory of building ``spec`` (and of loading it after): its weights, held once as float32 and
    written from where they are; the random codes and their sort; a block of code overlaps; the process itself."""
    weights = 4 * sum(math.prod(shape) for shape in shapes(spec, vocab_size).values())
    codes = (4 + 4 + 8) * T * max(vocab_size, spec.positions)  # a code table, its random keys and their argsort
    overlaps = 2 * 4 * BLOCK * spec.positions
    return weights + codes + overlaps + BASE


def fingerprint(spec: OrganismSpec) -> str:
    """What names an organism's folder: its description and this construction's version."""
    described = {k: v for k, v in vars(spec).items() if k not in ("source", "extra", "needle", "question")}
    described["planted"] = [{k: v for k, v in vars(h).items() if k != "settings" or v} for h in spec.planted]
    text = json.dumps({"version": VERSION, "t": T, "c": C, **described}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
