"""Faults made on purpose: plugins that change the donors, lying caches, bad values, unwritable outputs,
hanging metrics. Each case asserts the behaviour that makes the fault visible instead of silently wrong."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.networks.context import Context
from similarity_plugins.networks.data import Data
from tests.helpers.models import assert_unchanged, snapshot, tiny_cnn

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data(n_train: int = 48, n_test: int = 40) -> Data:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n_train, 1, 16, 16, generator=g)
    y = torch.randint(0, 10, (n_train,), generator=g)
    return Data(train=TensorDataset(x, y), test=TensorDataset(x[:n_test], y[:n_test]))


def _plugin(action, name: str = "meddler"):
    """A metric plugin that does ``action(front, end)`` and returns 0.5."""
    class Meddler:
        needs = ("test",)

        def similarity(self, front, end, layer, data, context):
            action(front, end)
            context.activations(front, layer.front, "test")   # cached while the donor is changed
            return 0.5
    Meddler.similarity = sp.hookimpl(Meddler.similarity)
    return Meddler


def _negate_conv(front, end):
    with torch.no_grad():
        front.block1[0].weight.mul_(-1)


def _bn_mean(front, end):
    front.block1[1].running_mean.fill_(3.0)


def _grad_off(front, end):
    torch.set_grad_enabled(False)


def _default_double(front, end):
    torch.set_default_dtype(torch.float64)


def _hook(front, end):
    end.block2.register_forward_hook(lambda m, i, o: o * 0)
    front.block1.register_forward_pre_hook(lambda m, i: None)
    end.fc.register_full_backward_hook(lambda m, gi, go: None)


def _global_hook(front, end):
    torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None)


def _replace_module(front, end):
    front.block1[2] = nn.Tanh()


def _replace_parameter(front, end):
    end.fc.weight = nn.Parameter(torch.zeros_like(end.fc.weight))


def _to_double(front, end):
    front.double()


def _padding(front, end):
    front.block1[0].padding = (2, 2)


def _bn_eps(front, end):
    front.block1[1].eps = 10.0


def _rng(front, end):
    torch.rand(5)
    np.random.rand(5)
    random.random()


CASES = [
    (_negate_conv, "block1.0.weight values changed"),
    (_bn_mean, "block1.1.running_mean values changed"),
    (_hook, "forward hooks on block2"),
    (_global_hook, "torch's global module hooks (global_forward_hooks)"),
    (_replace_module, "submodules of block1 replaced"),
    (_replace_parameter, "parameters of fc replaced"),
    (_to_double, "block1.0.weight moved to torch.float64"),
    (_padding, "settings of block1.0 (padding)"),
    (_bn_eps, "settings of block1.1 (eps)"),
]


@pytest.fixture
def donors():
    front, end = tiny_cnn(seed=0), tiny_cnn(seed=1)
    front.eval()
    end.eval()
    return front, end


@pytest.mark.parametrize("action,expected", CASES, ids=[c[0].__name__.strip("_") for c in CASES])
def test_a_plugin_that_changes_a_donor_gets_an_error_row_and_the_donors_are_restored(fresh_manager, donors, action,
                                                                                       expected):
    front, end = donors
    data = _data()
    before = snapshot(front), snapshot(end)
    baseline = sp.compare(front, end, "block2", data, "cka-linear")["cka-linear"].score
    sp.register_metric(_plugin(action), "meddler")
    report = sp.compare(front, end, "block2", data, ["meddler", "cka-linear"])
    row = report["meddler"]
    assert row.score is None
    assert "DonorModified" in row.error and "'meddler'" in row.error and expected in row.error, row.error
    assert report["cka-linear"].ok
    assert report["cka-linear"].score == baseline   # the later metric saw the original donors, nothing cached stale
    assert_unchanged(front, before[0])
    assert_unchanged(end, before[1])
    assert [type(m) for m in front.modules()] == [type(m) for m in tiny_cnn().modules()]
    assert not front.block1._forward_pre_hooks and not end.block2._forward_hooks and not end.fc._backward_hooks
    assert not torch.nn.modules.module._global_forward_hooks
    assert front.block1[0].padding == (1, 1) and front.block1[1].eps == 1e-5
    assert sp.compare(front, end, "block2", data, "cka-linear")["cka-linear"].score == baseline


@pytest.mark.parametrize("action,setting", [(_grad_off, "grad mode"), (_default_double, "default dtype")])
def test_global_torch_settings_are_restored_after_every_metric(fresh_manager, donors, action, setting):
    front, end = donors
    sp.register_metric(_plugin(action), "meddler")
    report = sp.compare(front, end, "block2", _data(), ["meddler", "stitch-slm"],
                        options={"epochs": 1, "batch_size": 16})
    assert report["meddler"].ok and setting in " ".join(report["meddler"].details["warnings"])
    assert report["stitch-slm"].ok, report["stitch-slm"].error   # trains a stitch: needs grad mode, float32
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32


def test_random_generators_are_the_callers_after_compare_and_each_metric_starts_seeded(fresh_manager, donors):
    front, end = donors
    draws = []

    class Draw:
        @sp.hookimpl
        def similarity(self, front):
            draws.append(float(torch.rand(1)))
            _rng(None, None)
            return draws[-1]

    sp.register_metric(_plugin(_rng), "meddler")
    sp.register_metric(Draw, "draw")
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(7)
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    sp.compare(front, end, "block2", _data(), ["draw", "meddler", "draw"], seed=3)
    sp.compare(front, end, "block2", _data(), ["meddler", "draw"], seed=3)
    assert draws[0] == draws[1]   # the same seeded start whatever ran before
    assert torch.equal(torch.get_rng_state(), states[0])
    assert (np.random.get_state()[1] == states[1]).all() and random.getstate() == states[2]


def test_a_metric_that_raises_after_changing_a_donor_reports_both(fresh_manager, donors):
    front, end = donors
    before = snapshot(front)

    def fail(front, end):
        _negate_conv(front, end)
        raise RuntimeError("boom")

    sp.register_metric(_plugin(fail), "meddler")
    row = sp.compare(front, end, "block2", _data(), "meddler")["meddler"]
    assert "block1.0.weight values changed" in row.error and "boom" in row.error
    assert_unchanged(front, before)


def test_the_guard_costs_little_and_nan_weights_count_as_unchanged(donors):
    from similarity_plugins.runner.guard import DonorGuard, same_bits

    front, end = donors
    with torch.no_grad():
        front.fc.bias[0] = float("nan")
    guard = DonorGuard({"front": front, "end": end})
    assert guard.check() is None
    assert same_bits(torch.tensor([float("nan")]), torch.tensor([float("nan")]))
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))


# ----------------------------------------------------------------------------- cache keys and verified files


def _variants():
    """Three changes that keep every tensor: BatchNorm eps, conv dilation+padding, pool padding."""
    def bn(m):
        m.block1[1].eps = 10.0

    def conv(m):
        m.block1[0].dilation, m.block1[0].padding = (2, 2), (2, 2)

    def pool(m):
        m.block1[3].padding = 1

    return {"bn-eps": bn, "conv-dilation": conv, "pool-padding": pool}


def _iri_kw(tmp_path, **kw):
    return dict(steps=4, batch_size=8, progress="never", cache_dir=tmp_path, optimizer="adam", **kw)


def test_module_settings_enter_every_cache_key(tmp_path):
    import copy

    from similarity_plugins.iri import generate_iris
    from similarity_plugins.networks.parallel import module_digest

    model = tiny_cnn().eval()
    seeds = torch.rand(8, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    base = generate_iris(model, "block2", seeds, **_iri_kw(tmp_path))
    keys, digests = {base.key}, {module_digest([model])}
    for name, change in _variants().items():
        variant = copy.deepcopy(model)
        change(variant)
        iris = generate_iris(variant, "block2", seeds, **_iri_kw(tmp_path))
        assert not iris.stats.get("from_cache"), name   # a cached set of the original would be wrong here
        keys.add(iris.key)
        digests.add(module_digest([variant]))
    assert len(keys) == 4 and len(digests) == 4
    again = generate_iris(model, "block2", seeds, **_iri_kw(tmp_path))
    assert again.stats.get("from_cache") and torch.equal(again.inputs, base.inputs)


def _only(folder, suffix):
    import os

    files = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(suffix)]
    assert len(files) == 1, files
    return files[0]


def test_a_tampered_or_truncated_iri_cache_file_is_a_corrupt_miss_and_recomputed(tmp_path):
    from similarity_plugins.iri import generate_iris
    from similarity_plugins.utils.digest import CorruptFileWarning

    model = tiny_cnn().eval()
    seeds = torch.rand(8, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    fresh = generate_iris(model, "block2", seeds, **_iri_kw(tmp_path))
    path = _only(tmp_path, "iris-" + fresh.key + ".pt")
    record = torch.load(path, weights_only=True)
    record["payload"]["inputs"].fill_(7.0)            # edited inside a valid file, digest left as it was
    record["payload"]["rel_error"].zero_()
    torch.save(record, path)
    with pytest.warns(CorruptFileWarning, match="corrupt"):
        again = generate_iris(model, "block2", seeds, **_iri_kw(tmp_path))
    assert not again.stats.get("from_cache") and torch.equal(again.inputs, fresh.inputs)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])    # truncated
    with pytest.warns(CorruptFileWarning, match="corrupt"):
        third = generate_iris(model, "block2", seeds, **_iri_kw(tmp_path))
    assert torch.equal(third.inputs, fresh.inputs)
    assert generate_iris(model, "block2", seeds, **_iri_kw(tmp_path)).stats.get("from_cache")   # rewritten whole


class _Stop(Exception):
    pass


def _stop_at(step):
    def callback(info):
        if info["step"] == step:
            raise _Stop
    return callback


@pytest.mark.parametrize("damage", ["edited", "truncated"])
def test_a_damaged_checkpoint_is_corrupt_not_another_run_and_the_run_starts_over(tmp_path, damage):
    import warnings

    from similarity_plugins.iri import generate_iris
    from similarity_plugins.utils.digest import CorruptFileWarning

    model = tiny_cnn().eval()
    seeds = torch.rand(8, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    kw = _iri_kw(tmp_path, checkpoint_every=2)
    kw.update(steps=12, batch_size=4)
    reference = generate_iris(model, "block2", seeds, **{**kw, "cache_dir": tmp_path / "ref"})
    with pytest.raises(_Stop):
        generate_iris(model, "block2", seeds, callback=_stop_at(5), **kw)
    path = _only(tmp_path, ".ckpt.pt")
    if damage == "edited":
        record = torch.load(path, weights_only=True)
        record["payload"]["out_err"].zero_()            # "every sample converged"
        torch.save(record, path)
    else:
        data = open(path, "rb").read()
        open(path, "wb").write(data[:-300])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = generate_iris(model, "block2", seeds, **kw)
    messages = [str(w.message) for w in caught]
    assert any(issubclass(w.category, CorruptFileWarning) and "corrupt" in str(w.message) for w in caught), messages
    assert not any("another run" in m for m in messages), messages
    assert not resumed.stats.get("resumed")
    assert torch.equal(resumed.inputs, reference.inputs) and torch.equal(resumed.rel_error, reference.rel_error)


# ----------------------------------------------------------------------------------------------- outputs


def _cli(*args):
    from similarity_plugins.cli.main import main

    return main(list(args))


CMP = ["compare", "--front", "small-cnn", "--end", "small-cnn", "--layer", "block2", "--data", "digits",
       "--metrics", "cka-linear", "--max-test", "64", "--no-progress"]


def _no_work(monkeypatch):
    """Make any comparison or training fail the test: the output checks must come first."""
    import similarity_plugins.cli.loading as loading
    import similarity_plugins.cli.score as score_cli

    fail = lambda *a, **k: pytest.fail("work started before the output check")  # noqa: E731
    monkeypatch.setattr(loading, "load_data", fail)
    monkeypatch.setattr(score_cli, "load_array", fail)


@pytest.mark.parametrize("command,case", [(c, k) for c in ("compare", "train", "iris", "score")
                                          for k in ("folder", "under-a-file", "read-only", "same-file")
                                          if (c, k) != ("train", "same-file")])   # train writes one file
def test_unwritable_outputs_are_refused_before_any_work(tmp_path, capsys, monkeypatch, case, command):
    _no_work(monkeypatch)
    (tmp_path / "a-file").write_text("x")
    bad = {"folder": str(tmp_path), "under-a-file": str(tmp_path / "a-file" / "r.json"),
           "read-only": "/proc/similarity-plugins-test/r.json", "same-file": str(tmp_path / "r.npz")}[case]
    args = {"compare": CMP + ["--out", str(tmp_path / "r.npz"), "--csv", bad],
            "train": ["train", "--model", "small-cnn", "--data", "digits", "--out", bad],
            "iris": ["iris", "--model", "small-cnn", "--layer", "block1", "--data", "digits", "--out",
                     str(tmp_path / "r.npz"), "--gallery", bad],
            "score": ["score", "x.npy", "y.npy", "--out", str(tmp_path / "r.npz"), "--csv", bad]}[command]
    assert _cli(*args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert bad in err or (case == "read-only" and "/proc" in err), err
    assert not (tmp_path / "r.npz").exists()


def test_compare_writes_its_outputs_whole_with_the_umask_modes_and_through_symlinks(tmp_path, capsys):
    import json
    import os
    import stat

    existing = tmp_path / "r.json"
    existing.write_text("old")
    os.chmod(existing, 0o640)
    target = tmp_path / "real.csv"
    target.write_text("old")
    os.chmod(target, 0o664)
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    fresh = tmp_path / "sub" / "r2.json"
    old = os.umask(0o027)
    try:
        assert _cli(*CMP, "--out", str(existing), "--csv", str(link)) == 0
        assert _cli(*CMP, "--out", str(fresh)) == 0
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731
    assert mode(existing) == 0o640 and mode(target) == 0o664 and mode(fresh) == 0o640
    assert link.is_symlink() and target.read_text().startswith("metric,layer,score")
    assert json.loads(existing.read_text())["results"][0]["metric"] == "cka-linear"
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]


def test_write_all_leaves_no_output_when_one_fails(tmp_path, monkeypatch):
    import os

    from similarity_plugins.utils import io

    a, b = tmp_path / "a.json", tmp_path / "b.csv"
    real = os.replace
    calls = []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(dst))
        real(src, dst)

    monkeypatch.setattr(io.os, "replace", flaky)
    with pytest.raises(OSError):
        io.write_all({str(a): "x", str(b): "y"})
    assert not a.exists() and not b.exists() and not os.listdir(tmp_path)
    monkeypatch.setattr(io.os, "replace", real)
    with pytest.raises(IsADirectoryError):
        io.write_all({str(a): "x", str(tmp_path): "y"})
    assert not os.listdir(tmp_path)


def test_the_cli_turns_an_oserror_into_one_line_naming_the_path(capsys, monkeypatch):
    import similarity_plugins.cli.compare_inputs as cli_compare  # where compare loads its data

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied", "/data/secret/x.pt")

    monkeypatch.setattr(cli_compare, "load_data", denied)
    assert _cli(*CMP) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: cannot use '/data/secret/x.pt': Permission denied"


# -------------------------------------------------------------------------------------- timeout and Ctrl-C


def test_a_metric_over_its_timeout_gets_an_error_row_and_can_no_longer_touch_anything(fresh_manager, donors):
    import threading
    import time

    front, end = donors
    before = snapshot(front), snapshot(end)
    data = _data()
    baseline = sp.compare(front, end, "block2", data, "cka-linear")["cka-linear"].score
    late_write = threading.Event()

    class Sleeper:
        @sp.hookimpl
        def similarity(self, front, context):
            time.sleep(1.0)
            with torch.no_grad():
                for p in front.parameters():
                    p.zero_()          # too late: these are private copies nobody uses any more
            context.memo.clear()
            late_write.set()
            return 1.0

    sp.register_metric(Sleeper, "sleeper")
    start = time.perf_counter()
    report = sp.compare(front, end, ["block2", "block3"], data, ["sleeper", "cka-linear"], timeout=0.3)
    assert time.perf_counter() - start < 5
    for layer in ("block2", "block3"):
        row = report["sleeper", layer]
        assert row.score is None and row.error.startswith("MetricTimeout") and "0.3 s" in row.error
    assert report["cka-linear", "block2"].score == baseline
    assert late_write.wait(5)
    assert_unchanged(front, before[0])
    assert_unchanged(end, before[1])
    assert sp.compare(front, end, "block2", data, "cka-linear", timeout=5)["cka-linear"].score == baseline
    with pytest.raises(ValueError, match="timeout"):
        sp.compare(front, end, "block2", data, "cka-linear", timeout=-1)


class _Scribbler:
    """Zeroes the front's cached test activations in place (the next metric must not see it)."""

    @sp.hookimpl
    def similarity(self, front, layer, context):
        context.activations(front, layer.front, "test").mul_(0)
        return 0.0


class _Probe:
    """The sum of the front's cached test activations' magnitudes: 0 when a write in place went unnoticed."""

    @sp.hookimpl
    def similarity(self, front, layer, context):
        return float(context.activations(front, layer.front, "test").double().abs().sum())


def test_after_a_timed_out_metric_a_write_into_cached_activations_is_still_noticed(fresh_manager, donors):
    import threading

    release = threading.Event()

    class Sleeper:
        @sp.hookimpl
        def similarity(self, front, layer, context):
            context.activations(front, layer.front, "test")
            release.wait(10)
            return 1.0

    for name, plugin in (("sleeper", Sleeper), ("scribbler", _Scribbler), ("probe", _Probe)):
        sp.register_metric(plugin, name)
    front, end = donors
    data = _data()
    baseline = sp.compare(front, end, "block2", data, "probe")["probe"].score
    try:
        report = sp.compare(front, end, "block2", data, ["sleeper", "scribbler", "probe"], timeout=0.3)
    finally:
        release.set()   # the abandoned call ends
    assert report["sleeper", "block2"].error.startswith("MetricTimeout") and baseline > 0
    assert any("in place" in w for w in report["scribbler", "block2"].details["warnings"])
    assert report["probe", "block2"].score == baseline


def test_the_context_renewed_after_a_timeout_guards_what_it_keeps(donors):
    from similarity_plugins.runner.isolation import Donors, MetricTimeout

    front, end = donors
    ctx = Context(_data(), reuse_nodes=True, derived_bytes=10**7)
    held = Donors(front, end, ctx, timeout=5.0)
    acts, key = held.ctx.activations(held.front, "block2", "test"), ("activations", id(held.front), "block2", "test")
    held.renew(set(held.ctx.memo), MetricTimeout("late"))
    assert held.ctx is not ctx and (held.ctx.reuse_nodes, held.ctx.derived_bytes) == (True, 10**7)
    assert key in held.ctx.memo   # kept
    acts.mul_(0)   # the abandoned thread, or a later metric, writes into a kept tensor in place
    assert "activations block2 test" in held.ctx.drop_changed()   # noticed, as in any other context
    assert not ctx.memo   # the caller's context got nothing of the call's


class _CtrlC:
    @sp.hookimpl
    def similarity(self, front):
        raise KeyboardInterrupt


def test_ctrl_c_raises_in_python_with_the_finished_rows_and_the_donors_restored(fresh_manager, donors):
    front, end = donors
    before = snapshot(front)

    def meddle_then_stop(front, end):
        _negate_conv(front, end)
        raise KeyboardInterrupt

    sp.register_metric(_CtrlC, "ctrl-c")
    sp.register_metric(_plugin(meddle_then_stop), "stop")
    with pytest.raises(KeyboardInterrupt) as caught:
        sp.compare(front, end, "block2", _data(), ["cka-linear", "ctrl-c", "cka-debiased"])
    report = caught.value.report
    assert report.meta["interrupted"] and report["cka-linear"].ok
    assert [r.error.split(":")[0] for r in report.results[1:]] == ["KeyboardInterrupt"] * 2
    with pytest.raises(KeyboardInterrupt):
        sp.compare(front, end, "block2", _data(), ["stop"])
    assert_unchanged(front, before)


def test_ctrl_c_in_the_cli_writes_the_finished_rows_marked_interrupted_and_exits_130(fresh_manager, tmp_path, capsys):
    import json

    sp.register_metric(_CtrlC, "ctrl-c")
    out, table = tmp_path / "r.json", tmp_path / "r.csv"
    args = [a if a != "cka-linear" else "cka-linear,ctrl-c" for a in CMP]
    assert _cli(*args, "--out", str(out), "--csv", str(table)) == 130
    report = json.loads(out.read_text())
    assert report["meta"]["interrupted"] is True
    rows = {r["metric"]: r for r in report["results"]}
    assert rows["cka-linear"]["score"] > 0 and rows["ctrl-c"]["error"].startswith("KeyboardInterrupt")
    assert "KeyboardInterrupt" in table.read_text() and "interrupted" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- bad values


def _split(n=40, *, x=None, y=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 16, 16, generator=g) if x is None else x
    y = torch.randint(0, 10, (n,), generator=g) if y is None else y
    return TensorDataset(x, y)


def _nan_images():
    x = torch.rand(40, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    x[7, 0, 3, 3] = float("nan")
    return x


STITCH = {"epochs": 1, "batch_size": 16}


@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize("bad,message", [
    ({"x": "nan"}, "NaN or Inf inputs (sample 7"),
    ({"y": torch.rand(40) * 9}, "torch.float32 labels"),
    ({"y": torch.full((40,), -1)}, "negative label"),
], ids=["nan-inputs", "float-labels", "negative-labels"])
def test_bad_values_in_a_split_give_the_metrics_that_read_it_an_error_row(donors, split, bad, message):
    front, end = donors
    kw = {k: (_nan_images() if v == "nan" else v) for k, v in bad.items()}
    data = Data(**{split: _split(**kw), ("test" if split == "train" else "train"): _split(seed=2)})
    report = sp.compare(front, end, "block2", data, ["cka-linear", "stitch-slm"], options=STITCH)
    readers = ["cka-linear", "stitch-slm"] if split == "test" else ["stitch-slm"]
    for row in report:
        if row.metric in readers:
            assert row.score is None and message in row.error and f"the {split} split" in row.error, row.error
        else:
            assert row.ok, row.error


def test_labels_beyond_the_models_classes_are_refused(donors):
    front, end = donors
    y = torch.randint(0, 10, (40,), generator=torch.Generator().manual_seed(0))
    y[3] = 12
    report = sp.compare(front, end, "block2", Data(train=_split(seed=2), test=_split(y=y)), ["stitch-slm"],
                        options=STITCH)
    import re

    assert re.search(r"label.* 12,? but the (end )?model has 10 (classes|outputs)", report["stitch-slm"].error)


@pytest.mark.parametrize("options,metric,message", [
    ({"max_samples": -5}, "cka-linear", "option max_samples must be a positive whole number of samples"),
    ({"max_samples": 0}, "cka-linear", "option max_samples must be a positive whole number of samples"),
    ({"max_train": 0, **STITCH}, "stitch-slm", "option max_train must be a positive whole number of samples"),
    ({"iri_tol": "abc"}, "iri-slm", "option iri_tol must be a positive number (relative representation error, e.g. "
                                    "1e-2), got 'abc'"),
    ({"epochs": "five"}, "stitch-slm", "option epochs must be a positive integer, got 'five'"),
])
def test_bad_option_values_give_that_metric_an_error_row_naming_the_option(donors, options, metric, message):
    front, end = donors
    report = sp.compare(front, end, "block2", _data(), [metric, "cka-debiased"], options={metric: options})
    assert report[metric].score is None and message in report[metric].error, report[metric].error
    assert report["cka-debiased"].ok


@pytest.mark.parametrize("extra,message", [
    (["--max-test", "-5"], "argument --max-test: expected a positive whole number"),
    (["--max-train", "0"], "argument --max-train: expected a positive whole number"),
    (["--option", "iri_tol=abc", "--metrics", "iri-slm"], "option iri_tol must be a positive number"),
    (["--option", "max_samples=0"], "option max_samples must be a positive whole number of samples"),
    (["--front", "small-cnn?in_channels=3"], "in_channels=3 in the model spec 'small-cnn?in_channels=3' disagrees"),
    (["--in-channels", "3"], "--in-channels 3 disagrees with the data"),
    (["--timeout", "0"], "timeout: expected a finite positive number"),
])
def test_the_cli_refuses_bad_values_before_any_work_naming_the_option(capsys, extra, message):
    args = list(CMP)
    for flag in ("--front", "--metrics"):
        if flag in extra:
            i = args.index(flag)
            del args[i:i + 2]
    with pytest.raises(SystemExit) if extra[0].startswith("--max") else _nothing():
        code = _cli(*args, *extra)
        assert code == 2
    assert message in capsys.readouterr().err


def test_the_cli_refuses_zero_seed_and_train_limits(capsys):
    for args in (["iris", "--model", "small-cnn", "--layer", "block1", "--data", "digits", "--max-seeds", "0",
                  "--out", "x.npz"],
                 ["train", "--model", "small-cnn", "--data", "digits", "--max-train", "-1", "--out", "x.pt"]):
        with pytest.raises(SystemExit) as exit_:
            _cli(*args)
        assert exit_.value.code == 2 and "expected a positive whole number" in capsys.readouterr().err


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.slow
def test_a_timeout_on_one_rank_is_an_error_on_every_rank_at_once(tmp_path):

    from tests.helpers import dist_workers

    results = dist_workers.run_ranks(["rank_timeout"], str(tmp_path), timeout_s=30, join_timeout_s=120)
    outcomes = [results[r]["rank_timeout"] for r in (0, 1)]
    assert all(status == "ok" for status, _ in outcomes), outcomes
    (rows0, seconds0), (rows1, seconds1) = (value for _, value in outcomes)
    assert rows0 == rows1
    hung, later = rows0
    assert hung[2] is None and "rank 1 of 2 failed: MetricTimeout" in hung[3], hung
    assert later[2] is None and "timed out under torchrun" in later[3], later
    assert seconds0 < 10 and seconds1 < 10


def test_a_reused_context_forgets_a_model_changed_in_place_between_calls(donors):
    front, end = donors
    data = _data()
    ctx = Context(data)
    first = sp.compare(front, end, "block2", data, "cka-linear", context=ctx)["cka-linear"].score
    assert sp.compare(front, end, "block2", data, "cka-linear", context=ctx)["cka-linear"].score == first
    front.block1[1].eps = 10.0      # the user changes a setting between the calls
    changed = sp.compare(front, end, "block2", data, "cka-linear", context=ctx)["cka-linear"].score
    assert changed == sp.compare(front, end, "block2", data, "cka-linear")["cka-linear"].score != first


@pytest.mark.gpu
def test_a_plugin_that_moves_a_donor_to_another_device_is_caught_and_undone(fresh_manager, donors):
    front, end = donors
    before = snapshot(front)
    sp.register_metric(_plugin(lambda f, e: f.cuda()), "mover")
    row = sp.compare(front, end, "block2", _data(), "mover")["mover"]
    assert row.score is None and "block1.0.weight moved to torch.float32 on cuda:0" in row.error, row.error
    assert all(t.device.type == "cpu" for t in list(front.parameters()) + list(front.buffers()))
    assert_unchanged(front, before)


def _study_writers(tmp_path):
    """Each study's (and the demo's) writer with small synthetic results: ``{study: (write, file names)}``."""
    from similarity_plugins.apps.studies import robustness, unseen_cue
    from similarity_plugins.apps.studies import shortcut as demo
    from similarity_plugins.host.results import Report, SimilarityResult
    from similarity_plugins.iri.result import IRISet

    def report(metrics):
        scores = {m: 0.3 + 0.08 * i for i, m in enumerate(metrics)}
        return Report([SimilarityResult(m, s, {"test_ci95": [s - 0.05, s + 0.05]}, layer=layer)
                       for m, s in scores.items() for layer in ("block3", "block4")])

    seeds = torch.rand(3, 1, 8, 8)
    iris = ({"block4": IRISet(seeds.clone(), torch.full((3,), 0.01, dtype=torch.float64), torch.ones(3, dtype=torch.long),
                              torch.zeros(3, dtype=torch.float64))}, seeds)
    rows = [{"donor_seeds": [2 * i, 2 * i + 1], "metric": m, "layer": "block3", "excess": 0.05 * i - 0.02 * j}
            for i in range(3) for j, m in enumerate(unseen_cue.METRICS)]
    summary = unseen_cue.summarise(rows, ["block3"])
    pairs = {"a -> b": report(demo.METRICS), "a -> c": report(demo.METRICS)}
    return {
        "shortcut": (lambda out: demo.write_files(out, pairs, {}, demo.DemoConfig.quick(), 0, ["x"], [], iris),
                     ["report.json", "report.csv", "similarity.png", "iris.png", "report.html"]),
        "robustness": (lambda out: robustness.write_files(out, {t: report(robustness.METRICS) for t in robustness.PAIRS},
                                                          {}, robustness.RobustnessConfig.quick(), 0, ["x"], {}, iris),
                       ["report.json", "report.csv", "similarity.png", "iris.png"]),
        "unseen-cue": (lambda out: unseen_cue.write_files(out, unseen_cue.UnseenCueConfig.quick(), 0, rows, summary, ["x"]),
                       ["report.json", "report.csv", "excess.png"]),
    }


@pytest.mark.parametrize("study", ["shortcut", "robustness", "unseen-cue"])
def test_a_study_writes_all_its_files_with_the_umask_modes(tmp_path, study):
    import json
    import os

    write, names = _study_writers(tmp_path)[study]
    out = tmp_path / "out"
    out.mkdir()
    old = os.umask(0o027)
    try:
        paths = write(str(out))
    finally:
        os.umask(old)
    assert paths == [str(out / name) for name in names]
    assert sorted(os.listdir(out)) == sorted(names)  # no temporary file left
    assert json.loads((out / "report.json").read_text())["explanation"] == ["x"]
    assert (out / "report.csv").read_text().count("\n") > 1
    for name in names:
        assert (out / name).stat().st_mode & 0o777 == 0o640
        if name.endswith(".png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _figures_as_tiny_pngs(monkeypatch) -> None:
    """The studies' figures as a few bytes of PNG header instead of rendered plots (seconds)."""
    from similarity_plugins.apps import gallery, plots
    from similarity_plugins.apps.studies import unseen_cue

    png = b"\x89PNG\r\n\x1a\n"
    for module, name in ((gallery, "iris_figure"), (plots, "sweep_figure"), (unseen_cue, "excess_figure")):
        monkeypatch.setattr(module, name, lambda *a, **k: png)


@pytest.mark.parametrize("study", ["shortcut", "robustness", "unseen-cue"])
def test_a_study_whose_last_file_cannot_be_written_leaves_none_of_its_files(tmp_path, study, monkeypatch):
    import os

    from similarity_plugins.utils import io

    _figures_as_tiny_pngs(monkeypatch)  # what is checked is which files are left; rendering is the test above's
    write, names = _study_writers(tmp_path)[study]
    out = tmp_path / "out"
    (out / names[-1]).mkdir(parents=True)  # the last target is a folder: its rename fails after the others
    with pytest.raises(IsADirectoryError):
        write(str(out))
    assert os.listdir(out) == [names[-1]] and not os.listdir(out / names[-1])
    os.rmdir(out / names[-1])
    if study == "shortcut":  # a figure that fails to render: nothing is written at all
        from similarity_plugins.apps import gallery

        monkeypatch.setattr(gallery, "iris_figure", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("render failed")))
        with pytest.raises(RuntimeError, match="render failed"):
            write(str(out))
        assert os.listdir(out) == []
        monkeypatch.undo()
        _figures_as_tiny_pngs(monkeypatch)
    real, calls = os.replace, []

    def full_disk_on_the_second(src, dst):  # one rename fails half-way: the files renamed before are removed
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(dst))
        real(src, dst)

    monkeypatch.setattr(io.os, "replace", full_disk_on_the_second)
    with pytest.raises(OSError, match="No space left"):
        write(str(out))
    assert os.listdir(out) == []
