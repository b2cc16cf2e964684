"""Every result records what made it (``meta["provenance"]``) and what its metrics declare (``meta["info"]``, a
grid's ``info``): the package version, date, machine, each model's identity, the data's size and fingerprint, the
options; reading the data for its fingerprint leaves the caller's random generators as they were."""

from __future__ import annotations

import datetime

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

import similarity_plugins as sp
from similarity_plugins.networks.data import split_digest
from similarity_plugins.networks.parallel import module_digest
from similarity_plugins.networks.wrapped import WrappedModel
from similarity_plugins.runner.provenance import package_version
from tests.helpers.models import tiny_cnn


def _data(n: int = 24) -> sp.Data:
    g = torch.Generator().manual_seed(5)
    split = TensorDataset(torch.rand(n, 1, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g))
    return sp.Data(train=split, test=split)


class NoisyDataset(Dataset):
    """A dataset whose reading draws from the global torch generator (a random augmentation)."""

    def __init__(self, n: int = 16) -> None:
        self.x, self.y = torch.rand(n, 1, 16, 16), torch.zeros(n, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i] + 0.0 * torch.rand(1), self.y[i]


def test_compare_records_models_data_machine_and_options():
    a, b, data = tiny_cnn(seed=0), tiny_cnn(seed=1), _data()
    report = sp.compare(a, b, "block3", data, ["cka-linear"], options={"max_samples": 20})
    record = report.meta["provenance"]
    assert record["package"] == package_version() == sp.__version__
    assert abs(datetime.datetime.fromisoformat(record["date"]) - datetime.datetime.now(datetime.timezone.utc)).seconds < 600
    assert record["machine"]["device"] == "cpu" and record["machine"]["cpu_count"] >= 1 and record["machine"]["cpu"]
    assert record["models"]["front"] == {"class": f"{type(a).__module__}.{type(a).__qualname__}", "dtype": "torch.float32",
                                         "parameters": sum(p.numel() for p in a.parameters()), "source": None,
                                         "fingerprint": module_digest([a])}
    assert record["models"]["end"]["fingerprint"] == module_digest([b]) != module_digest([a])
    assert record["data"] == {"test": {"size": 24, "fingerprint": split_digest(data.test)}}  # cka-linear reads test only
    assert record["options"] == {"max_samples": 20}
    assert tuple(report.meta["info"]["cka-linear"]["range"]) == (0.0, 1.0)
    assert report.meta["info"]["cka-linear"]["family"] == "cka"


class Declared(torch.nn.Module):
    """A model that declares itself wrapped (the `WrappedModel` Protocol: `similarity_plugins.hf` returns one) and
    where it came from; its layers' outputs are its rows as they are."""

    view, reads_text, pooling = "image", False, "flatten"

    def __init__(self, model: torch.nn.Module, source: dict) -> None:
        super().__init__()
        self.model, self.source = model, source

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def layer_activation(self, output: torch.Tensor) -> torch.Tensor:
        return output

    def canonical_layers(self) -> list[str]:
        return ["model.block3"]

    def token_counts(self, texts: list[str]) -> list[int]:
        raise TypeError("reads no text")

    def reading_settings(self) -> dict:
        return {}

    def provenance(self) -> dict:
        return {"source": self.source}


def test_a_model_pinned_by_a_hub_commit_is_identified_by_it():
    """A wrapped model (the `WrappedModel` Protocol) says where it came from; a plain module with an attribute of
    the same name is not asked (no attribute is probed by name), so it is identified by its fingerprint."""
    pinned = {"path": None, "hub_id": "org/tiny", "revision": "main", "commit": "0123abcd"}
    model = Declared(tiny_cnn(seed=0), dict(pinned))
    assert isinstance(model, WrappedModel) and not isinstance(tiny_cnn(seed=0), WrappedModel)
    report = sp.compare(model, tiny_cnn(seed=1), ("model.block3", "block3"), _data(), ["cka-linear"])
    record = report.meta["provenance"]
    assert record["models"]["front"]["source"] == pinned and record["models"]["front"]["fingerprint"] is None
    assert record["models"]["end"]["fingerprint"] is not None and report.meta["sources"] == {"front": pinned}
    plain = tiny_cnn(seed=0)
    plain.source = dict(pinned)
    record = sp.compare(plain, tiny_cnn(seed=1), "block3", _data(), ["cka-linear"]).meta["provenance"]
    assert record["models"]["front"]["source"] is None and record["models"]["front"]["fingerprint"] is not None


def test_reading_the_data_for_its_fingerprint_leaves_the_random_generators_as_they_were():
    data = sp.Data(test=NoisyDataset())
    torch.manual_seed(11)
    before = torch.get_rng_state()
    report = sp.compare(tiny_cnn(seed=0), tiny_cnn(seed=1), "block3", data, ["cka-linear"])
    assert torch.equal(torch.get_rng_state(), before)
    assert report.meta["provenance"]["data"]["test"]["size"] == 16


def test_score_records_the_arrays_and_option_arrays_by_their_digest():
    from similarity_plugins.runner.provenance import provenance

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((30, 5)), rng.standard_normal((30, 4))
    record = sp.score(x, y, ["cka-linear"]).meta["provenance"]
    assert record["models"] == {}
    assert record["data"]["x"]["shape"] == [30, 5] and record["data"]["y"]["shape"] == [30, 4]
    assert record["data"]["x"]["fingerprint"] != record["data"]["y"]["fingerprint"]
    assert sp.score(x, y, ["procrustes"]).meta["provenance"]["data"] == record["data"]  # same arrays, same digests
    table = np.tile(np.arange(30), (4, 1))  # a permutation table as an option: recorded by its digest, not listed
    options = provenance({}, {}, options={"permutations": table, "cka-linear": {"k": [1, 2]}},
                         device=torch.device("cpu"))["options"]
    assert options["permutations"]["array"]["shape"] == [4, 30] and options["cka-linear"] == {"k": [1, 2]}


def test_a_grid_records_each_model_and_from_a_store_what_the_store_recorded(tmp_path):
    models = {"a": tiny_cnn(seed=0), "b": tiny_cnn(seed=1)}
    data = sp.Data(test=_data().test)
    grid = sp.compare_grid(models, ["block3"], data, ["cka-linear"], pairs="across", store=tmp_path)
    record = grid.meta["provenance"]
    assert {m: record["models"][m]["fingerprint"] for m in models} == {m: module_digest([v]) for m, v in models.items()}
    assert record["data"]["test"]["size"] == 24
    assert grid.info["cka-linear"]["description"] and grid.info["cka-linear"]["invariances"]
    alone = sp.compare_grid(metrics=["cka-linear"], pairs="across", store=tmp_path).meta["provenance"]
    assert {m: alone["models"][m]["fingerprint"] for m in models} == {m: module_digest([v]) for m, v in models.items()}
    assert alone["models"]["a"]["store"] == str(tmp_path) and alone["data"]["test"]["size"] == 24
    assert alone["models"]["a"]["class"] == "Sequential"  # the entry's produced_by["model_class"]


def test_a_gpu_run_records_the_gpu(monkeypatch):
    import types

    from similarity_plugins.runner.provenance import machine

    card = types.SimpleNamespace(name="Test GPU", total_memory=80 * 2**30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: card)
    record = machine(torch.device("cuda", 0))
    assert record["gpu"] == "Test GPU" and record["gpu_memory_gib"] == 80.0 and record["device"] == "cuda:0"
    assert "gpu" not in machine(torch.device("cpu"))


@pytest.mark.gpu
def test_compare_on_a_gpu_records_its_name():
    report = sp.compare(tiny_cnn(seed=0), tiny_cnn(seed=1), "block3", _data(), ["cka-linear"], device="cuda")
    machine = report.meta["provenance"]["machine"]
    assert machine["gpu"] == torch.cuda.get_device_name(0) and machine["device"].startswith("cuda")
