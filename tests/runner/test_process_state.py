"""A plugin that changes process-wide state: ``score`` and ``compare`` put it back after the metric (one code path,
runner.process), name it in the row's warnings, and the later metrics compute as before."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins import Data
from tests.helpers.models import tiny_cnn


def _chdir(tmp):
    os.chdir(tmp)


def _env(_tmp):
    os.environ["SIMILARITY_PROBE_VAR"] = "1"


def _filters(_tmp):
    warnings.simplefilter("error")


def _umask(_tmp):
    os.umask(0)


def _umask_now() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _subnormals_flushed() -> bool:
    return bool((torch.full((1,), 1e-40, dtype=torch.float32, device="cpu") * 1.0).item() == 0.0)


# (what the plugin does, the words the row's warning names, the state to compare before and after)
CHANGES = [
    (lambda _t: torch.set_grad_enabled(False), "grad mode", torch.is_grad_enabled),
    (lambda _t: torch.set_default_dtype(torch.float64), "default dtype", torch.get_default_dtype),
    (lambda _t: torch.set_anomaly_enabled(True), "anomaly detection", torch.is_anomaly_enabled),
    (lambda _t: torch.set_default_device("meta"), "default device", torch.get_default_device),
    (lambda _t: torch.set_num_threads(torch.get_num_threads() + 1), "thread count", torch.get_num_threads),
    (lambda _t: np.seterr(all="raise"), "np.seterr", np.geterr),
    (lambda _t: torch.set_float32_matmul_precision("medium"), "matmul precision", torch.get_float32_matmul_precision),
    (_filters, "warnings filters", lambda: list(warnings.filters)),
    (_env, "environment variables (SIMILARITY_PROBE_VAR)", lambda: dict(os.environ)),
    (_chdir, "working directory", os.getcwd),
    (_umask, "umask", _umask_now),
    (lambda _t: torch.set_flush_denormal(True), "flushing of subnormal floats", _subnormals_flushed),
]
IDS = ["grad", "dtype", "anomaly", "device", "threads", "seterr", "matmul", "warnings", "environ", "cwd", "umask",
       "denormal"]


def _changer(action, tmp):
    class Changer:
        activations_only = True
        needs = ("test",)

        @sp.hookimpl
        def similarity(self, front, layer, context):
            context.activations(front, layer.front, "test")
            action(tmp)
            return 0.5
    return Changer


@pytest.fixture
def changer(fresh_manager, request, tmp_path):
    action, words, read = request.param
    sp.register_metric(_changer(action, tmp_path), "changer")
    return words, read


@pytest.mark.parametrize("changer", CHANGES, ids=IDS, indirect=True)
def test_score_restores_what_a_plugin_changed_and_later_metrics_are_unaffected(changer):
    words, read = changer
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 6)), rng.normal(size=(40, 5))
    baseline = sp.score(x, y, "cka-linear")["cka-linear"].score
    before = read()
    report = sp.score(x, y, ["changer", "cka-linear"])
    assert read() == before
    assert report["changer"].ok and words in " ".join(report["changer"].details["warnings"]), report["changer"].details
    assert report["cka-linear"].score == baseline and "warnings" not in report["cka-linear"].details


@pytest.mark.parametrize("changer", [CHANGES[i] for i in (0, 3, 4, 9)], ids=[IDS[i] for i in (0, 3, 4, 9)],
                         indirect=True)
def test_compare_restores_the_same_state_through_the_same_code(changer):
    words, read = changer
    g = torch.Generator().manual_seed(0)
    x, labels = torch.rand(24, 1, 16, 16, generator=g), torch.randint(0, 10, (24,), generator=g)
    data = Data(train=TensorDataset(x, labels), test=TensorDataset(x, labels))
    front, end = tiny_cnn(seed=0).eval(), tiny_cnn(seed=1).eval()
    baseline = sp.compare(front, end, "block2", data, "cka-linear")["cka-linear"].score
    before = read()
    report = sp.compare(front, end, "block2", data, ["changer", "cka-linear"])
    assert read() == before
    assert report["changer"].ok and words in " ".join(report["changer"].details["warnings"])
    assert report["cka-linear"].score == baseline


def test_filters_a_module_adds_when_first_imported_are_its_own_not_the_metrics(fresh_manager, monkeypatch):
    """A module imported for the first time inside a metric (SciPy adds filters on import) keeps its filters, and
    the row does not blame the metric; a metric that changes the filters otherwise in that call is still named."""
    import sys
    import types

    def importing(add_own: bool):
        class Importing:
            activations_only = True

            @sp.hookimpl
            def similarity(self, front, layer, context):
                module = types.ModuleType("similarity_probe_module")
                warnings.filterwarnings("ignore", message="probe module's own filter")  # what its import does
                sys.modules["similarity_probe_module"] = module
                if add_own:
                    warnings.filters.pop()  # not an addition in front: the metric's own change
                return 0.5
        return Importing

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((20, 4)), rng.standard_normal((20, 3))
    before = list(warnings.filters)
    sp.register_metric(importing(False), "importing")
    monkeypatch.delitem(sys.modules, "similarity_probe_module", raising=False)
    try:
        (row,) = sp.score(x, y, "importing").results
        assert not any("warnings filters" in w for w in row.details.get("warnings", [])), row.details
        assert list(warnings.filters)[1:] == before  # the import's filter stays, in front
        del sys.modules["similarity_probe_module"]
        sp.register_metric(importing(True), "importing-and-own", replace=True)
        (row,) = sp.score(x, y, "importing-and-own").results
        assert any("warnings filters" in w for w in row.details["warnings"])
    finally:
        warnings.filters[:] = before
        warnings._filters_mutated()
