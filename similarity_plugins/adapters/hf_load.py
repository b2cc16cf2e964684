"""Where `hf` gets a transformers model from: a model you built, a ``save_pretrained`` folder, or a hub id.

A hub id (``"EleutherAI/pythia-70m"``) loads through transformers' own ``from_pretrained``, so the user's cache
(``HF_HOME``), token and offline switch (``HF_HUB_OFFLINE``) apply as they do for transformers itself. The
revision is resolved to a commit once, and the model, its tokenizer and its image processor are all loaded at
that commit. `Origin.source` records where the model came from (the agreed provenance of reports and stores):
``{"path", "hub_id", "revision", "commit"}``.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn

from ..utils.extras import require

#: A model id of the Hugging Face hub: ``name`` or ``namespace/name`` (the rules of ``huggingface_hub``).
_HUB_ID = re.compile(r"(\b[\w\-.]+\b/)?\b[\w\-.]{1,96}\b", re.ASCII)
_COMMIT = re.compile(r"[0-9a-f]{40}")
_SNAPSHOT = re.compile(r"snapshots/([0-9a-f]{40})/")


def is_hub_id(text: Any) -> bool:
    """Whether ``text`` is spelled as a hub model id (``gpt2``, ``EleutherAI/pythia-70m``): at most one ``/``,
    letters, digits, ``-``, ``_`` and ``.``, no ``--`` or ``..``, at most 96 characters a part."""
    return (isinstance(text, str) and bool(_HUB_ID.fullmatch(text)) and "--" not in text and ".." not in text
            and not text.endswith(".git"))


@dataclass(frozen=True)
class Origin:
    """Where a wrapped model came from.

    Attributes:
        where: the folder or hub id its tokenizer and image processor load from (None: a model you built).
        kwargs: the ``from_pretrained`` keyword arguments that load them at the model's revision.
        source: ``{"path", "hub_id", "revision", "commit"}``, JSON-able (see the module docstring).
    """

    where: str | None
    kwargs: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)


def transformers_module(what: str = "hf()") -> Any:
    """``transformers``, or `MissingExtra` saying ``pip install "similarity-plugins[hf]"``."""
    return require("transformers", "hf", what)


def load_pretrained(source: str | os.PathLike, *, revision: str | None, dtype: Any, device: torch.device | None,
                    local_files_only: bool | None) -> tuple[nn.Module, Origin]:
    """Load the model of a ``save_pretrained`` folder or of a hub id, as the class its config names.

    Args:
        source: a folder, or a hub id when no such folder exists.
        revision: a branch, tag or commit of a hub id (None: the default branch); refused for a folder.
        dtype: ``torch.dtype``, ``"auto"`` or None (transformers' default: float32).
        device: where to put the model after loading, or None (the CPU).
        local_files_only: True: the cache only; None: transformers' default (``HF_HUB_OFFLINE``).

    Returns:
        ``(model in eval mode, Origin)``.

    Raises:
        ValueError: a string that is neither a folder nor a hub id, a revision for a folder, or a hub id that
            cannot be loaded (not found, or not cached while offline), saying which.
        MissingExtra: transformers is not installed.
    """
    text = os.fspath(source)
    if os.path.isdir(text):
        if revision is not None:
            raise ValueError(f"revision {revision!r} applies to a hub id, but {text!r} is a local folder; drop the "
                             "revision (or @REVISION), or give the hub id")
        model = _from_pretrained(text, {"local_files_only": True}, dtype)
        origin = Origin(text, {"local_files_only": True},
                        {"path": os.path.abspath(text), "hub_id": None, "revision": None, "commit": None})
    elif not isinstance(source, str) or not is_hub_id(text) or os.path.exists(text):
        what = "a file, not a folder" if os.path.exists(text) else "not a folder"
        raise ValueError(f"{text!r} is {what}, and not a hub id either; hf() takes a save_pretrained folder or a hub "
                         "model id such as 'EleutherAI/pythia-70m'")
    else:
        model, origin = _from_hub(text, revision, dtype, local_files_only)
    return (model if device is None else model.to(device)).eval(), origin


def _model_class(transformers: Any, config: Any) -> Any:
    names = [n for n in (getattr(config, "architectures", None) or []) if hasattr(transformers, n)]
    return getattr(transformers, names[0]) if names else transformers.AutoModel


def _dtype_kwargs(transformers: Any, dtype: Any) -> dict:
    if dtype is None:
        return {}
    major = int(transformers.__version__.split(".")[0])
    return {"dtype" if major >= 5 else "torch_dtype": dtype}   # transformers 5 renamed torch_dtype


def _from_pretrained(where: str, kwargs: dict, dtype: Any) -> nn.Module:
    transformers = transformers_module()
    config = transformers.AutoConfig.from_pretrained(where, **kwargs)
    return _model_class(transformers, config).from_pretrained(where, config=config, **kwargs,
                                                              **_dtype_kwargs(transformers, dtype))


def _from_hub(hub_id: str, revision: str | None, dtype: Any, local_files_only: bool | None) -> tuple[nn.Module, Origin]:
    transformers_module()
    kwargs: dict[str, Any] = {} if local_files_only is None else {"local_files_only": bool(local_files_only)}
    pinned = _resolve_revision(hub_id, revision, kwargs)
    if pinned is not None:
        kwargs["revision"] = pinned
    try:
        model = _from_pretrained(hub_id, kwargs, dtype)
    except OSError as exc:
        raise ValueError(_hub_failure(hub_id, revision, exc)) from exc
    commit = getattr(pinned, "resolved", None) or _cached_commit(hub_id, pinned)
    return model, Origin(hub_id, kwargs, {"path": None, "hub_id": hub_id, "revision": revision, "commit": commit})


def _resolve_revision(hub_id: str, revision: str | None, kwargs: dict) -> str | None:
    """The revision as transformers resolves it once for a whole load (a ``ResolvedRevision`` holding the commit,
    from the hub or, offline, from the cache's ``refs/``); as given when this transformers cannot resolve it."""
    try:
        from transformers.utils.hub import resolve_revision
    except ImportError:   # transformers before 5: each file resolves the revision itself
        return revision
    return resolve_revision(hub_id, revision, local_files_only=bool(kwargs.get("local_files_only")))


def _cached_commit(hub_id: str, revision: str | None) -> str | None:
    """The commit of the cached snapshot the config was read from (``.../snapshots/<commit>/config.json``)."""
    if revision is not None and _COMMIT.fullmatch(str(revision)):
        return str(revision)
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    path = try_to_load_from_cache(hub_id, "config.json", revision=None if revision is None else str(revision))
    found = _SNAPSHOT.search(str(path).replace(os.sep, "/")) if isinstance(path, str) else None
    return found.group(1) if found else None


def _hub_failure(hub_id: str, revision: str | None, exc: OSError) -> str:
    at = f" at revision {revision!r}" if revision is not None else ""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    message = f"cannot load the hub model {hub_id!r}{at}: {reason}"
    try:
        from huggingface_hub import constants
    except ImportError:
        return message
    if getattr(constants, "HF_HUB_OFFLINE", False):
        message += (f" (HF_HUB_OFFLINE is set and the cache {constants.HF_HUB_CACHE} does not hold it: load it once "
                    "online, or give a save_pretrained folder)")
    return message + f"; a local folder of that name does not exist in {os.getcwd()!r} either"


def load_part(origin: Origin, auto: str) -> Any | None:
    """The tokenizer (``auto="AutoTokenizer"``) or image processor (``"AutoImageProcessor"``) saved with the model,
    from the same folder or hub id and revision; None when there is none (or ``origin`` has no place)."""
    if origin.where is None:
        return None
    transformers = transformers_module()
    try:
        return getattr(transformers, auto).from_pretrained(origin.where, **origin.kwargs)
    except (OSError, ValueError, KeyError):
        return None


def source_of_instance(model: nn.Module) -> dict:
    """What can be known of where a model you built came from: its config's ``_name_or_path`` as a folder or a hub
    id (the revision and commit are not recorded by transformers)."""
    name = str(getattr(getattr(model, "config", None), "_name_or_path", "") or "")
    folder = os.path.isdir(name)
    return {"path": os.path.abspath(name) if folder else None, "hub_id": name if not folder and is_hub_id(name) else None,
            "revision": None, "commit": None}


@contextlib.contextmanager
def transformers_bars(show: bool, what: str = "hf()") -> Iterator[None]:
    """Within the block, transformers' and huggingface_hub's own progress bars (loading weights, downloads) are off
    unless ``show``; their settings come back afterwards. ``show=True`` changes nothing. Raises `MissingExtra`
    naming ``what`` when transformers is not installed."""
    transformers = transformers_module(what)
    if show:
        yield
        return
    logging = transformers.utils.logging
    from huggingface_hub.utils import tqdm as hub_tqdm

    was, hub_states = logging.is_progress_bar_enabled(), dict(getattr(hub_tqdm, "progress_bar_states", {}))
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            logging.enable_progress_bar()
        states = getattr(hub_tqdm, "progress_bar_states", None)
        if isinstance(states, dict):
            states.clear()
            states.update(hub_states)
