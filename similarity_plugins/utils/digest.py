"""Files that verify their contents: a payload saved with a SHA-256 of its tensors and settings, checked on load.

`save_verified` writes ``{"format", "kind", "digest", "payload"}`` with ``torch.save`` through
`atomic_write`; `load_verified` reads it with ``weights_only=True`` and returns the payload
only when the file is readable, of the expected ``kind`` and its digest matches. Anything else (a truncated
file, bytes changed inside a still valid zip, a file of another format) is a miss with a warning that says
"corrupt", and the caller recomputes. The digest detects accidents and edits of the data without the
digest; it is not a signature (whoever can write the folder can write a consistent file: see
docs/reliability.md for the trust model of a shared cache folder).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from typing import Any

import numpy as np
import torch
import xxhash

FORMAT = "similarity-plugins-verified-1"
#: The name of the hash `fast_hash` returns (recorded in the files whose keys and checksums it makes).
FAST_HASH = "xxh3-128"


def fast_hash(data: bytes = b"") -> Any:
    """A new XXH3-128 hash object (``update``, ``hexdigest``, ``digest``) fed with ``data``: the hash of model
    fingerprints, input digests and activation-store checksums.

    XXH3 (the ``xxhash`` package) reads about ten times faster than SHA-256 on a CPU without SHA extensions, and
    its 128 bits make an accidental collision as unlikely as SHA-256's for any number of files a lab keeps. It is
    not a cryptographic hash: it detects damage and changes, not a forgery by someone who can write the files
    (nor does SHA-256 here: whoever can write a file can write a matching checksum next to it).
    """
    return xxhash.xxh3_128(data)


def json_digest(value: Any) -> str:
    """The `fast_hash` (hex) of ``value`` written as JSON with sorted keys (``repr`` for what JSON cannot write):
    equal for equal plain values, whatever the order of their dicts."""
    return fast_hash(json.dumps(value, sort_keys=True, default=repr).encode()).hexdigest()


class CorruptFileWarning(UserWarning):
    """A cache or checkpoint file that failed verification (it is ignored and the work recomputed)."""


def update_tensor_digest(h: hashlib._Hash, label: str, t: torch.Tensor) -> None:
    """Feed ``label``, the dtype, the shape and the exact bytes of tensor ``t`` (any device) into hash ``h``."""
    t = t.detach()
    h.update(f"{label}|{t.dtype}|{tuple(t.shape)}|".encode())
    if t.numel():
        data = t.contiguous().cpu()
        if data.dtype == torch.bfloat16:
            data = data.view(torch.int16)
        h.update(data.numpy().reshape(-1).view(np.uint8))  # the bytes, without a copy


def value_text(value: Any) -> str:
    """``repr(value)`` with every NumPy array and tensor inside it (dicts, lists, tuples) written as its dtype, shape
    and the SHA-256 of its contents: two values whose arrays differ anywhere get different texts (a plain ``repr``
    elides the middle of a large array)."""
    if isinstance(value, (np.ndarray, torch.Tensor)):
        h = hashlib.sha256()
        if isinstance(value, torch.Tensor):
            update_tensor_digest(h, "array", value)
        else:
            h.update(f"{value.dtype}|{value.shape}|".encode())
            h.update(np.ascontiguousarray(value).tobytes() if value.dtype.kind in "biufc" else
                     repr(value.tolist()).encode("utf-8", "surrogatepass"))
        return f"<array {value.dtype} {tuple(value.shape)} sha256:{h.hexdigest()}>"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{value_text(k)}: {value_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(value_text(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value)


def update_inputs_digest(h: hashlib._Hash, label: str, x: Any) -> None:
    """Feed one batch's inputs into hash ``h``: a tensor (`update_tensor_digest`), a sequence of strings (each
    one's length and UTF-8 bytes, so ``["ab", "c"]`` and ``["a", "bc"]`` differ), or a dict of views (each view
    under its name, in key order)."""
    if isinstance(x, torch.Tensor):
        update_tensor_digest(h, label, x)
    elif isinstance(x, dict):
        for name in sorted(x):
            update_inputs_digest(h, f"{label}.{name}", x[name])
    elif isinstance(x, (list, tuple)) and all(isinstance(t, str) for t in x):
        h.update(f"{label}|text|{len(x)}|".encode())
        for text in x:
            data = text.encode("utf-8", "surrogatepass")
            h.update(f"{len(data)}|".encode() + data)
    else:
        raise TypeError(f"cannot fingerprint inputs of type {type(x).__name__}: give tensors, strings or a dict "
                        "of views")


def _feed(h: hashlib._Hash, label: str, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        update_tensor_digest(h, label, value)
    elif isinstance(value, np.ndarray):
        h.update(f"{label}|ndarray|{value.dtype}|{value.shape}|".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        h.update(f"{label}|dict|{len(value)}|".encode())
        for key in sorted(value, key=repr):
            _feed(h, f"{label}.{key!r}", value[key])
    elif isinstance(value, (list, tuple)):
        h.update(f"{label}|{type(value).__name__}|{len(value)}|".encode())
        for i, item in enumerate(value):
            _feed(h, f"{label}[{i}]", item)
    else:
        h.update(f"{label}|{type(value).__name__}|{value!r}|".encode())


def payload_digest(payload: Any) -> str:
    """SHA-256 (hex) of a payload of nested dicts, lists, tuples, tensors, NumPy arrays and plain values."""
    h = hashlib.sha256(FORMAT.encode())
    _feed(h, "", payload)
    return h.hexdigest()


def save_verified(payload: Any, path: str | os.PathLike, kind: str) -> None:
    """Save ``payload`` (loadable with ``weights_only=True``) with its digest to ``path``, atomically; a symlink at
    ``path`` is replaced by the file (never written through). ``kind`` names what the file holds ("iri-set",
    "iri-checkpoint"); `load_verified` checks it."""
    from .io import atomic_write

    record = {"format": FORMAT, "kind": kind, "digest": payload_digest(payload), "payload": payload}
    with atomic_write(path, follow_links=False) as fh:  # a link planted in a shared cache is replaced, not followed
        torch.save(record, fh)


def load_verified(path: str | os.PathLike, kind: str) -> Any | None:
    """The payload saved by `save_verified` at ``path``; None when the file is missing, or (with a
    `CorruptFileWarning` saying "corrupt" and why) a symbolic link (opened with ``O_NOFOLLOW``), unreadable,
    truncated, of another kind or format,
    or when its contents do not match the digest."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if os.path.islink(path):
            return _corrupt(path, "it is a symbolic link, which a cache entry never is")
        return _corrupt(path, f"it cannot be opened ({exc.strerror or exc})")
    try:
        with os.fdopen(fd, "rb") as fh:
            record = torch.load(fh, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a damaged file is a miss, not an error
        return _corrupt(path, f"it cannot be read ({type(exc).__name__}: {str(exc)[:120]})")
    if not isinstance(record, dict) or record.get("format") != FORMAT or "digest" not in record:
        return _corrupt(path, "it carries no content digest (another format or an older version)")
    if record.get("kind") != kind:
        return _corrupt(path, f"it holds {record.get('kind')!r}, expected {kind!r}")
    if payload_digest(record.get("payload")) != record["digest"]:
        return _corrupt(path, "its contents do not match their digest")
    return record["payload"]


def _corrupt(path: str, why: str) -> None:
    warnings.warn(f"ignoring {path}: the file is corrupt ({why}); recomputing", CorruptFileWarning, stacklevel=3)
    return None
