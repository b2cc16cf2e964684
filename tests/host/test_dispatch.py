"""Every metric call goes through pluggy: a ``similarity`` wrapper sees every call of compare, score and grid cells
(its arguments and its result) and may replace it, ``add_hookcall_monitoring`` traces the calls, families register
through pluggy too, and wrappers arrive through entry points (the metrics' group or a group of their own)."""

from __future__ import annotations

import sys
import threading
import time
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.host import manager as manager_module
from similarity_plugins.host.manager import build_plugin_manager
from tests.helpers.distributions import RECORDING_WRAPPER as TIMER
from tests.helpers.distributions import install_distribution, put_on_path
from tests.helpers.metrics import Meddler
from tests.helpers.models import tiny_cnn


class Recorder:
    """A wrapper of every metric call: records (metric, layer, seconds, value) and may replace or break the call."""

    def __init__(self, replace: dict | None = None, fail: str | None = None) -> None:
        self.calls: list[tuple[str, str, float, object]] = []
        self.replace, self.fail = replace or {}, fail

    @sp.hookimpl(wrapper=True)
    def similarity(self, metric, layer, options, seed):
        start = time.perf_counter()
        value = yield
        self.calls.append((metric, str(layer), time.perf_counter() - start, value))
        if metric == self.fail:
            raise RuntimeError(f"the wrapper refused {metric}")
        return self.replace.get(metric, value)


def _arrays() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(24, 5, generator=g, dtype=torch.float64)
    return x, x @ torch.randn(5, 5, generator=g, dtype=torch.float64)


def _images() -> sp.Data:
    g = torch.Generator().manual_seed(1)
    return sp.Data(test=TensorDataset(torch.rand(12, 1, 16, 16, generator=g), torch.zeros(12, dtype=torch.long)))


def test_a_wrapper_registered_at_run_time_sees_every_score_and_compare_call_with_its_arguments(fresh_manager):
    recorder = Recorder()
    fresh_manager.register(recorder, name="recorder")
    x, y = _arrays()
    report = sp.score(x, y, ["cka-linear", "procrustes"])
    front, end = tiny_cnn(seed=0), tiny_cnn(seed=1)
    compared = sp.compare(front, end, ["block1", "block2"], _images(), "cka-linear")
    seen = [(metric, layer) for metric, layer, _, _ in recorder.calls]
    assert seen == [("cka-linear", "x->y"), ("procrustes", "x->y"), ("cka-linear", "block1"), ("cka-linear", "block2")]
    values = [value for _, _, _, value in recorder.calls]
    assert values[0].score == report["cka-linear"].score and values[2].score == compared["cka-linear", "block1"].score
    assert all(seconds >= 0 for _, _, seconds, _ in recorder.calls)
    fresh_manager.unregister(recorder)
    sp.score(x, y, "cka-linear")
    assert len(recorder.calls) == 4  # unregistered: the next call runs without it


def test_a_wrapper_may_replace_a_result_or_turn_it_into_an_error_row(fresh_manager):
    fresh_manager.register(Recorder(replace={"cka-linear": 0.25}, fail="procrustes"), name="meddler")
    x, y = _arrays()
    report = sp.score(x, y, ["cka-linear", "procrustes", "cca"])
    assert report["cka-linear"].score == 0.25
    assert report["procrustes"].score is None and "the wrapper refused procrustes" in report["procrustes"].error
    assert report["cca"].ok  # the other metrics as ever


def test_monitoring_traces_each_metric_call_with_only_that_metrics_hookimpl_and_the_wrappers(fresh_manager):
    fresh_manager.register(Recorder(), name="recorder")
    traced: list[tuple[str, list[str], str]] = []
    undo = fresh_manager.add_hookcall_monitoring(
        lambda hook, impls, kwargs: traced.append((hook, sorted(i.plugin_name for i in impls), kwargs["metric"])),
        lambda outcome, hook, impls, kwargs: None)
    x, y = _arrays()
    sp.score(x, y, ["cka-linear", "procrustes"])
    undo()
    assert traced == [("similarity", ["cka-linear", "recorder"], "cka-linear"),
                      ("similarity", ["procrustes", "recorder"], "procrustes")]


def test_a_grid_calls_every_computed_cell_through_the_wrappers(fresh_manager):
    recorder = Recorder()
    fresh_manager.register(recorder, name="recorder")
    grid = sp.compare_grid([tiny_cnn(seed=0), tiny_cnn(seed=1)], ["block1"], _images(), "cka-linear", pairs="across")
    assert [(m, layer) for m, layer, _, _ in recorder.calls] == [("cka-linear", "block1")]  # the mirrored cell is a copy
    assert grid.matrix("cka-linear")[0, 1] == recorder.calls[0][3].score


def test_a_timed_out_call_and_a_changed_donor_keep_their_rows_under_a_wrapper(fresh_manager):
    release = threading.Event()

    class Sleeper:
        @sp.hookimpl
        def similarity(self):
            release.wait(10)
            return 1.0

    sp.register_metric(Meddler, "meddler")
    sp.register_metric(Sleeper, "sleeper")
    recorder = Recorder()
    fresh_manager.register(recorder, name="recorder")
    front, end = tiny_cnn(seed=0), tiny_cnn(seed=1)
    before = [p.clone() for p in front.parameters()]
    report = sp.compare(front, end, "block1", _images(), ["meddler", "cka-linear"])
    assert "block1.0.weight values changed" in report["meddler"].error and report["cka-linear"].ok
    assert all(torch.equal(a, b) for a, b in zip(before, front.parameters()))
    try:
        late = sp.compare(front, end, "block1", _images(), ["sleeper", "cka-linear"], timeout=0.3)
    finally:
        release.set()   # the abandoned call ends
    assert late["sleeper"].error.startswith("MetricTimeout") and late["cka-linear"].ok
    seen = [m for m, _, _, _ in recorder.calls]   # the abandoned sleeper's call is seen whenever its thread ends
    assert seen[:2] == ["meddler", "cka-linear"] and seen.count("cka-linear") == 2


def test_a_metric_whose_similarity_is_a_wrapper_or_no_hookimpl_is_refused_naming_the_fix(fresh_manager):
    with pytest.raises(TypeError, match="similarity_plugins.wrappers"):
        sp.register_metric(Recorder(), "recorder")

    class Unmarked:
        def similarity(self):
            return 1.0

    with pytest.raises(TypeError, match="not a hookimpl; decorate it with @similarity_plugins.hookimpl"):
        sp.register_metric(Unmarked, "unmarked")
    assert "recorder" not in fresh_manager.info and fresh_manager.get_plugin("recorder") is None


PLAIN = '''
import similarity_plugins


@similarity_plugins.hookimpl
def similarity():
    return 1.0
'''

FAMILY = '''
import similarity_plugins


class One:
    @similarity_plugins.hookimpl
    def similarity(self):
        return 1.0


@similarity_plugins.hookimpl
def register_metrics(register):
    register("fam-one", One)
'''


@pytest.fixture
def wrapper_dists(tmp_path, monkeypatch):
    """Fake distributions: a wrapper in the wrappers group, a wrapper in the metrics group, a metric in the wrappers
    group, and a family; the process-wide manager is rebuilt from them and the modules forgotten afterwards."""
    monkeypatch.delenv("SIMILARITY_PLUGINS", raising=False)
    monkeypatch.delenv("SIMILARITY_PLUGINS_DISABLE_AUTOLOAD", raising=False)
    install_distribution(tmp_path, "fake-timer", {"similarity_plugins.wrappers": {"timer": "fake_timer_mod"}},
                         {"fake_timer_mod": TIMER})
    install_distribution(tmp_path, "fake-misplaced", {"similarity_plugins": {"misplaced": "fake_misplaced_mod"},
                                                      "similarity_plugins.wrappers": {"plain": "fake_plain_mod"}},
                         {"fake_misplaced_mod": TIMER.replace("CALLS = []", "CALLS = ['misplaced']"),
                          "fake_plain_mod": PLAIN})
    install_distribution(tmp_path, "fake-fam", {"similarity_plugins": {"fake-fam": "fake_fam_mod"}},
                         {"fake_fam_mod": FAMILY})
    put_on_path(tmp_path, monkeypatch)
    yield
    for module in ("fake_timer_mod", "fake_misplaced_mod", "fake_plain_mod", "fake_fam_mod"):
        sys.modules.pop(module, None)


def test_a_wrapper_entry_point_loads_with_the_manager_and_wraps_every_call(wrapper_dists):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm = build_plugin_manager()
    # both wrappers (one in each group) are imported now; the metrics still load lazily
    assert {"fake_timer_mod", "fake_misplaced_mod"} <= set(sys.modules) and "fake_fam_mod" not in sys.modules
    assert any("wrapper 'plain' from fake-misplaced failed to load" in str(w.message) and "is not a wrapper"
               in str(w.message) for w in caught)
    assert not any("from now on only" in str(w.message) for w in caught)
    manager_module._pm = pm
    x, y = _arrays()
    sp.score(x, y, ["cka-linear", "procrustes"])
    assert sys.modules["fake_timer_mod"].CALLS == ["cka-linear", "procrustes"]
    assert sys.modules["fake_misplaced_mod"].CALLS == ["misplaced", "cka-linear", "procrustes"]
    pm.load_all()
    assert pm.info["fam-one"].error is None and "misplaced" not in pm.info


def test_similarity_plugins_selects_wrappers_as_it_selects_metrics(wrapper_dists, monkeypatch):
    monkeypatch.setenv("SIMILARITY_PLUGINS", "fake-fam")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # fake-timer exists: no warning about an unknown name
        build_plugin_manager()
    assert "fake_timer_mod" not in sys.modules
    monkeypatch.setenv("SIMILARITY_PLUGINS", "fake-timer")
    build_plugin_manager()
    assert "fake_timer_mod" in sys.modules


def test_a_family_registers_through_pluggy_and_an_unmarked_register_metrics_is_a_load_error(fresh_manager, monkeypatch):
    import types

    class One:
        @sp.hookimpl
        def similarity(self):
            return 1.0

    @sp.hookimpl
    def register_metrics(register):
        register("traced-one", One)

    def unmarked(register):
        register("never-one", One)

    eps = [types.SimpleNamespace(name=name, dist=types.SimpleNamespace(name="dist-a"), load=lambda obj=obj: obj)
           for name, obj in (("traced", types.SimpleNamespace(register_metrics=register_metrics)),
                             ("unmarked", types.SimpleNamespace(register_metrics=unmarked)))]
    monkeypatch.setattr(manager_module, "_entry_points", lambda: eps)
    pm = build_plugin_manager()
    traced = []
    pm.add_hookcall_monitoring(lambda hook, impls, kwargs: traced.append(hook), lambda *a: None)
    pm.load_all()
    assert traced == ["register_metrics"] and pm.info["traced-one"].error is None
    assert "is not a hookimpl" in pm.load_errors["unmarked"] and "never-one" not in pm.info


def test_calls_are_rebuilt_when_a_plugin_registers(fresh_manager):
    x, y = np.random.default_rng(0).normal(size=(2, 16, 3))
    first = fresh_manager.metric_call("cka-linear")
    assert fresh_manager.metric_call("cka-linear") is first  # cached
    recorder = Recorder()
    fresh_manager.register(recorder, name="late")
    assert fresh_manager.metric_call("cka-linear") is not first
    sp.score(x, y, "cka-linear")
    assert [m for m, _, _, _ in recorder.calls] == ["cka-linear"]
    with pytest.raises(KeyError):
        fresh_manager.metric_call("no-such-metric")
