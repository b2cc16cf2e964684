"""Writing files safely, and the table/CSV text every report shares.

Bottom layer: imports nothing from the package. :func:`atomic_write` is the one way this package writes
a file: readers never see a half-written file, and a failed write leaves the old file (if any) in place.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import tempfile
from typing import IO, Any, Iterator, Sequence


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", *, encoding: str | None = None,
                 newline: str | None = None) -> Iterator[IO]:
    """Open a temporary file next to ``path`` for writing; on success it replaces ``path`` atomically.

    The temporary file lives in the same folder (so ``os.replace`` is a rename on one file system) and
    keeps ``path``'s extension; it is flushed and fsync'ed before the rename, and removed if the block
    raises. Parent folders are created. ``mode``: "wb" (default) or "w" (text; ``encoding`` defaults to
    UTF-8). Usage: ``with atomic_write("out/report.csv", "w", newline="") as fh: fh.write(text)``.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write writes a whole new file: mode must be 'wb' or 'w', got {mode!r}")
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.splitext(path)[1], dir=directory)
    if mode == "w" and encoding is None:
        encoding = "utf-8"
    try:
        with os.fdopen(fd, mode, encoding=encoding, newline=newline) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(path: str | os.PathLike, text: str) -> str:
    """Write ``text`` (UTF-8, line endings as given) to ``path`` atomically; returns the path."""
    with atomic_write(path, "w", newline="") as fh:
        fh.write(text)
    return os.fspath(path)


def write_json(path: str | os.PathLike, payload: Any, indent: int = 2) -> str:
    """Write ``payload`` as JSON (with a final newline) to ``path`` atomically; returns the path."""
    return write_text(path, json.dumps(payload, indent=indent) + "\n")


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
