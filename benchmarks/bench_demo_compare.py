"""The demo's costly metrics on the demo's models and data, one ``compare`` call each: the benchmark that
catches a slower demo before the demo does.

Run: ``python -m pytest benchmarks/bench_demo_compare.py --benchmark-only`` (a few minutes on 2 cores), then
after a change ``... --benchmark-compare --benchmark-compare-fail=median:15%`` against the saved run.

Each case is ``compare(front, end, "block3", data, [metric])`` with the demo's options (``DemoConfig.quick``:
5 stitch epochs at batch 64, 64 IRI seeds, 1000 steps, tol 2e-2, first cycles of 100 steps) on its width-16
CNNs (seeded, untrained: the cost of a step does not depend on the weights) and the marked digits at 32x32, in
a fresh ``Context`` after one warm-up call in the process (the first ``compare`` of a process pays for imports
and lazy set-up, seconds that would otherwise land on whichever metric runs first). ``extra_info``: the
row's own ``seconds``, the process CPU seconds and minor page faults during the timed call (a heap that gives
its pages back shows as hundreds of thousands of faults).
"""

from __future__ import annotations

import resource
from functools import lru_cache

import pytest
import torch

from similarity_plugins import compare
from similarity_plugins.apps.studies.shortcut import DemoConfig, compare_options
from similarity_plugins.apps.zoo import SmallCNN
from similarity_plugins.datasets import PixelShortcut, digits_data
from similarity_plugins.networks.data import Data

METRICS = ["stitch-slm", "stitch-dm", "iri-slm"]


@lru_cache(maxsize=1)
def setup() -> tuple[torch.nn.Module, torch.nn.Module, Data, dict]:
    clean = digits_data(size=32, seed=0)
    data = Data(train=PixelShortcut(clean.train, seed=3), test=PixelShortcut(clean.test, seed=4))
    torch.manual_seed(1)
    a = SmallCNN(in_channels=1, width=16).eval()
    torch.manual_seed(2)
    b = SmallCNN(in_channels=1, width=16).eval()
    options = {k: v for k, v in compare_options(DemoConfig.quick()).items() if k != "svcca"}
    compare(a, b, "block1", data, ["stitch-hlm"], options={"epochs": 1}, seed=0, progress="never")   # warm-up
    return a, b, data, options


def _usage() -> tuple[float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_minflt


@pytest.mark.parametrize("metric", METRICS)
def test_demo_metric(benchmark, metric):
    benchmark.group = "demo-compare"
    a, b, data, options = setup()
    if metric.startswith("stitch"):
        options = {k: v for k, v in options.items() if not k.startswith("iri_")}
    out = {}

    def run() -> None:
        cpu, faults = _usage()
        out["report"] = compare(a, b, "block3", data, [metric], options=options, seed=0, progress="never")
        after = _usage()
        out["cpu"], out["faults"] = after[0] - cpu, after[1] - faults

    benchmark.pedantic(run, rounds=1, iterations=1)
    row = out["report"][metric]
    assert row.error is None
    benchmark.extra_info.update(metric=metric, row_seconds=round(row.seconds, 2), cpu_seconds=round(out["cpu"], 2),
                                minor_faults=out["faults"])
