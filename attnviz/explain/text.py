"""What ``attnviz explain`` says, in English and in Chinese (the tutorials' terms: 查询, 键, 值, 缩放点积, 掩码…).

Both catalogues have the same keys and the same ``{placeholders}``; a test holds them together.
Numbers are never written here: they come in as parameters.
"""

from __future__ import annotations

from typing import Any

EN: dict[str, str] = {
    "title": "Attention, step by step: {title}",
    "step": "Step {n} · {heading}",
    "positions.heading": "from tokens to X: embedding + position, then LayerNorm",
    "positions.text": "Each token's row of the embedding table, plus the positional encoding of its place "
                      "(sin/cos waves, Vaswani et al. 2017, 3.5), gives the vector that enters layer 0. The block "
                      "normalises it (LayerNorm: mean 0, variance 1 per row) before attending: that is X.",
    "positions.none": "This model adds no positional encoding: the embedding rows enter layer 0 as they are; "
                      "LayerNorm of them is X. Without positions, attention cannot tell word order.",
    "positions.residual": "Layer {layer}'s input is the residual stream after the layers below it; the block "
                          "normalises it (LayerNorm) before attending: that is X.",
    "embedding": "embedding", "position": "positional encoding", "summed": "embedding + position",
    "residual": "residual stream",
    "x.heading": "the input X",
    "x.text": "One row per token (x1, x2, …); each row is that token's vector.",
    "x.cross": "Cross-attention: X holds the decoder's tokens (the target, x1, x2, …), the context C the "
               "encoder's output (the source, c1, c2, …). Queries come from X; keys and values from C.",
    "w.heading": "the learned weights",
    "w.text": "Q = X·W_Q, K = X·W_K, V = X·W_V (plus a bias where the model has one).",
    "w.cross": "Q = X·W_Q, K = C·W_K, V = C·W_V (plus a bias where the model has one).",
    "w.head": "Only head {head}'s columns of W_Q, W_K and W_V are shown; --format json has every number.",
    "qkv.heading": "queries, keys and values",
    "qkv.text": "Each entry is a row of the input times a column of the weight matrix.",
    "qkv.dv": "Here d_v = {d_v} differs from d_k = {d_k}: V may be wider or narrower than Q and K; only Q "
              "and K must match, for their dot product.",
    "split.heading": "split into {n} heads",
    "split.text": "Each head takes its own d_k = {d_k} columns of Q and K and d_v = {d_v} columns of V ({spans}).",
    "split.gqa": " With grouped-query attention, {n} query heads share each key/value head.",
    "head": "Head {head}",
    "rope": "Rotate Q and K by position (RoPE): each pair of columns turns by an angle that grows with the "
            "position, so Q·Kᵀ depends on how far apart two tokens are.",
    "scores": "Step 5 · scores Q·Kᵀ: how well each query matches each key",
    "scale.sqrt-dk": "Step 6 · scale by 1/√d_k = 1/√{d_k} = {value}",
    "scale.sqrt-len": "Step 6 · scale by 1/√(number of keys) = 1/√{n} = {value}  (--scale sqrt-len: what seed 002 "
                      "does; the rule is 1/√d_k = {standard})",
    "scale.none": "Step 6 · no scaling (--scale none; the rule is 1/√d_k = {standard})",
    "scale.divide": "Step 6 · divide by {divisor}  (--scale {divisor}; the rule is 1/√d_k = {standard})",
    "why_scale": "Why 1/√d_k: if the components of a query and a key are independent with mean 0 and variance 1, "
                 "their dot product over d_k components has variance d_k. Dividing by √d_k brings the scores back "
                 "to variance 1, so the softmax does not saturate into a one-hot vector with vanishing gradients "
                 "(Vaswani et al. 2017, section 3.2.1). It depends on the head width d_k, not on the sequence length.",
    "mask.heading": "Step 7 · mask",
    "mask.none": "No mask: every query may attend to every key.",
    "mask.causal": "Causal mask: a token may attend only to itself and earlier tokens.",
    "mask.padding": "Padding mask: {keys} are padding; no query attends to them.",
    "mask.matrix": "mask (✓ may attend, · masked)",
    "mask.fill": "Where the mask forbids, the score becomes −∞, so e^(−∞) = 0 and the weight is exactly 0.",
    "masked_scores": "scores with −∞ where masked",
    "softmax.heading": "Step 8 · softmax over each row: weights ≥ 0 that sum to 1",
    "softmax.text": "softmax(s)_j = e^(s_j − m) / Σ_k e^(s_k − m), with m the row's largest score (subtracting m "
                    "changes nothing but keeps e^s from overflowing).",
    "exp": "e^(s − max)",
    "row_max": "row max", "row_sum": "row sum",
    "weights": "attention weights, head {head}",
    "empty_row": "Row {row}: every key is masked, so there is nothing to share the weight among: e^(−∞) over a "
                 "sum of 0 is 0/0 (a plain softmax gives NaN). attnviz gives weights of 0 and an output of 0.",
    "output.heading": "Step 9 · weights · V: each output row is a weighted average of V's rows",
    "head_output": "output of head {head}",
    "concat.heading": "concatenate the heads",
    "concat.text": "The heads' outputs side by side, head 0 first.",
    "no_wo.heading": "no output projection",
    "no_wo.text": "This model has no W_O: the concatenation is the output.",
    "wo.heading": "output projection W_O",
    "wo.text": "output = concat · W_O (+ b_O) mixes the heads back together.",
    "output": "output",
    "ref.header": "Where {source} differs from the computation above:",
    "ref.agrees": "{source} agrees with every number above.",
    "ref.off": "The comparison with {source} is off: {why}.",
    "ref.off.causal": "the causal mask was changed from the config's, so the tutorial computed something else",
    "ref.off.scale": "--scale changed the scaling the walkthrough uses",
    "errata.header": "Errors in the tutorials, each shown with numbers computed just now:",
    "errata.claim": "The tutorial says", "errata.finding": "Computed",
    # differences (explain_reference.Difference keys)
    "d.x_shape": "X is {rows}×{cols} ({rows} tokens x1–x{rows}, {cols} numbers each), not {claimed} as the tutorial says.",
    "d.shape": "{name}: the tutorial's is {theirs}, the computation's {ours}.",
    "d.q_row": "Q row {row}: the tutorial has {theirs}, computed {ours}.",
    "d.k_row": "K row {row}: the tutorial has {theirs}, computed {ours}.",
    "d.v_row": "V row {row}: the tutorial has {theirs}, computed {ours}.",
    "d.scores_row": "head {head} scores row {row}: the tutorial has {theirs}, computed {ours}.",
    "d.weights_row": "head {head} weights row {row}: the tutorial has {theirs}, computed {ours}.",
    "d.output_row": "output row {row}: the tutorial has {theirs}, computed {ours}.",
    "d.scale": "scale: the tutorial multiplies by {theirs} (divides by {divisor}{why}); the rule is 1/√d_k = 1/√{d_k} = {ours}.",
    "d.scale.len": ", √{n_keys}: the square root of the sequence length, not of d_k",
    "d.scale.64": ", the √d_k of the paper's d_k = 64 written as d_k itself: √64 = 8",
    "d.exp": "head {head} row {row}: e^{s} = {ours}, not {theirs}.",
    "d.exp_sum_own": "head {head} row {row}: its own e values add up to {ours}, not {theirs}.",
    "d.exp_sum_true": "head {head} row {row}: the true sum of e^s over the row is {ours}, not {theirs}.",
    "d.softmax_division": "head {head} row {row}: its own e values divided by its own sum are {ours}, not {theirs}.",
    "d.softmax_own": "head {head} row {row}: softmax of its own scores {scores} is {ours}, not {theirs}.",
    "d.weighted_sum": "head {head} row {row}: {terms} = {ours}, not {theirs}.",
    "d.no_w_o": "Multi-head attention normally ends with W_O: MultiHead = Concat(head_1, …, head_h)·W_O (Vaswani et "
                "al. 2017, 3.2.2). Without it the {n_heads} heads are put side by side but never mixed.",
    "d.mask_inverted": "The tutorial's mask means True = masked; attnviz and torch's scaled_dot_product_attention "
                       "read True = may attend. Passed straight in, head {head} attends to:",
    "d.mask_inverted.row": "{row} → {keys}: weights {weights}",
    "d.mask_inverted.empty": "{row} → nothing: every key is masked (a plain softmax gives NaN)",
    "d.mask_inverted.fix": "Invert it (~mask) or build it with torch.tril.",
    "d.q_from_context": "Q comes from the decoder (X, {t} rows) and K, V from the encoder (C, {s} rows), so the "
                        "output has {t} rows, one per decoder token: {ours}. Taken the other way round, as the "
                        "tutorial says, {backwards}",
    "d.q_from_context.fits": "the output would have {s} rows, one per source token ({theirs}), which cannot be added "
                             "to the decoder's {t}-row residual stream.",
    "d.q_from_context.nofit": "W_Q expects rows of width {d_x} but C has width {d_c}: the product does not exist.",
}

ZH: dict[str, str] = {
    "title": "注意力，一步一步算：{title}",
    "step": "第 {n} 步 · {heading}",
    "positions.heading": "从词元到 X：词嵌入 + 位置编码，再层归一化",
    "positions.text": "每个词元在嵌入表中的那一行，加上它所在位置的位置编码（正弦/余弦，Vaswani 等 2017，3.5 节），"
                      "就是进入第 0 层的向量。注意力之前先做层归一化（LayerNorm：每行均值 0、方差 1），得到 X。",
    "positions.none": "这个模型不加位置编码：嵌入行直接进入第 0 层，层归一化后就是 X。没有位置信息，注意力分不清词序。",
    "positions.residual": "第 {layer} 层的输入是下面各层之后的残差流；注意力之前先做层归一化，得到 X。",
    "embedding": "词嵌入", "position": "位置编码", "summed": "词嵌入 + 位置编码",
    "residual": "残差流",
    "x.heading": "输入 X",
    "x.text": "每个词元一行（x1, x2, …）；每一行是该词元的向量。",
    "x.cross": "交叉注意力：X 是解码器的词元（目标序列，x1, x2, …），上下文 C 是编码器的输出（源序列，c1, c2, …）。"
               "查询 Q 来自 X；键 K 和值 V 来自 C。",
    "w.heading": "可学习的权重矩阵",
    "w.text": "Q = X·W_Q，K = X·W_K，V = X·W_V（模型有偏置时再加偏置）。",
    "w.cross": "Q = X·W_Q，K = C·W_K，V = C·W_V（模型有偏置时再加偏置）。",
    "w.head": "这里只显示头 {head} 在 W_Q、W_K、W_V 中的那几列；--format json 给出全部数字。",
    "qkv.heading": "查询 Q、键 K、值 V",
    "qkv.text": "每个元素都是输入的一行乘以权重矩阵的一列。",
    "qkv.dv": "这里 d_v = {d_v} 与 d_k = {d_k} 不同：V 可以比 Q、K 宽或窄；只有 Q 和 K 必须等宽，才能做点积。",
    "split.heading": "划分为 {n} 个头（多头）",
    "split.text": "每个头取 Q、K 中属于自己的 d_k = {d_k} 列，V 中的 d_v = {d_v} 列（{spans}）。",
    "split.gqa": " 分组查询注意力：每 {n} 个查询头共用一个键/值头。",
    "head": "头 {head}",
    "rope": "按位置旋转 Q 和 K（RoPE）：每两列按随位置增大的角度旋转，于是 Q·Kᵀ 取决于两个词元相隔多远。",
    "scores": "第 5 步 · 注意力分数 Q·Kᵀ：每个查询与每个键有多匹配",
    "scale.sqrt-dk": "第 6 步 · 缩放点积：乘以 1/√d_k = 1/√{d_k} = {value}",
    "scale.sqrt-len": "第 6 步 · 乘以 1/√(键的个数) = 1/√{n} = {value}（--scale sqrt-len：种子教程 002 的做法；"
                      "正确的是 1/√d_k = {standard}）",
    "scale.none": "第 6 步 · 不缩放（--scale none；正确的是 1/√d_k = {standard}）",
    "scale.divide": "第 6 步 · 除以 {divisor}（--scale {divisor}；正确的是 1/√d_k = {standard}）",
    "why_scale": "为什么是 1/√d_k：若查询和键的各分量独立、均值 0、方差 1，它们在 d_k 个分量上的点积方差为 d_k。"
                 "除以 √d_k 使分数的方差回到 1，softmax 就不会饱和成独热向量、梯度消失（Vaswani 等 2017，3.2.1 节）。"
                 "它取决于每个头的宽度 d_k，而不是序列长度。",
    "mask.heading": "第 7 步 · 掩码",
    "mask.none": "没有掩码：每个查询都可以关注每个键。",
    "mask.causal": "因果掩码：每个词元只能关注自己和之前的词元。",
    "mask.padding": "填充掩码：{keys} 是填充位置，任何查询都不关注它们。",
    "mask.matrix": "掩码（✓ 可关注，· 被屏蔽）",
    "mask.fill": "被掩码屏蔽的位置，分数变为 −∞，于是 e^(−∞) = 0，权重恰好为 0。",
    "masked_scores": "屏蔽处为 −∞ 的分数",
    "softmax.heading": "第 8 步 · 对每一行做 softmax 归一化：权重 ≥ 0，且每行之和为 1",
    "softmax.text": "softmax(s)_j = e^(s_j − m) / Σ_k e^(s_k − m)，m 是该行最大的分数（减去 m 结果不变，但能防止 e^s 溢出）。",
    "exp": "e^(s − 最大值)",
    "row_max": "行最大值", "row_sum": "行之和",
    "weights": "注意力权重（头 {head}）",
    "empty_row": "第 {row} 行：所有键都被屏蔽，没有可分配权重的位置：e^(−∞) 除以总和 0 是 0/0"
                 "（普通的 softmax 给出 NaN）。attnviz 给出全 0 的权重和全 0 的输出。",
    "output.heading": "第 9 步 · 权重 · V：每个输出行是 V 各行的加权求和",
    "head_output": "头 {head} 的输出",
    "concat.heading": "拼接各个头",
    "concat.text": "把各个头的输出并排拼接，第 0 个头在最左边。",
    "no_wo.heading": "没有输出投影",
    "no_wo.text": "这个模型没有 W_O：拼接结果就是输出。",
    "wo.heading": "输出投影 W_O",
    "wo.text": "输出 = 拼接 · W_O（+ b_O），把各个头的结果重新混合。",
    "output": "输出",
    "ref.header": "{source} 与上面的计算不同之处：",
    "ref.agrees": "{source} 与上面的每个数字都一致。",
    "ref.off": "未与 {source} 比较：{why}。",
    "ref.off.causal": "因果掩码与配置不同，教程算的是另一回事",
    "ref.off.scale": "--scale 改变了缩放方式",
    "errata.header": "教程中的错误，每一条都用刚刚计算出的数字说明：",
    "errata.claim": "教程说", "errata.finding": "计算结果",
    "d.x_shape": "X 是 {rows}×{cols}（{rows} 个词元 x1–x{rows}，每个 {cols} 个数），不是教程所说的 {claimed}。",
    "d.shape": "{name}：教程的形状是 {theirs}，计算得到 {ours}。",
    "d.q_row": "Q 第 {row} 行：教程为 {theirs}，计算得 {ours}。",
    "d.k_row": "K 第 {row} 行：教程为 {theirs}，计算得 {ours}。",
    "d.v_row": "V 第 {row} 行：教程为 {theirs}，计算得 {ours}。",
    "d.scores_row": "头 {head} 的分数第 {row} 行：教程为 {theirs}，计算得 {ours}。",
    "d.weights_row": "头 {head} 的注意力权重第 {row} 行：教程为 {theirs}，计算得 {ours}。",
    "d.output_row": "输出第 {row} 行：教程为 {theirs}，计算得 {ours}。",
    "d.scale": "缩放：教程乘以 {theirs}（即除以 {divisor}{why}）；正确的是 1/√d_k = 1/√{d_k} = {ours}。",
    "d.scale.len": "，√{n_keys} 是序列长度的平方根，不是 d_k 的",
    "d.scale.64": "，把论文中 d_k = 64 的 √d_k 写成了 d_k 本身：√64 = 8",
    "d.exp": "头 {head} 第 {row} 行：e^{s} = {ours}，不是 {theirs}。",
    "d.exp_sum_own": "头 {head} 第 {row} 行：它自己的各个 e 值相加是 {ours}，不是 {theirs}。",
    "d.exp_sum_true": "头 {head} 第 {row} 行：该行 e^s 的真实总和是 {ours}，不是 {theirs}。",
    "d.softmax_division": "头 {head} 第 {row} 行：它自己的 e 值除以它自己的总和是 {ours}，不是 {theirs}。",
    "d.softmax_own": "头 {head} 第 {row} 行：对它自己的分数 {scores} 做 softmax 得 {ours}，不是 {theirs}。",
    "d.weighted_sum": "头 {head} 第 {row} 行：{terms} = {ours}，不是 {theirs}。",
    "d.no_w_o": "多头注意力通常以 W_O 结束：MultiHead = Concat(head_1, …, head_h)·W_O（Vaswani 等 2017，3.2.2 节）。"
                "没有它，{n_heads} 个头只是并排拼接，从不相互混合。",
    "d.mask_inverted": "教程的掩码中 True 表示“屏蔽”；attnviz 和 torch 的 scaled_dot_product_attention 中 True 表示"
                       "“可以关注”。直接传入时，头 {head} 关注的是：",
    "d.mask_inverted.row": "{row} → {keys}：权重 {weights}",
    "d.mask_inverted.empty": "{row} → 无：所有键都被屏蔽（普通的 softmax 给出 NaN）",
    "d.mask_inverted.fix": "应取反（~mask），或用 torch.tril 构造。",
    "d.q_from_context": "查询 Q 来自解码器（X，{t} 行），键 K、值 V 来自编码器（C，{s} 行），所以输出有 {t} 行，"
                        "每个解码器词元一行：{ours}。若按教程说的反过来，{backwards}",
    "d.q_from_context.fits": "输出会有 {s} 行，每个源词元一行（{theirs}），无法加到解码器 {t} 行的残差流上。",
    "d.q_from_context.nofit": "W_Q 需要宽度为 {d_x} 的行，而 C 的宽度是 {d_c}：这个乘积根本不存在。",
}

CATALOG = {"en": EN, "zh": ZH}


def say(key: str, lang: str = "en", **params: Any) -> str:
    """The sentence ``key`` in ``lang``, with ``params`` filled in."""
    return CATALOG[lang][key].format(**params)


def difference_text(diff: Any, lang: str = "en") -> str:
    """One :class:`attnviz.explain.reference.Difference` as a sentence (several lines for a mask)."""
    p = dict(diff.params)
    key = f"d.{diff.key}"
    if diff.key == "scale":
        why = say("d.scale.len", lang, **p) if p["is_sqrt_len"] else say("d.scale.64", lang) if p["is_64"] else ""
        return say(key, lang, **p, why=why)
    if diff.key == "shape":
        return say(key, lang, **{**p, "theirs": "×".join(map(str, p["theirs"])), "ours": "×".join(map(str, p["ours"]))})
    if diff.key == "mask_inverted":
        lines = [say(key, lang, head=p["head"])]
        for row in p["rows"]:
            lines.append("    " + (say("d.mask_inverted.empty", lang, row=row["row"]) if row["empty"] else
                                   say("d.mask_inverted.row", lang, row=row["row"], keys=", ".join(row["keys"]),
                                       weights=row["weights"])))
        lines.append("    " + say("d.mask_inverted.fix", lang))
        return "\n".join(lines)
    if diff.key == "q_from_context":
        shape = "×".join(map(str, p["ours"]))
        back = (say("d.q_from_context.fits", lang, s=p["s"], t=p["t"], theirs="×".join(map(str, p["theirs"])))
                if p["fits"] else say("d.q_from_context.nofit", lang, d_x=p["d_x"], d_c=p["d_c"]))
        return say(key, lang, t=p["t"], s=p["s"], ours=shape, backwards=back)
    return say(key, lang, **p)
