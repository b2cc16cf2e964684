"""The "world" a computation runs in: one process (the default) or many ranks (torch.distributed).

Core and the services (cka, stitch, iri) shard their work through a [`World`][World]; they never import
``torch.distributed`` themselves. [`current_world`][current_world] returns the single-process world unless
``torch.distributed`` is initialised, in which case it asks the factory that
``similarity_plugins.distributed`` registers (`register_world_factory`) for the torch.distributed
implementation. Core therefore knows no backend: the hook is generic, and the layering holds.

Fault protocol (every collective in the services follows it): the local work between two collectives runs
inside [`World.exchange`][World.exchange] or [`World.reduce_sum`][World.reduce_sum], which catch a local exception and send it
along
with the data. Every rank then raises the same [`CollectiveError`][CollectiveError], naming the failing rank and its
message, so no rank is left waiting in a collective that the failing rank will never reach.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch import nn

from ..utils.digest import fast_hash, update_tensor_digest
from .fingerprint import fingerprinted_tensors, update_module_configs


class CollectiveError(RuntimeError):
    """An exception on one rank, raised identically on every rank (the message names the rank).

    Attributes:
        error_types: the class names of the failed ranks' exceptions, in rank order (empty when the ranks
            disagreed rather than failed).
    """

    def __init__(self, message: str, error_types: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.error_types = tuple(error_types)


def _status(error: BaseException | None) -> tuple[str, str] | None:
    """What a rank tells the others of its failure: its exception's class name and message (None: it succeeded)."""
    return None if error is None else (type(error).__name__, str(error))


def shard_range(n: int, rank: int, size: int) -> range:
    """Contiguous share of ``range(n)`` for ``rank`` of ``size``: ``range(ceil(n*rank/size), ceil(n*(rank+1)/size))``.

    Shares differ in length by at most one, the longer ones first; with more ranks than items the last
    ranks get empty shares.
    """
    return range(-(-n * rank // size), -(-n * (rank + 1) // size))


class World:
    """A single process: ``rank`` 0 of ``size`` 1. Every collective is the identity.

    A subclass for a launcher (``similarity_plugins.distributed.TorchWorld`` for ``torch.distributed``) supplies two
    raw collectives, gathering one object from every rank and summing a tensor over the ranks; the fault protocol
    around them (every rank learns that one failed, and why) lives here.
    """

    rank: int = 0
    size: int = 1

    @property
    def distributed(self) -> bool:
        """True when more than one rank shares the work."""
        return self.size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0 (the rank that writes files)."""
        return self.rank == 0

    def shard(self, n: int) -> range:
        """This rank's contiguous share of ``range(n)`` (see `shard_range`)."""
        return shard_range(int(n), self.rank, self.size)

    # -- primitives a distributed world overrides -----------------------------------------------
    def _all_gather_objects(self, obj: Any) -> list[Any]:
        return [obj]

    def _all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def counter(self, key: str) -> Callable[[int], int]:
        """A counter that every rank shares under ``key`` (start 0): ``add(k)`` adds ``k`` atomically and returns
        the value before the addition (``add(0)`` reads it). Not a collective: ranks call it independently, e.g.
        to take the next work items. One process: a local counter."""
        total = [0]

        def add(k: int) -> int:
            before = total[0]
            total[0] += int(k)
            return before

        return add

    # -- the fault-tolerant collectives -----------------------------------------------------------
    def exchange(self, compute: Callable[[], Any], phase: str) -> list[Any]:
        """Run ``compute()`` here and gather every rank's value, in rank order (a list of ``size``).

        An exception in ``compute`` on any rank raises [`CollectiveError`][CollectiveError] on every rank (chained
        to the original on the rank where it happened). Values travel pickled: keep them small or tensors.
        """
        error: BaseException | None = None
        value = None
        try:
            value = compute()
        except Exception as exc:  # noqa: BLE001 - reported on every rank below
            error = exc
        if not self.distributed:
            if error is not None:
                raise error
            return [value]
        gathered = self._all_gather_objects((_status(error), value if error is None else None))
        self._raise_if_failed([s for s, _ in gathered], phase, error)
        return [v for _, v in gathered]

    def reduce_sum(self, compute: Callable[[], torch.Tensor], like: torch.Tensor, phase: str) -> torch.Tensor:
        """Sum of ``compute()`` over the ranks (a tensor shaped and typed like ``like``), on every rank.

        One all-reduce carries the values and a failure flag; when a rank failed, the messages are then
        gathered and every rank raises the same [`CollectiveError`][CollectiveError].
        """
        error: BaseException | None = None
        try:
            value = compute()
        except Exception as exc:  # noqa: BLE001
            error, value = exc, torch.zeros_like(like)
        if not self.distributed:
            if error is not None:
                raise error
            return value
        flat = torch.cat([value.detach().reshape(-1).to(torch.float64), torch.tensor([0.0 if error is None else 1.0],
                                                                                      dtype=torch.float64)])
        total = self._all_reduce(flat)
        if float(total[-1]) > 0:
            self._raise_if_failed([s for s in self._all_gather_objects(_status(error))], phase, error)
        return total[:-1].reshape(like.shape).to(like.dtype)

    def _raise_if_failed(self, statuses: list[tuple[str, str] | None], phase: str,
                         error: BaseException | None) -> None:
        failed = [(rank, s) for rank, s in enumerate(statuses) if s is not None]
        if not failed:
            return
        rank, (kind, text) = failed[0]
        more = f" (and {len(failed) - 1} other rank(s))" if len(failed) > 1 else ""
        message = f"rank {rank} of {self.size} failed{more}: {kind}: {text}"  # the same text on every rank
        collective = CollectiveError(message, tuple(s[0] for _, s in failed))
        if error is not None and not isinstance(error, CollectiveError):
            raise collective from error
        raise collective

    def control(self) -> World:
        """A world for ``compare``'s own small messages (agreeing on a row) on a channel of its own, so that a
        metric thread abandoned inside a collective cannot pair up with them; every rank must call it at the
        same point (a distributed world creates the channel collectively). In one process: ``self``."""
        return self

    def gather_rows(self, rows: torch.Tensor, phase: str) -> torch.Tensor:
        """Concatenate every rank's ``rows`` (n_r, ...) along dim 0 in rank order; empty shares allowed."""
        if not self.distributed:
            return rows
        parts = self.exchange(lambda: rows.detach().cpu(), phase)
        return torch.cat(parts).to(rows.device)

    def check_same(self, tag: str, value: Any) -> None:
        """Raise the same [`CollectiveError`][CollectiveError] on every rank unless ``value`` is equal on all ranks.

        ``tag`` names what is compared (e.g. "front/end weights"); the message lists the ranks that
        differ from rank 0. A no-op in one process.
        """
        if not self.distributed:
            return
        values = self.exchange(lambda: value, f"checking {tag}")
        differing = [r for r, v in enumerate(values) if v != values[0]]
        if differing:
            raise CollectiveError(
                f"{tag} differ between ranks: rank(s) {differing} disagree with rank 0 ({values[differing[0]]!r} "
                f"vs {values[0]!r}); every rank must load the same models (weights) and the same data: check "
                "the paths and seeds, and that no rank trains or modifies its copy")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, size={self.size})"


def module_digest(modules: Iterable[nn.Module]) -> str:
    """A digest (hex, `fast_hash`) over every parameter and buffer of ``modules`` (names, shapes, dtypes, bytes;
    each tensor once, `fingerprinted_tensors`) and each submodule's class and non-tensor configuration (`module_config`)."""
    h = fast_hash()
    for i, module in enumerate(modules):
        for name, t in fingerprinted_tensors(module):
            update_tensor_digest(h, f"{i}|{name}", t)
        update_module_configs(h, ((f"{i}|{name}", m) for name, m in module.named_modules()))
    return h.hexdigest()




_SINGLE = World()
_FACTORY: list[Callable[[], World]] = []


def register_world_factory(factory: Callable[[], World]) -> None:
    """Install the function that builds the world when ``torch.distributed`` is initialised (one only)."""
    _FACTORY[:] = [factory]


def current_world() -> World:
    """The torch.distributed world when a process group is initialised (and has > 1 rank), else one process."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        if not _FACTORY:
            raise RuntimeError("torch.distributed is initialised but no world factory is registered; "
                               "import similarity_plugins (which registers it) before calling compare")
        return _FACTORY[0]()
    return _SINGLE


def split_shard(split: Any, rows: range) -> Any:
    """The samples ``rows`` of a Dataset, or of a map-style DataLoader's dataset (same batch size and collate).

    Returns None when the split cannot be indexed (an ``IterableDataset``): the caller then runs it whole.
    """
    from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

    base = split.dataset if isinstance(split, DataLoader) else split
    if isinstance(base, IterableDataset) or not isinstance(base, Dataset) or not hasattr(base, "__len__"):
        return None
    part = Subset(base, list(rows))
    if isinstance(split, DataLoader):
        return DataLoader(part, batch_size=split.batch_size or 1, shuffle=False, collate_fn=split.collate_fn,
                          num_workers=split.num_workers)
    return part
