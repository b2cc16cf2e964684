"""The shared IRI cache cannot be turned against its user: entries are opened without following links and a link
planted as an entry is replaced, never written through; the cache folder is checked before the IRI work; an
error without a file name ("File too large", a full disk) is raised naming the path."""

from __future__ import annotations

import errno
import glob
import os
import warnings

import pytest
import torch

from similarity_plugins.iri import generate_iris
from similarity_plugins.utils.digest import CorruptFileWarning, load_verified, save_verified
from similarity_plugins.utils.io import atomic_write
from tests.helpers.models import tiny_cnn


def _seeds(n: int = 4) -> torch.Tensor:
    return torch.rand(n, 1, 16, 16, generator=torch.Generator().manual_seed(0))


def test_a_link_planted_as_a_cache_entry_is_neither_read_nor_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    entry = tmp_path / "cache" / "iris-abc.pt"
    entry.parent.mkdir()
    os.symlink(victim, entry)
    with pytest.warns(CorruptFileWarning, match="symbolic link"):
        assert load_verified(entry, "iri-set") is None
    save_verified({"x": torch.ones(2)}, entry, "iri-set")
    assert victim.read_text() == "precious"
    assert not os.path.islink(entry) and torch.equal(load_verified(entry, "iri-set")["x"], torch.ones(2))


def test_generate_iris_replaces_a_planted_link_and_leaves_its_target(tmp_path):
    model, seeds, cache = tiny_cnn(), _seeds(), tmp_path / "cache"
    first = generate_iris(model, "block2", seeds, steps=2, progress="never", cache_dir=cache)
    (entry,) = glob.glob(str(cache / "iris-*.pt"))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.remove(entry)
    os.symlink(victim, entry)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = generate_iris(model, "block2", seeds, steps=2, progress="never", cache_dir=cache)
    assert any("symbolic link" in str(w.message) for w in caught)
    assert victim.read_text() == "precious" and not os.path.islink(entry)
    assert torch.equal(again.inputs, first.inputs)


@pytest.mark.parametrize("make, message", [
    (lambda tmp: (tmp / "file").write_text("x") and tmp / "file" / "cache", "is a file, not a folder"),
    (lambda tmp: tmp / ("x" * 300), "longer than"),
    (lambda tmp: tmp / "/".join(["y" * 200] * 25), "path is"),
])
def test_an_unusable_cache_folder_is_refused_before_the_iri_work(tmp_path, monkeypatch, make, message):
    import similarity_plugins.iri.generate as generate

    monkeypatch.setattr(generate, "_optimize", lambda *a, **k: pytest.fail("the IRI work ran"))
    with pytest.raises(OSError, match=message):
        generate_iris(tiny_cnn(), "block2", _seeds(), steps=2, progress="never", cache_dir=make(tmp_path))


def test_a_read_only_cache_folder_is_refused_before_the_iri_work(tmp_path, monkeypatch):
    import similarity_plugins.iri.generate as generate

    cache = tmp_path / "ro"
    cache.mkdir()
    monkeypatch.setattr(generate, "_optimize", lambda *a, **k: pytest.fail("the IRI work ran"))
    monkeypatch.setattr("similarity_plugins.utils.io.tempfile.NamedTemporaryFile",  # root ignores mode bits
                        lambda **k: (_ for _ in ()).throw(PermissionError(errno.EACCES, "Permission denied")))
    with pytest.raises(OSError, match="not writable"):
        generate_iris(tiny_cnn(), "block2", _seeds(), steps=2, progress="never", cache_dir=cache)


def test_file_too_large_names_the_path(tmp_path):
    path = tmp_path / "big.pt"
    with pytest.raises(OSError, match="big.pt") as info:
        with atomic_write(path) as fh:
            fh.write(b"x")
            raise OSError(errno.EFBIG, "File too large")
    assert info.value.errno == errno.EFBIG and not path.exists()


@pytest.mark.parametrize("contents", [b"not a zip", None])
def test_a_damaged_or_foreign_iri_file_is_refused_naming_it(tmp_path, contents):
    import numpy as np

    from similarity_plugins.iri.store import load_iris
    from similarity_plugins.utils.readback import BadFile

    path = tmp_path / "iris.npz"
    if contents is None:
        np.savez(path, other=np.zeros(3))  # a valid .npz of something else
    else:
        path.write_bytes(contents)
    with pytest.raises(BadFile, match="iris.npz"):
        load_iris(path)


def test_a_cache_disk_without_room_for_the_set_is_refused_before_the_iri_work(tmp_path, monkeypatch):
    import shutil

    import similarity_plugins.iri.generate as generate

    monkeypatch.setattr(generate, "_optimize", lambda *a, **k: pytest.fail("the IRI work ran"))
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: shutil._ntuple_diskusage(10**9, 10**9 - 100, 100))
    with pytest.raises(OSError, match="100 bytes free"):
        generate_iris(tiny_cnn(), "block2", _seeds(), steps=2, progress="never", cache_dir=tmp_path / "cache")
