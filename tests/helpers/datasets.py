"""A dataset that hides the tensors of the one it wraps, so that readers take their per-sample path."""

from __future__ import annotations

from torch.utils.data import Dataset


class NoTensors(Dataset):
    """The samples ``(x, int(y))`` of ``ds``, read one by one (no ``tensors`` attribute to slice)."""

    def __init__(self, ds: Dataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int):
        x, y = self.ds[i]
        return x, int(y)
