"""The torch.distributed world: ranks, collectives, start-up checks and process-group set-up for the CLI.

[`TorchWorld`][TorchWorld] implements [`World`][similarity_plugins.networks.parallel.World] on an initialised default
process group (gloo on CPU, NCCL on CUDA). Collectives run on CPU tensors for gloo and on the rank's CUDA
device for NCCL; results come back on the CPU.
"""

from __future__ import annotations

import atexit
import datetime
import os
import sys
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from ..networks.parallel import CollectiveError, World, current_world

DEFAULT_TIMEOUT_S = 600


class TorchWorld(World):
    """Rank ``dist.get_rank()`` of ``dist.get_world_size()`` in the default process group (or in ``group``)."""

    def __init__(self, group: Any = None) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("TorchWorld needs an initialised process group (torch.distributed.init_process_group)")
        self.group = group
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self.backend = dist.get_backend(group)
        if self.backend == "nccl":
            self.comm_device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.comm_device = torch.device("cpu")

    def _all_gather_objects(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.size
        try:
            dist.all_gather_object(out, obj, group=self.group)
        except Exception as exc:  # noqa: BLE001 - a lost peer or a time-out
            raise CollectiveError(_lost_rank_message(exc)) from exc
        return out

    def _all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        buf = tensor.to(self.comm_device).contiguous()
        try:
            dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=self.group)
        except Exception as exc:  # noqa: BLE001
            raise CollectiveError(_lost_rank_message(exc)) from exc
        return buf.cpu()

    def counter(self, key: str) -> Any:
        """A counter in the default group's store (the TCPStore that torchrun or ``init_process_group`` set
        up): ``add(k)`` is one ``store.add``, atomic across ranks and nodes; no collective, no polling."""
        store = dist.distributed_c10d._get_default_store()
        name = f"similarity-plugins/{key}"

        def add(k: int) -> int:
            try:
                return int(store.add(name, int(k))) - int(k)
            except Exception as exc:  # noqa: BLE001 - the store's host (rank 0) is gone or timed out
                raise CollectiveError(_lost_rank_message(exc)) from exc

        return add

    def control(self) -> TorchWorld:
        """A gloo group of all ranks for ``compare``'s own messages (see [`World.control`][World.control]), created on the
        first call (collectively) and kept for the default group's lifetime."""
        default = dist.distributed_c10d._get_default_group()
        if _CONTROL.get("default") is not default:
            _CONTROL.update(default=default, group=dist.new_group(backend="gloo"))
        return TorchWorld(_CONTROL["group"])


_CONTROL: dict[str, Any] = {}


def _lost_rank_message(exc: BaseException) -> str:
    return (f"a collective operation failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            "another rank probably died or timed out; check every rank's log for the first error")


def is_distributed() -> bool:
    """True when torch.distributed is initialised with more than one rank."""
    return current_world().distributed


def rank() -> int:
    """This process's rank (0 outside torch.distributed)."""
    return current_world().rank


def world_size() -> int:
    """Number of ranks (1 outside torch.distributed)."""
    return current_world().size


def shard(n: int) -> range:
    """This rank's contiguous share of ``range(n)`` (empty when there are more ranks than items)."""
    return current_world().shard(n)


def check_same_everywhere(tag: str, value: Any, world: World | None = None) -> None:
    """Raise the same ``CollectiveError`` on every rank unless ``value`` (a hash, numbers...) is equal on all.

    See [`check_same`][similarity_plugins.networks.parallel.World.check_same]. A no-op in one process.
    """
    (world or current_world()).check_same(tag, value)


def launched_by_torchrun() -> bool:
    """True when the environment variables that torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK) are present."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def init_from_env(timeout_s: float | None = None) -> bool:
    """Initialise the default process group from torchrun's environment; returns True if it did.

    NCCL with ``cuda:LOCAL_RANK`` when CUDA is available, gloo otherwise. ``timeout_s`` (default
    ``$SIMILARITY_DIST_TIMEOUT`` or 600 s): how long a collective waits for a dead or stuck rank.
    Does nothing (returns False) outside torchrun or when a group is already initialised.
    """
    if not launched_by_torchrun() or not dist.is_available() or dist.is_initialized():
        return False
    timeout_s = float(timeout_s or os.environ.get("SIMILARITY_DIST_TIMEOUT", DEFAULT_TIMEOUT_S))
    timeout = datetime.timedelta(seconds=timeout_s)
    if torch.cuda.is_available():
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", timeout=timeout, device_id=torch.device("cuda", local))
    else:
        dist.init_process_group("gloo", timeout=timeout)
    return True


def default_device() -> str | None:
    """``cuda:LOCAL_RANK`` under torchrun with CUDA, else None (the caller's default)."""
    if launched_by_torchrun() and torch.cuda.is_available():
        return f"cuda:{int(os.environ['LOCAL_RANK'])}"
    return None


def finish() -> None:
    """Destroy the default process group if one is initialised (safe to call twice)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def end_rank_process(code: int = 0) -> NoReturn:
    """End a finished rank's process now: run the ``atexit`` handlers, flush stdout/stderr, ``os._exit(code)``.

    Call it last, after the outputs are written and [`finish`][finish] has destroyed the process group. It
    skips Python's finalisation: there a native thread (gloo, the autograd engine) that wants the GIL is
    unwound through C++ by CPython 3.11 and the rank aborts with "terminate called without an active
    exception" although its work is done (rare; seen once in CI). Never call it in a process that has
    more to do: nothing after it runs.
    """
    finish()
    atexit._run_exitfuncs()  # what a normal exit runs before finalisation (logging.shutdown, plugins' handlers)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
