"""extract(): one forward per batch into the store, nothing twice, never stale, resumable."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.networks.activations import extract_layers
from tests.helpers.failing import Failing
from tests.helpers.models import assert_unchanged, snapshot, tiny_cnn

LAYERS = ["block1", "block2", "fc"]


class Counting(nn.Module):
    """A model that counts its forward passes (in a private attribute: not part of the fingerprint)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.net = tiny_cnn(seed=seed)
        self._calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._calls += 1
        return self.net(x)


def _data(n: int = 40, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.rand(n, 1, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g))


def _layers(_model: str) -> list[str]:
    return [f"net.{name}" for name in LAYERS]


def test_extract_writes_what_the_forward_loop_gives_and_runs_once(tmp_path):
    model, data = Counting(), _data()
    before = snapshot(model)
    store = sp.extract({"a": model}, _layers("a"), sp.Data(test=data), tmp_path, batch_size=16)
    assert model._calls == 3  # 40 samples in batches of 16: one forward per batch for all three layers
    expected = extract_layers(model.net, LAYERS, data, batch_size=16)
    for layer, want in zip(_layers("a"), expected):
        got = store.load("a", layer)
        assert got.shape == (40, want[0].numel())
        np.testing.assert_array_equal(np.asarray(got), want.reshape(40, -1).numpy())
    entry = store.entry("a", "net.block1")
    assert entry["layer_shape"] == [8, 8, 8] and entry["produced_by"]["model_class"] == "Counting"
    assert store.layers("a") == _layers("a")
    model._calls = 0
    sp.extract({"a": model}, _layers("a"), sp.Data(test=data), tmp_path, batch_size=16)
    assert model._calls == 0  # a second extract of the same model and data runs no forward pass
    assert_unchanged(model, before)


def test_a_changed_weight_is_never_served_old_activations(tmp_path):
    model, data = Counting(), _data()
    sp.extract({"a": model}, ["net.fc"], sp.Data(test=data), tmp_path, batch_size=16)
    old = np.asarray(sp.Store(tmp_path).load("a", "net.fc"))
    with torch.no_grad():
        model.net.fc.weight[0, 0] += 1.0
    model._calls = 0
    store = sp.extract({"a": model}, ["net.fc"], sp.Data(test=data), tmp_path, batch_size=16)
    assert model._calls == 3
    new = np.asarray(store.load("a", "net.fc"))
    assert not np.array_equal(new, old)
    np.testing.assert_array_equal(new, extract_layers(model.net, ["fc"], data, batch_size=16)[0].numpy())


def test_changed_data_is_forwarded_again(tmp_path):
    model = Counting()
    sp.extract({"a": model}, ["net.fc"], sp.Data(test=_data(seed=0)), tmp_path, batch_size=16)
    model._calls = 0
    store = sp.extract({"a": model}, ["net.fc"], sp.Data(test=_data(seed=1)), tmp_path, batch_size=16)
    assert model._calls == 3
    want = extract_layers(model.net, ["fc"], _data(seed=1), batch_size=16)[0].numpy()
    np.testing.assert_array_equal(np.asarray(store.load("a", "net.fc")), want)


def test_an_interrupted_extraction_resumes_with_only_the_missing_batches(tmp_path):
    model, data = Counting(), Failing(_data(), fail_at=35)
    with pytest.raises(OSError, match="disk went away"):
        sp.extract({"a": model}, _layers("a"), sp.Data(test=data), tmp_path, batch_size=16)
    assert model._calls == 2
    with pytest.raises(sp.StoreError, match="no complete entry|holds no model"):
        sp.Store(tmp_path).load("a", "net.fc")  # a partial entry is never served
    data.armed, model._calls = False, 0
    store = sp.extract({"a": model}, _layers("a"), sp.Data(test=data), tmp_path, batch_size=16)
    assert model._calls == 1  # only the batch that failed
    expected = extract_layers(model.net, LAYERS, _data(), batch_size=16)
    for layer, want in zip(_layers("a"), expected):
        np.testing.assert_array_equal(np.asarray(store.load("a", layer)), want.reshape(40, -1).numpy())


def test_extract_refuses_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="batch_size"):
        sp.extract({"a": tiny_cnn()}, ["fc"], sp.Data(test=_data()), tmp_path, batch_size=0)
    with pytest.raises(ValueError, match="test split|Data.train is None"):
        sp.extract({"a": tiny_cnn()}, ["fc"], sp.Data(test=_data()), tmp_path, split="train")
    with pytest.raises(Exception, match="nope"):
        sp.extract({"a": tiny_cnn()}, ["nope"], sp.Data(test=_data()), tmp_path)


def test_a_wrapped_language_model_is_stored_with_its_pooling(tmp_path):
    from tests.helpers.hf_models import byt5, tiny_gpt2, zen_lines

    tok = byt5()
    gpt = tiny_gpt2(len(tok))
    data = sp.text_data(zen_lines()[:8])
    mean, last = sp.hf(gpt, tokenizer=tok), sp.hf(gpt, tokenizer=tok, pooling="last")
    store = sp.extract({"mean": mean, "last": last}, ["h.1"], data, tmp_path, batch_size=4)
    assert store.entry("mean", "h.1")["pooling"] == "mean" and store.entry("last", "h.1")["pooling"] == "last"
    assert store.entry("mean", "h.1")["key"] != store.entry("last", "h.1")["key"]
    want = extract_layers(last, ["h.1"], data.test, batch_size=4)[0]   # in memory: batches made by length
    assert np.allclose(np.asarray(store.load("last", "h.1")), want.numpy(), rtol=0, atol=1e-6)   # float32 rounding
