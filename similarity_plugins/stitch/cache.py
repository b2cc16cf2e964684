"""What stitch training reads every epoch, computed once: the front's activations and B's targets.

[`TrainingCache`][TrainingCache] runs the front (A up to cut i) over the training inputs once, batched and
without gradients, and B's native path once for the targets an objective needs (B's activation at
cut j, B's logits, B's activations at the taps after j). Each array lives in memory, or in a
memory-mapped float32 file in a temporary directory when it is larger than ``limit_bytes``
([`ArrayStore`][ArrayStore]). One cache serves every objective trained on the same inputs.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Iterable

import numpy as np
import torch

from ..networks.model_state import model_device
from ..networks.split import SplitNetwork
from ..utils.progress import Progress, progress_bar


class ArrayStore:
    """``n`` float32 samples of one per-sample ``shape``, held in memory or memory-mapped on disk.

    ``memmapped`` says which. ``take(idx)`` returns a (len(idx), *shape) CPU tensor copy; ``tensor``
    the whole (n, *shape) tensor (memory-mapped pages load on access). The temporary file is deleted
    when the store is garbage collected.
    """

    def __init__(self, n: int, shape: tuple[int, ...], limit_bytes: float) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.nbytes = int(n) * math.prod(self.shape) * 4
        self.memmapped = self.nbytes > limit_bytes
        self._dir = None
        if self.memmapped:
            self._dir = tempfile.TemporaryDirectory(prefix="similarity-stitch-")
            path = os.path.join(self._dir.name, "cache.npy")
            self._array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(int(n), *self.shape))
            self.tensor = torch.from_numpy(self._array)
        else:
            self.tensor = torch.empty((int(n), *self.shape), dtype=torch.float32)

    def write(self, start: int, values: torch.Tensor) -> None:
        """Store ``values`` (B, *shape) at rows ``start .. start+B-1``."""
        self.tensor[start:start + len(values)] = values.detach().to("cpu", torch.float32)

    def take(self, idx: torch.Tensor) -> torch.Tensor:
        """Rows ``idx`` (int64, sorted for memory-mapped locality) as a new (len(idx), *shape) tensor."""
        return self.tensor[idx]

    def __len__(self) -> int:
        return len(self.tensor)


def subset_indices(n: int, limit: int | None, seed: int) -> torch.Tensor | None:
    """Sorted indices of a seeded random subset of ``limit`` of ``n`` samples, or ``None`` for all."""
    if limit is None or limit >= n:
        return None
    g = torch.Generator().manual_seed(int(seed))
    return torch.randperm(n, generator=g)[:limit].sort().values


class TrainingCache:
    """Cached per-sample arrays for training stitches from ``front`` (A at cut i) to ``end`` (B at cut j)
    on inputs ``x`` (N, ...) with labels ``y`` (N,) (or ``None`` when no objective needs labels).

    ``ensure(names)`` computes what is missing among ``"front"``, ``"end_cut"``, ``"end_logits"``,
    ``"end_taps"`` in one batched no-grad pass each for the front and B's native path.
    ``targets(idx, names)`` gathers a batch. ``front_shape``, ``end_shape`` are per-sample shapes and
    ``num_classes`` is B's output size (from a 2-sample probe when not cached yet).

    ``rows``: cache only these rows (one rank's contiguous share of the N inputs under torch.distributed);
    readers still take global indices, which must lie in ``rows``. ``len(cache)`` is N either way.
    """

    def __init__(self, front: SplitNetwork, end: SplitNetwork, x: torch.Tensor, y: torch.Tensor | None, *,
                 device: torch.device | None = None, batch_size: int = 256, limit_bytes: float = 2**30,
                 progress: Progress = "never", rows: range | None = None) -> None:
        if not isinstance(x, torch.Tensor) or x.ndim < 2:
            raise TypeError("training inputs must be a tensor (N, ...) with one sample per row")
        if len(x) == 0:
            raise ValueError("the training set is empty: stitching needs training samples")
        if y is not None and len(y) != len(x):
            raise ValueError(f"{len(x)} training inputs but {len(y)} labels; they must match")
        self.front_net, self.end_net = front, end
        self.x = x
        self.rows = rows if rows is not None else range(len(x))
        self._offset = self.rows.start
        self.y = None if y is None else torch.as_tensor(y).long().cpu()
        self.device = device or model_device(front.model)
        self.batch_size = int(batch_size)
        self.limit_bytes = float(limit_bytes)
        self.progress = progress
        self.stores: dict[str, ArrayStore | tuple[ArrayStore, ...]] = {}
        self._probe: tuple[tuple[int, ...], tuple[int, ...], int] | None = None
        self.passes = {"front": 0, "end": 0}  # full passes run (for tests and benchmarks)

    def __len__(self) -> int:
        return len(self.x)

    # -- shapes ------------------------------------------------------------------------------------

    def _probe_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        if self._probe is None:
            x = self.x[:2].to(self.device)
            with torch.no_grad():
                a = self.front_net.front(x)
                b, logits, _ = self.end_net.native(x)
            self._probe = (tuple(a.shape[1:]), tuple(b.shape[1:]), int(logits.shape[1]))
        return self._probe

    @property
    def front_shape(self) -> tuple[int, ...]:
        """Per-sample shape of A's activation at cut i, e.g. (C, H, W) or (T, D)."""
        return self._probe_shapes()[0]

    @property
    def end_shape(self) -> tuple[int, ...]:
        """Per-sample shape of B's activation at cut j."""
        return self._probe_shapes()[1]

    @property
    def num_classes(self) -> int:
        """Size of B's logits (number of classes)."""
        return self._probe_shapes()[2]

    # -- filling -----------------------------------------------------------------------------------

    def ensure(self, names: Iterable[str]) -> None:
        """Compute and store the arrays in ``names`` that are not stored yet (see class docstring)."""
        names = set(names) - {"labels"}
        unknown = names - {"front", "end_cut", "end_logits", "end_taps"}
        if unknown:
            raise ValueError(f"unknown cached array(s) {sorted(unknown)}")
        if "front" in names and "front" not in self.stores:
            self._fill_front()
        missing = sorted(n for n in names - {"front"} if n not in self.stores)
        if missing:
            if "end_logits" not in self.stores and "end_logits" not in missing:
                missing.append("end_logits")  # (N, K): nearly free, and saves SLM a pass later
            self._fill_end(missing)

    def _batches(self) -> Iterable[tuple[int, torch.Tensor]]:

        starts = range(self.rows.start, self.rows.stop, self.batch_size)
        for start in progress_bar(starts, progress=self.progress, desc="caching", leave=False):
            stop = min(start + self.batch_size, self.rows.stop)
            yield start - self._offset, self.x[start:stop].to(self.device)

    def _fill_front(self) -> None:
        store = ArrayStore(len(self.rows), self.front_shape, self.limit_bytes)
        with torch.no_grad():
            for start, xb in self._batches():
                a = self.front_net.front(xb)
                if not torch.isfinite(a).all():
                    raise ValueError(
                        f"the front's activations at layer {self.front_net.layer!r} contain NaN or Inf "
                        f"(training samples from {start}); check the front model's weights and the inputs"
                    )
                store.write(start, a)
        self.passes["front"] += 1
        self.stores["front"] = store

    def _fill_end(self, names: list[str]) -> None:
        n = len(self.rows)
        new: dict[str, object] = {}
        with torch.no_grad():
            for start, xb in self._batches():
                cut, logits, taps = self.end_net.native(xb)
                if "end_cut" in names:
                    new.setdefault("end_cut", ArrayStore(n, tuple(cut.shape[1:]), self.limit_bytes)).write(start, cut)
                if "end_logits" in names:
                    new.setdefault("end_logits", ArrayStore(n, tuple(logits.shape[1:]), self.limit_bytes)).write(start, logits)
                if "end_taps" in names:
                    stores = new.setdefault("end_taps", tuple(ArrayStore(n, tuple(t.shape[1:]), self.limit_bytes) for t in taps))
                    for s, t in zip(stores, taps):
                        s.write(start, t)
        self.passes["end"] += 1
        self.stores.update(new)

    # -- reading -----------------------------------------------------------------------------------

    def front(self, idx: torch.Tensor) -> torch.Tensor:
        """A's activations at cut i for samples ``idx``: (len(idx), *front_shape) float32 on the CPU."""
        self.ensure(["front"])
        return self.stores["front"].take(self._local(idx))

    def targets(self, idx: torch.Tensor, names: Iterable[str], device: torch.device | None = None) -> dict:
        """The cached targets ``names`` (see `NEEDS`) for samples ``idx``, on ``device``."""
        names = tuple(names)
        self.ensure(names)
        device = device or torch.device("cpu")
        out: dict[str, object] = {}
        for name in names:
            if name == "labels":
                if self.y is None:
                    raise ValueError("this objective needs labels, but the training set has none")
                out[name] = self.y[idx].to(device)
            elif name == "end_taps":
                out[name] = tuple(s.take(self._local(idx)).to(device) for s in self.stores[name])
            else:
                out[name] = self.stores[name].take(self._local(idx)).to(device)
        return out

    def end_cut(self, idx: torch.Tensor) -> torch.Tensor:
        """B's native activations at cut j for samples ``idx`` (sorted), (len(idx), *end_shape) on the CPU.

        Read from the cache when it holds them; otherwise computed for these samples only.
        """
        if "end_cut" in self.stores:
            return self.stores["end_cut"].take(self._local(idx))
        chunks = []
        with torch.no_grad():
            for start in range(0, len(idx), self.batch_size):
                xb = self.x[idx[start:start + self.batch_size]].to(self.device)
                chunks.append(self.end_net.native(xb)[0].detach().to("cpu", torch.float32))
        return torch.cat(chunks)

    def _local(self, idx: torch.Tensor) -> torch.Tensor:
        """Global sample indices -> rows of the stores (raises when a sample is outside this cache's rows)."""
        if self._offset == 0 and len(self.rows) == len(self.x):
            return idx
        if len(idx) and (int(idx.min()) < self.rows.start or int(idx.max()) >= self.rows.stop):
            raise IndexError(f"samples {int(idx.min())}..{int(idx.max())} are outside this cache's rows {self.rows}")
        return idx - self._offset

    def memmapped(self) -> list[str]:
        """Names of the arrays held in memory-mapped files."""
        out = []
        for name, s in self.stores.items():
            stores = s if isinstance(s, tuple) else (s,)
            if any(st.memmapped for st in stores):
                out.append(name)
        return out
