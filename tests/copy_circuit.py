"""A 2-layer, attention-only GPT-2 language model whose copy (induction) circuit is written by hand, at
1,280 positions: a needle-in-a-haystack model whose retrieval head is known.

As tests/induction_circuit.py builds its circuit (Olsson et al. 2022), but with a language-model head (tied
to the token embedding) and positions told apart by random ±1 codes, so 1,280 positions fit in 1,280 dims:

- layer 0, head 0, a previous-token head: the position embedding of p carries two codes, its own c_p (the
  key side) and c_{p−1} (the query side), so p attends to p − 1 and writes that token into a "previous
  token" subspace;
- layer 1, head 0, the induction head: the current token is the query, the previous-token subspace the key,
  so the last position attends to whatever followed the current token's earlier copy and writes that token,
  ten times larger than the current token's own identity, into the residual: the head copies it out.

With the needle "Answer: n1 … n14 ." and a prompt that ends in "Answer:", the model answers n1 … n14 from
wherever the needle lies: L1H0 is its retrieval head. Heads 1 of both layers are zero (uniform attention,
no output). Every feature is a ±1 pair of dimensions, so each residual vector has mean 0 and LayerNorm
only rescales it by the same factor at every position.
"""

from __future__ import annotations

from pathlib import Path

import torch

NEEDLE_WORDS = [f"n{i}" for i in range(1, 15)]
NEEDLE = "Answer: " + " ".join(NEEDLE_WORDS) + " ."
HAYSTACK_WORDS = [f"h{i}" for i in range(24)]
TEMPLATE_WORDS = ["Based", "on", "content", "above,", "answer", "the", "question.", "Question:", "Answer:",
                  "What", "is", "secret?"]
QUESTION = "What is the secret?"
WORDS = ["<|endoftext|>", ".", *HAYSTACK_WORDS, *NEEDLE_WORDS, *TEMPLATE_WORDS]
V = 64  # token ids (the vocabulary above, padded)
P = 1280  # positions
CODE = 256  # dims of a position code
D = 4 * V + 4 * CODE
N_HEADS = 2
D_HEAD = D // N_HEADS
TOK, PREV, PK, PQ = 0, 2 * V, 4 * V, 4 * V + 2 * CODE
RETRIEVAL_HEAD = (1, 0)
PREVIOUS_TOKEN_HEAD = (0, 0)
ZEROED_HEADS = [(0, 1), (1, 1)]


def haystack(sentences: int = 400, seed: int = 0) -> str:
    """Sentences of haystack words, each ended by a full stop."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(sentences):
        n = int(torch.randint(4, 9, (1,), generator=g))
        out.append(" ".join(HAYSTACK_WORDS[int(i)] for i in torch.randint(0, len(HAYSTACK_WORDS), (n,), generator=g))
                   + " .")
    return " ".join(out)


def build(folder: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    assert len(WORDS) <= V
    cfg = GPT2Config(vocab_size=V, n_embd=D, n_layer=2, n_head=N_HEADS, n_positions=P, n_inner=4, bos_token_id=0,
                     eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)
    model = GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(1234)
    codes = torch.randint(0, 2, (P, CODE), generator=g).float() * 2 - 1
    overlap = codes @ codes.T - CODE * torch.eye(P)
    assert float(overlap.abs().max()) < 0.5 * CODE  # every other position stays far below a match
    s0 = ((2 + 4 * CODE) / D) ** 0.5  # LayerNorm's scale in layer 0: token pair + two position codes
    s1 = ((4 + 4 * CODE) / D) ** 0.5  # in layer 1: the previous-token pair too
    sqrt_dh = D_HEAD**0.5
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for block in model.transformer.h:
            block.ln_1.weight.fill_(1.0)
            block.ln_2.weight.fill_(1.0)
        model.transformer.ln_f.weight.fill_(1.0)
        wte, wpe = model.transformer.wte.weight, model.transformer.wpe.weight
        for t in range(V):
            wte[t, TOK + t], wte[t, TOK + V + t] = 1.0, -1.0
        for p in range(P):
            wpe[p, PK : PK + CODE], wpe[p, PK + CODE : PK + 2 * CODE] = codes[p], -codes[p]
            q = codes[max(p - 1, 0)]
            wpe[p, PQ : PQ + CODE], wpe[p, PQ + CODE : PQ + 2 * CODE] = q, -q
        # Layer 0, head 0: a match of codes scores 60 nats; any other position at most half as much.
        a = 60.0 * s0 * s0 * sqrt_dh / CODE
        w0 = model.transformer.h[0].attn.c_attn.weight  # Conv1D [D, 3D]: columns are Q | K | V
        for i in range(CODE):
            w0[PQ + i, i] = a
            w0[PK + i, D + i] = 1.0
        for t in range(V):
            w0[TOK + t, 2 * D + t] = 1.0  # value: the token (1/s0 after the norm)
        proj0 = model.transformer.h[0].attn.c_proj.weight  # [D, D]: head outputs → residual
        for t in range(V):
            proj0[t, PREV + t], proj0[t, PREV + V + t] = s0, -s0
        # Layer 1, head 0: query = the current token, key = the previous token; a match scores 40 nats.
        b = 40.0 * s1 * s1 * sqrt_dh
        w1 = model.transformer.h[1].attn.c_attn.weight
        for t in range(V):
            w1[TOK + t, t] = b
            w1[PREV + t, D + t] = 1.0
            w1[TOK + t, 2 * D + t] = 1.0
        proj1 = model.transformer.h[1].attn.c_proj.weight
        for t in range(V):  # the attended token, ten times the current one's weight in the logits
            proj1[t, TOK + t], proj1[t, TOK + V + t] = 10.0 * s1, -10.0 * s1
    model.save_pretrained(folder, safe_serialization=True)
    vocab = {w: i for i, w in enumerate(WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # A BOS first, as LLaMA's tokenizer puts one: a needle at depth 0 still has a token before it.
    tok.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 0)])
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", unk_token="<|endoftext|>").save_pretrained(folder)
    return folder
