"""NaN inputs in the first sample are refused as NaN inputs, not as a dataset that changes between reads (the
repeatability check reads sample 0 twice, and NaN != NaN)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins import Data
from similarity_plugins.networks.data import BadData, check_repeatable
from tests.helpers.models import tiny_cnn


def _images(nan_at: int | None) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(24, 1, 16, 16, generator=g), torch.randint(0, 10, (24,), generator=g)
    if nan_at is not None:
        x[nan_at, 0, 2, 5] = float("nan")
    return TensorDataset(x, y)


def test_a_nan_in_sample_0_is_repeatable():
    check_repeatable(_images(0))  # the same NaN in the same place on both reads: no BadData


@pytest.mark.parametrize("split", ["train", "test"])
def test_nan_test_inputs_are_refused_for_what_they_are(split):
    clean, bad = _images(None), _images(0)
    data = Data(train=bad if split == "train" else clean, test=bad if split == "test" else clean)
    model = tiny_cnn().eval()
    metric = "cka-linear" if split == "test" else "stitch-dm"
    options = {"epochs": 1, "batch_size": 8} if metric == "stitch-dm" else None
    row = sp.compare(model, model, "block2", data, metric, options=options)[metric]
    assert row.error and "NaN or Inf inputs (sample 0" in row.error, row.error
    assert "other inputs for the same index" not in row.error


def test_a_dataset_that_changes_between_reads_is_still_refused():
    class Drifting(TensorDataset):
        reads = 0

        def __getitem__(self, i):
            Drifting.reads += 1
            x, y = super().__getitem__(i)
            return x + Drifting.reads, y

    base = _images(None)
    with pytest.raises(BadData, match="other inputs for the same index"):
        check_repeatable(Drifting(*base.tensors))
