"""(c) Our MultiHeadAttention, weights returned, against torch.nn.MultiheadAttention(need_weights=True,
average_attn_weights=False) at B=8, L=512, d=768, h=12 on the CPU. Goal (issue 17): ≤ 0.9×.

Run: python benchmarks/bench_mha.py [--runs N]
"""

from __future__ import annotations

import argparse

import torch
from _common import report, time_call

from attnviz.attention import MultiHeadAttention


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    args = parser.parse_args()
    torch.manual_seed(0)
    d, h = 768, 12
    ref = torch.nn.MultiheadAttention(d, h, batch_first=True).eval()
    ours = MultiHeadAttention(d, h).eval()
    with torch.no_grad():
        wq, wk, wv = ref.in_proj_weight.chunk(3)
        bq, bk, bv = ref.in_proj_bias.chunk(3)
        for lin, w, b in ((ours.q_proj, wq, bq), (ours.k_proj, wk, bk), (ours.v_proj, wv, bv),
                          (ours.o_proj, ref.out_proj.weight, ref.out_proj.bias)):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
    x = torch.randn(args.batch, args.length, d)
    with torch.inference_mode():
        a = ours(x)
        b = ref(x, x, x, need_weights=True, average_attn_weights=False)
        assert torch.allclose(a.weights, b[1], atol=1e-5), "the two disagree; the benchmark would be meaningless"
        t_ours = time_call(lambda: ours(x, keep_scores=False), args.runs)  # weights only, as torch returns
        t_ref = time_call(lambda: ref(x, x, x, need_weights=True, average_attn_weights=False), args.runs)
    report(f"multi-head attention with weights, B={args.batch} L={args.length} d={d} h={h}",
           "attnviz MultiHeadAttention", t_ours, "torch.nn.MultiheadAttention", t_ref, goal="<= 0.9x")


if __name__ == "__main__":
    main()
