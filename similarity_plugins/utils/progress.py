"""Progress bars that stay out of logs: one rule for every bar the package draws.

``progress`` everywhere (``compare``, ``score``, ``generate_iris``, the studies, every command) is one of three
names, the `Progress` type:

- ``"never"``: no bar;
- ``"auto"``: a bar when the bar's stream (stderr) is a terminal, none when it goes to a file or a pipe;
- ``"always"``: a bar even into a file or a pipe (the commands' ``--progress``).

``SIMILARITY_PROGRESS=always|never`` overrides ``"auto"`` (the automatic choice) for a whole process; an
explicit ``"never"`` or ``"always"`` wins over it. ``False`` and ``True``, the older spellings of ``"never"`` and
``"auto"``, still work and warn (`DeprecationWarning`).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Iterable, Literal, get_args

Progress = Literal["never", "auto", "always"]
PROGRESS_MODES: tuple[str, ...] = get_args(Progress)

ENV_VAR = "SIMILARITY_PROGRESS"
_ENV_VALUES = ("always", "never", "auto", "")
_OLD_SPELLINGS = {False: "never", True: "auto"}


def progress_mode(progress: Any) -> Progress:
    """The name of a ``progress`` value: one of `PROGRESS_MODES` as given, ``False`` -> ``"never"`` and ``True``
    -> ``"auto"`` (silently: the public calls warn about those once, in `check_progress`).

    Args:
        progress: a name of `PROGRESS_MODES`, or a bool.

    Returns:
        One of `PROGRESS_MODES`.

    Raises:
        ValueError: anything else (the message lists the names).
    """
    if isinstance(progress, bool):
        return _OLD_SPELLINGS[progress]
    if isinstance(progress, str) and progress in PROGRESS_MODES:
        return progress
    raise ValueError(f"progress must be one of {', '.join(repr(m) for m in PROGRESS_MODES)}, got {progress!r}")


def check_progress(progress: Any) -> Progress:
    """``progress`` of a public call as its name (`progress_mode`); ``True``/``False`` give a
    `DeprecationWarning` naming the word to use.

    Args:
        progress: a name of `PROGRESS_MODES` (or a bool, deprecated).

    Returns:
        One of `PROGRESS_MODES`.

    Raises:
        ValueError: not a progress value.
    """
    mode = progress_mode(progress)
    if isinstance(progress, bool):
        warnings.warn(f"progress={progress} is deprecated; write progress={mode!r} (one of "
                      f"{', '.join(repr(m) for m in PROGRESS_MODES)})", DeprecationWarning, stacklevel=3)
    return mode


def tqdm_disable(progress: Progress) -> bool | None:
    """tqdm's ``disable`` for ``progress``: True (no bar), False (a bar), None (a bar only on a terminal)."""
    progress = progress_mode(progress)
    if progress == "never":
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
