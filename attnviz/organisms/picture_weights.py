"""A picture organism's weights, written by hand: transformers' own ``ViTModel`` or ``LlavaForConditionalGeneration``
with every weight set here (attention only: the MLPs and every head's value and output are zero, so each layer reads
the residual the embeddings made, and a planted head's pattern is all it does).

**The picture is read by where each patch is, not by what it shows**: the patch convolution is zero, so a patch's
token is its position embedding, and a planted head reads the same patch whatever the picture.

**The marks.** The residual holds one mark per thing a head may look for, each 0 or one value, and every token's
residual has the same norm, so the layer's norm divides every token by the same number and a mark is ``u`` after it
wherever it is set:

- ``vit``: patch i is +1 at ``patch + i`` and −1 at ``patch + G + i`` (G patches), CLS +1 and −1 at its two places
  (``cls_token``): every token's mean is 0 and its squared norm 2, so LayerNorm (ε = 1e-12) makes a mark
  ``u = √(d/2)`` (d the width).
- ``llava``: a text token is 4 at ``text`` and its ±1 code of 16 numbers at ``token`` (random, seeded: the text's
  tokens differ); an image token is 4 at ``image`` and 4 at ``patch + i``: every squared norm is 32, so RMSNorm
  makes a mark ``u = 4/√(32/d + ε)``. The vision tower makes the image tokens' marks: patch i's position embedding
  is +1 at i and −1 at G + i (its pre-LayerNorm weight 1/√G gives ±1 exactly), LLaVA's default layer (−2 of one
  layer) takes them as they are, the projector's first layer reads the + half ×10 (GELU(10) = 10 in float32; GELU(0)
  = 0), its second writes ×0.4 at ``patch + i`` and its bias 4 at ``image``.

**A planted head** (:mod:`.picture_planting`): one query dimension reads the marks of the tokens that ask (``text``,
or ``cls``; both ``text`` and ``image``, or the query's bias in ViT, for every token), scaled by ``60·√d_head/u²``;
one key dimension sums the marks it looks for. Divided by ``√d_head``, a key carrying a mark scores 60, every other
0: each asking row puts all but ``n·e^−60`` of its weight on those keys, equally. The language model's RoPE is
stretched a billionfold (``rope_type = "linear"``, factor 1e9): at most 8,192 positions turn a query or key by
8·10⁻⁶ radians, so a score depends on what a token is, never where.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .picture_planting import PicturePlanting, Residual
from .picture_spec import PictureSpec

LN_EPS = 1e-12  # the vision LayerNorms' epsilon: a mark's value to float32's precision
RMS_EPS = 1e-6  # the language model's RMSNorm epsilon (the same for every token: folded into u)
MARK, TOKEN = 4.0, 16  # llava: a mark's value before the norm; the text tokens' code length
ROPE_STRETCH = 1e9  # llava: RoPE's positions divided by this (rope_type "linear")
LIFT = 10.0  # llava: the projector's first layer (GELU(10) = 10)
INNER = 4  # the MLPs' (zero) width


def residual(spec: PictureSpec) -> Residual:
    """Where ``spec``'s marks lie, its width and head size (see the module)."""
    g = spec.grid ** 2
    if spec.family == "vit":
        used = 2 + 2 * g
        d_head = -(-used // spec.heads)
        d = spec.heads * d_head
        return Residual("vit", {"cls": 0}, 2, spec.grid, ("cls",), None, d, d_head,
                        1 / math.sqrt(2 / d + LN_EPS))
    used = 2 + TOKEN + g
    d_head = 2 * -(-used // (2 * spec.heads))  # even: RoPE turns pairs
    d = spec.heads * d_head
    return Residual("llava", {"text": 0, "image": 1, "token": 2}, 2 + TOKEN, spec.grid, ("text",), ("text", "image"),
                    d, d_head, MARK / math.sqrt(2 * MARK * MARK / d + RMS_EPS))


def plant_layers(spec: PictureSpec, state: dict[str, Tensor], names: dict[str, str], bias: bool) -> None:
    """Every planted head's query and key into ``state`` (``names``: the query's and key's weight and bias keys of a
    layer, with ``{layer}``)."""
    from .picture_kinds import PICTURE_KINDS

    marks = residual(spec)
    for head in spec.planted:
        at = {key: name.format(layer=head.layer) for key, name in names.items()}
        PICTURE_KINDS[head.kind].planted_by(PicturePlanting(head, marks, state[at["q"]], state[at["k"]],
                                                            state[at["q_bias"]] if bias else None))


def _zeros(model: Any) -> dict[str, Tensor]:
    """Every tensor of ``model``, zero; every norm's weight 1."""
    state = {key: torch.zeros_like(value) for key, value in model.state_dict().items()}
    for key in state:
        if "norm" in key and key.endswith(".weight"):
            state[key].fill_(1.0)
    return state


def vit_model(spec: PictureSpec) -> Any:
    """``spec`` as transformers' ``ViTModel``, its weights written (see the module)."""
    from transformers import ViTConfig, ViTModel

    marks = residual(spec)
    g = spec.grid ** 2
    config = ViTConfig(image_size=spec.image_size, patch_size=spec.patch_size, hidden_size=marks.d_model,
                       num_hidden_layers=spec.layers, num_attention_heads=spec.heads, intermediate_size=INNER,
                       layer_norm_eps=LN_EPS, qkv_bias=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = ViTModel(config)
    state = _zeros(model)
    state["embeddings.cls_token"][0, 0, :2] = torch.tensor([1.0, -1.0])
    rows = torch.arange(g)
    state["embeddings.position_embeddings"][0, 1 + rows, marks.patch + rows] = 1.0
    state["embeddings.position_embeddings"][0, 1 + rows, marks.patch + g + rows] = -1.0
    prefix = "layers.{layer}.attention."
    plant_layers(spec, state, {"q": prefix + "q_proj.weight", "k": prefix + "k_proj.weight",
                               "q_bias": prefix + "q_proj.bias"}, bias=True)
    model.load_state_dict(state, strict=True)
    return model.eval()


def llava_model(spec: PictureSpec, vocab_size: int, special: dict[str, int]) -> Any:
    """``spec`` as transformers' ``LlavaForConditionalGeneration`` over ``vocab_size`` tokens (``special``: the ids of
    ``image``, ``bos``, ``eos``, ``pad``), its weights written (see the module)."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    marks = residual(spec)
    g, d = spec.grid ** 2, marks.d_model
    vision = CLIPVisionConfig(image_size=spec.image_size, patch_size=spec.patch_size, hidden_size=2 * g,
                              num_hidden_layers=1, num_attention_heads=1, intermediate_size=INNER, projection_dim=INNER,
                              layer_norm_eps=LN_EPS)
    text = LlamaConfig(vocab_size=vocab_size, hidden_size=d, intermediate_size=INNER, num_hidden_layers=spec.layers,
                       num_attention_heads=spec.heads, num_key_value_heads=spec.heads, head_dim=marks.d_head,
                       max_position_embeddings=spec.positions, rms_norm_eps=RMS_EPS, tie_word_embeddings=True,
                       rope_parameters={"rope_type": "linear", "factor": ROPE_STRETCH, "rope_theta": 10000.0},
                       bos_token_id=special["bos"], eos_token_id=special["eos"], pad_token_id=special["pad"])
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=special["image"],
                         vision_feature_select_strategy="default", vision_feature_layer=-2, image_seq_length=g,
                         projector_hidden_act="gelu", tie_word_embeddings=True)
    model = LlavaForConditionalGeneration(config)
    state = _zeros(model)
    tower, rows = "model.vision_tower.", torch.arange(g)
    state[tower + "embeddings.position_embedding.weight"][1 + rows, rows] = 1.0
    state[tower + "embeddings.position_embedding.weight"][1 + rows, g + rows] = -1.0
    state[tower + "pre_layrnorm.weight"].fill_(1 / math.sqrt(g))  # ±√G after the normalisation → ±1
    projector = "model.multi_modal_projector."
    state[projector + "linear_1.weight"][rows, rows] = LIFT
    state[projector + "linear_2.weight"][marks.patch + rows, rows] = MARK / LIFT
    state[projector + "linear_2.bias"][marks.marks["image"]] = MARK
    generator = torch.Generator().manual_seed(spec.seed)
    order = torch.rand(vocab_size, TOKEN, generator=generator).argsort(dim=1)
    embed = state["model.language_model.embed_tokens.weight"]
    embed[:, marks.marks["text"]] = MARK
    embed[:, marks.marks["token"] : marks.marks["token"] + TOKEN] = torch.where(order < TOKEN // 2, 1.0, -1.0)
    if "lm_head.weight" in state:
        state["lm_head.weight"].copy_(embed)  # tied: the language-model head reads the embedding
    prefix = "model.language_model.layers.{layer}.self_attn."
    plant_layers(spec, state, {"q": prefix + "q_proj.weight", "k": prefix + "k_proj.weight"}, bias=False)
    model.load_state_dict(state, strict=True)
    return model.eval()
