"""The HTML page of a result: `Report.to_html` and `Grid.to_html` write through the one registered page writer.

The page is drawn by an application (`similarity_plugins.apps.report`), a layer above the result types, so the
result types cannot import it. The package's ``__init__`` installs the application's writer here when
``similarity_plugins`` is imported (as it installs the torch.distributed world for the networks services), and
the result types call it through `write_page`: the arrow stays pointing down.
"""

from __future__ import annotations

import os
from typing import Any, Callable

#: ``writer(result, path, title=...) -> html``: the one function that draws a result as a page (one installed)
PageWriter = Callable[..., str]
_WRITER: list[PageWriter] = []


def register_page_writer(writer: PageWriter) -> None:
    """Install the function that writes a result (a `Report` or a `Grid`) as one HTML page (one only).

    Args:
        writer: ``writer(result, path, title=None) -> str``: the page's text, also written to ``path`` when it
            is not None.
    """
    _WRITER[:] = [writer]


def write_page(result: Any, path: str | os.PathLike | None, *, title: str | None = None) -> str:
    """The HTML page of ``result`` from the installed writer, written to ``path`` when given.

    Args:
        result: a `Report` or a `Grid`.
        path: the file to write (whole, atomically), or None.
        title: the page's title, or None for one made from the result.

    Returns:
        The page's text.

    Raises:
        RuntimeError: no writer is installed (``similarity_plugins`` was not imported as a package).
    """
    if not _WRITER:
        raise RuntimeError("no HTML page writer is installed; `import similarity_plugins` installs the report "
                           "application's (similarity_plugins.apps.report)")
    return _WRITER[0](result, path, title=title)
