"""Refusals and isolation: rows that must correspond, values that must mean what they say, plugins that cannot
take the run down or change what others see, outputs that survive the shell, and clear answers for weak cases.

Each probe states what a careful user or a careless plugin author would do and asserts the answer that keeps the
fault visible. Every model and array is tiny and built here."""

from __future__ import annotations

import copy
import errno
import json
import os
import signal
import sys
import time

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import similarity_plugins as sp
from similarity_plugins.host.contract import Option
from similarity_plugins.networks.data import Data
from tests.helpers.models import tiny_cnn

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _arrays(n=24, dx=6, dy=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, dx, generator=g, dtype=torch.float64), torch.randn(n, dy, generator=g, dtype=torch.float64)


def _images(n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)


def _twins():
    """Two copies of one model: any correct comparison of their activations on the same rows is exactly alike."""
    front = tiny_cnn(seed=0).eval()
    return front, copy.deepcopy(front)


def _cli(*argv: str) -> int:
    from similarity_plugins.cli.main import main

    return main(list(argv))


def _hook(fn):
    fn = sp.hookimpl(fn)
    return fn


class _Flag:
    """Declares a boolean option and scores 1.0 when the metric received True, 0.0 for False."""
    options = (Option("flag", False, "a switch"),)
    activations_only = True
    needs = ("test",)

    @sp.hookimpl
    def similarity(self, options):
        value = options["flag"]
        assert isinstance(value, bool), f"received {value!r}"
        return float(value)


# ------------------------------------------------------------------------------ values that mean what they say


@pytest.mark.parametrize("value", [-5, 0, 2.5, "10", True])
def test_score_refuses_a_bad_sample_limit_as_compare_does(value):
    x, y = _arrays()
    row = sp.score(x, y, metrics=["cka-linear"], options={"max_samples": value})["cka-linear"]
    assert row.score is None and "max_samples" in row.error


@pytest.mark.parametrize("text,expected", [("false", False), ("0", False), ("no", False), ("False", False),
                                           ("true", True), ("1", True), ("yes", True), (0, False), (1, True)])
def test_a_boolean_option_given_as_text_or_0_1_means_what_it_says(fresh_manager, text, expected):
    sp.register_metric(_Flag, "flag-metric")
    x, y = _arrays()
    assert sp.score(x, y, metrics=["flag-metric"], options={"flag": text})["flag-metric"].score == float(expected)


@pytest.mark.parametrize("text", ["flase", "2", "maybe", 0.5, [True]])
def test_a_boolean_option_that_is_not_a_boolean_is_an_error_naming_it(fresh_manager, text):
    sp.register_metric(_Flag, "flag-metric")
    x, y = _arrays()
    row = sp.score(x, y, metrics=["flag-metric"], options={"flag": text})["flag-metric"]
    assert row.score is None and "option flag" in row.error


def test_the_cli_refuses_a_boolean_typo_before_any_work_and_reads_false_as_false(fresh_manager, tmp_path, capsys):
    sp.register_metric(_Flag, "flag-metric")
    x, y = _arrays()
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "y.npy", y.numpy())
    args = ["score", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--metrics", "flag-metric"]
    assert _cli(*args, "--option", "flag=flase") == 2
    assert "flag" in capsys.readouterr().err
    for text in ("false", "no", "0"):
        assert _cli(*args, "--option", f"flag={text}", "--out", str(tmp_path / "r.json")) == 0
        assert json.loads((tmp_path / "r.json").read_text())["results"][0]["score"] == 0.0


def test_stitch_bn_false_in_any_spelling_leaves_batchnorm_off():
    from similarity_plugins.host.values import coerce_option_values
    from similarity_plugins.stitch.settings import StitchSettings, stitch_options

    rules = {o.name: o.type for o in stitch_options()}
    for text in ("false", "no", "0", False, 0):
        options = coerce_option_values({"stitch_bn": text}, rules)
        assert options["stitch_bn"] is False and StitchSettings.from_options(options).stitch_bn is False
        assert StitchSettings(stitch_bn=text).validated().stitch_bn is False  # the settings read it by the same rule
    with pytest.raises(ValueError, match="option stitch_bn must be true or false"):
        coerce_option_values({"stitch_bn": "flase"}, rules)


@pytest.mark.parametrize("seed", [2.5, "1", True, 2**70, 2**63, None])
def test_seeds_are_integers_or_refused_naming_the_seed(seed):
    x, y = _arrays()
    with pytest.raises((TypeError, ValueError), match="seed"):
        sp.score(x, y, metrics=["cka-linear"], seed=seed)


def test_compare_refuses_a_seed_that_is_not_an_integer():
    front, end = _twins()
    with pytest.raises((TypeError, ValueError), match="seed"):
        sp.compare(front, end, "block2", Data(test=TensorDataset(*_images())), "cka-linear", seed=1.5)


@pytest.mark.parametrize("metric,minimum", [("cka-linear", 3), ("cka-rbf", 3), ("procrustes", 3), ("rsa", 3),
                                            ("cca", 3), ("cka-debiased", 4)])
def test_too_few_samples_for_a_measure_are_refused_naming_samples_and_the_minimum(metric, minimum):
    x, y = _arrays(n=2)
    row = sp.score(x, y, metrics=[metric])[metric]
    assert row.score is None and "samples" in row.error and str(minimum) in row.error


def test_the_minimum_sample_count_holds_in_compare_too():
    front, end = _twins()
    x, y = _images(40)
    report = sp.compare(front, end, "block2", Data(test=TensorDataset(x, y)), ["cka-linear", "procrustes"],
                        options={"max_samples": 2})
    for row in report:
        assert row.score is None and "samples" in row.error and "3" in row.error


def test_mutual_knn_with_every_other_sample_as_neighbours_is_refused():
    x, y = _arrays(n=6)
    row = sp.score(x, y, metrics=["mutual-knn"], options={"topk": 5})["mutual-knn"]
    assert row.score is None and "samples" in row.error


class _Outside:
    range = (0.0, 1.0)
    activations_only = True

    def __init__(self, value):
        self.value = value

    @sp.hookimpl
    def similarity(self):
        return self.value


def test_a_score_beyond_its_range_by_rounding_is_clamped_and_one_further_is_flagged(fresh_manager):
    sp.register_metric(_Outside(1.0 + 1e-12), "rounded")
    sp.register_metric(_Outside(1.5), "outside")
    x, y = _arrays()
    report = sp.score(x, y, metrics=["rounded", "outside"])
    assert report["rounded"].score == 1.0 and not report["rounded"].details.get("warnings")
    row = report["outside"]
    assert row.score == 1.5 and any("outside" in w and "range" in w for w in row.details["warnings"])


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), -1, 0, "5"])
def test_a_timeout_that_is_not_a_finite_positive_number_is_one_clear_line(timeout):
    front, end = _twins()
    with pytest.raises(ValueError, match="timeout"):
        sp.compare(front, end, "block2", Data(test=TensorDataset(*_images())), "cka-linear", timeout=timeout)


def test_an_option_no_selected_metric_takes_names_the_metrics_that_do_not_a_lookalike_metric():
    x, y = _arrays()
    with pytest.raises(ValueError) as caught:
        sp.score(x, y, metrics=["cka-linear"], options={"epochs": 3})
    message = str(caught.value)
    assert "procrustes" not in message and "stitch-slm" in message


def test_info_json_is_strict_json(fresh_manager, capsys):
    class Unbounded:
        range = (0.0, float("inf"))
        options = (Option("cap", float("inf"), "no cap"), Option("nan", float("nan"), "odd default"))

        @sp.hookimpl
        def similarity(self):
            return 0.0

    sp.register_metric(Unbounded, "unbounded")
    assert _cli("info", "unbounded", "--json") == 0
    json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert _cli("list", "--json") == 0
    json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))


def test_a_huge_error_is_cut_in_the_table(fresh_manager):
    class Loud:
        activations_only = True

        @sp.hookimpl
        def similarity(self):
            raise ValueError("x" * 100_000)

    sp.register_metric(Loud, "loud")
    x, y = _arrays()
    report = sp.score(x, y, metrics=["loud"])
    assert len(str(report)) < 2000 and "characters" in str(report)


def test_csv_with_many_detail_keys_is_linear():
    from similarity_plugins.host.results import Report, SimilarityResult

    rows = [SimilarityResult(f"m{i}", 0.5, {f"k{i}_{j}": j for j in range(20_000)}, layer="x->y") for i in range(2)]
    start = time.perf_counter()
    text = Report(rows).to_csv()
    assert time.perf_counter() - start < 2.0  # a list membership test per key took minutes here
    assert text.count("\n") == 3 and text.splitlines()[0].count(",") == 5 + 40_000 - 1


def test_overflowing_rbf_inputs_say_overflow_not_identical_rows():
    x, y = _arrays()
    row = sp.score(x * 1e305, y, metrics=["cka-rbf"])["cka-rbf"]
    assert row.score is None and "overflow" in row.error and "identical" not in row.error


@pytest.mark.parametrize("make,word", [(lambda x: x.to_sparse(), "sparse"), (lambda x: x.to("meta"), "meta")])
def test_sparse_and_meta_arrays_are_clear_answers(make, word):
    x, y = _arrays()
    try:
        report = sp.score(make(x), y, metrics=["cka-linear"])
    except (TypeError, ValueError) as exc:
        assert word in str(exc) and "x" in str(exc)
    else:
        assert report["cka-linear"].ok


def test_a_failing_layer_is_not_suggested_as_its_own_alternative():
    from similarity_plugins.networks.split import SplitNetwork
    from tests.helpers.models import TwoHeaded

    model = TwoHeaded()
    net = SplitNetwork(model, "split")
    with pytest.raises(TypeError) as caught:
        net.front(torch.rand(2, 1, 16, 16))
    assert "'split'" not in caught.value.args[0].partition("such as")[2]


# ------------------------------------------------------------------------------ rows that correspond


class _Augmented(Dataset):
    """Images with a random perturbation drawn from torch's generator on every read (a random transform)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] + 0.3 * torch.rand_like(self.x[i]), self.y[i]


class _Drifting(Dataset):
    """Returns a different image for the same index on every read, whatever the random generators say."""

    def __init__(self, x, y):
        self.x, self.y, self.reads = x, y, 0

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        self.reads += 1
        return self.x[i] * (1 + 0.1 * (self.reads % 7)), self.y[i]


def _cka_of_twins(test) -> sp.SimilarityResult:
    front, end = _twins()
    return sp.compare(front, end, "block2", Data(test=test), "cka-linear")["cka-linear"]


@pytest.mark.parametrize("how", ["shuffled loader", "augmenting dataset", "augmenting shuffled loader",
                                 "loader with a worker"])
def test_the_two_models_see_the_same_rows_however_the_data_is_fed(how):
    x, y = _images(48)
    test = {"shuffled loader": lambda: DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True),
            "augmenting dataset": lambda: _Augmented(x, y),
            "augmenting shuffled loader": lambda: DataLoader(_Augmented(x, y), batch_size=8, shuffle=True),
            "loader with a worker": lambda: DataLoader(_Augmented(x, y), batch_size=16, num_workers=1,
                                                       persistent_workers=True)}[how]()
    row = _cka_of_twins(test)
    assert row.ok and row.score == pytest.approx(1.0, abs=1e-9)


def test_a_random_transform_is_named_in_a_warning():
    x, y = _images(48)
    with pytest.warns(UserWarning, match="random"):
        _cka_of_twins(_Augmented(x, y))


def test_a_dataset_that_returns_other_images_for_the_same_index_is_refused():
    x, y = _images(48)
    row = _cka_of_twins(_Drifting(x, y))
    assert row.score is None and "same index" in row.error


class _Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.shared = nn.ReLU()
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))

    def forward(self, x):
        return self.head(self.shared(self.conv(self.shared(x - 0.5))))


class _Untraceable(_Twice):
    def forward(self, x):
        if float(x.sum()) > -1:  # data-dependent control flow: torch.fx cannot trace it
            x = x - 0.5
        return self.head(self.shared(self.conv(self.shared(x))))


@pytest.mark.parametrize("model", [_Twice, _Untraceable])
def test_an_activation_of_a_module_called_twice_is_refused_saying_how_many_times(model):
    front = model()
    x, y = _images(16)
    report = sp.compare(front, copy.deepcopy(front), "shared", Data(train=TensorDataset(x, y),
                        test=TensorDataset(x, y)), ["cka-linear", "procrustes"])
    for row in report:
        assert row.score is None and "2 times" in row.error


class _SequenceFirst(nn.Module):
    """A layer whose output puts the sequence first: (T, N, D), as batch_first=False layers do."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 8)
        self.mix = nn.Identity()
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        tokens = self.embed(x.reshape(len(x), 16, 16)).transpose(0, 1)  # (16, N, 8)
        return self.head(self.mix(tokens).mean(0))


def test_an_activation_whose_first_dimension_is_not_the_batch_is_refused():
    front = _SequenceFirst()
    x, y = _images(20)
    row = sp.compare(front, copy.deepcopy(front), "mix", Data(test=TensorDataset(x, y)), "cka-linear")["cka-linear"]
    assert row.score is None and "batch" in row.error


def test_labels_shaped_as_a_column_or_a_batch_of_other_length_are_refused():
    front, end = _twins()
    x, y = _images(20)
    row = sp.compare(front, end, "block2", Data(test=TensorDataset(x, y[:, None].repeat(1, 2))),
                     "cka-linear")["cka-linear"]
    assert row.score is None and "label" in row.error


# ------------------------------------------------------------------------------ plugins that cannot take the run down


@pytest.mark.parametrize("exc", [SystemExit(3), GeneratorExit(), SystemExit("usage: x")])
def test_a_metric_that_exits_gets_an_error_row_and_the_others_run(fresh_manager, exc):
    class Exiting:
        activations_only = True

        @sp.hookimpl
        def similarity(self):
            raise exc

    sp.register_metric(Exiting, "exiting")
    x, y = _arrays()
    report = sp.score(x, y, metrics=["cka-linear", "exiting", "procrustes"])
    assert report["cka-linear"].ok and report["procrustes"].ok
    assert report["exiting"].error.startswith(type(exc).__name__)
    front, end = _twins()
    report = sp.compare(front, end, "block2", Data(test=TensorDataset(*_images())), ["exiting", "cka-linear"])
    assert report["cka-linear"].ok and report["exiting"].error.startswith(type(exc).__name__)


def test_a_metric_that_calls_sys_exit_leaves_the_cli_its_table_and_json(fresh_manager, tmp_path, capsys):
    class Argparsey:
        activations_only = True

        @sp.hookimpl
        def similarity(self):
            sys.exit(2)

    sp.register_metric(Argparsey, "argparsey")
    x, y = _arrays()
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "y.npy", y.numpy())
    code = _cli("score", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--metrics", "cka-linear,argparsey",
                "--out", str(tmp_path / "r.json"))
    assert code == 1
    rows = {r["metric"]: r for r in json.loads((tmp_path / "r.json").read_text())["results"]}
    assert rows["cka-linear"]["score"] is not None and rows["argparsey"]["error"].startswith("SystemExit")
    assert "cka-linear" in capsys.readouterr().out


@pytest.mark.parametrize("exc", [SystemExit(1), ImportError("no module named x")])
def test_a_plugin_that_exits_at_import_is_a_broken_entry(fresh_manager, exc):
    class EntryPoint:
        name = "exits-at-import"

        def load(self):
            raise exc

    fresh_manager.add_entry_points([(EntryPoint(), "bad-package")])
    fresh_manager.load_all()
    info = sp.metric_info("exits-at-import")
    assert info.error and type(exc).__name__ in info.error
    assert "cka-linear" in sp.list_metrics()


def test_a_result_from_another_call_is_stored_under_its_own_name_and_layer(fresh_manager):
    shared = {}

    class Wrapper:
        activations_only = True

        @sp.hookimpl
        def similarity(self, context, front, end, layer):
            if "row" not in shared:
                x = context.activations(front, layer.front)
                y = context.activations(end, layer.end)
                shared["row"] = sp.score(x, y, metrics=["cka-linear"])["cka-linear"]
            return shared["row"]

    sp.register_metric(Wrapper, "wrapper")
    front, end = _twins()
    report = sp.compare(front, end, ["block1", "block2"], Data(test=TensorDataset(*_images())),
                        ["wrapper", "cka-linear"])
    assert sorted((r.metric, r.layer) for r in report) == [("cka-linear", "block1"), ("cka-linear", "block2"),
                                                          ("wrapper", "block1"), ("wrapper", "block2")]
    assert shared["row"].metric == "cka-linear" and shared["row"].layer == "x->y"
    assert "wrapper" in str(report)


class _Scribbler:
    """Writes into every object it is handed: activations, labels, options, data."""
    activations_only = True
    options = (Option("nested", None, "a dict"),)

    @sp.hookimpl
    def similarity(self, context, front, end, layer, options):
        context.activations(front, layer.front).mul_(0)
        context.activations(end, layer.end, flat=False).add_(7)
        if isinstance(options.get("nested"), dict):
            options["nested"]["changed"] = True
        return 0.0


def test_a_plugin_cannot_change_the_activations_the_next_metric_or_the_caller_sees(fresh_manager):
    sp.register_metric(_Scribbler, "scribbler")
    x, y = _arrays()
    x0, y0 = x.clone(), y.clone()
    nested = {"a": 1}
    expected = sp.score(x, y, metrics=["cka-linear"])["cka-linear"].score
    report = sp.score(x, y, metrics=["scribbler", "cka-linear"], options={"scribbler": {"nested": nested}})
    assert torch.equal(x, x0) and torch.equal(y, y0) and nested == {"a": 1}
    assert report["cka-linear"].score == pytest.approx(expected, rel=1e-12)
    front, end = _twins()
    data = Data(test=TensorDataset(*_images()))
    baseline = sp.compare(front, end, "block2", data, "procrustes")["procrustes"].score
    report = sp.compare(front, end, "block2", data, ["scribbler", "procrustes"])
    assert report["procrustes"].score == pytest.approx(baseline, abs=1e-9)


def test_a_plugin_cannot_swap_the_data_for_the_metrics_after_it(fresh_manager):
    class Thief:
        @sp.hookimpl
        def similarity(self, data, context):
            data.test = TensorDataset(torch.zeros(4, 1, 16, 16), torch.zeros(4, dtype=torch.long))
            context.data.test = data.test
            return 0.0

    sp.register_metric(Thief, "thief")
    front, end = _twins()
    data = Data(test=TensorDataset(*_images()))
    test = data.test
    report = sp.compare(front, end, "block2", data, ["thief", "cka-linear"])
    assert data.test is test and report["cka-linear"].details["n"] == 32


def test_a_plugin_named_like_an_option_is_skipped_with_a_warning_and_the_option_still_works(fresh_manager):
    class Greedy:
        @sp.hookimpl
        def similarity(self):
            return 0.0

    with pytest.warns(UserWarning, match="max_samples"):
        try:
            sp.register_metric(Greedy, "max_samples")
        except ValueError as exc:
            import warnings
            warnings.warn(str(exc), UserWarning)
    x, y = _arrays()
    row = sp.score(x, y, metrics=["cka-linear"], options={"max_samples": 10})["cka-linear"]
    assert row.ok and row.details["n"] == 10


def test_an_entry_point_named_like_an_option_is_marked_broken_naming_both(fresh_manager):
    class EntryPoint:
        name = "epochs"

        def load(self):
            class P:
                @sp.hookimpl
                def similarity(self):
                    return 0.0
            return P

    with pytest.warns(UserWarning, match="epochs"):
        fresh_manager.add_entry_points([(EntryPoint(), "greedy-package")])
        fresh_manager.load_all()
    assert "epochs" not in sp.list_metrics() or sp.metric_info("epochs").error


# ------------------------------------------------------------------------------ outputs that survive the shell


@pytest.fixture
def arrays_on_disk(tmp_path):
    x, y = _arrays()
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "y.npy", y.numpy())
    return ["score", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--metrics", "cka-linear"]


@pytest.mark.parametrize("path", ["", "-", "  "])
def test_an_empty_or_dash_output_path_is_refused_before_any_work(arrays_on_disk, capsys, path):
    assert _cli(*arrays_on_disk, "--out", path) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "cka-linear" not in capsys.readouterr().out


def test_an_output_that_is_an_input_is_refused(arrays_on_disk, tmp_path, capsys):
    before = (tmp_path / "x.npy").read_bytes()
    assert _cli(*arrays_on_disk, "--csv", str(tmp_path / "x.npy")) == 2
    assert "input" in capsys.readouterr().err and (tmp_path / "x.npy").read_bytes() == before


def test_two_outputs_that_reach_one_file_through_a_link_are_refused(arrays_on_disk, tmp_path, capsys):
    (tmp_path / "r.json").write_text("{}")
    os.symlink(tmp_path / "r.json", tmp_path / "link.csv")
    os.link(tmp_path / "r.json", tmp_path / "hard.csv")
    for other in ("link.csv", "hard.csv"):
        assert _cli(*arrays_on_disk, "--out", str(tmp_path / "r.json"), "--csv", str(tmp_path / other)) == 2
        assert "same file" in capsys.readouterr().err
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "sub", tmp_path / "alias")
    assert _cli(*arrays_on_disk, "--out", str(tmp_path / "sub" / "a.json"), "--csv",
                str(tmp_path / "alias" / "a.json")) == 2


@pytest.mark.parametrize("command", [["demo", "--quick"], ["study", "shortcut", "--quick"]])
@pytest.mark.parametrize("path", ["", "-", "  "])
def test_folder_commands_refuse_an_empty_or_dash_out_before_any_work(command, path, monkeypatch, capsys):
    import similarity_plugins.apps.studies as studies

    monkeypatch.setattr(studies, "run_study", lambda *a, **k: pytest.fail("the study ran"))
    monkeypatch.setattr("similarity_plugins.apps.studies.shortcut.run_demo", lambda *a, **k: pytest.fail("the demo ran"))
    assert _cli(*command, "--out", path) == 2
    assert "--out" in capsys.readouterr().err


def test_train_and_grid_refuse_to_write_over_their_own_inputs(tmp_path, capsys):
    weights = tmp_path / "a.pt"
    torch.save(tiny_cnn(seed=0).state_dict(), weights)
    before = weights.read_bytes()
    assert _cli("train", "--model", f"small-cnn@{weights}", "--data", "digits", "--out", str(weights)) == 2
    assert "input" in capsys.readouterr().err and weights.read_bytes() == before
    grid = ["grid", "--model", f"a=small-cnn@{weights}", "--model", "b=small-cnn", "--layers", "block1",
            "--data", "digits", "--in-channels", "1"]
    assert _cli(*grid, "--out", str(weights)) == 2
    assert "input" in capsys.readouterr().err and weights.read_bytes() == before
    assert _cli(*grid, "--out", str(tmp_path / "g.json"), "--resume", str(tmp_path / "g.json")) == 2
    assert "same file" in capsys.readouterr().err and not (tmp_path / "g.json").exists()


class _BrokenPipe:
    def write(self, text):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def test_the_files_are_written_before_the_table_meets_a_closed_pipe(arrays_on_disk, tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    monkeypatch.setattr(sys, "stdout", _BrokenPipe())
    code = _cli(*arrays_on_disk, "--out", str(out))
    assert out.exists() and json.loads(out.read_text())["results"][0]["score"] > 0
    assert code in (0, 141)


def test_sigterm_writes_the_finished_rows_like_ctrl_c(fresh_manager, arrays_on_disk, tmp_path):
    class Killed:
        activations_only = True

        @sp.hookimpl
        def similarity(self):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(2)
            return 0.0

    def unhandled(*_):
        raise AssertionError("SIGTERM reached the test's handler: the CLI did not install one")

    sp.register_metric(Killed, "killed")
    previous = signal.signal(signal.SIGTERM, unhandled)
    try:
        args = [a if a != "cka-linear" else "cka-linear,killed" for a in arrays_on_disk]
        code = _cli(*args, "--out", str(tmp_path / "r.json"))
    finally:
        restored = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, previous)
    assert restored is unhandled
    assert code == 143
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["meta"]["interrupted"] is True and report["results"][0]["score"] is not None


def test_a_full_disk_is_an_error_naming_the_path(arrays_on_disk, tmp_path, monkeypatch, capsys):
    from similarity_plugins.utils import io

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io.os, "fsync", full)
    out = tmp_path / "r.json"
    assert _cli(*arrays_on_disk, "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "r.json" in err and "No space left" in err and not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


@pytest.mark.parametrize("value", ["", "  ", "FILE"])
def test_an_empty_cache_folder_or_one_that_is_a_file_is_refused_naming_the_option(tmp_path, value):
    if value == "FILE":
        value = str(tmp_path / "a-file")
        (tmp_path / "a-file").write_text("x")
    front, end = _twins()
    x, y = _images()
    row = sp.compare(front, end, "block2", Data(train=TensorDataset(x, y), test=TensorDataset(x, y)), "iri-slm",
                     options={"iri_cache_dir": value})["iri-slm"]
    assert row.score is None and "iri_cache_dir" in row.error


def test_a_list_of_batches_is_not_read_as_samples():
    x, y = _arrays(n=24)
    with pytest.raises(ValueError, match="batches"):
        sp.score([x[:12].numpy(), x[12:].numpy()], [y[:12].numpy(), y[12:].numpy()], metrics=["cka-linear"])


@pytest.mark.parametrize("make", [lambda x, y: (x, y), lambda x, y: [x, y], lambda x, y: x])
def test_a_split_given_as_arrays_instead_of_a_dataset_is_refused(make):
    x, y = _images(20)
    with pytest.raises(TypeError, match="TensorDataset"):
        Data(test=make(x, y))


def test_tiny_inputs_are_measured_or_refused_saying_underflow():
    x, y = _arrays()
    report = sp.score(x * 1e-310, y, metrics=["cka-linear", "procrustes", "cka-rbf"])
    assert report["cka-linear"].score == pytest.approx(sp.score(x, y, metrics=["cka-linear"])["cka-linear"].score,
                                                       rel=1e-6)
    for name in ("procrustes", "cka-rbf"):
        assert report[name].score is None and "underflow" in report[name].error
