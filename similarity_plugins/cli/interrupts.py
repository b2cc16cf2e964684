"""A stopped run: SIGTERM raised as Ctrl-C is, and the exit codes of a run stopped either way (130, 143)."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so that the finished rows are written the same way (exit 143)."""


def interrupted_code(exc: BaseException) -> int:
    """The exit code of a run stopped by ``exc``: 143 for SIGTERM (`Terminated`), 130 for Ctrl-C."""
    return 143 if isinstance(exc, Terminated) else 130


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` (a ``KeyboardInterrupt``) in the main thread, as
    Ctrl-C does; the previous handler comes back afterwards. Elsewhere than the main thread: nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated(f"terminated by signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
