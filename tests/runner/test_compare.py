"""The plugin host, the registry, compare() and the report."""

from __future__ import annotations

import json
import math
import types

import pytest
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.host import manager as manager_module
from similarity_plugins.host.manager import build_plugin_manager
from similarity_plugins.host.registry import select_metrics
from similarity_plugins.networks.context import Context
from similarity_plugins.networks.split import SplitNetwork
from tests.helpers.models import assert_unchanged, snapshot, tiny_cnn


def test_builtins_are_registered():
    names = sp.list_metrics()
    for name in ["cka-linear", "cka-debiased", "cka-rbf"]:
        assert name in names
        assert sp.metric_info(name).package == "similarity-plugins"
        assert sp.metric_info(name).error is None
    assert names == sorted(names)


def test_wildcards_and_unknown_names():
    assert sp.list_metrics("cka-*") == ["cka-debiased", "cka-linear", "cka-rbf"]
    assert select_metrics("cka-linear,cka-rbf") == ["cka-linear", "cka-rbf"]
    assert select_metrics(["cka-r*", "cka-*"])[0] == "cka-rbf"
    with pytest.raises(sp.UnknownMetric, match="did you mean 'cka-linear'"):
        select_metrics("cka-linaer")
    with pytest.raises(sp.UnknownMetric, match="matches no metric"):
        select_metrics("nothing-*")


def test_builtins_load_like_entry_points(monkeypatch):
    ep = types.SimpleNamespace(name="const-one", dist=types.SimpleNamespace(name="fake-dist"),
                               load=lambda: _ConstPlugin)
    monkeypatch.setattr(manager_module, "_entry_points", lambda: [ep])
    pm = build_plugin_manager()
    pm.load_all()
    assert pm.info["const-one"].package == "fake-dist"
    assert pm.info["cka-linear"].package == "similarity-plugins"
    monkeypatch.setenv("SIMILARITY_PLUGINS_DISABLE_AUTOLOAD", "1")
    pm = build_plugin_manager()
    assert "const-one" not in pm.info and "cka-linear" in pm.info


class _ConstPlugin:
    """Always 1."""

    @sp.hookimpl
    def similarity(self):
        return 1.0


def test_compare_cka_and_report(data):
    a, b = tiny_cnn(seed=0), tiny_cnn(seed=1)
    report = sp.compare(a, b, "block2", data, metrics="cka-*")
    assert [r.metric for r in report.results] == ["cka-debiased", "cka-linear", "cka-rbf"]
    for r in report:
        assert r.error is None, r.error
        assert 0.0 < r.score <= 1.0 and r.seconds >= 0 and r.layer == "block2"
        assert r.details["n"] == 48
    assert report["cka-linear"].score == pytest.approx(sp.functional.cka(
        SplitNetwork(a, "block2").front(data.test.tensors[0]).detach(),
        SplitNetwork(b, "block2").front(data.test.tensors[0]).detach()), abs=1e-6)
    self_report = sp.compare(a, a, "block3", data, metrics=["cka-linear"])
    assert self_report["cka-linear"].score == pytest.approx(1.0, abs=1e-9)
    parsed = json.loads(report.to_json())
    assert parsed["results"][1]["metric"] == "cka-linear" and "meta" in parsed
    csv_text = report.to_csv()
    assert csv_text.splitlines()[0].startswith("metric,layer,score,seconds,error")
    assert len(csv_text.splitlines()) == 4
    table = str(report)
    assert "cka-linear" in table and "block2" in table


def test_layer_sweep_and_pairs(data, tmp_path):
    a, b = tiny_cnn(seed=0), tiny_cnn(seed=1)
    report = sp.compare(a, b, ["block1", ("block2", "block3")], data, metrics="cka-linear")
    assert report.layers == ["block1", "block2->block3"]
    assert report["cka-linear", "block1"].score > 0
    assert report["cka-linear", ("block2", "block3")].score > 0
    with pytest.raises(KeyError, match="one per layer"):
        report["cka-linear"]
    report.to_json(str(tmp_path / "r.json"))
    report.to_csv(str(tmp_path / "r.csv"))
    assert json.loads((tmp_path / "r.json").read_text())["meta"]["layers"] == ["block1", "block2->block3"]


def test_plugin_that_raises_does_not_stop_others(data, fresh_manager):
    class Boom:
        @sp.hookimpl
        def similarity(self, layer):
            raise RuntimeError("kaboom at " + layer.front)

    fresh_manager.register_metric(Boom, "boom")
    report = sp.compare(tiny_cnn(), tiny_cnn(seed=1), "block1", data, metrics=["boom", "cka-linear"])
    assert report["boom"].score is None and "kaboom at block1" in report["boom"].error
    assert report["cka-linear"].error is None
    assert "kaboom" in str(report)


def test_plugin_that_fails_to_import(data, fresh_manager):
    fresh_manager.load_reference("broken", "no_such_module_xyz:Plugin", "broken-dist")
    assert "broken" in sp.list_metrics()
    report = sp.compare(tiny_cnn(), tiny_cnn(seed=1), "block1", data, metrics=["broken", "cka-linear"])
    assert "failed to load" in report["broken"].error and "no_such_module_xyz" in report["broken"].error
    assert report["cka-linear"].ok


def test_hookimpl_takes_any_subset_and_return_forms(data, fresh_manager):
    @sp.hookimpl
    def similarity(options, seed):
        return {"score": options["value"] + seed, "details": {"seen": sorted(options)}}

    sp.register_metric(similarity, "subset")
    fresh_manager.register_metric(_ConstPlugin(), "const")
    report = sp.compare(tiny_cnn(), tiny_cnn(), "block1", data, metrics=["subset", "const"], seed=2,
                        options={"value": 1.5, "subset": {"extra": 1}, "const": {"ignored": 0}})
    assert report["subset"].score == 3.5
    assert report["subset"].details["seen"] == ["extra", "value"]
    assert report["const"].score == 1.0


def test_bad_return_value_is_an_error_row(data, fresh_manager):
    @sp.hookimpl
    def similarity():
        return "high"

    sp.register_metric(similarity, "bad-return")
    report = sp.compare(tiny_cnn(), tiny_cnn(), "block1", data, metrics="bad-return")
    assert "return a float" in report["bad-return"].error


def test_unknown_layer_and_metric_raise_at_once(data):
    with pytest.raises(sp.LayerNotFound, match="available: block1, block2"):
        sp.compare(tiny_cnn(), tiny_cnn(), "block9", data, metrics="cka-linear")
    with pytest.raises(sp.UnknownMetric, match="did you mean"):
        sp.compare(tiny_cnn(), tiny_cnn(), "block1", data, metrics="cka-lineer")


def test_bad_data_gives_error_rows():
    a, b = tiny_cnn(), tiny_cnn(seed=1)
    empty = sp.Data(test=TensorDataset(torch.zeros(0, 1, 16, 16), torch.zeros(0, dtype=torch.long)))
    assert "empty" in sp.compare(a, b, "block1", empty, metrics="cka-linear")["cka-linear"].error
    tiny = sp.Data(test=TensorDataset(torch.rand(3, 1, 16, 16), torch.zeros(3, dtype=torch.long)))
    assert "4" in sp.compare(a, b, "block1", tiny, metrics="cka-debiased")["cka-debiased"].error
    missing = sp.compare(a, b, "block1", sp.Data(), metrics="cka-linear")["cka-linear"].error
    assert "test split" in missing


def test_nan_activations_are_reported(data):
    a, b = tiny_cnn(), tiny_cnn(seed=1)
    with torch.no_grad():
        a.block1[0].weight[0, 0, 0, 0] = float("nan")
    error = sp.compare(a, b, "block2", data, metrics="cka-linear")["cka-linear"].error
    assert "NaN" in error and "block2" in error


def test_donors_are_bit_identical_afterwards(data):
    a, b = tiny_cnn(seed=0), tiny_cnn(seed=1)
    a.train()  # a user's model in train mode must stay in train mode with its BN stats untouched
    b.block1[0].weight.requires_grad_(False)
    before_a, before_b = snapshot(a), snapshot(b)
    sp.compare(a, b, ["block1", "block3"], data, metrics="cka-*")
    assert_unchanged(a, before_a)
    assert_unchanged(b, before_b)


def test_activations_are_computed_once_per_model_and_layer(data):
    a, b = tiny_cnn(seed=0), tiny_cnn(seed=1)
    calls = []
    a.block1.register_forward_hook(lambda *args: calls.append(1))
    sp.compare(a, b, "block2", data, metrics="cka-*")
    assert len(calls) == 1  # 48 test samples in one batch, shared by three metrics


def test_device_argument_never_moves_the_users_model(data):
    a = tiny_cnn()
    report = sp.compare(a, a, "block1", data, metrics="cka-linear", device="cpu")
    assert report.meta["device"] == "cpu"
    assert next(a.parameters()).device.type == "cpu"
    assert math.isclose(report["cka-linear"].score, 1.0, abs_tol=1e-9)


def test_device_argument_runs_metrics_on_a_copy(data, fresh_manager):
    """``device="cpu:0"`` differs from the model's ``cpu``, so compare takes the copy path: metrics get a moved
    copy, and even a metric that zeroes the weights it was given cannot touch the user's model."""
    a = tiny_cnn()
    seen = {}

    @sp.hookimpl
    def similarity(front, end, device):
        seen.update(front_is_users=front is a, end_is_users=end is a, device=device)
        with torch.no_grad():
            for p in front.parameters():
                p.zero_()
        return 1.0

    sp.register_metric(similarity, "vandal")
    before = snapshot(a)
    report = sp.compare(a, a, "block1", data, metrics="vandal", device="cpu:0")
    assert report.meta["device"] == "cpu:0"   # the copy is guarded too: the vandal's row is an error
    assert report["vandal"].score is None and "block1.0.weight values changed" in report["vandal"].error
    assert seen == {"front_is_users": False, "end_is_users": False, "device": torch.device("cpu", 0)}
    assert_unchanged(a, before)
    copied = sp.compare(a, a, "block1", data, metrics="cka-linear", device="cpu:0")
    assert math.isclose(copied["cka-linear"].score, 1.0, abs_tol=1e-9)


def test_reused_context_takes_this_calls_options_and_data(data):
    a, b = tiny_cnn(seed=0), tiny_cnn(seed=1)
    ctx = Context(data)
    first = sp.compare(a, b, "block2", data, metrics="cka-linear", context=ctx)
    other = sp.Data(test=TensorDataset(torch.rand(40, 1, 16, 16), torch.zeros(40, dtype=torch.long)))
    second = sp.compare(a, b, "block2", other, metrics="cka-linear", context=ctx, options={"max_samples": 30})
    fresh = sp.compare(a, b, "block2", other, metrics="cka-linear", options={"max_samples": 30})
    assert second["cka-linear"].score == fresh["cka-linear"].score != first["cka-linear"].score
    assert second["cka-linear"].details["n"] == 30


def _rng_states():
    import random

    import numpy as np

    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def _assert_same_rng(before, after):
    assert torch.equal(before[0], after[0]), "torch RNG changed"
    assert before[1][0] == after[1][0] and (before[1][1] == after[1][1]).all() and before[1][2:] == after[1][2:], \
        "NumPy RNG changed"
    assert before[2] == after[2], "random RNG changed"


def test_compare_leaves_the_global_rngs_as_they_were(data, fresh_manager):
    import random

    import numpy as np

    drawn = []

    class Draws:
        @sp.hookimpl
        def similarity(self):
            drawn.append((torch.rand(1).item(), float(np.random.rand()), random.random()))
            return 1.0

    class DrawsThenRaises:
        @sp.hookimpl
        def similarity(self):
            torch.rand(100), np.random.rand(100), random.random()
            raise RuntimeError("after drawing")

    sp.register_metric(Draws, "draws")
    sp.register_metric(DrawsThenRaises, "draws-then-raises")
    a, b = tiny_cnn(), tiny_cnn(seed=1)  # (tiny_cnn seeds the global generator itself)
    torch.manual_seed(123), np.random.seed(123), random.seed(123)
    before = _rng_states()
    report = sp.compare(a, b, "block1", data, metrics=["draws-then-raises", "draws", "cka-linear"])
    assert "after drawing" in report["draws-then-raises"].error and report["draws"].ok
    _assert_same_rng(before, _rng_states())
    with pytest.raises(sp.UnknownOption):
        sp.compare(a, b, "block1", data, metrics="cka-linear", options={"epochs": 1})
    _assert_same_rng(before, _rng_states())
    torch.rand(5), np.random.rand(5), random.random()  # other global state: the metric still sees `seed`
    sp.compare(a, b, "block1", data, metrics="draws")
    assert drawn[0] == drawn[1]
    sp.compare(a, b, "block1", data, metrics="draws", seed=1)
    assert drawn[2] != drawn[0]


def test_compare_does_not_change_a_context_passed_in(data):
    a, b = tiny_cnn(seed=0), tiny_cnn(seed=1)
    ctx = Context(data, seed=5, options={"max_samples": 20})
    sp.compare(a, b, "block2", data, metrics="cka-linear", context=ctx, seed=1, options={"max_samples": 30}, progress="auto")
    assert (ctx.data, ctx.seed, ctx.options, ctx.progress) == (data, 5, {"max_samples": 20}, "never")
    shared = dict(ctx.memo)
    assert any(k[0] == "activations" for k in shared)  # same data: the caches are shared (the point of passing it)
    other = sp.Data(test=TensorDataset(torch.rand(40, 1, 16, 16), torch.zeros(40, dtype=torch.long)))
    sp.compare(a, b, "block2", other, metrics="cka-linear", context=ctx)
    assert ctx.data is data and ctx.memo == shared  # other data: a memo of its own, this one untouched


@pytest.mark.gpu
def test_compare_on_cuda_leaves_the_cuda_rng_as_it_was(data, fresh_manager):
    class DrawsOnCuda:
        @sp.hookimpl
        def similarity(self, device):
            return float(torch.rand(1, device=device))

    sp.register_metric(DrawsOnCuda, "draws-cuda")
    a, b = tiny_cnn(), tiny_cnn(seed=1)
    torch.cuda.manual_seed_all(7)
    before = [torch.cuda.get_rng_state(i) for i in range(torch.cuda.device_count())]
    first = sp.compare(a, b, "block1", data, metrics=["draws-cuda", "cka-linear"], device="cuda")
    after = [torch.cuda.get_rng_state(i) for i in range(torch.cuda.device_count())]
    assert all(torch.equal(x, y) for x, y in zip(before, after))
    torch.rand(3, device="cuda")
    again = sp.compare(a, b, "block1", data, metrics="draws-cuda", device="cuda")
    assert first["draws-cuda"].score == again["draws-cuda"].score  # seeded from `seed` on the GPU too
