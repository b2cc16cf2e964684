"""Every optional dependency missing says the same way which extra installs it (`utils.extras.require`): CuPy for
the IRI backend, safetensors for IRI files, pytest-benchmark for the bench command (which exits 2 on one line)."""

from __future__ import annotations

import sys

import pytest
import torch

from similarity_plugins.cli.main import main
from similarity_plugins.iri import backends
from similarity_plugins.iri.result import IRISet
from similarity_plugins.iri.store import load_iris, save_iris
from similarity_plugins.utils.extras import MissingExtra


def _hidden(monkeypatch, *modules: str) -> None:
    """The modules hidden as if not installed: importing them raises ImportError."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def test_the_cupy_backend_names_the_gpu_extra(monkeypatch):
    _hidden(monkeypatch, "cupy")
    monkeypatch.setattr(backends, "_cupy", lambda: None)
    with pytest.raises(MissingExtra, match=r"backend='cupy' needs the cupy package.*similarity-plugins\[gpu\]"):
        backends.cupy_backend()


def test_safetensors_files_name_the_io_extra(monkeypatch, tmp_path):
    _hidden(monkeypatch, "safetensors", "safetensors.torch")
    iris = IRISet(torch.rand(2, 1, 4, 4), torch.full((2,), 0.01, dtype=torch.float64), torch.ones(2, dtype=torch.long),
                  torch.zeros(2, dtype=torch.float64), settings={})
    with pytest.raises(MissingExtra, match=r"writing \.safetensors .*similarity-plugins\[io\]"):
        save_iris(iris, tmp_path / "iris.safetensors")
    assert not (tmp_path / "iris.safetensors").exists()
    (tmp_path / "other.safetensors").write_bytes(b"")
    with pytest.raises(MissingExtra, match=r"reading \.safetensors needs the safetensors package"):
        load_iris(tmp_path / "other.safetensors")


def test_bench_without_pytest_benchmark_exits_2_naming_the_test_extra(monkeypatch, capsys):
    _hidden(monkeypatch, "pytest_benchmark")
    assert main(["bench", "--metrics", "cka-linear"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: similarity-plugins bench needs the pytest_benchmark package")
    assert 'pip install "similarity-plugins[test]"' in err and err.count("\n") == 1
