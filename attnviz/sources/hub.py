"""Fetch a model's files from the Hugging Face hub, through its usual cache.

``--revision`` pins a branch, tag or commit; ``HF_HUB_OFFLINE=1`` makes every lookup local (the
hub library reads it). Every failure becomes one :class:`ModelNotFoundError` saying what was
tried and how to fix it.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ModelNotFoundError
from .files import INDEX, SINGLE


def looks_like_path(model: str) -> bool:
    """A value meant as a local path rather than a hub id (``org/name`` or ``name``)."""
    return model.startswith((".", "/", "~")) or "\\" in model or model.count("/") > 1


OFFLINE = ("leave out [[model]] (the embedded encoder), or a causal model organism: "
           "[[model=sample_configs/organism_needle.toml]]")
PICTURE_OFFLINE = ("a picture organism, heads planted by hand: [[model=sample_configs/organism_llava.toml]] (a "
                   "vision-language model) or sample_configs/organism_vit.toml (an image encoder)")
"""What runs offline instead, as the hub's error says it: for texts (:data:`OFFLINE`), for pictures."""


@contextmanager
def hub_errors(repo_id: str, revision: str | None, offline: str = OFFLINE) -> Iterator[None]:
    """Turn the hub library's exceptions into one actionable line (``offline``: what runs offline instead)."""
    from huggingface_hub import constants
    from huggingface_hub import errors as hub

    at = f" at revision {revision!r}" if revision else ""
    try:
        yield
    except hub.HFValidationError:
        raise ModelNotFoundError(
            f"{repo_id!r} is neither a folder nor a valid hub id (org/name); check [[model]]"
        ) from None
    except hub.RevisionNotFoundError:
        raise ModelNotFoundError(f"{repo_id!r} has no revision {revision!r}; check [[revision]]") from None
    except hub.GatedRepoError:
        raise ModelNotFoundError(f"{repo_id!r} is gated; accept its licence on the hub and log in with `hf auth login`") from None
    except hub.RepositoryNotFoundError:
        raise ModelNotFoundError(
            f"no model {repo_id!r} on the Hugging Face hub (or it is private); check the id, or pass a local folder "
            "or a .toml config"
        ) from None
    except (hub.OfflineModeIsEnabled, hub.LocalEntryNotFoundError):
        why = "HF_HUB_OFFLINE=1 is set" if constants.HF_HUB_OFFLINE else "the hub cannot be reached (no network?)"
        raise ModelNotFoundError(
            f"{repo_id!r}{at} is not in the local Hugging Face cache and {why}; on a machine with network, run "
            f"`hf download {repo_id}` once{'' if revision is None else ' (at that revision)'}, or pass a local "
            f"model folder; offline now: {offline}"
        ) from None
    except hub.HfHubHTTPError as exc:
        raise ModelNotFoundError(f"the hub refused {repo_id!r}{at}: {exc}") from None
    except (OSError, ConnectionError) as exc:
        raise ModelNotFoundError(
            f"could not download {repo_id!r}{at} ({type(exc).__name__}); check the network, or set HF_HUB_OFFLINE=1 "
            "to use the cache"
        ) from None


@functools.cache
def hub_reachable() -> bool:
    """Whether the hub's host name resolves. When it does not, lookups go straight to the cache
    instead of through the hub library's retries (half a minute of them, for nothing)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()  # its retry messages would bury attnviz's one-line error
    if constants.HF_HUB_OFFLINE:
        return False
    try:
        socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname or "", 443)
    except OSError:
        return False
    return True


def download(repo_id: str, filename: str, revision: str | None) -> Path:
    """One file of a repo, through the cache; only the cache when the hub cannot be reached."""
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo_id, filename, revision=revision, local_files_only=not hub_reachable()))


def fetch_config(repo_id: str, revision: str | None, offline: str = OFFLINE) -> Path:
    """The cached snapshot folder holding ``config.json`` (downloaded if needed; ``offline``: what the error names
    to run offline instead)."""
    with hub_errors(repo_id, revision, offline):
        return download(repo_id, "config.json", revision).parent


def fetch_native_files(repo_id: str, revision: str | None) -> Path | None:
    """Download ``tokenizer.json``, the safetensors weights (and ``generation_config.json`` where there is one);
    None if the repo lacks them."""
    from huggingface_hub import errors as hub

    def get(name: str) -> Path | None:
        try:
            with hub_errors(repo_id, revision):
                return download(repo_id, name, revision)
        except ModelNotFoundError:
            raise
        except (hub.EntryNotFoundError, hub.RemoteEntryNotFoundError):
            return None

    try:
        if get("tokenizer.json") is None:
            return None
        with contextlib.suppress(ModelNotFoundError):  # optional (which tokens end generation), maybe not cached
            get("generation_config.json")
        single = get(SINGLE)
        if single is not None:
            return single.parent
        index = get(INDEX)
    except ModelNotFoundError:
        return None  # e.g. not cached while offline: transformers may still find what it needs
    if index is None:
        return None
    for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
        get(shard)
    return index.parent
