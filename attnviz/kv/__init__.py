"""What a KV-cache policy would lose, head by head, on one's own prompt (issue 44).

The context and its future tokens (a question appended, or the model's own greedy continuation) run once
(:mod:`.layers`); each layer's policies are scored on the context's rows (:mod:`attnviz.analysis.kv_policies`,
after kvpress and the papers), each key/value head keeps its top ``budget`` keys, and what that loses is read on
the future rows: recall (the attention mass kept) and the output error. End to end, each kept set is applied to a
real cache (:mod:`.evict`) and the future tokens run on it: the KL divergence of its next-token distributions from
the full cache's, and whether the greedy answer changes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import torch

from ..analysis import kv_policies as kvp
from ..analysis import policies as _policies
from ..defaults import ANSWER_TOKENS, BUDGETS
from ..errors import AttnvizWarning, UsageError
from ..limits import MAX_KV_RUNS
from .budgets import distinct_budgets
from .result import HeadLoss, KVResult, PolicyRun

__all__ = ["POLICIES", "KVResult", "kv"]

POLICIES = _policies.POLICIES
DROPPED = 5  # the dropped keys the future needed most, per head
MAX_FUTURE = 512  # future tokens at most: the question or the continuation


def _future_ids(source: Any, question: str | None) -> tuple[list[int], list[str]]:
    info = source.encode(question, what="[[question]]")
    pairs = [(i, label) for i, label, special in zip(info.ids, info.labels, info.special, strict=True) if not special]
    return [i for i, _ in pairs], [label for _, label in pairs]


@torch.no_grad()
def kv(model: str | None, text: str, *, policies: Sequence[str] | None = None, budgets: Sequence[float] = BUDGETS,
       question: str | None = None, continue_tokens: int | None = None, answer_tokens: int = ANSWER_TOKENS,
       end_to_end: bool = True, engine: str = "auto", revision: str | None = None, device: str = "cpu",
       trust_remote_code: bool = False, dtype: str | None = None, keep_sets: bool = False,
       question_window: bool = False, truncate: bool = False, tova_across: Literal["layer", "group"] = "layer",
       settings: Mapping[str, Any] | None = None, progress: Callable[[str], None] | None = None) -> KVResult:
    """Score ``policies`` (default: every registered one) at ``budgets`` (keys per head, or fractions of the
    context's) on ``text``, the future
    being ``question`` (appended) or the model's greedy continuation of ``continue_tokens`` tokens (see the
    module). ``question_window``: SnapKV and PyramidKV observe the question's queries instead of the prompt's last
    ones (the question is known when the cache is cut). ``tova_across``: TOVA averages the last query's attention
    over every head of the layer (``"layer"``, the paper's and kvpress's) or within each GQA group (``"group"``).
    ``truncate``: cut a prompt too long for the model (with its
    future and answer) to what fits, keeping its start. ``keep_sets``: keep each head's kept positions.
    ``settings``: the chosen policies' settings by name (each declared on its policy's record,
    :class:`~attnviz.analysis.policies.Setting`: ``{"window": 32, "n_sink": 8}``); ``question_window`` and
    ``tova_across`` are two of them."""
    from ..sources.causal import load_causal
    from ..sources.resolve import checked_engine

    policies = list(POLICIES) if policies is None else list(policies)
    if len(set(policies)) < len(policies):
        warnings.warn(f"a policy named twice runs once: {', '.join(dict.fromkeys(policies))}", AttnvizWarning,
                      stacklevel=2)
        policies = list(dict.fromkeys(policies))
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise UsageError(f"[[policy={unknown[0]}]] is unknown; use one of {', '.join(POLICIES)}")
    if question is not None and continue_tokens is not None:
        raise UsageError("[[question]] and [[continue_tokens]] are two futures: give one of them, not both")
    if question is None and continue_tokens is None:
        raise UsageError("give the future queries: [[question]] (a text appended) or [[continue_tokens]] (the "
                         "model's own continuation), one of them")
    if tova_across not in ("layer", "group"):
        raise UsageError(f"[[tova_across={tova_across}]]: layer (the paper's) or group")
    given = dict(settings or {})
    declared = _policies.declared_settings(policies)
    for name, value, default in (("question_window", question_window, False), ("tova_across", tova_across, "layer")):
        if value != default and name in declared:  # the two settings with keywords of their own
            given.setdefault(name, value)
    chosen = _policies.chosen_settings(policies, given)
    question_window = bool(chosen.get("question_window", False))
    if question_window and question is None:
        raise UsageError("[[question_window]] makes SnapKV observe the question: give [[question]]")
    if continue_tokens is not None and not 1 <= continue_tokens <= MAX_FUTURE:
        raise UsageError(f"[[continue_tokens={continue_tokens}]] must be between 1 and {MAX_FUTURE}")
    if not budgets:
        raise UsageError("give at least one budget")
    causal = load_causal(model, engine=checked_engine(engine), revision=revision, device=device,
                         trust_remote_code=trust_remote_code, dtype=dtype, cut=end_to_end)
    source: Any = causal.source
    if not source.causal:
        raise UsageError(f"{source.name} is not a causal model: a KV cache belongs to a decoder (give a GPT-2 or "
                         "LLaMA-family model)")
    info = source.encode(text, truncate=truncate)
    context, labels = list(info.ids), list(info.labels)
    question_ids, question_labels = _future_ids(source, question) if question is not None else ([], [])
    if question is not None and not question_ids:
        raise UsageError("[[question]] gives no tokens")
    after = len(question_ids) + answer_tokens if question is not None else int(continue_tokens or 0)
    limit = source.max_positions
    if truncate and limit is not None and len(context) + after > limit:
        keep = max(2, limit - after)  # the prompt's start, so the future and the answer fit
        context, labels = context[:keep], labels[:keep]
    say = progress or (lambda _: None)
    runner = None
    if question is not None:
        future, future_labels = question_ids, question_labels
        n_context = len(context)
    else:
        assert continue_tokens is not None
        say("continuing the text")
        from ..sources.decoding import decode

        continuation = decode(causal.stepper, context, max_new_tokens=continue_tokens, eos_ids=causal.eos).new
        continuation = [context[-1], *continuation]
        future = continuation[:-1] if len(continuation) > 1 else continuation
        future_labels = [labels[-1], *(_label(source, i) for i in continuation[1:-1])]
        context = context[:-1]
        n_context = len(context)
    if n_context < 2:
        raise UsageError("the text gives fewer than 2 tokens: no cache worth cutting")
    answer_room = answer_tokens if question is not None else 0
    if source.max_positions is not None and n_context + len(future) + answer_room > source.max_positions:
        raise UsageError(f"the text ({n_context} tokens), the future ({len(future)}) and the answer ({answer_room}) "
                         f"pass the {source.max_positions} positions {source.name} takes; shorten the text, or give "
                         "[[truncate=True]]")
    # (policy, budget as given, keys kept): the count tells 1 key from 1.0 (every key), which compare equal
    resolved = [(policy, budget, count) for policy in policies for budget, count in distinct_budgets(budgets, n_context)]
    if len(resolved) > MAX_KV_RUNS:
        raise UsageError(f"{len(policies)} policies × {len(resolved) // len(policies)} budgets are {len(resolved):,} "
                         f"runs, each a cut of every layer and a decoding of its own; at most {MAX_KV_RUNS}: give "
                         "fewer budgets or policies")
    if end_to_end:
        _check_end_to_end(source, len(future) + answer_room, len(resolved))
    ids = [*context, *future]
    every = [*labels[:n_context], *future_labels]
    runs = {key: PolicyRun(key[0], key[1], [], []) for key in resolved}
    keep_by_run: dict[tuple[str, int | float, int], list[torch.Tensor]] = {key: [] for key in resolved}
    n_layers = source.n_layers
    from .context_pass import layer_windows

    # A sliding-window layer holds only the keys its next query sees (its last W − 1): its policy chooses among them.
    held_from = [max(0, n_context - (w - 1)) if w is not None else 0 for w in layer_windows(source)]
    say("reading the layers")
    n_kv = 1
    needs: list[torch.Tensor] = []
    keys = any(POLICIES[policy].needs_keys for policy in policies)
    for parts in _layers(source, ids, every, n_context, keys=keys):
        n_kv = parts.n_kv_heads
        # The future's rows are few (the question, the continuation): computed once, read by every policy and budget.
        future_rows = kvp.DenseRows(parts.future.block(0, parts.future.n_rows), offset=n_context)
        inputs = kvp.PolicyInputs(rows=parts.context, n_kv_heads=n_kv, future=future_rows,
                                  n_sink=chosen.get("n_sink", kvp.N_SINK), window=chosen.get("window", kvp.WINDOW),
                                  kernel=chosen.get("kernel", kvp.KERNEL), question_window=question_window,
                                  tova_across=chosen.get("tova_across", "layer"), keys=parts.context.k,
                                  settings=chosen)
        values = parts.values.double()
        future_mass = kvp.oracle_scores(future_rows, n_kv, n_context)  # [Hkv, T]: what the future attends
        if keep_sets:
            needs.append(future_mass.float())
        scores: dict[str, torch.Tensor] = {}
        first = held_from[parts.layer]
        for key in resolved:
            policy, count = key[0], key[2]
            if policy not in scores:
                scored = POLICIES[policy].scores(inputs)
                if first:  # keys a windowed layer no longer holds: never kept
                    scored = scored.clone()
                    scored[:, :first] = float("-inf")
                scores[policy] = scored
            count = POLICIES[policy].layer_budget(count, parts.layer, n_layers, n_context)
            if first:
                count = min(count, n_context - first)
            keep = kvp.keep_top(scores[policy], count)
            recall = kvp.group_mean(kvp.recall(future_rows, keep), n_kv)
            error = kvp.group_mean(kvp.output_error(future_rows, values, keep), n_kv)
            run = runs[key]
            run.keys.append(count)
            keep_by_run[key].append(keep)
            for head in range(n_kv):
                lost = future_mass[head].masked_fill(keep[head], -1.0)
                top = torch.topk(lost, min(DROPPED, n_context))
                dropped = [(int(p), every[int(p)], float(m)) for m, p in zip(top.values, top.indices, strict=True)
                           if m > 0]
                run.heads.append(HeadLoss(parts.layer, head, int(keep[head].sum()), float(recall[head]),
                                          float(error[head]), dropped))
    result = KVResult(model_name=source.name, engine=source.engine, n_layers=n_layers,
                      n_heads=causal.stepper.n_heads, n_kv_heads=n_kv,
                      n_context=n_context, future_mode="question" if question is not None else "continue",
                      future=future_labels, full_answer=None, tokens=every[:n_context])
    if end_to_end:
        from .evict import CacheRunner, kl_divergence

        say("running the cut caches")
        runner = CacheRunner(causal.stepper, context, causal.eos)
        answer_length = answer_tokens if question is not None else 0
        full = runner.full(future, answer_length)
        result.full_answer = _decode(source, full.answer) if question is not None else None
        for key in resolved:
            cut = runner.run(runner.cut(keep_by_run[key]), future, answer_length)
            kl = kl_divergence(full.logprobs, cut.logprobs)
            run = runs[key]
            run.kl, run.kl_max = float(kl.mean()), float(kl.max())
            if question is not None:
                run.answer, run.changed = _decode(source, cut.answer), cut.answer != full.answer
            else:
                run.changed = bool((cut.logprobs.argmax(-1) != full.logprobs.argmax(-1)).any())
    if keep_sets:
        result.need = torch.stack(needs)
    for key in resolved:
        if keep_sets:
            runs[key].kept = [[row.nonzero()[:, 0].tolist() for row in keep] for keep in keep_by_run[key]]
        result.runs.append(runs[key])
    return result


LOGPROB_COPIES = 3  # the full cache's log-probabilities, a cut's, and the KL's block of rows beside them


def _check_end_to_end(source: Any, fed: int, runs: int) -> None:
    """End to end, every cut cache is fed the future a token at a time (a cut cache's keys are not in position order)
    and keeps its next-token log-probabilities (float64, ``[future, vocabulary]``): bounded before any run."""
    from ..limits import check_memory

    if fed > MAX_FUTURE:
        raise UsageError(f"the future and the answer are {fed:,} tokens, each fed a token at a time on {runs + 1} "
                         f"caches end to end; at most {MAX_FUTURE}: shorten the question, or give [[end_to_end=False]] "
                         "for recall and output error alone (one pass, any length)")
    check_memory(LOGPROB_COPIES * fed * _vocabulary(source) * 8,
                 f"comparing {runs + 1} caches' next-token distributions over {fed:,} tokens")


def _vocabulary(source: Any) -> int:
    """The size of the model's next-token distribution (its tokenizer's vocabulary; 262,144 where none says)."""
    for tokenizer in (getattr(source, "hf_tokenizer", None), getattr(source, "tokenizer", None)):
        for size in (getattr(tokenizer, "vocab_size", None), getattr(tokenizer, "get_vocab_size", None)):
            size = size() if callable(size) else size
            if isinstance(size, int) and size > 0:
                return size
    return 262_144


def _layers(source: Any, ids: list[int], labels: list[str], n_context: int, *, keys: bool = False) -> Any:
    from .context_pass import read_sequence

    # The policies read narrow causal blocks; the prefix's keys too where a policy scores them (key norms).
    return read_sequence(source, ids, labels, n_context, narrow=True, queries_keys=keys)


def _label(source: Any, token: int) -> str:
    from ..sources.tokens import label_from_piece

    piece = source.tokenizer.id_to_token(token) if hasattr(source.tokenizer, "id_to_token") else None
    return label_from_piece(piece) if piece is not None else f"<{token}>"


def _decode(source: Any, ids: list[int]) -> str:
    tokenizer = getattr(source, "hf_tokenizer", None)
    if tokenizer is not None:
        return str(tokenizer.decode(ids, skip_special_tokens=True)).strip()
    decode = getattr(source.tokenizer, "decode", None)
    return str(decode(ids)).strip() if decode is not None else " ".join(map(str, ids))
