"""Rows of stored entries paired by sample, never by position.

Before any work on two or more store entries (a grid from a store, ``score`` or ``functional.streamed`` on
entries), `align` compares their sample ids and, where both have them, the digests of each sample's inputs:
the same samples in another order are read in one common order (the first entry's), different samples or
different data are refused naming both entries and what differs, and ``shared=True`` keeps the samples every
entry holds, saying how many each loses. `AlignedRows` is an entry read in the common order: a permutation of
its rows applied on read, chunk by chunk.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .paths import StoreError
from .store import StoredArray


class AlignedRows:
    """The rows of a stored entry in a common order: row ``i`` is the entry's row ``index[i]`` (all rows in their
    own order when ``index`` is None). Shape (n, D); slicing and ``np.asarray`` read only the chunks needed."""

    def __init__(self, array: StoredArray, index: np.ndarray | None = None) -> None:
        self.array, self.index = array, index
        self.shape = (len(array) if index is None else len(index), array.shape[1])
        self.dtype = array.dtype

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def name(self) -> str:
        """``"model:layer"`` of the entry."""
        return self.array.name

    @property
    def nbytes(self) -> int:
        """Bytes of the rows read whole."""
        return self.shape[0] * self.shape[1] * self.dtype.itemsize

    def take(self, rows: Any) -> AlignedRows:
        """The rows ``rows`` (an index array or a slice of this view's rows), as another view."""
        picked = np.arange(len(self))[rows]
        return AlignedRows(self.array, picked if self.index is None else self.index[picked])

    def __getitem__(self, rows: Any) -> np.ndarray:
        if self.index is None:
            return self.array[rows]
        picked = self.index[rows]
        return self.array[picked] if np.ndim(picked) else self.array[int(picked)]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)

    def __repr__(self) -> str:
        order = "its own order" if self.index is None else "a common order"
        return f"AlignedRows({self.name!r}, shape={self.shape}, {order})"


@dataclass
class Aligned:
    """What `align` found: one view per entry (in the order given), the samples kept and dropped per entry."""

    views: list[AlignedRows]
    kept: int
    dropped: dict[str, int]

    def summary(self) -> dict:
        """``{"kept": n, "dropped": {entry: count}}`` for a report's meta."""
        return {"kept": self.kept, "dropped": dict(self.dropped)}


def _positions(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Where each of ``wanted`` (all present in ``ids``) sits in ``ids``."""
    order = np.argsort(ids, kind="stable")
    return order[np.searchsorted(ids, wanted, sorter=order)]


def _differ(a: StoredArray, b: StoredArray, ids_a: np.ndarray, ids_b: np.ndarray) -> str:
    only_a, only_b = np.setdiff1d(ids_a, ids_b), np.setdiff1d(ids_b, ids_a)
    shared = len(ids_a) - len(only_a)
    first = "; ".join(f"first id only in {e.name}: {int(o[0])}" for e, o in ((a, only_a), (b, only_b)) if len(o))
    return (f"the entries {a.name} and {b.name} hold different samples: {len(ids_a)} and {len(ids_b)} sample ids, "
            f"{shared} of them in both ({first})")


def align(arrays: Sequence[StoredArray], *, shared: bool = False) -> Aligned:
    """The entries ``arrays`` read in one common order, checked to hold the same samples of the same data.

    Args:
        arrays: store entries (`Store.load`), two or more (one is returned as it is).
        shared: keep the sample ids every entry holds (in the first entry's order) instead of refusing entries whose
            ids differ; a ``UserWarning`` says how many samples each entry loses.

    Returns:
        `Aligned`: a view per entry whose row ``i`` is the same sample in every view.

    Raises:
        StoreError: an entry that repeats a sample id; entries with different ids (unless ``shared``) or none in
            common; entries whose inputs differ for one sample id (extracted from different data): each names
            both entries and what differs.
    """
    ids = [a.sample_ids() for a in arrays]
    for a, i in zip(arrays, ids):
        if len(np.unique(i)) != len(i):
            raise StoreError(f"the entry {a.name} repeats sample ids; each row must be its own sample: {a.store.path}")
    common = ids[0]
    for a, i in zip(arrays[1:], ids[1:]):
        if len(i) == len(common) and np.array_equal(i, common):
            continue
        if shared:
            common = common[np.isin(common, i)]
        elif len(i) != len(ids[0]) or not np.isin(i, ids[0]).all():
            raise StoreError(_differ(arrays[0], a, ids[0], i) + "; pass shared_samples=True (--shared-samples) to "
                             "keep the samples both hold")
    if not len(common):
        raise StoreError("the entries " + ", ".join(a.name for a in arrays) + " have no sample id in common")
    views = []
    for a, i in zip(arrays, ids):
        index = None if len(i) == len(common) and np.array_equal(i, common) else _positions(i, common)
        views.append(AlignedRows(a, index))
    _check_inputs(arrays, views)
    dropped = {a.name: len(i) - len(common) for a, i in zip(arrays, ids)}
    if any(dropped.values()):
        lost = ", ".join(f"{count} of {name}" for name, count in dropped.items() if count)
        warnings.warn(f"kept the {len(common)} samples every entry holds; dropped {lost}", UserWarning, stacklevel=2)
    return Aligned(views, len(common), dropped)


def _check_inputs(arrays: Sequence[StoredArray], views: list[AlignedRows]) -> None:
    """Refuse entries whose inputs differ for one sample id (both made by ``extract``, which digests each sample)."""
    known = [(a, v) for a, v in zip(arrays, views) if a.manifest["samples"].get("digests")]
    if len(known) < 2:
        return
    base, base_view = known[0]
    fingerprint = base.manifest.get("data_fingerprint")
    reference = None
    for a, v in known[1:]:
        same_rows = v.index is None and base_view.index is None and len(a) == len(base)
        if same_rows and fingerprint is not None and a.manifest.get("data_fingerprint") == fingerprint:
            continue  # the same samples, in the same order, of the same inputs
        if reference is None:
            reference = _ordered(base.sample_digests(), base_view.index)
        mine = _ordered(a.sample_digests(), v.index)
        bad = np.flatnonzero((mine != reference).any(axis=1))
        if len(bad):
            first = int(base.sample_ids()[bad[0] if base_view.index is None else base_view.index[bad[0]]])
            raise StoreError(f"the entries {base.name} and {a.name} were made from different data: the inputs of "
                             f"{len(bad)} of their {len(v)} shared sample ids differ (first: id {first}); extract "
                             "both from the same data")


def _ordered(digests: np.ndarray, index: np.ndarray | None) -> np.ndarray:
    return digests if index is None else digests[index]


def as_entries(*values: Any) -> list[StoredArray] | None:
    """The values as store entries when every one is a `StoredArray`, else None (arrays are paired by position)."""
    return list(values) if values and all(isinstance(v, StoredArray) for v in values) else None
