"""Seed 001's ``MultiHeadAttention`` class, run as written: which failures it hits, in order.

The class is executed in a fresh namespace; each failure is classified from the exception, one
fix is applied (a config field, a missing import, the never-assigned ``self.is_causal``, or, last,
an edit of the code itself) and everything is run again, so the list of failures is computed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import MultiHeadAttention

# Seed 001 (001_c2d0e18109f35d0d.txt, section 2.1.6 多头注意力), its ```python block, verbatim but for
# whitespace: the seed stores the page on one line, so the line breaks and indentation are restored
# here (tests check that collapsing the whitespace gives back the seed's text).
SEED_001_MHA = r"""import torch.nn as nn
import torch

'''多头自注意力计算模块'''
class MultiHeadAttention(nn.Module):

    def __init__(self, args: ModelArgs, is_causal=False):
        # 构造函数
        # args: 配置对象
        super().__init__()
        # 隐藏层维度必须是头数的整数倍,因为后面我们会将输入拆成头数个矩阵
        assert args.n_embd % args.n_head == 0
        # 模型并行处理大小,默认为1。
        model_parallel_size = 1
        # 本地计算头数,等于总头数除以模型并行处理大小。
        self.n_local_heads = args.n_heads // model_parallel_size
        # 每个头的维度,等于模型维度除以头的总数。
        self.head_dim = args.dim // args.n_heads

        # Wq, Wk, Wv 参数矩阵,每个参数矩阵为 n_embd x n_embd
        # 这里通过三个组合矩阵来代替了n个参数矩阵的组合,其逻辑在于矩阵内积再拼接其实等同于拼接矩阵再内积,
        # 不理解的读者可以自行模拟一下,每一个线性层其实相当于n个参数矩阵的拼接
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        # 输出权重矩阵,维度为 n_embd x n_embd(head_dim = n_embeds / n_heads)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)
        # 注意力的 dropout
        self.attn_dropout = nn.Dropout(args.dropout)
        # 残差连接的 dropout
        self.resid_dropout = nn.Dropout(args.dropout)

        # 创建一个上三角矩阵,用于遮蔽未来信息
        # 注意,因为是多头注意力,Mask 矩阵比之前我们定义的多一个维度
        if is_causal:
            mask = torch.full((1, 1, args.max_seq_len, args.max_seq_len), float("-inf"))
            mask = torch.triu(mask, diagonal=1)
            # 注册为模型的缓冲区
            self.register_buffer("mask", mask)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):

        # 获取批次大小和序列长度,[batch_size, seq_len, dim]
        bsz, seqlen, _ = q.shape

        # 计算查询(Q)、键(K)、值(V),输入通过参数矩阵层,维度为 (B, T, n_embed) x (n_embed, n_embed) -> (B, T, n_embed)
        xq, xk, xv = self.wq(q), self.wk(k), self.wv(v)

        # 将 Q、K、V 拆分成多头,维度为 (B, T, n_head, C // n_head),然后交换维度,变成 (B, n_head, T, C // n_head)
        # 因为在注意力计算中我们是取了后两个维度参与计算
        # 为什么要先按B*T*n_head*C//n_head展开再互换1、2维度而不是直接按注意力输入展开,是因为view的展开方式是直接把输入全部排开,
        # 然后按要求构造,可以发现只有上述操作能够实现我们将每个头对应部分取出来的目标
        xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xq = xq.transpose(1, 2)
        xk = xk.transpose(1, 2)
        xv = xv.transpose(1, 2)

        # 注意力计算
        # 计算 QK^T / sqrt(d_k),维度为 (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        scores = torch.matmul(xq, xk.transpose(2, 3)) / math.sqrt(self.head_dim)
        # 掩码自注意力必须有注意力掩码
        if self.is_causal:
            assert hasattr(self, 'mask')
            # 这里截取到序列长度,因为有些序列可能比 max_seq_len 短
            scores = scores + self.mask[:, :, :seqlen, :seqlen]
        # 计算 softmax,维度为 (B, nh, T, T)
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        # 做 Dropout
        scores = self.attn_dropout(scores)
        # V * Score,维度为(B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        output = torch.matmul(scores, xv)

        # 恢复时间维度并合并头。
        # 将多头的结果拼接起来, 先交换维度为 (B, T, n_head, C // n_head),再拼接成 (B, T, n_head * C // n_head)
        # contiguous 函数用于重新开辟一块新内存存储,因为Pytorch设置先transpose再view会报错,
        # 因为view直接基于底层存储得到,然而transpose并不会改变底层存储,因此需要额外存储
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)

        # 最终投影回残差流。
        output = self.wo(output)
        output = self.resid_dropout(output)
        return output
"""

# The config it is first given: the names the class body reads after its assert (dim, n_heads, as in
# the tutorial's LLaMA-style ModelArgs), small enough to run in microseconds.
START_ARGS: dict[str, Any] = {"dim": 8, "n_heads": 2, "dropout": 0.0, "max_seq_len": 16}
_ALIASES = {"n_embd": "dim", "n_head": "n_heads", "dim": "n_embd", "n_heads": "n_head"}
_T, _S = 3, 5  # query (decoder) and key/value (encoder) lengths
# The one code edit: keys and values viewed with their own length, not the queries' seqlen.
_KV_VIEW = {"xk = xk.view(bsz, seqlen,": "xk = xk.view(bsz, k.shape[1],",
            "xv = xv.view(bsz, seqlen,": "xv = xv.view(bsz, v.shape[1],"}

FAILURE_TEXT = {
    "args": ("ModelArgs has no field {name}: the assert reads n_embd/n_head, the rest of the class dim/n_heads",
             "ModelArgs 没有字段 {name}:assert 读取 n_embd/n_head,类的其余部分读取 dim/n_heads,两套命名混用"),
    "import": ("{name} is used but never imported; the block imports only torch and torch.nn",
               "使用了 {name} 却没有导入,代码块只导入了 torch 和 torch.nn"),
    "is_causal": ("__init__ never assigns self.is_causal, which forward reads",
                  "__init__ 从未赋值 self.is_causal,而 forward 读取它"),
    "kv_view": ("keys and values are viewed with the queries' length seqlen, so cross-attention with S ≠ T "
                "fails; the one fix that edits the code: view them with their own length",
                "键 K、值 V 按查询 Q 的长度 seqlen 做 view,编码器与解码器长度不同(S ≠ T)时交叉注意力报错;"
                "唯一需要改代码的修复:按它们自己的长度 view"),
}


class ModelArgs:
    """A bare config object: only the fields it is given."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


@contextmanager
def seeded_default_rng(seed: int) -> Iterator[None]:
    """Seed torch's CPU generator (what ``nn.Linear`` initialises from) for a block, then restore it."""
    gen = torch.default_generator
    state = gen.get_state()
    gen.manual_seed(seed)
    try:
        yield
    finally:
        gen.set_state(state)


@lru_cache(maxsize=4)
def _compiled(source: str) -> Any:
    return compile(source, "seed_001_mha", "exec")


class _Failure(Exception):
    def __init__(self, stage: str, error: BaseException) -> None:
        super().__init__(stage)
        self.stage, self.error = stage, error


def _classify(error: BaseException) -> tuple[str, str] | None:
    """``(kind, name)`` of a failure this module knows how to fix, else None."""
    text = str(error)
    if isinstance(error, NameError) and (m := re.search(r"name '(\w+)' is not defined", text)):
        return ("import", m.group(1)) if m.group(1) in ("math", "F") else None
    if isinstance(error, AttributeError) and (m := re.search(r"'(\w+)' object has no attribute '(\w+)'", text)):
        if m.group(1) == "ModelArgs" and m.group(2) in _ALIASES:
            return "args", m.group(2)
        if m.group(1) == "MultiHeadAttention" and m.group(2) == "is_causal":
            return "is_causal", "is_causal"
    if isinstance(error, RuntimeError) and "is invalid for input of size" in text:
        return "kv_view", "view"
    return None


def _attempt(fixes: list[tuple[str, str]]) -> dict[str, Any]:
    """Run the seed's class once with the fixes so far; raises _Failure at the first error."""
    source, args = SEED_001_MHA, dict(START_ARGS)
    namespace: dict[str, Any] = {"torch": torch, "nn": nn, "ModelArgs": ModelArgs}
    for kind, name in fixes:
        if kind == "args":
            args[name] = args[_ALIASES[name]]
        elif kind == "import":
            namespace[name] = {"math": math, "F": F}[name]
        elif kind == "kv_view":
            for old, new in _KV_VIEW.items():
                source = source.replace(old, new)
    set_is_causal = ("is_causal", "is_causal") in fixes

    def build(is_causal: bool) -> nn.Module:
        try:
            module = namespace["MultiHeadAttention"](ModelArgs(**args), is_causal=is_causal)
        except Exception as error:
            raise _Failure("__init__", error) from error
        if set_is_causal:
            module.is_causal = is_causal
        return module.eval()

    try:
        exec(_compiled(source), namespace)
    except Exception as error:
        raise _Failure("exec", error) from error
    g = torch.Generator().manual_seed(0)
    dim = args["dim"]
    dec, enc = torch.randn(1, _T, dim, generator=g), torch.randn(1, _S, dim, generator=g)
    with seeded_default_rng(0):
        causal, cross = build(True), build(False)
    try:
        self_out = causal(dec, dec, dec)
    except Exception as error:
        raise _Failure("forward (causal self-attention)", error) from error
    try:
        cross_out = cross(dec, enc, enc)
    except Exception as error:
        raise _Failure("forward (cross-attention, S ≠ T)", error) from error
    with seeded_default_rng(0):  # its initial weights are overwritten below
        ours = MultiHeadAttention(dim, args["n_heads"], bias=False)
    with torch.no_grad():
        for mine, theirs in (("q_proj", "wq"), ("k_proj", "wk"), ("v_proj", "wv"), ("o_proj", "wo")):
            getattr(ours, mine).weight.copy_(getattr(causal, theirs).weight)
        diff = (ours(dec, causal=True).output - self_out).abs().max().item()
    return {"self_shape": list(self_out.shape), "cross_shape": list(cross_out.shape), "max_abs_diff_vs_attnviz": diff}


def run_seed_mha(max_rounds: int = 10) -> dict[str, Any]:
    """Failures in the order the seed's class hits them, each with the fix applied before the next run."""
    fixes: list[tuple[str, str]] = []
    failures: list[dict[str, Any]] = []
    result: dict[str, Any] | None = None
    for _ in range(max_rounds):
        try:
            result = _attempt(fixes)
            break
        except _Failure as failure:
            fix = _classify(failure.error)
            failures.append({"stage": failure.stage, "error": f"{type(failure.error).__name__}: {failure.error}",
                             "kind": fix[0] if fix else None, "name": fix[1] if fix else None})
            if fix is None or fix in fixes:
                break
            fixes.append(fix)
    return {"start_args": dict(START_ARGS), "T": _T, "S": _S, "failures": failures, "result": result}
