"""KV-cache policies as records: a registry that plugins extend (issue 51).

A policy is one :class:`Policy`: its name, a score function over one layer's rows (``[Hkv, T]`` per-key scores,
higher kept first; a GQA group's, or a layer's, choice is the function's to make), the keys it always keeps, its
per-layer budget rule (PyramidKV's pyramid is a rule, not a special case), the inputs it reads and its citation.
:func:`select` does the top-k once for every policy, as kvpress's ``ScorerPress`` does. The functions are named as
``"module:function"`` and imported when a policy first runs, so reading the registry (``--help``) imports no torch.

A plugin adds one with :func:`register` (``attnviz.plugins``' entry points); ``attnviz kv --policy NAME`` then runs it
end to end, and ``attnviz kv --help`` lists it. docs/development.md shows kvpress's key-norm press added so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..defaults import KERNEL, N_SINK, WINDOW
from ..errors import PluginError
from ..records import Registry, resolve

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

    from .kv_policies import PolicyInputs

Function = str | Callable[..., Any]  # "module:function", or the function itself


def _resolve(function: Function, what: str) -> Callable[..., Any]:
    return resolve(function, what)


def _returned(found: Any, shape: tuple[int, ...], what: str, axes: str) -> Tensor:
    """What a record's function returned, as float64, when it is a real tensor of ``shape``; else the function's
    author is told what it gave and what it should (a :class:`PluginError`, never an internal error)."""
    import torch

    if not isinstance(found, torch.Tensor) or tuple(found.shape) != shape or found.is_complex():
        got = f"a tensor {tuple(found.shape)} of {found.dtype}" if isinstance(found, torch.Tensor) else \
            f"a {type(found).__name__}"
        raise PluginError(f"{what} gave {got}, not a real tensor of {axes} {shape}")
    return found.double()


@dataclass(frozen=True)
class Setting:
    """One setting of a policy, declared on its record as kvpress declares a press's fields: a whole number from
    ``low`` to ``high``, one of ``choices``, or a yes/no (a ``bool`` default). The API takes it by name
    (``kv(settings={"window": 32})``), the command line as ``--set window=32``; every policy that declares a name
    reads the same value."""

    name: str
    default: Any
    help: str
    low: int = 0
    high: int = 0
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"a policy setting's name is a lower-case identifier such as window; got {self.name!r}")

    def value(self, given: Any) -> Any:
        """``given`` (a value, or the command line's text) as this setting's value, checked."""
        from ..errors import UsageError

        if isinstance(self.default, bool):
            if isinstance(given, str) and given.strip().lower() in ("true", "yes", "1", "false", "no", "0"):
                given = given.strip().lower() in ("true", "yes", "1")
            if not isinstance(given, bool):
                raise UsageError(f"[[set={self.name}]] is yes or no (true/false); got {given!r}")
            return given
        if isinstance(self.default, int):
            if isinstance(given, str) and given.strip().lstrip("-").isascii() and given.strip().lstrip("-").isdigit():
                given = int(given)
            if isinstance(given, bool) or not isinstance(given, int) or not self.low <= given <= self.high:
                raise UsageError(f"[[set={self.name}]] is a whole number from {self.low:,} to {self.high:,}; got "
                                 f"{given!r}")
            return given
        if given not in self.choices:
            raise UsageError(f"[[set={self.name}]] is {' or '.join(self.choices)}; got {given!r}")
        return given


@dataclass(frozen=True)
class Policy:
    """One KV-cache policy (see the module). ``score(inputs) -> [Hkv, T]``; ``always(inputs) -> [T]`` bool, the keys
    kept whatever they score (raised above every other key, their own order kept); ``budget(count, layer, n_layers,
    n_keys) -> int``, a layer's keys (None: ``count`` in every layer); ``reads``: the :class:`PolicyInputs` fields
    it uses besides the rows (``future``, ``keys``, ``window``, …): ``future`` and ``keys`` are read only for the
    policies that name them."""

    name: str
    summary: str  # a few words, for --help
    citation: str
    score: Function
    always: Function | None = None
    budget: Function | None = None
    reads: tuple[str, ...] = ()
    settings: tuple[Setting, ...] = ()  # what a user may set (read by the score function as inputs.setting(name))

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name) or self.name != self.name.lower():
            raise ValueError(f"a policy's name is lower-case letters, digits, - and _; got {self.name!r}")
        if self.name == "all":
            raise ValueError("'all' means every policy; give the policy another name")
        for what, text in (("summary", self.summary), ("citation", self.citation)):
            if not isinstance(text, str) or not text.isprintable():
                raise ValueError(f"{self.name}: a policy's {what} is printable text")

    @property
    def needs_future(self) -> bool:
        return "future" in self.reads

    @property
    def needs_keys(self) -> bool:
        return "keys" in self.reads

    def scores(self, inputs: PolicyInputs) -> Tensor:
        """``[Hkv, T]`` float64: the score function's, its always-kept keys raised above the others."""
        import torch

        found = _resolve(self.score, f"policy {self.name}")(inputs)
        shape = (inputs.n_kv_heads, inputs.rows.n_keys)
        scores = _returned(found, shape, f"policy {self.name}'s score function", "key/value heads × keys")
        if bool(torch.isnan(scores).any()):
            raise PluginError(f"policy {self.name}'s score function gave NaN scores, which rank no key; it must give a "
                              "number for every key")
        if self.always is None:
            return scores
        kept = _returned(_resolve(self.always, f"policy {self.name}")(inputs), (inputs.rows.n_keys,),
                         f"policy {self.name}'s always-kept function", "keys").to(torch.bool)
        if kept.any() and (~kept).any():
            low, high = scores[:, kept].min(), scores[:, ~kept].max()
            if low <= high:  # raise the always-kept keys above every other key, keeping their own order
                scores = scores.clone()
                scores[:, kept] += high - low + 1
        return scores

    def layer_budget(self, count: int, layer: int, n_layers: int, n_keys: int) -> int:
        """The keys ``layer`` keeps at a budget of ``count`` (the rule, or ``count`` itself)."""
        if self.budget is None:
            return count
        found = _resolve(self.budget, f"policy {self.name}")(count, layer, n_layers, n_keys)
        if isinstance(found, bool) or not isinstance(found, (int, float)) or not math.isfinite(found):
            raise PluginError(f"policy {self.name}'s budget function gave {found!r} for layer {layer}, not a number of "
                              "keys")
        return max(1, min(n_keys, int(found)))


def _check(registered: Registry[Policy], policy: Policy) -> None:
    if not isinstance(policy, Policy):
        raise TypeError(f"a policy is an attnviz.analysis.policies.Policy, not {type(policy).__name__}")


POLICIES: Registry[Policy] = Registry("policy", _check)
"""Every KV-cache policy, by name (the built-ins sealed, a plugin's added)."""
register, unregister, registered = POLICIES.register, POLICIES.unregister, POLICIES.registered

_OWN = "attnviz.analysis.kv_policies:"
_SNAP = (Setting("window", WINDOW, "the last queries observed and always kept (kvpress window_size)", 1, 1 << 20),
         Setting("kernel", KERNEL, "the width of the pooling over keys (kvpress kernel_size)", 1, 1023),
         Setting("question_window", False, "observe the question's queries, not the prompt's last ones"))
register(Policy("streaming", "sinks + recent window", "StreamingLLM, Xiao et al. 2023 (kvpress StreamingLLMPress)",
                _OWN + "streaming_policy", always=_OWN + "sinks_kept",
                settings=(Setting("n_sink", N_SINK, "the first tokens always kept (kvpress n_sink)", 0, 1 << 20),)))
register(Policy("h2o", "accumulated attention", "H2O, Zhang et al. 2023 (kvpress ObservedAttentionPress)",
                _OWN + "h2o_policy"))
register(Policy("snapkv", "the last queries' attention, pooled", "SnapKV, Li et al. 2024 (kvpress SnapKVPress)",
                _OWN + "snapkv_policy", always=_OWN + "window_kept", reads=("future",), settings=_SNAP))
register(Policy("tova", "the last query's", "TOVA, Oren et al. 2024 (tova_cache.py; kvpress TOVAPress)",
                _OWN + "tova_policy", always=_OWN + "last_kept",
                settings=(Setting("tova_across", "layer", "average the last query over every head of the layer (the "
                                  "paper's) or within each grouped-query group", choices=("layer", "group")),)))
register(Policy("pyramidkv", "SnapKV, budgets falling with depth", "PyramidKV, Cai et al. 2024 (kvpress "
                "PyramidKVPress; attnviz's bottom differs, see pyramid_budgets)", _OWN + "snapkv_policy",
                always=_OWN + "window_kept", budget=_OWN + "pyramid_layer_budget", reads=("future",), settings=_SNAP))
register(Policy("oracle", "the future queries' own: the upper bound", "the future's own attention (an upper bound)",
                _OWN + "oracle_policy", reads=("future",)))
BUILT_IN = POLICIES.seal()


def policy_help() -> str:
    """``--policy``'s help, from the registry (a plugin's policies too, once plugins have loaded)."""
    listed = ", ".join(f"{p.name} ({p.summary})" for p in POLICIES.values())
    return f"The policies, comma-separated, or all: {listed}."


def declared_settings(policies: list[str] | None = None) -> dict[str, Setting]:
    """Every setting the ``policies`` (default: every registered one) declare, by name (the first declaration)."""
    chosen = [POLICIES[name] for name in (policies if policies is not None else list(POLICIES))]
    found: dict[str, Setting] = {}
    for policy in chosen:
        for setting in policy.settings:
            found.setdefault(setting.name, setting)
    return found


def settings_help() -> str:
    """``--set``'s help, from the registry: each setting, its default and the policies that read it."""
    readers: dict[str, list[str]] = {}
    for policy in POLICIES.values():
        for setting in policy.settings:
            readers.setdefault(setting.name, []).append(policy.name)
    listed = "; ".join(f"{name}={setting.default} ({setting.help}; {', '.join(readers[name])})"
                       for name, setting in declared_settings().items())
    return f"A policy's setting, NAME=VALUE (repeatable): {listed}."


def chosen_settings(policies: list[str], given: Mapping[str, Any]) -> dict[str, Any]:
    """The value of every setting the chosen ``policies`` declare: the ``given`` ones checked, the rest their
    defaults. A setting no chosen policy reads is refused (it would change nothing)."""
    from ..errors import UsageError

    declared = declared_settings(policies)
    unknown = [name for name in given if name not in declared]
    if unknown:
        every = declared_settings()
        whose = [p.name for p in POLICIES.values() if any(s.name == unknown[0] for s in p.settings)]
        raise UsageError(f"[[set={unknown[0]}]]: " + (f"only {', '.join(whose)} read it, and none of them runs here"
                         if whose else f"no policy has it; the settings are {', '.join(every) or 'none'}"))
    return {name: setting.value(given[name]) if name in given else setting.default
            for name, setting in declared.items()}


def parse_settings(pairs: list[str]) -> dict[str, str]:
    """``["window=32", "n_sink=8"]`` (the command line's ``--set``) → ``{"window": "32", "n_sink": "8"}``; each value
    is checked by its setting (:func:`chosen_settings`)."""
    from ..errors import UsageError

    found: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip().lower()
        if not sep or not name or not value.strip():
            raise UsageError(f"[[set]] takes NAME=VALUE, such as window=32; got {pair!r}")
        if name in found:
            raise UsageError(f"[[set={name}]] is given twice; give each setting once")
        found[name] = value.strip()
    return found


def parse_policies(text: str) -> list[str] | None:
    """``--policy``'s text: ``all`` (None: every registered policy) or names, comma-separated (checked by kv)."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    return None if not names or names == ["all"] else names
