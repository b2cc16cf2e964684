"""The README's "write a metric plugin" example (one metric, a family with register_metrics, and a wrapper of every
metric call), really installed and run through its entry points: the metrics lazily imported, listed, run in
compare and on arrays in score; the wrapper loaded with the manager, seeing every call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.repo import ROOT

EXAMPLE = ROOT / "examples" / "plugin"

SCRIPT = """
import sys
import torch
from torch import nn
from torch.utils.data import TensorDataset
import similarity_plugins as sp
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 14 * 14, 3))
other = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 14 * 14, 3))
data = sp.Data(test=TensorDataset(torch.rand(20, 1, 16, 16), torch.zeros(20, dtype=torch.long)))
assert sp.compare(model, model, "1", data, metrics="cka-linear")["cka-linear"].ok
print("IMPORTED", [m for m in ("similarity_mean_cosine", "similarity_mean_stats") if m in sys.modules])
names = sp.list_metrics()
assert {"mean-cosine", "mean-euclidean", "mean-norm-ratio"} <= set(names), names
assert "mean-stats" not in names  # a family's entry-point name is a label, not a metric
assert {sp.metric_info(n).package for n in ("mean-cosine", "mean-euclidean")} == {"similarity-mean-cosine"}
assert sp.metric_info("mean-cosine").kind is None  # declares nothing: unknown
assert sp.metric_info("mean-euclidean").kind == "distance" and sp.metric_info("mean-norm-ratio").range == (0.0, 1.0)
report = sp.compare(model, other, "1", data, metrics=["mean-cosine", "mean-euclidean", "mean-norm-ratio", "cka-linear"])
print("SCORE", report["mean-cosine"].score, report["mean-cosine"].error)
x = torch.rand(30, 5)
arrays = sp.score(x, 2 * x, metrics="mean-*")
print("ARRAYS", arrays["mean-euclidean"].score, float(x.double().mean(0).norm()), arrays["mean-norm-ratio"].score,
      arrays["mean-cosine"].error)
print("TABLE", "mean-euclidean (distance)" in str(report))
import json
import similarity_call_timer  # the wrapper the manager loaded through its entry point: it saw every call above
print("TIMED", json.dumps(similarity_call_timer.CALLS))
"""


def _line(stdout: str, tag: str) -> list[str]:
    return [ln for ln in stdout.splitlines() if ln.startswith(tag)][0].split(maxsplit=1)[1:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(EXAMPLE)],
        capture_output=True, text=True,
    )
    if done.returncode != 0:
        pytest.fail("pip could not install the example plugin:\n" + done.stderr[-2000:])
    return target


def _run(target: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]), **env}
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=environment)


@pytest.mark.slow  # pip-installs the example package and starts a fresh interpreter
def test_example_plugin_is_discovered_and_runs(installed):
    done = _run(installed)
    assert done.returncode == 0, done.stderr
    assert _line(done.stdout, "IMPORTED") == ["[]"]  # compare with a built-in imported neither entry point
    score, error = _line(done.stdout, "SCORE")[0].split()
    assert abs(float(score) - 1.0) > 1e-6 and error == "None"  # two different models
    euclidean, x_mean_norm, ratio, error = _line(done.stdout, "ARRAYS")[0].split(maxsplit=3)
    # the family on arrays: y = 2x, so the distance of the means is |mean x| and the norm ratio 1/2
    assert float(euclidean) == pytest.approx(float(x_mean_norm), rel=1e-6) and float(ratio) == pytest.approx(0.5)
    assert "mean-cosine needs the models" in error  # the single-metric example does not declare activations_only
    assert _line(done.stdout, "TABLE") == ["True"]
    # the wrapper (entry-point group similarity_plugins.wrappers) saw every metric call: compare's, then score's
    # (score refuses mean-cosine, which needs the models, before any call)
    timed = json.loads(_line(done.stdout, "TIMED")[0])
    assert timed == {"cka-linear": 2, "mean-cosine": 1, "mean-euclidean": 2, "mean-norm-ratio": 2}


@pytest.mark.slow  # a fresh interpreter
def test_similarity_plugins_empty_hides_the_example(installed):
    done = _run(installed, SIMILARITY_PLUGINS="")
    assert done.returncode != 0 and "AssertionError" in done.stderr and "mean-cosine" not in done.stderr
    assert _line(done.stdout, "IMPORTED") == ["[]"]


@pytest.mark.slow  # a fresh interpreter
def test_disable_autoload_hides_the_example(installed):
    done = _run(installed, SIMILARITY_PLUGINS_DISABLE_AUTOLOAD="1")
    assert done.returncode != 0 and "AssertionError" in done.stderr and "mean-cosine" not in done.stderr


@pytest.mark.slow  # a fresh interpreter
def test_cli_lists_the_package(installed):
    environment = {**os.environ, "PYTHONPATH": str(installed)}
    done = subprocess.run([sys.executable, "-m", "similarity_plugins", "list"], capture_output=True, text=True, env=environment)
    assert done.returncode == 0, done.stderr
    row = [ln for ln in done.stdout.splitlines() if ln.startswith("mean-cosine")][0]
    assert "similarity-mean-cosine" in row and "Cosine similarity" in row
