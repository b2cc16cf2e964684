"""The activation store: layout, put/load, checksums, two writers."""

from __future__ import annotations

import json
import multiprocessing as mp
import os

import numpy as np
import pytest

from similarity_plugins.store.store import CorruptChunk, Store, StoreError


def _rows(seed: int, n: int = 50, d: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def test_put_load_round_trip_from_chunks(tmp_path):
    store = Store.create(tmp_path / "s")
    x = _rows(0)
    arr = store.put("a", "layer1.0", (x[i:i + 16] for i in range(0, 50, 16)), sample_ids=np.arange(100, 150))
    assert arr.shape == (50, 7) and arr.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(arr), x)
    np.testing.assert_array_equal(arr[3:40:5], x[3:40:5])
    np.testing.assert_array_equal(arr[[49, 0, 17]], x[[49, 0, 17]])
    assert [start for start, _ in arr.chunks()] == [0, 16, 32, 48]
    again = Store(tmp_path / "s")
    assert again.models == ["a"] and again.layers("a") == ["layer1.0"]
    np.testing.assert_array_equal(again.sample_ids("a", "layer1.0"), np.arange(100, 150))
    entry = again.entry("a", "layer1.0")
    assert entry["shape"] == [50, 7] and entry["dtype"] == "float32" and len(entry["chunks"]) == 4
    assert entry["produced_by"] == {"by": "Store.put"}


def test_layout_readable_without_the_package(tmp_path):
    store = Store.create(tmp_path)
    x = _rows(1)
    store.put("m/1", "fc", x)
    folder = tmp_path / "m%2F1" / "fc"
    manifest = json.loads((folder / "manifest.json").read_text())
    parts = [np.load(folder / manifest["key"] / c["file"]) for c in manifest["chunks"]]
    np.testing.assert_array_equal(np.concatenate(parts), x)


def test_replacing_an_entry_removes_the_old_chunks(tmp_path):
    store = Store.create(tmp_path)
    store.put("a", "l", _rows(0))
    old_key = store.entry("a", "l")["key"]
    store.put("a", "l", _rows(1))
    assert store.entry("a", "l")["key"] != old_key
    assert not (tmp_path / "a" / "l" / old_key).exists()
    np.testing.assert_array_equal(np.asarray(store.load("a", "l")), _rows(1))


def test_flipped_byte_is_named_and_never_served(tmp_path):
    store = Store.create(tmp_path)
    store.put("a", "l", (_rows(0)[i:i + 20] for i in range(0, 50, 20)))
    entry = store.entry("a", "l")
    path = tmp_path / "a" / "l" / entry["key"] / entry["chunks"][1]["file"]
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0x01
    path.write_bytes(bytes(raw))
    arr = store.load("a", "l")
    np.testing.assert_array_equal(arr[:20], _rows(0)[:20])  # the intact chunk still reads
    with pytest.raises(CorruptChunk, match=entry["chunks"][1]["file"]):
        arr[25]
    with pytest.raises(CorruptChunk):
        list(store.load("a", "l").chunks())


def test_unknown_names_and_bad_input_are_refused(tmp_path):
    store = Store.create(tmp_path)
    store.put("a", "l", _rows(0))
    with pytest.raises(StoreError, match="holds: a"):
        store.load("b", "l")
    with pytest.raises(StoreError, match="holds layers: l"):
        store.load("a", "m")
    with pytest.raises(StoreError, match="same width"):
        store.put("a", "x", [_rows(0, d=3), _rows(0, d=4)])
    with pytest.raises(StoreError, match="one id per row"):
        store.put("a", "x", _rows(0), sample_ids=np.arange(3))
    with pytest.raises(StoreError, match="not an activation store"):
        Store(tmp_path / "nothing")


def _writer(path: str, model: str, seed: int) -> None:
    store = Store.create(path)
    for k in range(3):
        store.put(model, f"l{k}", (_rows(seed + k, n=400, d=32)[i:i + 64] for i in range(0, 400, 64)))
        store.put("shared", "l", _rows(99, n=400, d=32))  # both write the same entry at once


def test_two_writers_at_once(tmp_path):
    ctx = mp.get_context("fork")  # two real processes; fork keeps the test fast (no re-import)
    procs = [ctx.Process(target=_writer, args=(os.fspath(tmp_path), f"w{i}", 10 * i)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = Store(tmp_path)
    assert store.models == ["shared", "w0", "w1"]
    for i in range(2):
        for k in range(3):
            np.testing.assert_array_equal(np.asarray(store.load(f"w{i}", f"l{k}")), _rows(10 * i + k, n=400, d=32))
    np.testing.assert_array_equal(np.asarray(store.load("shared", "l")), _rows(99, n=400, d=32))
    leftovers = [p for p in tmp_path.rglob("*") if p.name.startswith(".")]
    assert leftovers == []


def test_chunks_are_written_as_np_save_writes_them_with_the_checksum_of_their_bytes(tmp_path):
    import io

    from similarity_plugins.store.store import file_checksum
    from similarity_plugins.store.writing import write_npy

    for block in (np.arange(12, dtype=np.float32).reshape(3, 4), np.zeros((0, 5), np.float32),
                  np.asfortranarray(np.ones((4, 3))), np.arange(5, dtype=np.int64)):
        path = tmp_path / "c.npy"
        with open(path, "wb") as fh:
            checksum = write_npy(fh, block)
        saved = io.BytesIO()
        np.save(saved, np.ascontiguousarray(block))
        assert path.read_bytes() == saved.getvalue()
        assert checksum == file_checksum(str(path))
        assert np.array_equal(np.load(path), block)
