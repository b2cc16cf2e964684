"""What a command writes: its paths checked before any work and made absolute once, its files written all-or-none,
and its report printed and written (the finished rows of a stopped run too)."""

from __future__ import annotations

import os
from typing import Any, Sequence

from ..utils.text import counted
from .interrupts import interrupted_code


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


def write_outputs(files: dict[str, Any], say: bool = True) -> list[str]:
    """Write ``{path: text or bytes}`` all-or-none (`write_all`) and, when
    ``say``, print ``wrote PATH`` for each; None paths (and None contents) are skipped. Returns the paths."""
    from ..utils.io import write_all

    written = write_all({p: c for p, c in files.items() if p is not None and c is not None})
    if say:
        for path in written:
            print(f"wrote {path}")
    return written


def emit_report(report: Any, out: str | None, csv: str | None, seconds: float, note: str = "") -> int:
    """Write ``report`` (a [`Report`][similarity_plugins.host.results.Report]) as JSON to ``out`` and as CSV to ``csv`` when
    given, all-or-none (`write_outputs`), then print it and the time it took (``seconds``, with ``note``
    after it): the files come first, so a closed pipe (``| head -1``) cannot lose them. Returns the exit code:
    0 when no row has an error, else 1."""
    files = {path: text for path, text in ((out, report.to_json() + "\n" if out is not None else None),
                                           (csv, report.to_csv() if csv is not None else None)) if path is not None}
    written = write_outputs(files, say=False)
    print(report)
    print(f"\n{counted(len(report), 'result')} in {seconds:.1f} s{note}")
    for path in written:
        print(f"wrote {path}")
    return 0 if all(r.error is None for r in report) else 1


def emit_interrupted(report: Any, out: str | None, csv: str | None, seconds: float,
                     interrupted: BaseException | None) -> int:
    """`emit_report` of a run that may have been stopped (``interrupted``: the ``KeyboardInterrupt``, a
    SIGTERM's included, or None): the finished rows are written and printed; returns 130/143 when stopped."""
    if interrupted is None:
        return emit_report(report, out, csv, seconds)
    finished = sum(r.error_type != "KeyboardInterrupt" for r in report)
    emit_report(report, out, csv, seconds, f" (interrupted: {finished} finished)")
    return interrupted_code(interrupted)
