"""The data a comparison runs on: a train split (to fit stitches, seed IRIs) and a test split (to score)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
)


@dataclass
class Data:
    """Train and test splits for a comparison.

    Each split is a ``torch.utils.data.Dataset`` or a ``DataLoader`` yielding ``(x, y)`` pairs, where
    ``x`` is an input tensor (for images: ``(C, H, W)`` float in ``[0, 1]`` per sample, normalisation
    belongs inside the model) and ``y`` an integer class label. Either split may be ``None`` when no
    selected metric needs it (CKA needs only ``test``; stitching needs both).
    """

    train: Dataset | DataLoader | None = None
    test: Dataset | DataLoader | None = None

    def __post_init__(self) -> None:
        for name in ("train", "test"):
            _check_split_container(getattr(self, name), name)

    def split(self, name: str) -> Dataset | DataLoader:
        """Return the split called ``name`` ("train" or "test"), or raise a clear error if it is missing."""
        if name not in ("train", "test"):
            raise ValueError(f"unknown split {name!r}; expected 'train' or 'test'")
        value = getattr(self, name)
        if value is None:
            raise ValueError(
                f"this metric needs a {name} split, but Data.{name} is None; "
                f"pass Data(train=..., test=...) with a {name} dataset"
            )
        return value


def _check_split_container(split: Any, name: str) -> None:
    """Refuse a split given as arrays rather than as a dataset: a tensor (its rows would be read as (x, y)
    pairs) or a tuple/list of arrays (``(x, y)``: read as a dataset of two samples)."""
    if isinstance(split, (torch.Tensor, np.ndarray)):
        raise TypeError(f"Data.{name} is an array of shape {tuple(split.shape)}, not a dataset of (x, y) pairs; "
                        f"pass TensorDataset(x, y)")
    if isinstance(split, (tuple, list)) and split and all(isinstance(v, (torch.Tensor, np.ndarray)) for v in split):
        shapes = ", ".join(str(tuple(v.shape)) for v in split)
        raise TypeError(f"Data.{name} is a {type(split).__name__} of {len(split)} arrays ({shapes}), which would be "
                        f"read as {len(split)} samples; pass TensorDataset(x, y) (torch.utils.data)")


class BadData(ValueError):
    """A split whose values cannot be used: NaN/Inf inputs, labels that are not class indices (the message says
    which split and sample)."""


def check_batch(x: torch.Tensor, y: torch.Tensor, first: int = 0, what: str = "the data split") -> None:
    """Raise `BadData` unless the float inputs ``x`` (B, ...) are finite and the labels ``y`` (B,) are integer
    class indices >= 0. ``first``: the index of the batch's first sample (for the message)."""
    if x.is_floating_point() or x.is_complex():
        finite = torch.isfinite(x.reshape(len(x), -1)).all(1) if x.ndim else torch.isfinite(x).reshape(1)
        if not bool(finite.all()):
            bad = (~finite).nonzero().flatten()
            raise BadData(f"{what} has NaN or Inf inputs (sample {first + int(bad[0])}, and {len(bad) - 1} more in "
                          "its batch); clean the data or leave those samples out")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise BadData(f"{what} has {y.dtype} labels (sample {first}: {y.reshape(-1)[0].item()!r}); labels must be "
                      "integer class indices: convert them with .long() if they are whole numbers")
    if y.dim() != 1 or (x.dim() and len(y) != len(x)):
        raise BadData(f"{what} has labels of shape {tuple(y.shape)} for {len(x)} inputs (sample {first}); give one "
                      "integer label per sample, shape (B,)")
    if y.numel() and int(y.min()) < 0:
        raise BadData(f"{what} has a negative label ({int(y.min())}); labels must be class indices 0 .. classes-1")


class NotOneInputSpace(TypeError):
    """A split of text or of several views given to a metric that needs one input tensor for both models."""


#: Every pass over a split runs with the random generators seeded with this, so that two passes (the front's and
#: the end's) draw the same shuffled order, the same random transforms and the same worker seeds.
PASS_SEED = 0


def iterate_batches(split: Dataset | DataLoader, batch_size: int = 256,
                    what: str = "the data split") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield ``(x, y)`` batches of a split, the same samples in the same order on every pass.

    A Dataset is read in order; a DataLoader keeps its batch size, collate function and workers, but reads in
    order (a shuffling sampler is replaced by the dataset's order, a ``SubsetRandomSampler`` by its indices in
    the order given; `ordered_loader`), with fresh workers. Each pass runs with the random generators
    (torch, NumPy, ``random``) seeded with `PASS_SEED` and restored afterwards, so random transforms
    draw alike on every pass (`check_repeatable` warns about them, and refuses a dataset that returns
    other inputs for the same index even then).

    ``x``: (B, ...) float tensor; ``y``: (B,) int64 tensor. Raises ``ValueError`` for an empty split and
    `BadData` (naming ``what``) for NaN/Inf inputs, labels that are not integer class indices, or
    labels whose shape is not one per sample.
    """
    from ..utils.rng import isolated_rng, seed_all

    check_repeatable(split, what)
    loader = ordered_loader(split, batch_size)
    seen = 0
    with isolated_rng():
        seed_all(PASS_SEED)
        for batch in loader:
            if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                raise TypeError("data must yield (x, y) pairs; got a batch of type " + type(batch).__name__)
            x, y = as_inputs(batch[0]), torch.as_tensor(batch[1])
            for view in (x.values() if isinstance(x, dict) else (x,)):
                check_batch(view if isinstance(view, torch.Tensor) else torch.zeros(len(view)), y, seen, what)  # labels
            seen += len(y)
            yield x, y.long()
    if seen == 0:
        raise ValueError(f"{what} is empty: it yielded no samples")


def as_inputs(x: Any) -> Any:
    """One batch's inputs as the models read them: a tensor, a list of strings (text), or a dict of such views
    (paired data: ``{"image": (B, C, H, W), "text": [B strings]}``)."""
    if isinstance(x, dict):
        return {name: as_inputs(view) for name, view in x.items()}
    if isinstance(x, (list, tuple)) and x and all(isinstance(v, str) for v in x):
        return list(x)
    return torch.as_tensor(x)


def to_device(x: Any, device: torch.device) -> Any:
    """A batch's inputs (see `as_inputs`) with their tensors on ``device`` (strings stay as they are)."""
    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=True)
    if isinstance(x, dict):
        return {name: to_device(view, device) for name, view in x.items()}
    return x


def ordered_loader(split: Dataset | DataLoader, batch_size: int = 256) -> DataLoader:
    """A new DataLoader over ``split`` that yields its samples in one fixed order (see `iterate_batches`).

    A sampler other than the standard ones (sequential, random, subset-random) is kept when it yields the same
    order twice, and refused (``ValueError``) otherwise: the two models would see other rows.
    """
    if not isinstance(split, DataLoader):
        return DataLoader(split, batch_size=batch_size, shuffle=False)
    if isinstance(split.dataset, IterableDataset):
        return split  # a stream: its order is its own (documented in docs/reliability.md)
    kw = {"num_workers": split.num_workers, "collate_fn": split.collate_fn, "pin_memory": split.pin_memory,
          "timeout": split.timeout, "worker_init_fn": split.worker_init_fn,
          "multiprocessing_context": split.multiprocessing_context,
          "generator": torch.Generator().manual_seed(PASS_SEED)}
    if split.num_workers > 0:
        kw["prefetch_factor"] = split.prefetch_factor
    batch_sampler = split.batch_sampler
    if batch_sampler is not None and type(batch_sampler) is not BatchSampler:
        _same_order(batch_sampler, "batch sampler")
        return DataLoader(split.dataset, batch_sampler=batch_sampler, **kw)
    sampler = _in_order(split.sampler, split.dataset)
    if split.batch_size is None:
        return DataLoader(split.dataset, batch_size=None, sampler=sampler, **kw)
    return DataLoader(split.dataset, batch_size=split.batch_size, sampler=sampler, drop_last=split.drop_last, **kw)


def _in_order(sampler: Any, dataset: Any) -> Any:
    if isinstance(sampler, (SequentialSampler, RandomSampler)):
        return SequentialSampler(dataset)
    if isinstance(sampler, SubsetRandomSampler):
        return list(sampler.indices)
    _same_order(sampler, "sampler")
    return sampler


def _same_order(sampler: Any, what: str) -> None:
    from ..utils.rng import isolated_rng, seed_all

    orders = []
    for _ in range(2):
        with isolated_rng():
            seed_all(PASS_SEED)
            orders.append([list(i) if isinstance(i, (list, tuple)) else i for i in iter(sampler)])
    if orders[0] != orders[1]:
        raise ValueError(f"the DataLoader's {what} ({type(sampler).__name__}) yields another order on every pass, "
                         "so the two models would see different rows; pass a loader without it (or the dataset)")


def check_repeatable(split: Dataset | DataLoader, what: str = "the data split") -> None:
    """Read the first sample of ``split`` (a map-style dataset, or a DataLoader's) twice under one seed and once
    under another. Raises `BadData` when the same index gives other inputs under the same seed (the
    inputs change between passes whatever the random generators say: the models' rows could not correspond);
    warns (``UserWarning`` naming "random") when only the seed changes them (a random transform: every pass of
    this package draws alike, so the rows correspond, but they are augmented inputs)."""
    from ..utils.rng import isolated_rng, seed_all

    dataset = split.dataset if isinstance(split, DataLoader) else split
    if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__getitem__") or split_size(dataset) in (None, 0):
        return
    reads = []
    for seed in (PASS_SEED, PASS_SEED, PASS_SEED + 1):
        with isolated_rng():
            seed_all(seed)
            try:
                sample = dataset[0]
                reads.append(torch.as_tensor(sample[0] if isinstance(sample, (tuple, list)) else sample))
            except Exception:  # noqa: BLE001 - an unusual dataset: the pass itself reports what is wrong
                return
    if not _equal(reads[0], reads[1]):
        raise BadData(f"{what} returns other inputs for the same index on every read (sample 0 differed between "
                      "two reads with the random generators seeded alike), so the two models would not see the "
                      "same rows; make the dataset return the same input for the same index")
    if not _equal(reads[0], reads[2]):
        warnings.warn(f"{what} applies a random transform (sample 0 changes with the random seed): both models see "
                      "the same draws, but of augmented inputs; use a deterministic transform to compare on the data "
                      "as it is", UserWarning, stacklevel=3)


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same shape, dtype and values, a NaN equal to a NaN in the same place (NaN inputs are refused later,
    for what they are)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(torch.equal(a, b)) or (a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all()))


def load_all(split: Dataset | DataLoader, batch_size: int = 256,
             what: str = "the data split") -> tuple[torch.Tensor, torch.Tensor]:
    """Materialise a whole split as ``(X, Y)``: X (N, ...) float, Y (N,) int64, on the CPU (checked as
    `iterate_batches` does; ``what`` names the split in errors)."""
    xs, ys = [], []
    for x, y in iterate_batches(split, batch_size, what):
        if not isinstance(x, torch.Tensor):
            raise NotOneInputSpace(f"{what} holds {'text' if isinstance(x, list) else 'several views per sample'}, "
                                   "not one input tensor: this metric runs both models on one input tensor or "
                                   "optimises inputs (IRIs need a continuous input space, which token ids are not; "
                                   "image stitching feeds one input tensor to both models; two language models of "
                                   "one tokenizer stitch with stitch-slm or stitch-dm); use activation-only "
                                   "metrics (cka-*, procrustes, rsa, cca, ...) on text and paired data")
        xs.append(x.detach().cpu())
        ys.append(y.detach().cpu())
    return torch.cat(xs), torch.cat(ys)


def split_size(split: Any) -> int | None:
    """Number of samples in a split if known without iterating (len of a Dataset or a loader's dataset)."""
    if isinstance(split, DataLoader):
        split = split.dataset
    try:
        return len(split)
    except TypeError:
        return None


def split_digest(split: Any, batch_size: int = 256, what: str = "the data split") -> str | None:
    """A digest (hex, `fast_hash`) of a split's content: every input and label, in the order `iterate_batches` reads them
    (dtype, shape and exact bytes). None for no split; ``"unreadable: <error>"`` for a split that cannot be
    read (the metrics that read it report the error). One pass over the data, no model."""
    from ..utils.digest import fast_hash, update_inputs_digest, update_tensor_digest

    if split is None:
        return None
    h = fast_hash(b"split-digest-2")
    try:
        for k, (x, y) in enumerate(iterate_batches(split, batch_size, what)):
            update_inputs_digest(h, f"x{k}", x)
            update_tensor_digest(h, f"y{k}", y)
    except Exception as exc:  # noqa: BLE001 - the metrics reading this split report the error in their rows
        return f"unreadable: {type(exc).__name__}: {exc}"
    return h.hexdigest()
