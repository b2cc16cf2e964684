"""The README's "write a metric plugin" example, really installed and run through its entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugin"

SCRIPT = """
import torch
from torch import nn
from torch.utils.data import TensorDataset
import similarity_plugins as sp
assert "mean-cosine" in sp.list_metrics(), sp.list_metrics()
assert sp.metric_info("mean-cosine").package == "similarity-mean-cosine"
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 14 * 14, 3))
data = sp.Data(test=TensorDataset(torch.rand(20, 1, 16, 16), torch.zeros(20, dtype=torch.long)))
report = sp.compare(model, model, "1", data, metrics=["mean-cosine", "cka-linear"])
print("SCORE", report["mean-cosine"].score, report["mean-cosine"].error)
"""


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


def test_example_plugin_is_discovered_and_runs(installed):
    done = _run(installed)
    assert done.returncode == 0, done.stderr
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("SCORE")][0]
    assert abs(float(line.split()[1]) - 1.0) < 1e-5 and line.split()[2] == "None"


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
