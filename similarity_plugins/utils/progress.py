"""Progress bars that stay out of logs: one rule for every bar the package draws.

``progress`` everywhere (``compare``, ``score``, ``generate_iris``, the studies, every command) takes:

- ``False``: no bar;
- ``True``: a bar when the bar's stream (stderr) is a terminal, none when it goes to a file or a pipe;
- ``"always"``: a bar even into a file or a pipe (the commands' ``--progress``).

``SIMILARITY_PROGRESS=always|never`` overrides ``True`` (the automatic choice) for a whole process; an
explicit ``False`` or ``"always"`` wins over it.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Union

Progress = Union[bool, str]

ENV_VAR = "SIMILARITY_PROGRESS"
_ENV_VALUES = ("always", "never", "auto", "")


def check_progress(progress: Any) -> Progress:
    """``progress`` as given if it is ``True``, ``False`` or ``"always"``; raises ``ValueError`` otherwise."""
    if progress is True or progress is False or progress == "always":
        return progress
    raise ValueError(f"progress must be True, False or 'always', got {progress!r}")


def tqdm_disable(progress: Progress) -> bool | None:
    """tqdm's ``disable`` for ``progress``: True (no bar), False (a bar), None (a bar only on a terminal)."""
    progress = check_progress(progress)
    if progress is False:
        return True
    if progress == "always":
        return False
    env = os.environ.get(ENV_VAR, "").strip().lower()
    if env not in _ENV_VALUES:
        raise ValueError(f"{ENV_VAR} must be one of always, never, auto; got {env!r}")
    return {"always": False, "never": True}.get(env)


def shows_progress(progress: Progress, stream: Any = None) -> bool:
    """Whether a bar (or other progress output) for ``progress`` would be shown on ``stream`` (default stderr)."""
    disable = tqdm_disable(progress)
    if disable is None:
        stream = sys.stderr if stream is None else stream
        isatty = getattr(stream, "isatty", None)
        return bool(isatty and isatty())
    return not disable


def progress_bar(iterable: Iterable | None = None, *, progress: Progress, **kwargs: Any) -> Any:
    """A ``tqdm`` bar (on stderr) over ``iterable`` that follows the module's rule for ``progress``;
    other keyword arguments go to ``tqdm`` as they are (``total``, ``desc``, ``leave``, ``unit`` ...)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, disable=not shows_progress(progress, kwargs.get("file")), **kwargs)
