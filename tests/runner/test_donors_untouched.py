"""Every registered metric leaves both donors bit-identical: parameters, buffers (BatchNorm statistics),
``training`` flags and ``requires_grad`` flags, whatever state the user left them in."""

from __future__ import annotations

import torch

import similarity_plugins as sp
from similarity_plugins.networks.data import Data
from tests.helpers.models import assert_unchanged, snapshot, tiny_cnn

FAST = {"epochs": 1, "batch_size": 32, "iri_max_seeds": 32, "iri_steps": 30, "iri_batch_size": 16}


def _data(n_train: int = 96, n_test: int = 64) -> Data:
    g = torch.Generator().manual_seed(0)
    train = torch.utils.data.TensorDataset(torch.rand(n_train, 1, 16, 16, generator=g),
                                           torch.randint(0, 10, (n_train,), generator=g))
    test = torch.utils.data.TensorDataset(torch.rand(n_test, 1, 16, 16, generator=g),
                                          torch.randint(0, 10, (n_test,), generator=g))
    return Data(train=train, test=test)


def test_every_registered_metric_leaves_both_donors_bit_identical():
    front, end = tiny_cnn(seed=0), tiny_cnn(seed=1)
    front.train()                                   # a user mid-training: BatchNorm would update in train mode
    front.block1[0].weight.requires_grad_(False)    # mixed requires_grad flags
    end.eval()
    end.fc.bias.requires_grad_(False)
    before = snapshot(front), snapshot(end)
    metrics = sp.list_metrics()
    assert {"cka-linear", "stitch-slm", "iri-slm", "iri-fula"} <= set(metrics)
    report = sp.compare(front, end, ["block1", "block2"], _data(), metrics=metrics, options=FAST)
    # CCA and PWCCA refuse by design where n - 1 <= rank(front) + rank(end) (64 test rows, 512-wide block1)
    errors = {(r.metric, r.layer): r.error for r in report.results if r.error and "is degenerate here" not in r.error}
    assert not errors, errors
    assert {r.metric for r in report.results} == set(metrics)
    assert_unchanged(front, before[0])
    assert_unchanged(end, before[1])
    assert front.training and not end.training
