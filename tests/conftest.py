"""Shared test configuration: `slow` tests run only with ``--all`` (or ``-m``); GPU tests skip cleanly without
CUDA; trained tiny donors are built once a session.

No global state is changed at import. The session runs on one intra-op thread (``pytest_configure``); modules
that must hold one thread whatever the session does opt in with
``pytestmark = pytest.mark.usefixtures("one_torch_thread")`` (restored after the module); the session
donors are trained on one thread too and leave the caller's thread count and RNG state as they were.
Tests must not change the shared donors (they assert that donors are left bit-identical anyway). Every test
starts from global random generators (torch, NumPy, ``random``) seeded from its own node id (``seeded_rngs``), so
a test that draws without a generator of its own draws the same numbers in every run, in any order.
"""

from __future__ import annotations

import contextlib
import random
from typing import Iterator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from tests.helpers.seeding import seed_of_test

_LIMITS: list = []


def pytest_configure(config):
    """One intra-op thread for the whole session (torch, OpenMP and BLAS pools) and, unless set, for the
    interpreters the tests start: the suite's models are tiny, and on a 2-core machine, shared or not, extra
    threads spin-wait and cost more CPU than they save. The Hugging Face hub is off (``HF_HUB_OFFLINE=1``, read
    when huggingface_hub is first imported, after this): no test reaches the network."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from threadpoolctl import threadpool_limits

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):  # and for the interpreters tests start
        os.environ.setdefault(name, "1")
    torch.set_num_threads(1)
    _LIMITS.append(threadpool_limits(limits=1))  # kept for the session


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", default=False,
                     help="run the whole suite, `slow` tests included (by default they are left out)")


def pytest_collection_modifyitems(config, items):
    _deselect_slow_by_default(config, items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _deselect_slow_by_default(config, items) -> None:
    """``python -m pytest`` leaves out tests marked ``slow``; ``--all``, any ``-m`` expression or a test named by
    its node id (``path::name``) keeps them (docs/testing.md)."""
    if config.getoption("all") or config.option.markexpr or any("::" in str(arg) for arg in config.args):
        return
    slow = [item for item in items if "slow" in item.keywords]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if "slow" not in item.keywords]


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` intra-op threads, then restore the caller's count."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def seeded_rngs(request) -> None:
    """Seed torch's, NumPy's and ``random``'s global generators from the test's node id before it runs: its
    draws then do not depend on the tests that ran before it (the shuffled CI pass) or on luck."""
    seed = seed_of_test(request.node.nodeid)
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny models gain nothing from threads, and a shared machine punishes oversubscription."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="session")
def digits16():
    """sklearn digits at 16x16 (train/test ``Data``), made locally."""
    from similarity_plugins.datasets import digits_data

    return digits_data(size=16)


@pytest.fixture(scope="session")
def digits32():
    """sklearn digits at 32x32 (train/test ``Data``), made locally."""
    from similarity_plugins.datasets import digits_data

    return digits_data(size=32)


@pytest.fixture(scope="session")
def small_cnn_donors(digits32) -> tuple[nn.Module, nn.Module]:
    """Two SmallCNN (width 8) donors trained 3 epochs on 32x32 digits with seeds 0 and 1, in eval mode."""
    from similarity_plugins.apps.training import train_classifier
    from similarity_plugins.apps.zoo import SmallCNN

    models = []
    with torch_threads(1):
        for seed in (0, 1):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)  # initial weights independent of the tests that ran before
                model = SmallCNN(in_channels=1, num_classes=10, width=8)
            train_classifier(model, digits32.train, epochs=3, lr=3e-3, seed=seed, progress="never")
            models.append(model.eval())
    return models[0], models[1]


@pytest.fixture(scope="session")
def tiny_cnn16(digits16) -> nn.Module:
    """``tests.helpers.models.tiny_cnn`` trained 4 epochs on 16x16 digits (about 95% test accuracy), eval mode."""
    from tests.helpers.models import tiny_cnn

    model = tiny_cnn()
    x, y = digits16.train.tensors
    with torch_threads(1), torch.random.fork_rng(devices=[]):
        g = torch.Generator().manual_seed(0)
        opt = torch.optim.Adam(model.parameters(), 1e-2)
        for _ in range(4):
            perm = torch.randperm(len(x), generator=g)
            for i in range(0, len(x), 64):
                idx = perm[i:i + 64]
                loss = F.cross_entropy(model(x[idx]), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
    model.eval()
    xt, yt = digits16.test.tensors
    with torch.no_grad():
        accuracy = float((model(xt).argmax(1) == yt).float().mean())
    assert accuracy > 0.85, f"the tiny_cnn16 donor failed to train (test accuracy {accuracy:.2f})"
    return model


@pytest.fixture(scope="session")
def big_store(tmp_path_factory) -> tuple:
    """The out-of-core store of the bounded-memory tests (800 MB, tests/helpers/big_store.py), written once a
    session: ``(its folder, the reference linear CKA of its two entries)``. Tests only read it."""
    from tests.helpers.big_store import write_big_store

    folder = tmp_path_factory.mktemp("big-store")
    return folder, write_big_store(folder)


@pytest.fixture
def data():
    """A tiny random ``Data`` (64 train / 48 test images of 1x16x16, 10 classes), the same every time."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 1, 16, 16, generator=g)
    y = torch.randint(0, 10, (64,), generator=g)
    return sp.Data(train=TensorDataset(x, y), test=TensorDataset(x[:48], y[:48]))


@pytest.fixture
def fresh_manager(monkeypatch):
    """A private plugin manager, so tests can register metrics without leaking them."""
    from similarity_plugins.host import manager as manager_module
    from similarity_plugins.host.manager import build_plugin_manager

    pm = build_plugin_manager(load_entry_points=False)
    monkeypatch.setattr(manager_module, "_pm", pm)
    return pm
