"""A per-metric timeout in the CLI: the process exits with the documented code (1: a row has an error), not
SIGABRT from the abandoned metric thread at interpreter shutdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.repo import ROOT

SCRIPT = """
import sys, time, torch
import similarity_plugins as sp
from similarity_plugins.cli.main import console_main

class Busy:
    @sp.hookimpl
    def similarity(self, front):
        a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
        stop = time.time() + 60
        while time.time() < stop:      # inside torch kernels most of the time, as a slow metric is
            a = (a @ a).tanh()
        return 0.5

sp.register_metric(Busy, "busy")
console_main(sys.argv[1:])
"""


@pytest.mark.slow  # a subprocess that imports torch and builds a model (about 5 s)
def test_a_timed_out_metric_leaves_the_cli_exit_code_as_documented(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script), "compare", "--front", "small-cnn", "--end", "small-cnn",
                           "--in-channels", "1", "--layer", "block2", "--data", "digits", "--max-test", "32",
                           "--metrics", "busy,cka-linear", "--timeout", "1", "--out", str(out), "--no-progress"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    rows = {r["metric"]: r for r in json.loads(out.read_text())["results"]}
    assert "MetricTimeout" in rows["busy"]["error"] and rows["cka-linear"]["error"] is None
