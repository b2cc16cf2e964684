"""The paths a command writes: checked before any work, and made absolute once."""

from __future__ import annotations

import os
from typing import Any, Sequence


def check_outputs(paths: dict[str, Any], inputs: dict[str, Any] | None = None) -> None:
    """Refuse, before any work, the output paths that cannot be written: ``{"--out": path, "--csv": path}``
    (None entries are skipped); ``inputs`` (``{"X": path}``) are files the command reads, which no output may be.

    Raises ``ValueError`` naming the option, the path and the reason: an empty path (an unset shell variable),
    ``-`` (the table already goes to stdout), a folder, a read-only file or folder, a path under a file, an
    input file, or two outputs that reach one file (the same name, a symbolic link to it or to a folder above
    it, or a hard link). The CLI exits 2 on it.
    """
    from ..utils.io import unwritable_reason

    seen: dict[str, tuple[str, str]] = {}   # resolved target -> (option, path)
    reads = {what: _resolved(path) for what, path in (inputs or {}).items() if path}
    for option, path in paths.items():
        if path is None:
            continue
        text = os.fspath(path)
        if not text.strip():
            raise ValueError(f"{option} is empty ({text!r}: an unset shell variable?); give a file name, or drop "
                             f"{option}")
        if text.strip() == "-":
            raise ValueError(f"{option} '-': the table already goes to stdout; give a file name")
        reason = unwritable_reason(text)
        if reason is not None:
            raise ValueError(f"cannot write {option} {text!r}: {reason}")
        target = _resolved(text)
        for what, source in reads.items():
            if _same_file(target, source):
                raise ValueError(f"{option} {text!r} is the input {what}; writing it would destroy what this "
                                 "command reads: give another file name")
        for other, (other_option, other_path) in seen.items():
            if _same_file(target, other):
                raise ValueError(f"{option} {text!r} and {other_option} {other_path!r} name the same file "
                                 f"({target}); give each its own")
        seen[target] = (option, text)


def resolve_outputs(args: Any, options: Sequence[str], inputs: dict[str, Any] | None = None) -> None:
    """Check the output paths of ``args`` (`check_outputs`; ``options`` as ``"--out"``, read from ``args.out``)
    and make each one absolute, once, before any plugin runs: a plugin that changes the working folder
    (``os.chdir``) cannot move where the outputs go, and the path checked is the path written."""
    attrs = {option: option.lstrip("-").replace("-", "_") for option in options}
    check_outputs({option: getattr(args, attr) for option, attr in attrs.items()}, inputs)
    for attr in attrs.values():
        if getattr(args, attr) is not None:
            setattr(args, attr, os.path.abspath(os.fspath(getattr(args, attr))))


def _resolved(path: Any) -> str:
    """The absolute path ``path`` reaches, every symbolic link (of the file and of the folders above it) followed."""
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _same_file(a: str, b: str) -> bool:
    """Whether two resolved paths are one file: the same name, or one existing file under two names (a hard link)."""
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet: only the names can agree
        return False


def input_files(*specs: "str | None") -> dict[str, str]:
    """The files named by model specs (``small-cnn@a.pt``: ``a.pt``) and ARRAY specs (``x.npz:KEY``: ``x.npz``)
    that exist, as ``{spec: path}``, for `check_outputs`."""
    found = {}
    for spec in specs:
        if not spec:
            continue
        path = spec.rpartition("@")[2] if "@" in spec and not spec.startswith("hf:") else spec  # hf:ID@REVISION
        for candidate in (path, path.rpartition(":")[0]):
            if candidate and os.path.isfile(candidate):
                found[spec] = candidate
                break
    return found
