"""The long-context methods' defaults, declared once for the library and the command line (issue 51): the API's
keyword defaults and the commands' option defaults are these names. Core: constants only, nothing imported, so a
command's options read them without importing torch."""

from __future__ import annotations

NEEDLE = "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."
"""The needle hidden in the haystack (gkamradt's LLMTest_NeedleInAHaystack, as Wu et al. use it)."""

QUESTION = "What is the best thing to do in San Francisco?"
"""The question whose answer is :data:`NEEDLE`."""

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Where the needle goes, as fractions of the haystack."""

ANSWER_TOKENS = 20
"""Tokens generated at most after the prompt: needle's answer, kv's answer after the question."""

BUDGETS = (0.25,)
"""kv's and patterns' budgets: a quarter of the prompt's keys."""

N_SINK = 4
"""StreamingLLM's sink tokens (kvpress StreamingLLMPress.n_sink): the streaming policy's n_sink setting."""

WINDOW = 64
"""SnapKV's observation window (kvpress SnapKVPress.window_size): the snapkv and pyramidkv window setting."""

KERNEL = 5
"""SnapKV's pooling width (kvpress SnapKVPress.kernel_size; avg_pool1d, padding kernel // 2, stride 1)."""
