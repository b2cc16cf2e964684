"""Writing files safely, and the table/CSV text every report shares.

Bottom layer: imports nothing from the package. `atomic_write` is the one way this package writes
a file: readers never see a half-written file, and a failed write leaves the old file (if any) in place.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
import stat
import tempfile
import threading
from typing import IO, Any, Iterator, Mapping, Sequence

_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process umask (read by setting and restoring it, under a lock)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def write_target(path: str | os.PathLike) -> str:
    """The file that writing ``path`` changes: ``path`` itself, or where it points when it is a symlink (links
    are written through: the link stays and its target gets the new contents)."""
    path = os.fspath(path)
    return os.path.realpath(path) if os.path.islink(path) else path


def not_regular_reason(path: str | os.PathLike) -> str | None:
    """Why writing ``path`` would replace something that is not a regular file (a FIFO, a device node such as
    ``/dev/null``, a socket), or None when ``path`` (through a symlink) is a regular file or does not exist.
    Replacing such a node by renaming a file over it would destroy it, so every write refuses it."""
    try:
        mode = os.stat(write_target(path)).st_mode
    except OSError:  # nothing there (or unreachable: a name too long, a file above it): nothing to replace
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    return f"it is {kind}, not a regular file; writing would replace it: give the name of a regular file"


def _new_temp(path: str | os.PathLike, follow_links: bool = True) -> tuple[int, str, str]:
    """``(fd, temporary path, target)`` for writing ``path``: the temporary file sits next to the target, keeps its
    extension and has the mode the target will have (an existing file's mode, else 0o666 less the umask).
    ``OSError`` (EINVAL, naming ``path``) when the target exists and is not a regular file (`not_regular_reason`).
    ``follow_links=False``: the target is ``path`` itself, a symlink there is replaced, never written through."""
    target = write_target(path) if follow_links else os.fspath(path)
    special = not_regular_reason(target) if follow_links or not os.path.islink(target) else None
    if special is not None:
        raise OSError(errno.EINVAL, f"refusing to write {os.fspath(path)}: {special}", os.fspath(path))
    directory = os.path.dirname(os.path.abspath(target))
    os.makedirs(directory, exist_ok=True)
    mode = stat.S_IMODE(os.stat(target).st_mode) if os.path.exists(target) else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.splitext(target)[1], dir=directory)
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp, target


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", *, encoding: str | None = None,
                 newline: str | None = None, follow_links: bool = True, durable: bool = True) -> Iterator[IO]:
    """Open a temporary file next to ``path`` for writing; on success it replaces ``path`` atomically.

    The temporary file lives in the same folder (so ``os.replace`` is a rename on one file system) and
    keeps ``path``'s extension; it is flushed and fsync'ed before the rename, and removed if the block
    raises. Parent folders are created. A new file gets the umask's permissions, an existing one keeps its
    mode, and a symlink is written through (`write_target`). ``mode``: "wb" (default) or "w" (text;
    ``encoding`` defaults to UTF-8). Usage: ``with atomic_write("out/report.csv", "w", newline="") as fh: ...``.
    ``follow_links=False`` (shared caches): a symlink at ``path`` is replaced by the file, its target untouched.
    A target that is not a regular file (a FIFO, ``/dev/null``) is refused; an ``OSError`` that names no file
    (a full disk, "File too large") is raised naming ``path``. ``durable=False`` leaves out the fsync (the file is
    still replaced whole; a crash of the machine may lose it): for files a checksum elsewhere verifies and that
    are written again when lost.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write writes a whole new file: mode must be 'wb' or 'w', got {mode!r}")
    fd, tmp, target = _new_temp(path, follow_links)
    if mode == "w" and encoding is None:
        encoding = "utf-8"
    try:
        with _naming(path), os.fdopen(fd, mode, encoding=encoding, newline=newline) as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _naming(path: str | os.PathLike) -> Iterator[None]:
    """Re-raise an ``OSError`` that names no file (a full disk on ``write``, ``fsync``) as one naming ``path``."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from exc


def write_all(files: Mapping[str, str | bytes]) -> list[str]:
    """Write every ``{path: contents}`` (text as UTF-8) so that either all of them are replaced or none.

    All contents go to temporary files first (next to each target, as `atomic_write`); only when every
    one is written are they renamed into place. If a rename fails (rare: every folder took a file a moment
    before), the files already renamed are removed again and the error is raised. Returns the paths.
    """
    staged: list[tuple[str, str]] = []
    try:
        for path, contents in files.items():
            fd, tmp, target = _new_temp(path)
            staged.append((tmp, target))
            with _naming(path), os.fdopen(fd, "wb") as fh:
                fh.write(contents.encode("utf-8") if isinstance(contents, str) else contents)
                fh.flush()
                os.fsync(fh.fileno())
        done: list[str] = []
        try:
            for tmp, target in staged:
                os.replace(tmp, target)
                done.append(target)
        except BaseException:
            for target in done:
                with contextlib.suppress(OSError):
                    os.unlink(target)
            raise
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    return [os.fspath(p) for p in files]


def unwritable_reason(path: str | os.PathLike) -> str | None:
    """Why a file could not be written at ``path`` (a short phrase), or None when it can be.

    Checks without creating anything that stays: ``path`` (through a symlink) is not a folder, is not a
    read-only file, its nearest existing ancestor is a folder (not a file), and a probe file can be created
    in that folder (this catches read-only folders and file systems, also for root).
    """
    target = write_target(path)
    if os.path.isdir(target):
        return "it is a folder, not a file name"
    too_long = _too_long(target)
    if too_long is not None:
        return too_long
    special = not_regular_reason(target)
    if special is not None:
        return special
    if os.path.exists(target) and not os.access(target, os.W_OK):
        return "the file is read-only"
    folder = os.path.dirname(os.path.abspath(target))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        return f"{folder} is a file, not a folder"
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as exc:
        return f"the folder {folder} is not writable ({exc.strerror or exc})"
    return None


def _too_long(path: str) -> str | None:
    """Why ``path`` is too long for its file system (a name or the whole path), or None."""
    absolute = os.path.abspath(path)
    folder = os.path.dirname(absolute)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    try:
        name_max, path_max = os.pathconf(folder, "PC_NAME_MAX"), os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError):
        return None
    long_names = [p for p in absolute.split(os.sep) if len(os.fsencode(p)) > name_max]
    if long_names:
        return f"the name {long_names[0][:40]}... is longer than the {name_max} bytes a name may have there"
    if len(os.fsencode(absolute)) >= path_max:
        return f"the path is {len(os.fsencode(absolute))} bytes long, more than the {path_max - 1} allowed"
    return None


def write_text(path: str | os.PathLike, text: str) -> str:
    """Write ``text`` (UTF-8, line endings as given) to ``path`` atomically; returns the path."""
    with atomic_write(path, "w", newline="") as fh:
        fh.write(text)
    return os.fspath(path)


def json_text(payload: Any, indent: int = 2) -> str:
    """``payload`` as indented JSON text with a final newline (what `write_json` writes)."""
    return json.dumps(payload, indent=indent) + "\n"


def write_json(path: str | os.PathLike, payload: Any, indent: int = 2) -> str:
    """Write ``payload`` as JSON (with a final newline) to ``path`` atomically; returns the path."""
    return write_text(path, json_text(payload, indent))


def csv_text(header: Sequence[str], rows: Iterator[Sequence[Any]] | Sequence[Sequence[Any]]) -> str:
    """CSV text (``\\n`` line ends): the header row, then one line per row; ``None`` cells are empty."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if cell is None else cell for cell in row])
    return buf.getvalue()


def text_table(header: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    """An aligned plain-text table: the first ``left`` columns left-aligned, the rest right-aligned,
    two spaces between columns and a dashed rule under the header. Cells are formatted with ``str``."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]])
