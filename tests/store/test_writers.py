"""Two writers never mix an entry: each manifest is made from the chunks its own run wrote or checked."""

from __future__ import annotations

import multiprocessing as mp
import os

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.networks.activations import extract_layers
from tests.helpers.failing import Failing
from tests.helpers.models import tiny_cnn

LAYERS = ["block2", "fc"]


def _data(seed: int, n: int = 24) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.rand(n, 1, 16, 16, generator=g), torch.zeros(n, dtype=torch.long))


def _runs(seeds) -> dict[int, list[np.ndarray]]:
    model = tiny_cnn(seed=0)
    return {s: [a.reshape(len(a), -1).numpy() for a in extract_layers(model, LAYERS, _data(s), batch_size=2)[:-1]]
            for s in seeds}


def _writer(path: str, seed: int, barrier) -> None:
    torch.set_num_threads(1)  # a forked child must not start the parent's thread pool
    barrier.wait()
    sp.extract({"m": tiny_cnn(seed=0)}, LAYERS, sp.Data(test=_data(seed)), path, batch_size=2)
    os._exit(0)


def test_two_processes_on_different_data_leave_one_run_whole(tmp_path):
    runs = _runs((1, 2))
    ctx = mp.get_context("fork")  # real processes; fork keeps the test fast (no re-import)
    folder = os.fspath(tmp_path / "s")
    sp.Store.create(folder)
    barrier = ctx.Barrier(2)  # both start at once: their batches interleave
    procs = [ctx.Process(target=_writer, args=(folder, seed, barrier)) for seed in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = sp.Store(folder)
    # each entry (a model's layer) holds one run's rows whole; the layers are committed one by one, so when both
    # runs finish at once two layers may come from different runs, which their data fingerprints then say
    owners = []
    for k, layer in enumerate(LAYERS):
        got = np.asarray(store.load("m", layer))
        owner = [s for s, want in runs.items() if np.array_equal(got, want[k])]
        assert len(owner) == 1, f"the entry of {layer} mixes the two runs' rows"
        owners.append(owner[0])
    prints = [store.entry("m", layer)["data_fingerprint"] for layer in LAYERS]
    assert all((owners[i] == owners[j]) == (prints[i] == prints[j]) for i in range(len(LAYERS)) for j in range(i))
    again = sp.extract({"m": tiny_cnn(seed=0)}, LAYERS, sp.Data(test=_data(owners[0])), folder, batch_size=2)
    if len(set(owners)) == 1:
        assert again.extracted["m"]["forwarded"] == 0  # every chunk of the run that won is there, under its digest
    for k, layer in enumerate(LAYERS):  # and the store now holds that run's rows in every layer
        np.testing.assert_array_equal(np.asarray(sp.Store(folder).load("m", layer)), runs[owners[0]][k])


def test_a_run_resumed_after_another_run_on_other_data_is_whole(tmp_path):
    runs = _runs((1, 2))
    model = tiny_cnn(seed=0)
    first = Failing(_data(1), 5, "stopped")
    with pytest.raises(OSError, match="stopped"):
        sp.extract({"m": model}, LAYERS, sp.Data(test=first), tmp_path, batch_size=2)
    other = sp.extract({"m": model}, LAYERS, sp.Data(test=_data(2)), tmp_path, batch_size=2)
    assert all(np.array_equal(np.asarray(other.load("m", layer)), want) for layer, want in zip(LAYERS, runs[2]))
    first.armed = False
    store = sp.extract({"m": model}, LAYERS, sp.Data(test=first), tmp_path, batch_size=2)
    assert store.extracted["m"] == {"forwarded": 20, "found": 4}  # its own 2 batches were kept beside the others
    for layer, want in zip(LAYERS, runs[1]):
        np.testing.assert_array_equal(np.asarray(store.load("m", layer)), want)
