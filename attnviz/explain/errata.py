"""Errata of the tutorials attnviz grew out of (seeds 000, 001, 003), in English and Chinese.

Every number a finding shows is computed here, with torch and attnviz, each time :func:`errata`
is called; nothing is copied from the tutorials. Cheap: small seeded tensors, no model loads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..attention import MultiHeadAttention, attention_weights, causal_mask
from .errata_code import FAILURE_TEXT, run_seed_mha, seeded_default_rng

__all__ = ["Erratum", "errata"]


@dataclass(frozen=True)
class Erratum:
    """One error of a tutorial: what it says, what is true, and the numbers that show it."""

    seed: str  # "000", "001", "003"
    key: str  # stable id, e.g. "000-scale-64"
    claim: dict[str, str]  # {"en": ..., "zh": ...}: what the tutorial says, and where
    finding: dict[str, str]  # {"en": ..., "zh": ...}: what is true, with the computed numbers
    numbers: dict[str, Any]  # the computed values behind the finding (JSON-ready)


def _r(x: torch.Tensor | float, digits: int = 4) -> Any:
    """Rounded plain Python numbers (lists for tensors); -0.0 shown as 0.0."""
    if isinstance(x, torch.Tensor):
        return [_r(v, digits) for v in x.tolist()] if x.dim() else _r(x.item(), digits)
    if isinstance(x, list):
        return [_r(v, digits) for v in x]
    return round(float(x), digits) + 0.0


def _fmt(values: list[Any]) -> str:
    """``[0.1234, 0.5]`` with four decimals, as the texts write a row of numbers."""
    return "[" + ", ".join(_fmt(v) if isinstance(v, list) else f"{v:.4f}" for v in values) + "]"


def _scale_64() -> Erratum:
    d_k, n = 64, 5
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(128, d_k, generator=g), torch.randn(128, d_k, generator=g)  # small: one thread, microseconds
    scores = q @ k.T  # [128, 128] dot products of unit-variance vectors: variance d_k
    row = scores[0, :n]
    nb = {
        "d_k": d_k, "sqrt_d_k": math.sqrt(d_k), "example_scores": _r(row),
        "softmax_div_sqrt_d_k": _r(torch.softmax(row / math.sqrt(d_k), -1)),
        "softmax_div_64": _r(torch.softmax(row / 64, -1)), "uniform": _r(1 / n),
        "std_raw": _r(scores.std()), "std_div_sqrt_d_k": _r((scores / math.sqrt(d_k)).std()),
        "std_div_64": _r((scores / 64).std()), "n_scores": scores.numel(),
    }
    en = (f"The divisor is √d_k, which is {nb['sqrt_d_k']:g} for the paper's d_k = 64, not 64. Seeded random q, k "
          f"with d_k = 64 give the scores {_fmt(nb['example_scores'])}; softmax after /√d_k = /8: "
          f"{_fmt(nb['softmax_div_sqrt_d_k'])}; after /64: {_fmt(nb['softmax_div_64'])}, much flatter, close to "
          f"uniform ({nb['uniform']:.4f} each). Over {nb['n_scores']} scores the std is {nb['std_raw']:.4f} before "
          f"scaling, {nb['std_div_sqrt_d_k']:.4f} after /√d_k (unit variance, the point of the scaling) and "
          f"{nb['std_div_64']:.4f} after /64.")
    zh = (f"缩放点积的除数是 √d_k,论文中 d_k = 64 时为 {nb['sqrt_d_k']:g},而不是 64。用固定随机种子生成 d_k = 64 的查询 Q、"
          f"键 K,得到分数 {_fmt(nb['example_scores'])};除以 √d_k = 8 后 softmax 为 {_fmt(nb['softmax_div_sqrt_d_k'])};"
          f"除以 64 后为 {_fmt(nb['softmax_div_64'])},明显更平,接近均匀分布(每项 {nb['uniform']:.4f})。"
          f"在 {nb['n_scores']} 个分数上,缩放前标准差为 {nb['std_raw']:.4f},除以 √d_k 后为 "
          f"{nb['std_div_sqrt_d_k']:.4f}(方差为 1,这正是缩放的目的),除以 64 后为 {nb['std_div_64']:.4f}。")
    return Erratum("000", "000-scale-64", {
        "en": "Section 2.3 (steps of the computation): the attention scores are scaled by dividing by a fixed value "
              "(e.g. 64).",
        "zh": "2.3 节(Attention 计算具体步骤):对 attention score 进行缩放,“除以固定值(eg:64)”。"}, {"en": en, "zh": zh}, nb)


def _mask_inverted() -> Erratum:
    t = 3
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, t, 4, generator=g), torch.randn(1, 1, t, 4, generator=g)
    eye = torch.eye(t).expand(1, 1, t, t)  # V = identity: each output row is that query's weights
    mask = torch.triu(torch.ones(t, t), diagonal=1).bool()  # seed 000's create_causal_mask: True = masked
    wrong = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)[0, 0]
    right = F.scaled_dot_product_attention(q, k, eye, attn_mask=~mask)[0, 0]
    scores = q[0, 0] @ k[0, 0].T / math.sqrt(q.shape[-1])  # what SDPA softmaxes, for checking by hand
    ours = attention_weights(scores, mask=mask)
    own = torch.softmax(scores.masked_fill(mask, -1e9), dim=-1)  # the seed's own masked_attention: right
    above = torch.ones(t, t).triu(1).bool()
    nb = {
        "tokens": t, "seed_mask": mask.tolist(), "scores": _r(scores), "sdpa_weights_with_seed_mask": _r(wrong),
        "weight_on_future_per_row": _r(wrong.masked_fill(~above, 0).sum(-1)),
        "weight_on_past_and_self_per_row": _r(wrong.masked_fill(above, 0).sum(-1)),
        "last_row": _r(wrong[-1]), "last_row_sum": _r(wrong[-1].sum()),
        "last_row_has_nan": bool(wrong[-1].isnan().any()), "torch_version": torch.__version__.split("+")[0],
        "attnviz_weights_with_seed_mask": _r(ours),
        "inverted_equals_causal_mask": bool(torch.equal(~mask, causal_mask(t))),
        "sdpa_weights_with_inverted_mask": _r(right), "seed_masked_fill_weights": _r(own),
    }
    last = "NaN" if nb["last_row_has_nan"] else f"{_fmt(nb['last_row'])} (sum {nb['last_row_sum']:g}, not 1; no NaN)"
    last_zh = "NaN" if nb["last_row_has_nan"] else f"{_fmt(nb['last_row'])}(和为 {nb['last_row_sum']:g},不是 1;没有 NaN)"
    en = (f"torch's scaled_dot_product_attention and attnviz read True as \"may attend\". Passed straight as "
          f"attn_mask, seed 000's mask gives, on {t} tokens (V = identity, so the output rows are the weights), "
          f"{_fmt(nb['sdpa_weights_with_seed_mask'])}: the weight on later tokens per row is "
          f"{_fmt(nb['weight_on_future_per_row'])} and on the token itself and earlier ones "
          f"{_fmt(nb['weight_on_past_and_self_per_row'])}, so each token attends only to the future. The last token "
          f"has no allowed key: torch {nb['torch_version']} gives {last}. attnviz gives the same rows "
          f"{_fmt(nb['attnviz_weights_with_seed_mask'])}. Inverted, ~mask (= torch.tril, = attnviz.causal_mask("
          f"{t})) gives causal weights {_fmt(nb['sdpa_weights_with_inverted_mask'])}, the same as the seed's own "
          f"masked_fill(mask, -1e9) gives ({_fmt(nb['seed_masked_fill_weights'])}): the mask is right only there.")
    zh = (f"torch 的 scaled_dot_product_attention 和 attnviz 都把 True 理解为“可以关注”。把教程的掩码直接作为 attn_mask 传入,"
          f"在 {t} 个 token 上(值 V 取单位矩阵,输出行就是注意力权重)得到 {_fmt(nb['sdpa_weights_with_seed_mask'])}:"
          f"每行落在后面 token 上的权重为 {_fmt(nb['weight_on_future_per_row'])},落在自身及之前 token 上的为 "
          f"{_fmt(nb['weight_on_past_and_self_per_row'])},即每个 token 只关注未来。最后一个 token 没有可关注的键 K:"
          f"torch {nb['torch_version']} 给出 {last_zh}。attnviz 给出同样的行 {_fmt(nb['attnviz_weights_with_seed_mask'])}。"
          f"取反 ~mask(即 torch.tril,即 attnviz.causal_mask({t}))才得到因果权重 "
          f"{_fmt(nb['sdpa_weights_with_inverted_mask'])},与教程自己的 masked_fill(mask, -1e9) 结果相同"
          f"({_fmt(nb['seed_masked_fill_weights'])}):这个掩码只在那种写法里是对的。")
    return Erratum("000", "000-mask-true-means-masked", {
        "en": "Section 4.2: the mask is torch.triu(torch.ones(n, n), diagonal=1).bool(), True = masked, used as "
              "scores.masked_fill(mask, -1e9): the opposite of torch's SDPA attn_mask.",
        "zh": "4.2 节:掩码为 torch.triu(torch.ones(n, n), diagonal=1).bool(),“True 表示需要屏蔽的位置”,"
              "用于 scores.masked_fill(mask, -1e9),与 torch SDPA 的 attn_mask 约定相反。"}, {"en": en, "zh": zh}, nb)


def _cross_backwards() -> Erratum:
    s, t, d = 4, 3, 4
    g = torch.Generator().manual_seed(0)
    enc, dec = torch.randn(1, s, d, generator=g), torch.randn(1, t, d, generator=g)
    with seeded_default_rng(0):
        mha = MultiHeadAttention(d, 2)
    right, backwards = mha(dec, enc), mha(enc, dec)  # (queries from, keys/values from)
    try:
        added = list((dec + backwards.output).shape)
        error = None
    except RuntimeError as exc:
        added, error = None, str(exc)
    nb = {
        "encoder_tokens": s, "decoder_tokens": t, "d_model": d, "decoder_stream_shape": list(dec.shape),
        "right_output_shape": list(right.output.shape), "right_weights_shape": list(right.weights.shape),
        "right_residual_shape": list((dec + right.output).shape),
        "backwards_output_shape": list(backwards.output.shape), "backwards_weights_shape": list(backwards.weights.shape),
        "backwards_residual_shape": added, "backwards_residual_error": error,
    }
    res = f"fails: {error}" if error else f"gives {added}"
    en = (f"Q comes from the decoder and K, V from the encoder (seed 003 has it right). With an encoder of S = {s} "
          f"tokens, a decoder of T = {t} and d = {d}: the right way gives an output of shape "
          f"{nb['right_output_shape']} (weights {nb['right_weights_shape']}), one row per decoder position, added to "
          f"the decoder's residual stream {nb['decoder_stream_shape']} → {nb['right_residual_shape']}. The tutorial's way "
          f"(Q from the encoder) gives {nb['backwards_output_shape']} (weights {nb['backwards_weights_shape']}), one row per encoder "
          f"token; adding it to the decoder's stream {res}.")
    res_zh = f"报错:{error}" if error else f"得到 {added}"
    zh = (f"查询 Q 来自解码器,键 K、值 V 来自编码器(seed 003 的说法是对的)。编码器 S = {s} 个 token,解码器 T = {t} 个,"
          f"d = {d}:正确做法输出形状为 {nb['right_output_shape']}(权重 {nb['right_weights_shape']}),每个解码器位置一行,"
          f"可加到解码器的残差流 {nb['decoder_stream_shape']} 上 → {nb['right_residual_shape']}。教程的做法输出 "
          f"{nb['backwards_output_shape']}(权重 {nb['backwards_weights_shape']}),每个编码器 token 一行;"
          f"加到解码器的残差流上{res_zh}。")
    return Erratum("001", "001-cross-attention-backwards", {
        "en": "Section 2.1.4: in the Transformer's decoder, Q comes from the encoder's output and K, V from the "
              "decoder's input.",
        "zh": "2.1.4 节:“在 Transformer 的 Decoder 结构中,Q 来自于 Encoder 的输出,K 与 V 来自于 Decoder 的输入”。"},
        {"en": en, "zh": zh}, nb)


def _mha_class() -> Erratum:
    run = run_seed_mha()
    nb = {**run, "failures_count": len(run["failures"])}
    en_items, zh_items = [], []
    for i, f in enumerate(run["failures"], 1):
        why_en, why_zh = FAILURE_TEXT.get(f["kind"], ("not fixed here", "此处未修复"))
        en_items.append(f"{i}) in {f['stage']}: {f['error']} ({why_en.format(name=f['name'])})")
        zh_items.append(f"{i}){f['stage']}:{f['error']}({why_zh.format(name=f['name'])})")
    result = run["result"]
    if result:
        tail_en = (f" With all {nb['failures_count']} fixes, causal self-attention gives {result['self_shape']}, equal "
                   f"to attnviz's MultiHeadAttention with the same weights (max |diff| "
                   f"{result['max_abs_diff_vs_attnviz']:.1e}), and cross-attention gives {result['cross_shape']}.")
        tail_zh = (f"全部 {nb['failures_count']} 处修复后,因果自注意力输出 {result['self_shape']},与相同权重的 attnviz "
                   f"MultiHeadAttention 一致(最大差 {result['max_abs_diff_vs_attnviz']:.1e}),交叉注意力输出 "
                   f"{result['cross_shape']}。")
    else:
        tail_en, tail_zh = " It still does not run.", "仍无法运行。"
    args = ", ".join(f"{k}={v}" for k, v in run["start_args"].items())
    en = (f"Executed as written with ModelArgs({args}), queries of T = {run['T']} tokens and, for cross-attention, "
          f"keys/values of S = {run['S']}, fixing one failure at a time and running again, it fails "
          f"{nb['failures_count']} times: " + "; ".join(en_items) + "." + tail_en)
    zh = (f"按原样执行(ModelArgs({args}),查询 Q 长度 T = {run['T']},交叉注意力的键 K、值 V 长度 S = {run['S']}),"
          f"每次修复一处再重新运行,共失败 {nb['failures_count']} 次:" + ";".join(zh_items) + "。" + tail_zh)
    return Erratum("001", "001-mha-class-does-not-run", {
        "en": "Section 2.1.6: the MultiHeadAttention class (parallel heads with three combined matrices) is given "
              "as working code.",
        "zh": "2.1.6 节:多头注意力 MultiHeadAttention 类(用三个组合矩阵并行计算多头)作为可运行代码给出。"},
        {"en": en, "zh": zh}, nb)


def _param_count(d_model: int, n_heads: int, d_head: int | None = None) -> int:
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        return sum(p.numel() for p in MultiHeadAttention(d_model, n_heads, d_head=d_head).parameters())


def _params_3h1() -> Erratum:
    d, h = 512, 8
    one, many, wide = _param_count(d, 1), _param_count(d, h), _param_count(d, h, d_head=d)
    claimed = (3 * h + 1) / 4
    nb = {"d_model": d, "h": h, "params_h1": one, "params_h8": many, "ratio": many / one,
          "claimed_ratio": claimed, "claimed_params_h8": round(claimed * one),
          "params_h8_full_width_heads": wide, "ratio_full_width_heads": _r(wide / one)}
    en = (f"With d_k = d_model/h, multi-head attention has exactly as many parameters as single-head: "
          f"MultiHeadAttention(d_model={d}, n_heads=1) has {one:,}, n_heads={h} (d_k = {d // h}) has {many:,}, "
          f"ratio {nb['ratio']:g}; both are 4·{d}² + 4·{d} (W_Q, W_K, W_V, W_O and biases). The claimed "
          f"(3h+1)/4 = {claimed:g} for h = {h} would mean {nb['claimed_params_h8']:,}. Even heads of full width "
          f"(d_k = {d}) give {wide:,}, ratio {nb['ratio_full_width_heads']:g}, not {claimed:g}.")
    zh = (f"当 d_k = d_model/h 时,多头注意力的参数量与单头完全相同:MultiHeadAttention(d_model={d}, n_heads=1) 有 "
          f"{one:,} 个参数,n_heads={h}(d_k = {d // h})有 {many:,} 个,比值 {nb['ratio']:g};两者都是 4·{d}² + 4·{d}"
          f"(W_Q、W_K、W_V、W_O 及偏置)。教程的 (3h+1)/4 在 h = {h} 时为 {claimed:g},即 {nb['claimed_params_h8']:,} 个。"
          f"即使每个头都保持全宽(d_k = {d}),也是 {wide:,} 个,比值 {nb['ratio_full_width_heads']:g},而不是 {claimed:g}。")
    return Erratum("003", "003-params-3h-plus-1", {
        "en": "Pros and cons table, row \"resource use\": multi-head attention adds about (3h+1)/4 times the "
              "parameters of single-head attention.",
        "zh": "优缺点表“资源消耗”一行:多头注意力的参数量增加约 (3h+1)/4 倍(相比单头)。"}, {"en": en, "zh": zh}, nb)


_BUILDERS = (_scale_64, _mask_inverted, _cross_backwards, _mha_class, _params_3h1)


def errata() -> list[Erratum]:
    """Every erratum, its numbers computed now (deterministic: fixed seeds, global RNG untouched)."""
    # One intra-op thread while computing: the tensors are tiny, and on a busy 2-core machine each op
    # that wakes a second OpenMP thread waits ~15 ms for it (300 ms in all instead of 5 ms).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [build() for build in _BUILDERS]
    finally:
        torch.set_num_threads(threads)
