"""The one way figures are made and turned into file contents: matplotlib on the Agg backend (`pyplot`),
the format a file name asks for (`figure_format`) and a figure's bytes (`figure_bytes`), so that a
figure can be written together with other files, all or none (`write_all`).
matplotlib is imported only when a figure is drawn."""

from __future__ import annotations

import io
import os
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def figure_format(path: str | os.PathLike) -> str:
    """The image format a file name asks for: its extension without the dot ("png" when it has none)."""
    return os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or "png"


def figure_bytes(fig: Any, fmt: str = "png", dpi: int = 120) -> bytes:
    """Render the matplotlib figure ``fig`` as ``fmt`` ("png", "pdf", "svg", ...) at ``dpi`` dots per inch and
    close it (also when rendering fails); returns the file contents."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=fmt, dpi=dpi)
    finally:
        pyplot().close(fig)
    return buf.getvalue()
