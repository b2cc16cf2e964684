"""``similarity-plugins bench``, the ``similarity_benchmark`` fixture and saved-run comparison.

The fast tests check validation (exit 2 before anything runs) and the pieces; the slow ones run real
benchmarks: in process (``main([...])`` runs pytest-benchmark's suite nested in this session; the small
workload's donors are trained once per process), in a subprocess with a metric that raises, and from a
third-party package's own test file with both packages pip-installed into temporary targets (so the
``pytest11`` entry point comes from this tree's metadata, not from the editable install's).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from similarity_plugins.apps.bench.runner import BenchRequest, format_table, pytest_arguments, saved_runs
from similarity_plugins.apps.bench.workloads import WORKLOADS, get_workload
from similarity_plugins.cli import main
from tests.helpers.repo import ROOT

EXAMPLE = ROOT / "examples" / "plugin"
BUILTINS = ["cka-debiased", "cka-linear", "cka-rbf", "iri-dm", "iri-fula", "iri-hlm", "iri-slm",
            "stitch-dm", "stitch-fula", "stitch-hlm", "stitch-slm"]


def _machine_folder(storage: Path) -> Path:
    from pytest_benchmark.utils import get_machine_id

    return storage / get_machine_id()


def _fake_saved_run(storage: Path, name: str = "0001_before") -> Path:
    folder = _machine_folder(storage)
    folder.mkdir(parents=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"benchmarks": []}), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------ fast


@pytest.mark.parametrize("argv, expected", [
    (["--metrics", "cka-linaer"], ["unknown metric 'cka-linaer'", "did you mean 'cka-linear'", "stitch-slm"]),
    (["--metrics", "nothing-*"], ["matches no metric", "cka-linear"]),
    (["--workload", "huge"], ["unknown workload 'huge'", "small, resnet18"]),
    (["--workload", "small,tiny"], ["unknown workload 'tiny'", "small, resnet18"]),
    (["--compare", "--compare-fail", "mean:fast"], ["malformed --compare-fail 'mean:fast'", "mean:20%", "median"]),
    (["--compare", "--compare-fail", "ops:5%"], ["malformed --compare-fail 'ops:5%'", "min, max, mean"]),
    (["--compare-fail", "mean:20%"], ["--compare-fail needs --compare"]),
    (["--rounds", "0"], ["--rounds must be >= 1"]),
    (["--save", "a/b"], ["bad --save name 'a/b'", "Must not contain"]),
    (["--metrics", "cka-*", "--option", "epochs=3"], ["unknown option 'epochs'", "max_samples"]),
])
def test_bad_input_exits_2_naming_the_choices(argv, expected, capsys, tmp_path):
    code = main(["bench", "--storage", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    for text in expected:
        assert text in err


def test_compare_with_nothing_saved_exits_2(capsys, tmp_path):
    assert main(["bench", "--metrics", "cka-linear", "--storage", str(tmp_path / "empty"), "--compare"]) == 2
    err = capsys.readouterr().err
    assert "no saved run" in err and "--autosave" in err
    assert not (tmp_path / "empty").exists()  # validation creates nothing


def test_compare_with_an_unknown_run_id_lists_the_saved_runs(capsys, tmp_path):
    _fake_saved_run(tmp_path)
    assert main(["bench", "--metrics", "cka-linear", "--storage", str(tmp_path), "--compare", "0042"]) == 2
    err = capsys.readouterr().err
    assert "no saved run matching '0042'" in err and "0001_before" in err
    assert [p.name for p in saved_runs(tmp_path, "0001")] == ["0001_before.json"]


def test_flags_pass_through_under_pytest_benchmark_names(tmp_path):
    request = BenchRequest(json="out.json", storage=str(tmp_path), autosave=True, save="base", compare="0003",
                           compare_fail=["mean:20%", "min:0.5"])
    args = pytest_arguments(request, "pytest.ini")
    assert Path(args[0]).name == "suite.py"
    for flag in ["--benchmark-json=out.json", "--benchmark-autosave", "--benchmark-save=base", "--benchmark-compare=0003",
                 "--benchmark-compare-fail=mean:20%", "--benchmark-compare-fail=min:0.5",
                 f"--benchmark-storage=file://{tmp_path.resolve()}"]:
        assert flag in args
    latest = pytest_arguments(BenchRequest(compare=True), "pytest.ini")
    assert "--benchmark-compare" in latest and not any(a.startswith("--benchmark-json") for a in latest)


def test_workload_options_per_family_and_user_overrides():
    small = get_workload("small")
    assert small.options_for("stitch-dm")["epochs"] == 2 and "iri_steps" not in small.options_for("stitch-dm")
    assert small.options_for("iri-slm")["iri_steps"] == 100
    assert small.options_for("cka-linear") == {} and small.options_for("mean-cosine") == {}
    assert small.options_for("iri-dm", {"iri_steps": 7})["iri_steps"] == 7
    user = {"epochs": 5, "stitch-dm": {"lr": 0.1}, "iri-dm": {"iri_steps": 1}}
    assert small.options_for("stitch-dm", user) == {**small.options_for("stitch-dm"), "epochs": 5, "lr": 0.1}
    assert small.options_for("cka-linear", user, takes={"max_samples": None}) == {}  # only what it declares
    assert set(WORKLOADS) >= {"small", "resnet18"} and get_workload(small) is small


def test_table_shows_times_scores_and_errors():
    rows = [{"metric": "cka-linear", "workload": "small", "mean": 0.25, "min": 0.2, "rounds": 3, "score": 0.9,
             "error": None},
            {"metric": "boom", "workload": "small", "mean": None, "min": None, "rounds": 0, "score": None,
             "error": "ZeroDivisionError: x"}]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == ["metric", "workload", "mean", "s", "min", "s", "rounds", "score", "error"]
    assert lines[1].split() == ["cka-linear", "small", "0.2500", "0.2000", "3", "0.9000"]
    assert lines[2].split()[:6] == ["boom", "small", "-", "-", "0", "-"] and lines[2].endswith("ZeroDivisionError: x")


FIXTURE_TESTS = """
import pytest
import torch
from torch import nn
from similarity_plugins import Data
from similarity_plugins.apps.bench import Donors, Workload
from similarity_plugins.datasets import ImageTensors


def _tiny(seed):
    torch.manual_seed(seed)
    net = lambda: nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3)).eval()
    split = lambda n: ImageTensors(torch.rand(n, 1, 8, 8), torch.arange(n) % 3, num_classes=3)
    return Donors(net(), net(), "1", Data(train=split(32), test=split(24)))


TINY = Workload("tiny", "two untrained 2-layer nets on noise", _tiny, rounds=2, warmup_rounds=0)


def test_custom_workload(similarity_benchmark):
    result = similarity_benchmark("cka-linear", workload=TINY)
    assert result.metric == "cka-linear" and result.error is None and 0 < result.score <= 1


def test_unknown_workload(similarity_benchmark):
    with pytest.raises(ValueError, match="valid workloads: small, resnet18"):
        similarity_benchmark("cka-linear", workload="nope")
"""


@pytest.mark.slow  # a pytest-benchmark session in a fresh interpreter
def test_fixture_runs_a_metric_on_a_given_workload(tmp_path, capsys):
    """``similarity_benchmark(metric, workload=...)`` in a test file of its own, in a pytest session nested in this
    one, with the plugin loaded by its entry-point name (the fixture's module imports nothing heavy)."""
    (tmp_path / "test_tiny.py").write_text(FIXTURE_TESTS, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    out = tmp_path / "tiny.json"
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "similarity_plugins_pytest", "--import-mode=importlib",
                        "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"), str(tmp_path),
                        f"--benchmark-json={out}", f"--benchmark-storage=file://{tmp_path}",
                        "-W", "ignore::pytest_benchmark.logger.PytestBenchmarkWarning"])
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    (bench,) = json.loads(out.read_text())["benchmarks"]
    assert bench["name"] == "test_custom_workload" and bench["group"] == "workload tiny" and bench["stats"]["rounds"] == 2
    assert bench["extra_info"]["workload"] == "tiny" and bench["extra_info"]["layer"] == "1"


# ------------------------------------------------------------------------------------------ slow


def _one_round(*argv: str) -> list[str]:
    return ["bench", "--rounds", "1", "--warmup-rounds", "0", *argv]


@pytest.mark.slow
def test_bench_small_every_builtin_json_and_autosave(tmp_path, capsys):
    """The command on the default workload (all metrics, one round each), its JSON and its saved run."""
    out = tmp_path / "bench.json"
    code = main(_one_round("--workload", "small", "--json", str(out), "--storage", str(tmp_path / "store"), "--autosave"))
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    report = json.loads(out.read_text())
    assert {"machine_info", "commit_info", "benchmarks", "datetime", "version"} <= set(report)
    by_metric = {b["extra_info"]["metric"]: b for b in report["benchmarks"]}
    assert sorted(m for m in by_metric if m in BUILTINS) == BUILTINS
    for name in BUILTINS:
        bench = by_metric[name]
        assert bench["group"] == "workload small" and bench["extra_info"]["workload"] == "small"
        assert bench["extra_info"]["error"] is None and math.isfinite(bench["extra_info"]["score"])
        assert bench["stats"]["rounds"] == 1 and bench["stats"]["mean"] > 0
        assert bench["name"] == f"test_metric[small-{name}]"
    table = printed[printed.index("metric  "):]
    assert all(any(line.startswith(name + " ") for line in table.splitlines()) for name in BUILTINS)
    assert len(saved_runs(tmp_path / "store")) == 1


@pytest.mark.slow
def test_saved_run_comparison_passes_and_a_regression_fails(tmp_path, capsys):
    storage = str(tmp_path / "store")
    assert main(_one_round("--metrics", "cka-linear", "--storage", storage, "--autosave")) == 0
    assert main(_one_round("--metrics", "cka-linear", "--storage", storage, "--compare",
                           "--compare-fail", "mean:1000000%")) == 0
    # make the saved run look 1,000 times faster than it was: now any honest run has regressed
    saved = saved_runs(Path(storage))[0]
    data = json.loads(saved.read_text())
    for bench in data["benchmarks"]:
        for key in ("min", "max", "mean", "median", "stddev", "iqr", "q1", "q3", "ld15iqr", "hd15iqr", "total"):
            bench["stats"][key] *= 1e-3
    saved.write_text(json.dumps(data))
    capsys.readouterr()
    code = main(_one_round("--metrics", "cka-linear", "--storage", storage, "--compare", saved.stem[:4],
                           "--compare-fail", "mean:20%"))
    printed = capsys.readouterr().out
    assert code == 3, printed[-3000:]
    assert "performance regressed (--compare-fail mean:20%)" in printed and "test_metric[small-cka-linear]" in printed


FAILING = """
import sys
import similarity_plugins as sp
from similarity_plugins.cli import main

@sp.hookimpl
def similarity(front, end, layer):
    raise ZeroDivisionError("broken on purpose")

sp.register_metric(similarity, "broken")
raise SystemExit(main(sys.argv[1:]))
"""


def _pip_install(source: Path, target: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--target", str(target), str(source)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"pip could not install {source}:\n" + done.stderr[-2000:])


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> str:
    """This tree (copied first, so the build leaves nothing behind) and the example plugin, each
    pip-installed into a temporary target; returns the PYTHONPATH that puts both first."""
    source = tmp_path_factory.mktemp("source")
    for name in ("similarity_plugins", "similarity_plugins_pytest"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    host, plugin = tmp_path_factory.mktemp("host"), tmp_path_factory.mktemp("plugin")
    _pip_install(source, host)
    _pip_install(EXAMPLE, plugin)
    return os.pathsep.join([str(plugin), str(host)])


@pytest.mark.slow
def test_fixture_in_a_third_party_test_file(installed, tmp_path):
    """The example package's own test (3 lines with ``similarity_benchmark``) runs through the pytest11 entry point."""
    out = tmp_path / "plugin.json"
    env = {**os.environ, "PYTHONPATH": installed, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(EXAMPLE),
                           "-c", str(EXAMPLE / "pyproject.toml"), str(EXAMPLE / "tests"), f"--benchmark-json={out}"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    (bench,) = json.loads(out.read_text())["benchmarks"]
    assert bench["name"] == "test_mean_cosine_speed" and bench["group"] == "workload small"
    info = bench["extra_info"]
    assert info["metric"] == "mean-cosine" and info["package"] == "similarity-mean-cosine" and info["workload"] == "small"
    assert -1.0 <= info["score"] <= 1.0 and bench["stats"]["rounds"] == get_workload("small").rounds
    # and the plugin can be switched off by its entry-point name
    off = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:similarity_plugins_pytest",
                          "--rootdir", str(EXAMPLE), "-c", str(EXAMPLE / "pyproject.toml"), str(EXAMPLE / "tests")],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert off.returncode != 0 and "fixture 'similarity_benchmark' not found" in off.stdout


@pytest.mark.slow
def test_bench_times_a_third_party_metric_and_reports_one_that_raises(installed, tmp_path):
    """Installed plugin ``mean-cosine`` next to a built-in, and a metric registered at run time that raises:
    its row carries the error, the others still run, exit code 1."""
    out = tmp_path / "bench.json"
    argv = _one_round("--metrics", "broken,mean-cosine,cka-linear", "--json", str(out), "--storage", str(tmp_path),
                      "--option", "epochs=1")  # taken by the open metrics, not passed to cka-linear
    done = subprocess.run([sys.executable, "-c", FAILING, *argv], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": installed, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "test_metric[small-mean-cosine]" in done.stdout
    table = done.stdout[done.stdout.index("metric  "):].splitlines()[1:]
    rows = {line.split()[0]: line for line in table}
    assert list(rows) == ["broken", "mean-cosine", "cka-linear"]
    assert "ZeroDivisionError: broken on purpose" in rows["broken"] and rows["broken"].split()[2:6] == ["-", "-", "0", "-"]
    for name in ("mean-cosine", "cka-linear"):
        assert "Error" not in rows[name] and float(rows[name].split()[2]) > 0 and -1 <= float(rows[name].split()[5]) <= 1
    names = [b["extra_info"]["metric"] for b in json.loads(out.read_text())["benchmarks"]]
    assert names == ["mean-cosine", "cka-linear"]  # the errored benchmark carries no timing


def test_small_workload_times_the_cca_family_where_cca_is_defined():
    """450 test digits are too few for CCA at block3 (256 + 256 values); cca and pwcca are timed at block4, the rest
    at the workload's layer."""
    from similarity_plugins.apps.bench.workloads import WORKLOADS, Donors

    donors = Donors(front=None, end=None, layer="block3", data=None)
    small = WORKLOADS["small"]
    assert small.layer_for("cca", donors) == small.layer_for("pwcca", donors) == "block4"
    assert {small.layer_for(m, donors) for m in ("svcca", "procrustes", "cka-linear", "stitch-slm")} == {"block3"}
