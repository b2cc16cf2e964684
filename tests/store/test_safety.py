"""Every write stays inside the store: names, paths read from manifests, links, folders that lead outside."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import similarity_plugins as sp
from similarity_plugins.store.paths import quote_name
from tests.helpers.models import tiny_cnn


def _rows(seed: int = 0, n: int = 12) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def _files(folder) -> set[str]:
    return {os.path.relpath(os.path.join(root, f), folder) for root, _, files in os.walk(folder) for f in files}


def test_dot_names_stay_inside_and_never_touch_the_store_files(tmp_path):
    root = tmp_path / "s"
    store = sp.Store.create(root)
    marker = (root / "store.json").read_text()
    for model, layer in [("..", "l"), (".", "l"), ("m", ".."), ("m", "."), (".hidden", "l"), ("a/../..", "b/c")]:
        store.put(model, layer, _rows())
        np.testing.assert_array_equal(np.asarray(store.load(model, layer)), _rows())
    assert (root / "store.json").read_text() == marker
    assert sorted(os.listdir(tmp_path)) == ["s"]  # nothing written beside the store
    assert all(not name.startswith(".") for name in os.listdir(root))
    assert sorted(store.models) == sorted(["..", ".", "m", ".hidden", "a/../.."])
    assert sorted(store.layers("m")) == [".", ".."]


def test_names_that_cannot_be_folders_are_refused_and_quoting_never_merges_two(tmp_path):
    store = sp.Store.create(tmp_path)
    for bad in ("", "a\x00b", "\udc80", "x" * 300, 7):
        with pytest.raises(sp.StoreError, match="name"):
            store.put(bad, "l", _rows())
    with pytest.raises(sp.StoreError, match="name must not be empty"):
        sp.extract({"": tiny_cnn()}, ["fc"], sp.Data(test=_digits()), tmp_path)
    names = ["a/b", "a%2Fb", "a%252Fb", ".x", "%2Ex", "A", "a", "\u00e9", "e\u0301"]
    assert len({quote_name(n, "model") for n in names}) == len(names)
    for k, name in enumerate(names):
        store.put(name, "l", _rows(k))
    for k, name in enumerate(names):
        np.testing.assert_array_equal(np.asarray(store.load(name, "l")), _rows(k))


def _digits():
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.rand(8, 1, 16, 16, generator=g), torch.zeros(8, dtype=torch.long))


def _edit_manifest(root, model: str, layer: str, **changes) -> None:
    path = root / model / layer / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest))


def test_paths_read_from_a_manifest_are_checked_before_use(tmp_path):
    outside = tmp_path / "outside"
    (outside / "x").mkdir(parents=True)
    (outside / "x" / "keep.txt").write_text("precious")
    root = tmp_path / "deep" / "s"
    store = sp.Store.create(root)
    store.put("m", "l", _rows(0))
    _edit_manifest(root, "m", "l", key="../../../outside/x")
    with pytest.raises(sp.StoreError, match="manifest.*no valid key"):
        store.load("m", "l")
    store.put("m", "l", _rows(1))  # replaces the damaged entry: removes nothing outside its folder
    assert (outside / "x" / "keep.txt").read_text() == "precious"
    np.testing.assert_array_equal(np.asarray(store.load("m", "l")), _rows(1))
    manifest = json.loads((root / "m" / "l" / "manifest.json").read_text())
    for bad in ("../../../outside/x/keep.txt", "/etc/passwd", manifest["chunks"][0]["file"].replace("-", "/", 1)):
        _edit_manifest(root, "m", "l", chunks=[{**manifest["chunks"][0], "file": bad}])
        with pytest.raises(sp.StoreError, match="not a chunk file"):
            store.load("m", "l")
    _edit_manifest(root, "m", "l", chunks=manifest["chunks"], samples={"ids": "../../ids.npy", "digests": None})
    with pytest.raises(sp.StoreError, match="sample files"):
        store.load("m", "l")


def test_no_file_is_written_through_a_link(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    root = tmp_path / "s"
    store = sp.Store.create(root)
    store.put("m", "l", _rows(0))
    key_folder = root / "m" / "l" / store.entry("m", "l")["key"]
    chunk = key_folder / store.entry("m", "l")["chunks"][0]["file"]
    planted = [root / "m" / "l" / "manifest.json", root / "store.json", chunk]
    for path in planted:
        path.unlink()
        path.symlink_to(outside)
    os.unlink(root / "store.json")
    sp.Store.create(root)  # the marker is written again, the link replaced
    store.put("m", "l", _rows(0))  # the same rows: the same chunk name, written over the planted link
    assert outside.read_text() == "precious"
    assert not any(p.is_symlink() for p in planted)
    np.testing.assert_array_equal(np.asarray(store.load("m", "l")), _rows(0))


def test_a_folder_that_leads_outside_is_refused_naming_it(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    root = tmp_path / "s"
    store = sp.Store.create(root)
    store.put("ok", "l", _rows())
    os.symlink(outside, root / "m")
    with pytest.raises(sp.StoreError, match=r"s/m is a symbolic link to .*elsewhere, outside the store"):
        store.put("m", "l", _rows())
    with pytest.raises(sp.StoreError, match="outside the store"):
        sp.extract({"m": tiny_cnn()}, ["fc"], sp.Data(test=_digits()), root)
    (root / "ok" / "x").symlink_to(outside)  # a layer folder
    with pytest.raises(sp.StoreError, match="outside the store"):
        store.put("ok", "x", _rows())
    with pytest.raises(sp.StoreError, match="outside the store"):
        store.models  # noqa: B018 - listing reads through the folders too
    assert os.listdir(outside) == []
    inside = root / "alias"
    os.symlink(root / "ok", inside)  # a link that stays inside the store is followed
    os.unlink(root / "m")
    os.unlink(root / "ok" / "x")
    assert sorted(sp.Store(root).models) == ["ok"]


def test_extract_replaces_planted_links_and_forwards_what_they_hid(tmp_path):
    outside = tmp_path / "outside.npy"
    np.save(outside, np.zeros((4, 10), np.float32))
    data, model = sp.Data(test=_digits()), tiny_cnn()
    store = sp.extract({"m": model}, ["fc"], data, tmp_path / "s", batch_size=4)
    want = np.asarray(store.load("m", "fc"))
    entry = store.entry("m", "fc")
    chunk = tmp_path / "s" / "m" / "fc" / entry["key"] / entry["chunks"][1]["file"]
    chunk.unlink()
    chunk.symlink_to(outside)
    (tmp_path / "s" / "m" / "fc" / "manifest.json").unlink()
    (tmp_path / "s" / "m" / "fc" / "manifest.json").symlink_to(outside)
    store = sp.extract({"m": model}, ["fc"], data, tmp_path / "s", batch_size=4)
    assert store.extracted == {"m": {"forwarded": 4, "found": 4}}  # the linked chunk is not taken for the store's
    assert not chunk.is_symlink() and np.load(outside).sum() == 0
    np.testing.assert_array_equal(np.asarray(store.load("m", "fc")), want)
