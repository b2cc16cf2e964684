"""compare_grid(store=...) and score from store entries equal the in-memory path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from tests.helpers.models import tiny_cnn

METRICS = ["cka-debiased", "procrustes", "rsa"]


def _data(n: int = 48) -> sp.Data:
    g = torch.Generator().manual_seed(3)
    return sp.Data(test=TensorDataset(torch.rand(n, 1, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)))


def _scores(grid: sp.Grid) -> dict:
    return {(r.metric, r.details["front_model"], r.details["end_model"], r.layer): r.score for r in grid.report.results}


def _close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if a[key] is None or b[key] is None:  # a metric that refuses these shapes refuses them on both paths
            assert a[key] is b[key], key
            continue
        # the same float32 activations reach the same float64 measures: equal up to summation order
        assert abs(a[key] - b[key]) <= 1e-10, (key, a[key], b[key])


def test_grid_from_the_store_equals_the_grid_from_the_models(tmp_path):
    models = {"a": tiny_cnn(seed=0), "b": tiny_cnn(seed=1)}
    layers = ["block3", "fc"]
    data = _data()
    direct = sp.compare_grid(models, layers, data, METRICS, pairs="across")
    filled = sp.compare_grid(models, layers, data, METRICS, pairs="across", store=tmp_path)
    assert sum(v is not None for v in _scores(direct).values()) == 24
    _close(_scores(direct), _scores(filled))
    alone = sp.compare_grid(metrics=METRICS, pairs="across", store=tmp_path)
    _close(_scores(direct), _scores(alone))
    assert alone.meta["store"] == str(tmp_path)
    chosen = sp.compare_grid(layers={"a": ["fc"], "b": ["fc"]}, metrics=["cka-linear"], pairs="across", store=tmp_path)
    assert len(chosen.report.results) == 2


def test_score_takes_store_entries(tmp_path):
    models = {"a": tiny_cnn(seed=0), "b": tiny_cnn(seed=1)}
    store = sp.extract(models, ["block3"], _data(), tmp_path)
    x, y = store.load("a", "block3"), store.load("b", "block3")
    from_store = sp.score(x, y, metrics=["cka-linear", "procrustes"])
    from_arrays = sp.score(np.asarray(x), np.asarray(y), metrics=["cka-linear", "procrustes"])
    for r1, r2 in zip(from_store, from_arrays):
        assert r1.score == pytest.approx(r2.score, abs=1e-12)


def test_store_only_grid_refuses_unknown_entries_and_model_metrics(tmp_path):
    sp.extract({"a": tiny_cnn()}, ["fc"], _data(), tmp_path)
    with pytest.raises(sp.StoreError, match="holds: a"):
        sp.compare_grid(layers={"z": ["fc"]}, store=tmp_path)
    with pytest.raises(sp.StoreError, match="no layer 'fx'"):
        sp.compare_grid(layers={"a": ["fx"]}, store=tmp_path)
    with pytest.raises(TypeError, match="store="):
        sp.compare_grid()


def test_cache_bytes_bounds_the_activations_a_grid_from_the_store_holds(tmp_path, fresh_manager):
    """Node activations read from the store are held like derived quantities: read on first use, dropped least
    recently used beyond ``cache_bytes`` and read again when needed; the values do not change."""
    from similarity_plugins import register_metric
    from tests.helpers.metrics import observed_cka

    held: list[int] = []  # the bytes of activations the context holds when the metric runs

    def record_held(context) -> None:
        held.append(sum(v.numel() * v.element_size() for k, v in context.memo.items()
                        if isinstance(k, tuple) and k[0] == "activations"))

    register_metric(observed_cka(record_held), "held-cka")
    models = {"a": tiny_cnn(seed=0), "b": tiny_cnn(seed=1), "c": tiny_cnn(seed=2)}
    store = sp.extract(models, ["block3", "fc"], _data(), tmp_path)
    node = 48 * int(np.prod(store.load("a", "block3").shape[1:])) * 4  # the largest node: (48, D) float32
    reads: list[tuple[str, str]] = []
    from similarity_plugins.store.rows import AlignedRows

    read = AlignedRows.__array__

    def counted(self, *args, **kwargs):
        reads.append((self.array.model, self.array.layer))
        return read(self, *args, **kwargs)

    AlignedRows.__array__ = counted
    try:
        whole = sp.compare_grid(metrics=["held-cka", "cka-linear"], store=tmp_path)
        assert sorted(reads) == sorted(set(reads)) and len(reads) == 6  # every node read once, when first used
        most = max(held)
        held.clear()
        reads.clear()
        bounded = sp.compare_grid(metrics=["held-cka", "cka-linear"], store=tmp_path, cache_bytes=2 * node)
    finally:
        AlignedRows.__array__ = read
    assert max(held) <= 2 * node < most  # never more than the budget (two nodes: one cell) once it is set
    assert len(reads) > 6  # nodes dropped and read again
    for metric in ("held-cka", "cka-linear"):
        assert np.array_equal(whole.matrix(metric), bounded.matrix(metric))
