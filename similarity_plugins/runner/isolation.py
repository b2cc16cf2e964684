"""What the metrics of one ``compare`` call run on, and the wall-clock limit of ``compare(..., timeout=S)``.

`Donors` holds the donors the plugins see, their `DonorGuard` and the
[`Context`][context.Context]. Without a timeout the plugins get the donors themselves (or the copies moved to
``device``). With a timeout they get private deep copies, made once per call, and each metric call runs in a
daemon thread (`call_with_timeout`). A call that overruns gets a `MetricTimeout` row; its thread
cannot be stopped (Python has no safe way to kill a thread), so it is abandoned: it keeps running, on the
private copies and the old context, until it returns or the process ends. `Donors.renew` then gives
the later metrics fresh copies and a new context that holds only what was cached before the timed-out call,
so nothing the abandoned thread does can reach them, except two things it shares with the whole process:
CPU time and the global random generators (later metrics are seeded as usual, but a thread still drawing
from torch's or NumPy's global generator can change their draws; the row says so in its warnings).
"""

from __future__ import annotations

import copy
import math
import threading
from typing import Any, Callable

import torch
from torch import nn

from ..networks.context import Context
from .guard import DonorGuard

_THREAD = "similarity-metric"  # the name prefix of the threads metric calls run in under a timeout


class MetricTimeout(TimeoutError):
    """A metric call that did not finish within ``compare``'s ``timeout`` (its thread was abandoned)."""


def check_timeout(timeout: Any) -> float | None:
    """``timeout`` as a finite positive number of seconds, or None; ``ValueError`` naming the option otherwise
    (``inf`` too: no limit is ``None``)."""
    if timeout is None:
        return None
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
            or not math.isfinite(timeout)):
        raise ValueError(f"timeout: expected a finite positive number of seconds (None for no limit), got {timeout!r}")
    return float(timeout)


def call_with_timeout(fn: Callable[[], Any], seconds: float, what: str) -> Any:
    """``fn()`` in a daemon thread, waiting at most ``seconds``; its value, or its exception re-raised here.

    Raises `MetricTimeout` naming ``what`` when the call is still running after ``seconds``; the
    thread is left running. The thread runs with the caller's grad mode (grad mode is per thread).
    """
    outcome: dict[str, Any] = {}
    grad = torch.is_grad_enabled()

    def work() -> None:
        try:
            with torch.set_grad_enabled(grad):
                outcome["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=work, name=f"{_THREAD} {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        late = MetricTimeout(f"{what} did not finish within the timeout of {seconds:g} s; its thread was abandoned "
                             "(it runs on private copies of the donors, which later metrics do not see)")
        late.thread = thread
        raise late
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def abandoned_threads() -> list[threading.Thread]:
    """The metric threads of timed-out calls that are still running, in this process (any ``compare`` call).

    A process that ends while one runs must end without Python's finalisation (``os._exit`` after the
    ``atexit`` handlers, as the CLI does): there the thread, inside a torch kernel, would be unwound through C++
    and the process would abort (SIGABRT, exit code 134) instead of exiting with its own code."""
    return [t for t in threading.enumerate() if t.name.startswith(_THREAD + " ") and t.is_alive()
            and t is not threading.current_thread()]


class Donors:
    """The donors and context the metrics of one ``compare`` call see (see the module docstring).

    ``front`` / ``end``: the models to run (already on ``device``); ``private``: give the plugins deep copies
    (used with a timeout). Attributes ``front``, ``end``, ``guard``, ``ctx`` and ``timeout`` (seconds or None);
    ``abandoned``: the threads of timed-out calls.
    """

    def __init__(self, front: nn.Module, end: nn.Module, ctx: Context, timeout: float | None = None) -> None:
        self._sources = (front, end)
        self.timeout = timeout
        if timeout is not None:  # caches of this call's own: an abandoned thread must not write into a caller's context
            ctx = ctx.derive(keep=_everything)
        self.ctx = ctx
        self.abandoned: list[threading.Thread] = []
        self.halted: str | None = None
        # under torchrun with a timeout, rows are agreed on a channel of their own (an abandoned call may sit in a
        # collective of the services' channel); created here, at the same point on every rank
        self.world = ctx.world.control() if timeout is not None and ctx.world.distributed else ctx.world
        self._make()

    def _make(self) -> None:
        front, end = self._sources
        if self.timeout is not None:
            front_copy = copy.deepcopy(front)
            front, end = front_copy, front_copy if end is self._sources[0] else copy.deepcopy(end)
        self.front, self.end = front, end
        self.guard = DonorGuard({"front": front, "end": end})

    def after_agreement(self, result: Any, failed_types: tuple[str, ...]) -> None:
        """Under torchrun: once any rank's call timed out (``failed_types``, the class names of the failed ranks'
        exceptions, holds `MetricTimeout`), stop running metrics on every rank: the abandoned thread may still be
        in a collective on the services' channel, where later metrics would pair up with it. The later rows get
        `halted` as their error."""
        if self.world.distributed and MetricTimeout.__name__ in failed_types and self.halted is None:
            self.halted = (f"not run: {result.metric!r} at layer {result.layer} timed out under torchrun, and its "
                           "abandoned call may still be inside a collective; rerun without the slow metric or with a "
                           "longer --timeout")

    @property
    def running(self) -> int:
        """How many abandoned threads are still running."""
        return sum(t.is_alive() for t in self.abandoned)

    def renew(self, memo_before: set, late: MetricTimeout) -> None:
        """After a timed-out call (``late``): fresh private copies and a new context (`Context.derive`) holding the
        entries that existed before that call (``memo_before``: their keys), with their write counters, and the
        readers of stored activations; the abandoned thread keeps the old ones."""
        self.abandoned.append(getattr(late, "thread", None) or threading.current_thread())
        readers = set(self.ctx.loaders)
        self.ctx = self.ctx.derive(keep=lambda key: key in memo_before or key in readers)
        self._make()


def _everything(_key: Any) -> bool:
    return True


def _mentions(key: Any, ident: int) -> bool:
    """True when a memo key (a tuple, possibly nested) holds the model id ``ident``."""
    if isinstance(key, tuple):
        return any(_mentions(part, ident) for part in key)
    return type(key) is int and key == ident


def forget_changed_donors(ctx: Context, models: tuple[nn.Module, ...]) -> list[str]:
    """With a context reused across ``compare`` calls: drop the memo entries of a model whose tensors or module
    settings ([`module_digest`][similarity_plugins.networks.parallel.module_digest]) changed since the call that
    cached them. The in-memory caches
    are keyed by the model's identity, so without this a model changed in place between two calls (new weights,
    a BatchNorm ``eps``) would get the results of its old self. Returns the roles of the models that changed.
    Cost: one digest (XXH3-128) of each model's tensors per call."""
    from ..networks.parallel import module_digest

    changed = []
    for i, model in enumerate(dict.fromkeys(models)):
        key = ("donor-digest", id(model))
        digest = module_digest([model])
        if ctx.memo.get(key, digest) != digest:
            for k in [k for k in ctx.memo if _mentions(k, id(model))]:
                del ctx.memo[k]
            changed.append(("front", "end")[min(i, 1)])
        ctx.memo[key] = digest
    return changed
