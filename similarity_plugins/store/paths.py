"""Where an activation store's files live, and the checks that keep every read and write inside the store.

One function quotes model and layer names into folder names (`quote_name`); every file name read from a
manifest is checked against the pattern of the files the store writes (`member`); every folder the store
writes into or reads from is checked not to lead outside it through a symbolic link (`checked_folder`).
Files are written with `atomic_write(..., follow_links=False)`: a link planted where a file goes is replaced,
never written through.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from typing import Any, Mapping

from ..utils.digest import fast_hash
from ..utils.readback import BadFile, read_json
from ..utils.text import how_to

FORMAT = "similarity-plugins-store-2"
#: Formats this version recognises but does not read (their keys and checksums are of another hash).
OLD_FORMATS = ("similarity-plugins-store-1",)
#: An entry's key: 32 hex digits.
KEY = re.compile(r"[0-9a-f]{32}")
#: A chunk: its rows ``start-stop``, the digest of the inputs it was made from and the checksum of its bytes.
CHUNK = re.compile(r"(\d{12})-(\d{12})-([0-9a-f]{32})-([0-9a-f]{32})\.npy")
#: The sample ids and the per-sample input digests of an entry, named by their checksum.
SAMPLES = {"ids": re.compile(r"ids-([0-9a-f]{32})\.npy"), "digests": re.compile(r"digests-([0-9a-f]{32})\.npy")}
NAME_MAX = 255  # bytes of one folder name on the common file systems


class StoreError(ValueError):
    """A store entry that is missing, partial, damaged or does not match what was asked for; the message says which
    and what to do."""


class CorruptChunk(StoreError):
    """A chunk file whose bytes do not match the checksum recorded when it was written."""


def extract_again() -> str:
    """The advice for an entry that must be written again, in the reader's terms (a command on the command line)."""
    return "extract it again (" + how_to("similarity_plugins.extract", "similarity-plugins extract") + ")"


def quote_name(name: Any, what: str) -> str:
    """The folder name of a model or layer name: percent-quoted (``/`` -> ``%2F``, ``%`` -> ``%25``, ...), a leading
    ``.`` as ``%2E`` (so no name is ``.``, ``..`` or a hidden file). Two names never share a folder name.

    Args:
        name: the name as the user gave it.
        what: ``"model"`` or ``"layer"``, for the message.

    Returns:
        The folder name (at most `NAME_MAX` bytes).

    Raises:
        StoreError: ``name`` is not text, is empty, holds a NUL character or a lone surrogate, or is too long
            once quoted.
    """
    if not isinstance(name, str):
        raise StoreError(f"a {what} name must be text, got {type(name).__name__} {name!r}")
    if not name:
        raise StoreError(f"a {what} name must not be empty; name every {what}")
    if "\x00" in name:
        raise StoreError(f"the {what} name {name!r} holds a NUL character, which no file system takes; rename it")
    try:
        quoted = urllib.parse.quote(name, safe="._-", errors="strict")
    except UnicodeEncodeError:
        raise StoreError(f"the {what} name {name!r} is not valid Unicode text (a lone surrogate); rename it") from None
    if quoted.startswith("."):
        quoted = "%2E" + quoted[1:]
    if len(quoted.encode()) > NAME_MAX:
        raise StoreError(f"the {what} name {name[:40]!r}... is {len(quoted.encode())} bytes once quoted for the file "
                         f"system, over the {NAME_MAX} a folder name may have; use a shorter name")
    return quoted


def entry_key(*parts: str) -> str:
    """The content address of an entry (32 hex digits): a digest of the store format and ``parts`` (the model's
    fingerprint, what it reads with and the layer, or the digest of the rows of a ``put``)."""
    return fast_hash(json.dumps([FORMAT, *parts]).encode()).hexdigest()


def chunk_file(start: int, stop: int, data_digest: str, checksum: str) -> str:
    """The file name of the chunk of rows ``start .. stop-1`` made from inputs with ``data_digest`` and whose bytes
    have ``checksum``."""
    return f"{start:012d}-{stop:012d}-{data_digest}-{checksum}.npy"


def member(folder: str, name: Any, pattern: re.Pattern, where: str) -> str:
    """The path of the file ``name`` (read from a manifest) in ``folder``, once ``name`` is checked to be a file
    the store writes (`CHUNK`, `SAMPLES`): never a path, ``..`` or another folder's file.

    Raises:
        StoreError: naming ``where`` (the manifest) when ``name`` is not such a file name.
    """
    if not isinstance(name, str) or not pattern.fullmatch(name):
        raise StoreError(f"{where} names the file {name!r}, which is not a file this store writes (edited or "
                         f"damaged); {extract_again()}")
    return os.path.join(folder, name)


def checked_folder(root: str, folder: str, base: str | None = None) -> str:
    """``folder`` (inside the store ``root``, whose real path is ``base`` when the caller has it) once no part of it
    below ``root`` is a symbolic link that leads outside ``root``; ``StoreError`` naming the link otherwise. Parts
    that do not exist yet are fine."""
    base = base or os.path.realpath(root)
    relative = os.path.relpath(folder, root)
    if relative == os.curdir:
        return folder
    if relative.startswith(os.pardir) or os.path.isabs(relative):
        raise StoreError(f"{folder} is not inside the store {root}")
    current = root
    for part in relative.split(os.sep):
        current = os.path.join(current, part)
        if os.path.islink(current):
            target = os.path.realpath(current)
            if os.path.commonpath([base, target]) != base:
                raise StoreError(f"{current} is a symbolic link to {target}, outside the store {root}; the store "
                                 "reads and writes only inside its folder: remove the link")
        elif not os.path.exists(current):
            break
    return folder


def layer_folder(root: str, model: str, layer: str, base: str | None = None) -> str:
    """The folder of the entries of (model, layer) in the store ``root`` (real path ``base`` when the caller has it),
    its names quoted (`quote_name`) and checked to lead nowhere outside the store (`checked_folder`)."""
    folder = os.path.join(root, quote_name(model, "model"), quote_name(layer, "layer"))
    return checked_folder(root, folder, base)


def key_folder(root: str, model: str, layer: str, key: str, base: str | None = None) -> str:
    """The folder of the files of entry ``key`` of (model, layer) in the store ``root``, checked like `layer_folder`;
    ``StoreError`` for a key that is not an entry key (32 hex digits, or a ``.put-`` staging name)."""
    if not KEY.fullmatch(key) and not key.startswith(".put-"):
        raise StoreError(f"{key!r} is not an entry key of this store (32 hex digits)")
    return checked_folder(root, os.path.join(layer_folder(root, model, layer, base), key), base)


def read_store_json(path: str, what: str) -> Any:
    """The JSON value of the store's file ``path`` (``what``: "manifest", "store marker"); `StoreError` naming the
    file when it cannot be read or is not JSON, ``FileNotFoundError`` when it does not exist."""
    try:
        return read_json(path, what)
    except BadFile as exc:
        raise StoreError(f"{exc}; {extract_again()} to rewrite it") from None


def check_names(per_model: Mapping[str, list[str]]) -> None:
    """Refuse, before any work, a model or layer name that cannot name a folder of the store (`quote_name`)."""
    for model, layers in per_model.items():
        quote_name(model, "model")
        for layer in layers:
            quote_name(layer, "layer")
