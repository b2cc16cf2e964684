"""Every kind of data goes into a store: paired image and text views give the grid's in-memory matrix, and an
extraction that fails leaves nothing a later read takes for an entry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import similarity_plugins as sp
from tests.helpers.failing import Failing

pytest.importorskip("transformers")

from tests.helpers.hf_models import byt5, tiny_gpt2, tiny_vit, zen_lines  # noqa: E402

LAYERS = {"img": ["layers.0", "layers.1"], "txt": ["h.0", "h.1"]}
METRICS = ["cka-linear", "procrustes", "rsa"]


def _setup():
    tok = byt5()
    models = {"img": sp.hf(tiny_vit()), "txt": sp.hf(tiny_gpt2(len(tok)), tokenizer=tok)}
    g = torch.Generator().manual_seed(0)
    data = sp.paired_data({"image": torch.rand(10, 3, 16, 16, generator=g), "text": zen_lines()[:10]})
    return models, data


def test_paired_data_in_a_store_gives_the_in_memory_matrix(tmp_path):
    models, data = _setup()
    memory = sp.compare_grid(models, LAYERS, data, METRICS, pairs="across")
    store = sp.extract(models, LAYERS, data, tmp_path / "a")  # the grid's batches: the same padded rows
    assert store.extracted == {"img": {"forwarded": 10, "found": 0}, "txt": {"forwarded": 10, "found": 0}}
    alone = sp.compare_grid(metrics=METRICS, pairs="across", store=tmp_path / "a")
    filled = sp.compare_grid(models, LAYERS, data, METRICS, pairs="across", store=tmp_path / "b")
    for metric in METRICS:
        want = memory.matrix(metric)
        assert np.isfinite(want[np.isfinite(want)]).any()
        np.testing.assert_allclose(alone.matrix(metric), want, atol=1e-10, equal_nan=True)
        np.testing.assert_allclose(filled.matrix(metric), want, atol=1e-10, equal_nan=True)


def test_a_failed_extraction_leaves_nothing_a_read_takes_for_an_entry(tmp_path):
    models, data = _setup()
    stops = Failing(data.test, 7, "the caption file went away")
    with pytest.raises(OSError, match="caption file"):
        sp.extract(models, LAYERS, sp.Data(test=stops), tmp_path, batch_size=3)
    store = sp.Store(tmp_path)
    assert store.models == []
    with pytest.raises(sp.StoreError, match="holds no model 'img'"):
        store.load("img", "layers.1")
    with pytest.raises(sp.StoreError, match="no complete entry"):
        sp.compare_grid(metrics=["cka-linear"], store=tmp_path)
    stops.armed = False
    store = sp.extract(models, LAYERS, sp.Data(test=stops), tmp_path, batch_size=3)
    assert store.extracted["img"] == {"forwarded": 4, "found": 6}  # the batches written before the failure kept
    assert store.extracted["txt"] == {"forwarded": 10, "found": 0}
    assert sorted(store.models) == ["img", "txt"]
