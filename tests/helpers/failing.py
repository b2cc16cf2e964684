"""A dataset that fails on one sample, to stop an extraction part way (the store's resume and cleanup tests)."""

from __future__ import annotations

from torch.utils.data import Dataset


class Failing(Dataset):
    """The samples of ``base``; reading sample ``fail_at`` raises ``OSError(message)`` while ``armed`` is true."""

    def __init__(self, base: Dataset, fail_at: int, message: str = "disk went away") -> None:
        self.base, self.fail_at, self.message, self.armed = base, fail_at, message, True

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int):
        if self.armed and i == self.fail_at:
            raise OSError(self.message)
        return self.base[i]
