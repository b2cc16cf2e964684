"""The third fault campaign (issue #50): small probes of grids and their resume files, stitching around in-place
layers, every donor dtype and grad mode, model outputs, state a plugin leaves behind, outputs that are not regular
files, the shared IRI cache, exit codes after a timeout and cost notes.

Each probe is a function that returns a verdict and a detail:

- ``good``: the answer a careful user expects (the right value, or a refusal that names the input and the fix);
- ``weak``: it works but the answer is unhelpful (a raw exception, a refusal with the wrong reason, a valid setup
  refused, a process setting left changed that nothing later depends on);
- ``bad``: a silently wrong answer, lost work, a file replaced that must not be, a wrong exit code or a crash.

An exception a probe does not expect is ``bad``. Every probe builds tiny seeded models and data inline (a 16x16
CNN with BatchNorm, trained 3 epochs on the scikit-learn digits, which ship with scikit-learn; nothing is
downloaded) and uses only calls that exist both at commit 11318e7 (before the campaign) and now: no ``progress=``
argument (it took True/False then and takes "never"/"auto"/"always" now). Two probes start a Python subprocess
(a per-metric timeout in the CLI; a built-in metric's first call in a fresh process). The harness puts back the
process state a probe (or the code under test) left changed, so probes do not leak into each other.

Run it on a tree (the repository root on ``PYTHONPATH``), one process, one thread; about 15 s on a shared CPU:

    OMP_NUM_THREADS=1 PYTHONPATH=. python lab/fault_campaign_3.py [--json PATH] [--only NAME ...]

To compare with the code before the campaign, check the old commit out beside this one and put it first on the
path, running this file from here:

    git worktree add /tmp/old50 11318e7
    OMP_NUM_THREADS=1 PYTHONPATH=/tmp/old50 python lab/fault_campaign_3.py --json before.json

It prints one line per probe (``name: verdict (detail)``) and the totals; ``--json`` writes them too.
Write-up: docs/lab/fault_campaign_3.md.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import glob
import io
import json
import math
import os
import random
import stat
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp

STITCH = ["stitch-hlm", "stitch-slm", "stitch-dm", "stitch-fula"]
FIT = {"epochs": 1, "batch_size": 32}
CUT = "block2.1"  # BatchNorm; the ReLU after it runs in place in the in-place copies
PROBES: list[tuple[str, str, Callable[[Path], tuple[str, str]]]] = []


def probe(family: str):
    """Register a probe of ``family``; its name is the function's name."""
    def register(fn):
        PROBES.append((fn.__name__, family, fn))
        return fn
    return register


# ----------------------------------------------------------------------------------------------- models and data

def cnn(seed: int = 0, width: int = 8, inplace: bool = False) -> nn.Sequential:
    """A 2-block CNN with BatchNorm for (N, 1, 16, 16) inputs: block1, block2, pool, flatten, fc."""
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=inplace),
                             nn.MaxPool2d(2))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential()
        model.add_module("block1", block(1, width))
        model.add_module("block2", block(width, 2 * width))
        model.add_module("pool", nn.AdaptiveAvgPool2d(1))
        model.add_module("flatten", nn.Flatten())
        model.add_module("fc", nn.Linear(2 * width, 10))
    return model.eval()


def in_place(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose ReLUs write into their input: the same function."""
    twin = copy.deepcopy(model)
    for module in twin.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = True
    return twin


_CACHE: dict = {}


def digits() -> sp.Data:
    """The scikit-learn digits at 16x16 (made locally by the package)."""
    if "digits" not in _CACHE:
        from similarity_plugins.datasets import digits_data
        _CACHE["digits"] = digits_data(size=16)
    return _CACHE["digits"]


def trained() -> nn.Module:
    """``cnn()`` trained 3 epochs on the digits (about 55% test accuracy: enough for predictions to mean something)."""
    if "trained" not in _CACHE:
        model = cnn().train()
        x, y = digits().train.tensors
        with torch.random.fork_rng(devices=[]):
            g = torch.Generator().manual_seed(0)
            opt = torch.optim.Adam(model.parameters(), 1e-2)
            for _ in range(3):
                perm = torch.randperm(len(x), generator=g)
                for i in range(0, len(x), 64):
                    idx = perm[i:i + 64]
                    loss = F.cross_entropy(model(x[idx]), y[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
        _CACHE["trained"] = model.eval()
    return copy.deepcopy(_CACHE["trained"])


def small_digits(n_train: int = 128, n_test: int = 64) -> sp.Data:
    x, y = digits().train.tensors
    xt, yt = digits().test.tensors
    return sp.Data(train=TensorDataset(x[:n_train], y[:n_train]), test=TensorDataset(xt[:n_test], yt[:n_test]))


def random_data(seed: int = 0, n: int = 48, n_test: int = 32, train: bool = True) -> sp.Data:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.rand(n, 1, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)
    test = TensorDataset(x[:n_test], y[:n_test])
    return sp.Data(train=TensorDataset(x, y), test=test) if train else sp.Data(test=test)


def as_produced(model: nn.Module, layer: str, x: torch.Tensor) -> torch.Tensor:
    """The output of ``layer`` as produced, copied by a hook at once (before any in-place op can change it)."""
    seen = []
    handle = model.get_submodule(layer).register_forward_hook(lambda _m, _i, out: seen.append(out.clone()))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return seen[0]


RANK = {"good": 0, "weak": 1, "bad": 2}


def worst(results: list[tuple[str, str]]) -> tuple[str, str]:
    """The worst verdict of several cases of one probe; the detail lists the cases with that verdict."""
    verdict = max((r[0] for r in results), key=RANK.__getitem__)
    return verdict, "; ".join(detail for v, detail in results if v == verdict)


def scores(report) -> dict:
    return {row.metric: (row.score if row.ok else f"error: {short(row.error)}") for row in report}


def short(text, n: int = 110) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


def exc_text(exc: BaseException) -> str:
    return short(f"{type(exc).__name__}: {exc}")


_REGISTERED: set = set()


def register(plugin, name: str) -> str:
    """Register a probe metric once per process (the registry is global)."""
    if name not in _REGISTERED:
        sp.register_metric(plugin, name)
        _REGISTERED.add(name)
    return name


def quiet_cli(argv: list[str]) -> tuple[int | None, str, BaseException | None]:
    """Run the CLI in this process; returns (exit code, what it wrote to stderr and stdout, an escaped exception)."""
    from similarity_plugins.cli.main import main

    out = io.StringIO()
    code, escaped = None, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:  # noqa: BLE001 - a traceback out of main is what the probe looks for
            escaped = exc
    return code, out.getvalue(), escaped


# ------------------------------------------------------------------------------------ stitching after in-place ops

def stitch_verdict(report, what: str) -> tuple[str, str]:
    got = scores(report)
    if any(isinstance(v, str) for v in got.values()):
        return "weak", f"{what}: {got}"
    off = {k: round(v, 4) for k, v in got.items() if abs(v - 1.0) > 1e-6}
    if off:
        return "bad", f"{what}: the same function scores {off}, not 1.0"
    return "good", f"{what}: all 1.0"


@probe("stitch after in-place op")
def s_inplace_twins_all_objectives(tmp: Path):
    """A model with ReLU(inplace=True) after the cut, stitched to its copy: 1.0 for all four objectives."""
    model = in_place(trained())
    report = sp.compare(model, copy.deepcopy(model), CUT, small_digits(), STITCH, options=FIT)
    return stitch_verdict(report, "in-place twins")


@probe("stitch after in-place op")
def s_inplace_vs_plain_same_function(tmp: Path):
    """The same network with and without in-place ReLUs, both ways round: 1.0."""
    plain, inplace = trained(), in_place(trained())
    return worst([stitch_verdict(sp.compare(front, end, CUT, small_digits(), STITCH, options=FIT), what)
                  for front, end, what in [(plain, inplace, "plain->in-place"), (inplace, plain, "in-place->plain")]])


@probe("stitch after in-place op")
def s_split_native_and_end_see_the_cut_as_produced(tmp: Path):
    """SplitNetwork.native/front return the cut as produced; end() does not write into the caller's tensor."""
    from similarity_plugins.networks.split import SplitNetwork

    plain = trained()
    x = digits().test.tensors[0][:32]
    expected = as_produced(plain, CUT, x)
    split = SplitNetwork(in_place(plain), CUT)
    with torch.no_grad():
        act = split.native(x)[0]
        h = split.front(x)
        before = h.clone()
        split.end(h)
    checks = {"native's activation": torch.equal(act, expected), "front's output": torch.equal(before, expected),
              "end left the caller's tensor as it was": torch.equal(h, before)}
    wrong = [name for name, ok in checks.items() if not ok]
    if wrong:
        return "bad", f"not so: {', '.join(wrong)} (the ReLU in place overwrote the cut's output)"
    return "good", "native, front and end read the cut as produced"


@probe("stitch after in-place op")
def s_context_activations_as_produced(tmp: Path):
    """What a metric reads through context.activations at an in-place cut is the cut's output as produced."""
    seen = {}

    class Reader:
        needs = ("test",)
        activations_only = True

        @sp.hookimpl
        def similarity(self, front, layer, context):
            seen["act"] = context.activations(front, layer.front, "test")
            return 0.5

    name = register(Reader(), "fc3-reader")
    data, plain = small_digits(), trained()
    model = in_place(plain)
    report = sp.compare(model, model, CUT, data, name)
    if not report[name].ok:
        return "bad", f"error: {short(report[name].error)}"
    got = torch.as_tensor(np.asarray(seen["act"])).reshape(len(data.test), -1).float()
    expected = as_produced(plain, CUT, data.test.tensors[0]).reshape(len(data.test), -1)
    if torch.allclose(got, expected, atol=1e-6):
        return "good", "context.activations is the BatchNorm output (negatives kept)"
    return "bad", f"context.activations differs from the cut's output (max diff {float((got - expected).abs().max()):.3g})"


@probe("stitch after in-place op")
def s_grid_stitch_at_an_inplace_cut(tmp: Path):
    """The grid's own capture path: a plain model and its in-place twin at the cut, stitch-dm in every cell."""
    grid = sp.compare_grid({"plain": trained(), "inplace": in_place(trained())}, [CUT], small_digits(), "stitch-dm",
                           options=FIT)
    failed = [c for c in grid.cells.values() if not c.ok]
    if failed:
        return "weak", f"{len(failed)} cells failed: {short(failed[0].error, 70)}"
    values = grid.matrix("stitch-dm")
    if np.abs(values - 1.0).max() > 1e-6:
        return "bad", f"the same function scores {np.round(values, 4).tolist()} (rows: front plain, in-place)"
    return "good", "every cell 1.0"


# --------------------------------------------------------------------------------- donor dtypes and grad modes (C)

def twins(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """A model and its copy (made here: a copy made inside inference mode would hold inference tensors)."""
    return model, copy.deepcopy(model)


def twins_verdict(pair, metrics, what: str, tol: float = 1e-6) -> tuple[str, str]:
    """Compare a model with its copy at block2: every metric must score 1.0 (within ``tol``)."""
    options = FIT if any(m.startswith("stitch") for m in metrics) else None
    report = sp.compare(pair[0], pair[1], "block2", small_digits(), metrics, options=options)
    got = scores(report)
    errors = {k: v for k, v in got.items() if isinstance(v, str)}
    if errors:
        return "weak", f"{what}: valid setup fails: {errors}"
    off = {k: round(v, 4) for k, v in got.items() if abs(v - 1.0) > tol}
    if off:
        return "bad", f"{what}: twins score {off}"
    near = {k: round(v, 4) for k, v in got.items() if abs(v - 1.0) > 1e-6}
    return "good", f"{what}: twins score 1.0" + (f" ({near}: one near-tie test sample flips under rounding)" if near else "")


@probe("dtypes and grad modes (C)")
def c_float64_donors_stitch(tmp: Path):
    return twins_verdict(twins(trained().double()), ["stitch-dm"], "float64 donors")


@probe("dtypes and grad modes (C)")
def c_half_precision_donors_stitch(tmp: Path):
    """float16 and bfloat16 donors; 2 of 64 test samples may flip near a tie (8 bits of mantissa)."""
    results = [twins_verdict(twins(trained().to(dtype)), ["stitch-dm"], str(dtype).replace("torch.", ""), tol=0.06)
               for dtype in (torch.float16, torch.bfloat16)]
    return worst(results)


@probe("dtypes and grad modes (C)")
def c_stitch_inside_callers_grad_mode(tmp: Path):
    results = []
    for mode, what in [(torch.no_grad, "no_grad"), (torch.inference_mode, "inference_mode")]:
        pair = twins(trained())
        with mode():
            results.append(twins_verdict(pair, ["stitch-dm"], what))
            if torch.is_grad_enabled():
                results.append(("bad", f"{what}: the caller's grad mode was changed"))
    return worst(results)


@probe("dtypes and grad modes (C)")
def c_cka_inside_inference_mode(tmp: Path):
    pair = twins(trained())
    with torch.inference_mode():
        return twins_verdict(pair, ["cka-linear"], "cka in inference_mode")


@probe("dtypes and grad modes (C)")
def c_stitch_with_float64_default_dtype(tmp: Path):
    pair = twins(trained())
    torch.set_default_dtype(torch.float64)  # the harness puts it back
    return twins_verdict(pair, ["stitch-dm"], "default dtype float64")


@probe("dtypes and grad modes (C)")
def c_model_built_in_inference_mode_is_refused_naming_the_fix(tmp: Path):
    with torch.inference_mode():
        inside = cnn()
    try:
        report = sp.compare(inside, cnn(seed=1), "block2", small_digits(), "cka-linear")
    except ValueError as exc:
        if "inference" in str(exc):
            return "good", exc_text(exc)
        return "weak", exc_text(exc)
    except Exception as exc:  # noqa: BLE001
        return "weak", f"raw {exc_text(exc)}"
    row = report["cka-linear"]
    if row.ok:
        return "good", "scored (inference tensors were usable)"
    return ("good" if "inference" in row.error else "weak"), f"error row: {short(row.error)}"


# ------------------------------------------------------------------------------ model outputs and data shapes (B)

class TupleOut(nn.Module):
    """Returns (logits, block1's output): the second item reads a value from before the cut."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x):
        hidden = self.net.block1(x)
        return self.net.fc(self.net.flatten(self.net.pool(self.net.block2(hidden)))), hidden


class DictOut(nn.Module):
    """Returns {"logits": ..., "pooled": ...} (the Hugging Face style)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x):
        return {"logits": self.net(x), "pooled": x.mean((1, 2, 3))}


def outputs_verdict(model: nn.Module) -> tuple[str, str]:
    report = sp.compare(model, copy.deepcopy(model), "net.block2", small_digits(), ["cka-linear", "stitch-dm"],
                        options=FIT)
    got = scores(report)
    if any(isinstance(v, str) for v in got.values()):
        return "weak", f"{got}"
    if abs(got["stitch-dm"] - 1.0) > 1e-6 or abs(got["cka-linear"] - 1.0) > 1e-6:
        return "bad", f"twins score {got}"
    return "good", "logits read from the output; twins score 1.0"


@probe("model outputs and data (B)")
def b_tuple_output_model(tmp: Path):
    return outputs_verdict(TupleOut(trained()))


@probe("model outputs and data (B)")
def b_dict_output_model(tmp: Path):
    return outputs_verdict(DictOut(trained()))


@probe("model outputs and data (B)")
def b_score_takes_negative_strides(tmp: Path):
    a = np.random.default_rng(0).normal(size=(30, 5))
    try:
        got = sp.score(a[::-1], a[:, ::-1], "cka-linear")["cka-linear"]
    except Exception as exc:  # noqa: BLE001
        return "weak", f"raw {exc_text(exc)}"
    expected = sp.score(a[::-1].copy(), a[:, ::-1].copy(), "cka-linear")["cka-linear"].score
    if not got.ok:
        return "weak", f"error row: {short(got.error)}"
    return ("good", "scored as a copy") if abs(got.score - expected) < 1e-12 else ("bad", f"{got.score} != {expected}")


@probe("model outputs and data (B)")
def b_nan_in_sample_0_refused_as_nan(tmp: Path):
    data = small_digits()
    x, y = (t.clone() for t in data.test.tensors)
    x[0, 0, 2, 5] = float("nan")
    row = sp.compare(trained(), trained(), "block2", sp.Data(train=data.train, test=TensorDataset(x, y)),
                     "cka-linear")["cka-linear"]
    if row.ok:
        return "bad", f"NaN input scored: {row.score}"
    if "NaN" in row.error and "same index" not in row.error:
        return "good", short(row.error)
    return "weak", f"refused for another reason: {short(row.error)}"


@probe("model outputs and data (B)")
def b_train_set_smaller_than_one_batch(tmp: Path):
    """64 training samples and the default batch size (128): one batch, as a user expects."""
    model = trained()
    row = sp.compare(model, copy.deepcopy(model), "block2", small_digits(n_train=64), "stitch-dm",
                     options={"epochs": 1})["stitch-dm"]
    if row.ok:
        return ("good", "trained on one batch") if abs(row.score - 1.0) < 1e-6 else ("bad", f"twins {row.score}")
    return "weak", f"refused: {short(row.error)}"


# ------------------------------------------------------------------------------------------ grids and resume files

LAYERS = ["block1", "block2"]
CALLS: list = []


class Counted:
    needs = ("test",)
    activations_only = True

    @sp.hookimpl
    def similarity(self, front, end, layer, context):
        CALLS.append(layer)
        return float(context.activations(front, layer.front).mean() - context.activations(end, layer.end).mean())


def grid_models() -> dict:
    return {"a": cnn(seed=0, width=4), "b": cnn(seed=1, width=4)}


def counted() -> str:
    CALLS.clear()
    return register(Counted(), "fc3-counted")


def cell_values(grid) -> dict:
    return {(m, grid.nodes[i], grid.nodes[j]): c.score for (m, i, j), c in grid.cells.items()}


@probe("grids and resume files")
def g_resume_on_other_data_weights_or_options(tmp: Path):
    """A resume file reused with other data of the same size, changed weights, or other metric options."""
    metric, models = counted(), grid_models()
    changed = grid_models()
    with torch.no_grad():
        changed["a"].block1[0].weight.add_(0.1)
    results = []
    for what, models2, data2, options in [("other data of the same size", models, random_data(1), None),
                                          ("changed weights", changed, random_data(0), None),
                                          ("other options", models, random_data(0), {"max_samples": 8})]:
        path = tmp / f"cells-{len(results)}.jsonl"
        metric = "cka-linear" if options else metric  # a metric that takes max_samples
        sp.compare_grid(models, LAYERS, random_data(0), metric, resume=path)
        try:
            resumed = sp.compare_grid(models2, LAYERS, data2, metric, options=options, resume=path)
        except ValueError as exc:
            text = str(exc)
            results.append(("good", f"{what}: refused") if "resume file" in text and "other" in text
                           else ("weak", f"{what}: {exc_text(exc)}"))
            continue
        fresh = cell_values(sp.compare_grid(models2, LAYERS, data2, metric, options=options))
        got = cell_values(resumed)
        diff = max(abs(got[k] - fresh[k]) for k in fresh)
        results.append(("bad", f"{what}: old scores returned (off by up to {diff:.3g})") if diff > 1e-12
                       else ("good", f"{what}: recomputed"))
    return worst(results)


@probe("grids and resume files")
def g_resume_all_pairs_then_across(tmp: Path):
    metric, path, models, data = counted(), tmp / "cells.jsonl", grid_models(), random_data()
    sp.compare_grid(models, LAYERS, data, metric, resume=path)
    across = sp.compare_grid(models, LAYERS, data, metric, pairs="across", resume=path)
    fresh = sp.compare_grid(models, LAYERS, data, metric, pairs="across")
    extra = set(across.cells) - set(fresh.cells)
    if extra:
        return "bad", f"{len(extra)} cells returned that were not asked for ({len(across.cells)} vs {len(fresh.cells)})"
    return "good", f"exactly the {len(fresh.cells)} cells asked for"


@probe("grids and resume files")
def g_resume_after_a_torn_last_line(tmp: Path):
    metric, path, models, data = counted(), tmp / "cells.jsonl", grid_models(), random_data()
    one = [(("a", "block1"), ("b", "block2"))]
    two = one + [(("b", "block1"), ("a", "block2"))]
    sp.compare_grid(models, LAYERS, data, metric, pairs=one, resume=path)
    with open(path, "a") as fh:
        fh.write('{"cell": {"metric": "fc3-coun')  # an interruption in the middle of a line
    try:
        sp.compare_grid(models, LAYERS, data, metric, pairs=two, resume=path)
        sp.compare_grid(models, LAYERS, data, metric, pairs=two, resume=path)
    except Exception as exc:  # noqa: BLE001
        return "weak", f"resume refused after the torn line: {exc_text(exc)}"
    if len(CALLS) > 2:
        return "bad", f"the cell finished after the torn line was computed again ({len(CALLS)} calls for 2 cells)"
    return "good", "2 calls for 2 cells: the next finished cell was readable"


def _damaged_resume(tmp: Path, edit) -> tuple[str, str]:
    metric, path, models, data = counted(), tmp / "cells.jsonl", grid_models(), random_data()
    first = sp.compare_grid(models, LAYERS, data, metric, resume=path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(edit(lines)) + "\n")
    n = len(CALLS)
    try:
        again = sp.compare_grid(models, LAYERS, data, metric, resume=path)
    except ValueError as exc:
        named = str(path) in str(exc) or path.name in str(exc)
        return ("good" if named else "weak"), f"refused{'' if named else ' without naming the file'}: {exc_text(exc)}"
    except Exception as exc:  # noqa: BLE001
        return "weak", f"raw {exc_text(exc)}"
    changed = {k for k, v in cell_values(again).items() if v != cell_values(first)[k]}
    return "accepted", f"{len(CALLS) - n} cells recomputed, {len(changed)} values differ"


@probe("grids and resume files")
def g_resume_file_with_a_line_that_is_not_json(tmp: Path):
    verdict, detail = _damaged_resume(tmp, lambda lines: lines[:1] + ["{not json"] + lines[1:])
    return ("weak", f"silently skipped: {detail}") if verdict == "accepted" else (verdict, detail)


@probe("grids and resume files")
def g_resume_file_with_an_edited_score(tmp: Path):
    def edit(lines):
        line = json.loads(lines[2])  # the cell (a, block1) x (a, block2): a score that is not 0
        cell = line.get("cell", line)  # version 2 wraps the cell with its digest
        cell["result"]["score"] = 0.5
        return lines[:2] + [json.dumps(line)] + lines[3:]

    verdict, detail = _damaged_resume(tmp, edit)
    if verdict == "accepted":
        return "weak", f"an edited cell was accepted: {detail}"
    return verdict, detail


@probe("grids and resume files")
def g_grid_json_cut_or_tampered(tmp: Path):
    grid = sp.compare_grid({"a": cnn(width=4)}, LAYERS, random_data(), "cka-linear")
    path = tmp / "g.json"
    results = []
    payload = grid.to_dict()
    payload["cells"][0]["front"] = 99
    for what, text in [("cut", '{"format": "similarity-plugins grid", "nodes": ['),
                       ("cell index 99", json.dumps(payload))]:
        path.write_text(text)
        try:
            back = sp.Grid.from_json(path)
        except ValueError as exc:
            if isinstance(exc, json.JSONDecodeError) or str(path) not in str(exc):
                results.append(("weak", f"{what}: {exc_text(exc)} (file not named)"))
            else:
                results.append(("good", f"{what}: refused naming the file"))
            continue
        except Exception as exc:  # noqa: BLE001
            results.append(("weak", f"{what}: raw {exc_text(exc)}"))
            continue
        results.append(("weak", f"{what}: accepted ({len(back.cells)} cells)"))
    return worst(results)


@probe("grids and resume files")
def g_cli_grid_on_a_cut_resume_file(tmp: Path):
    path = tmp / "cells.jsonl"
    path.write_text('{"format": "similarity-plugins grid", "nodes": [')
    code, text, escaped = quiet_cli(["grid", "--model", "a=small-cnn?width=4", "--in-channels", "1", "--layers",
                                     "block2", "--data", "digits:16", "--max-test", "32", "--metrics", "cka-linear",
                                     "--no-progress", "--resume", str(path)])
    if escaped is not None:
        return "weak", f"traceback out of main: {exc_text(escaped)}"
    if code == 2 and str(path) in text:
        return "good", "exit 2 naming the file"
    return "weak", f"exit {code}: {short(text.strip().splitlines()[-1] if text.strip() else '')}"


@probe("grids and resume files")
def g_infinite_scores_round_trip(tmp: Path):
    class Infinite:
        needs = ("test",)
        activations_only = True

        @sp.hookimpl
        def similarity(self, front, end, layer, context):
            return math.inf if layer.front == layer.end else -math.inf

    name = register(Infinite(), "fc3-infinite")
    grid = sp.compare_grid({"a": cnn(width=4)}, LAYERS, random_data(), name)
    grid.to_json(tmp / "g.json")
    back = sp.Grid.from_json(tmp / "g.json")
    kept = [[float(v) for v in row] for row in back.matrix(name).tolist()]
    if kept == [[math.inf, -math.inf], [-math.inf, math.inf]] and all(c.ok for c in back.cells.values()):
        return "good", "+inf and -inf read back as scores"
    failed = sum(not c.ok for c in back.cells.values())
    return "bad", f"read back as {kept}, {failed} cells now failed"


# ------------------------------------------------------------------------------ grids that answer as compare does

class SharedTwice(nn.Module):
    """``shared`` runs twice per forward pass (the torchvision BasicBlock ``relu`` pattern); ``a`` and ``b`` once."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.a = nn.Conv2d(1, 4, 3, padding=1)
            self.shared = nn.ReLU()
            self.b = nn.Conv2d(4, 4, 3, padding=1)
            self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 16 * 16, 10))

    def forward(self, x):
        return self.head(self.shared(self.b(self.shared(self.a(x)))))


@probe("grids like compare")
def g_model_names_1_and_str_1(tmp: Path):
    try:
        grid = sp.compare_grid({1: cnn(width=4), "1": cnn(seed=1, width=4)}, ["block1"], random_data(train=False),
                               "cka-linear")
    except (ValueError, TypeError) as exc:
        return ("good" if "1" in str(exc) else "weak"), f"refused: {exc_text(exc)}"
    models = sorted({str(n[0]) for n in grid.nodes})
    if len(models) < 2:
        return "bad", f"two models given, the grid holds {len(models)} ({models}): one silently dropped"
    return "good", f"both models kept: {models}"


@probe("grids like compare")
def g_layer_that_runs_twice(tmp: Path):
    model = SharedTwice().eval()
    grid = sp.compare_grid({"m": model}, ["a", "shared", "b"], random_data(train=False), "cka-linear")
    shared_ok, others_failed = [], []
    for (_, i, j), cell in grid.cells.items():
        if "shared" in (grid.nodes[i][1], grid.nodes[j][1]):
            if cell.ok:
                shared_ok.append(cell)
        elif not cell.ok:
            others_failed.append(cell)
    if shared_ok:
        return "bad", f"{len(shared_ok)} cells of a layer run twice scored (from one of its calls); compare refuses it"
    if others_failed:
        return "weak", f"refused, but {len(others_failed)} cells of other layers failed too"
    return "good", "only the shared layer's cells carry compare's refusal"


@probe("grids like compare")
def g_metric_that_needs_a_missing_train_split(tmp: Path):
    models = {"a": cnn(width=4), "b": cnn(seed=1, width=4)}
    try:
        grid = sp.compare_grid(models, ["block1"], random_data(train=False), "cka-linear,linear-regression")
    except Exception as exc:  # noqa: BLE001
        return "bad", f"the whole grid raised (every other cell lost): {exc_text(exc)}"
    bad_lr = [c for (m, _, _), c in grid.cells.items() if m == "linear-regression" and c.ok]
    bad_cka = [c for (m, _, _), c in grid.cells.items() if m == "cka-linear" and not c.ok]
    if bad_lr:
        return "bad", "linear-regression scored without a train split"
    if bad_cka:
        return "weak", "the other metric's cells failed too"
    return "good", "linear-regression's cells carry the error; cka-linear ran"


class TupleLayer(nn.Module):
    def forward(self, x):
        return x, x * 2


class OneBadLayer(nn.Module):
    """Layer ``split`` outputs a tuple (no activation to compare); ``a`` and ``b`` are plain convolutions."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.a = nn.Conv2d(1, 4, 3, padding=1)
            self.split = TupleLayer()
            self.b = nn.Conv2d(4, 4, 3, padding=1)
            self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 16 * 16, 10))

    def forward(self, x):
        p, q = self.split(self.a(x))
        return self.head(self.b(p + q))


def scoped(grid, failing) -> tuple[str, str]:
    """Cells for which ``failing(metric, front, end)`` is true must fail, the others must score."""
    wrong_ok = [k for k, c in grid.cells.items() if c.ok and failing(k[0], grid.nodes[k[1]], grid.nodes[k[2]])]
    wrong_err = [k for k, c in grid.cells.items() if not c.ok and not failing(k[0], grid.nodes[k[1]], grid.nodes[k[2]])]
    if wrong_ok:
        return "bad", f"{len(wrong_ok)} cells scored that should fail"
    if wrong_err:
        return "weak", f"{len(wrong_err)} of {len(grid.cells)} cells failed that did not need to"
    return "good", f"only the {sum(not c.ok for c in grid.cells.values())} cells that need it failed"


@probe("grids like compare")
def g_one_bad_layer_fails_only_its_cells(tmp: Path):
    try:
        grid = sp.compare_grid({"m": OneBadLayer().eval()}, ["a", "split", "b"], random_data(train=False), "cka-linear")
    except Exception as exc:  # noqa: BLE001
        return "weak", f"the grid raised: {exc_text(exc)}"
    return scoped(grid, lambda _m, front, end: "split" in (front[1], end[1]))


@probe("grids like compare")
def g_bad_train_split_fails_only_the_metrics_that_read_it(tmp: Path):
    base = random_data()
    x, y = (t.clone() for t in base.train.tensors)
    x[5, 0, 1, 1] = float("nan")
    data = sp.Data(train=TensorDataset(x, y), test=base.test)
    try:
        grid = sp.compare_grid(grid_models(), ["block1"], data, "cka-linear,linear-regression")
    except Exception as exc:  # noqa: BLE001
        return "weak", f"the grid raised: {exc_text(exc)}"
    return scoped(grid, lambda metric, _f, _e: metric == "linear-regression")


# ------------------------------------------------------------------------------------ state a plugin leaves behind

def changer(action, name: str) -> str:
    class Changer:
        needs = ("test",)
        activations_only = True

        @sp.hookimpl
        def similarity(self, front, layer, context):
            context.activations(front, layer.front, "test")
            action()
            return 0.5

    return register(Changer(), name)


def xy():
    rng = np.random.default_rng(0)
    return rng.normal(size=(40, 6)), rng.normal(size=(40, 5))


def state_probe(cases, leak_verdict: str) -> tuple[str, str]:
    """Run ``score`` with a plugin that changes one setting, then cka-linear; compare the setting and the score."""
    x, y = xy()
    baseline = sp.score(x, y, "cka-linear")["cka-linear"].score
    leaked, broken = [], []
    for what, action, read, put_back in cases:
        before = read()
        name = changer(action, f"fc3-change-{what.replace(' ', '-')}")
        try:
            report = sp.score(x, y, [name, "cka-linear"])
            after = read()
        finally:
            put_back(before)
        if after != before:
            leaked.append(what)
        row = report["cka-linear"]
        if not row.ok or row.score != baseline:
            broken.append(f"{what}: later metric {'error' if not row.ok else row.score}")
    if broken:
        return "bad", "; ".join(broken)
    if leaked:
        return leak_verdict, f"left changed after score: {', '.join(leaked)}"
    return "good", f"restored: {', '.join(c[0] for c in cases)}"


@probe("state left behind")
def st_score_restores_grad_dtype_anomaly(tmp: Path):
    return state_probe([
        ("grad mode", lambda: torch.set_grad_enabled(False), torch.is_grad_enabled, torch.set_grad_enabled),
        ("default dtype", lambda: torch.set_default_dtype(torch.float64), torch.get_default_dtype,
         torch.set_default_dtype),
        ("anomaly detection", lambda: torch.set_anomaly_enabled(True), torch.is_anomaly_enabled,
         torch.set_anomaly_enabled),
    ], "bad")


@probe("state left behind")
def st_score_with_a_plugin_that_sets_the_meta_device(tmp: Path):
    return state_probe([("default device", lambda: torch.set_default_device("meta"),
                         lambda: str(torch.get_default_device()), lambda d: torch.set_default_device(d))], "weak")


@probe("state left behind")
def st_score_restores_process_settings(tmp: Path):
    env_key = "FC3_PROBE_VARIABLE"
    return state_probe([
        ("thread count", lambda: torch.set_num_threads(torch.get_num_threads() + 1), torch.get_num_threads,
         torch.set_num_threads),
        ("np.seterr", lambda: np.seterr(all="raise"), np.geterr, lambda s: np.seterr(**s)),
        ("warnings filters", lambda: warnings.simplefilter("error"), lambda: list(warnings.filters),
         lambda f: warnings.filters.__setitem__(slice(None), f)),
        ("environment", lambda: os.environ.__setitem__(env_key, "1"), lambda: os.environ.get(env_key),
         lambda v: os.environ.pop(env_key, None) if v is None else os.environ.__setitem__(env_key, v)),
        ("matmul precision", lambda: torch.set_float32_matmul_precision("medium"),
         torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        ("working directory", lambda: os.chdir(tempfile.gettempdir()), os.getcwd, os.chdir),
    ], "weak")


@probe("state left behind")
def st_score_leaves_the_callers_random_streams(tmp: Path):
    def reseed():
        torch.manual_seed(1234)
        np.random.seed(1234)
        random.seed(1234)

    name = changer(reseed, "fc3-reseed")
    x, y = xy()
    draws = []
    for metrics in (["cka-linear"], [name, "cka-linear"]):
        torch.manual_seed(5)
        np.random.seed(5)
        random.seed(5)
        sp.score(x, y, metrics)
        draws.append((torch.rand(1).item(), np.random.rand(), random.random()))
    if draws[0] != draws[1]:
        return "bad", "a plugin's reseeding changed the caller's random streams"
    return "good", "the caller's torch, NumPy and random streams go on as without the plugin"


@probe("state left behind")
def st_score_state_outside_the_documented_list(tmp: Path):
    """A plugin sets the umask to 0 or flushes subnormal numbers to zero (torch.set_flush_denormal)."""
    x, y = xy()
    tiny_x, tiny_y = x * 1e-310, y * 1e-310  # linear CKA measures subnormal inputs exactly (docs/reliability.md)
    baseline = sp.score(tiny_x, tiny_y, "cka-linear")["cka-linear"].score
    problems = []
    name = changer(lambda: os.umask(0), "fc3-umask")
    np.save(tmp / "x.npy", x)
    saved = os.umask(0o022)
    try:
        quiet_cli(["score", str(tmp / "x.npy"), str(tmp / "x.npy"), "--metrics", f"{name},cka-linear", "--out",
                   str(tmp / "r.json")])
        left = os.umask(0o022)
    finally:
        os.umask(saved)
    mode = stat.S_IMODE(os.stat(tmp / "r.json").st_mode) if (tmp / "r.json").exists() else None
    if left != 0o022:
        problems.append(f"umask left {oct(left)}, --out written {oct(mode) if mode is not None else 'not at all'}")
    name = changer(lambda: torch.set_flush_denormal(True), "fc3-denormal")
    try:
        row = sp.score(tiny_x, tiny_y, [name, "cka-linear"])["cka-linear"]
        left = bool((torch.tensor([1e-310], dtype=torch.float64) * 1.0).item() == 0.0)
    finally:
        torch.set_flush_denormal(False)
    if left or row.score != baseline:
        after = row.score if row.ok else f"refused: {short(row.error, 45)}"
        problems.append(f"flush-denormal left {'on' if left else 'off'}; later cka-linear on subnormal inputs: {after}")
    return ("weak", "; ".join(problems)) if problems else ("good", "umask and flush-denormal restored")


FIRST_CALL = """
import json, numpy as np, similarity_plugins as sp
rng = np.random.default_rng(0)
row = sp.score(rng.normal(size=(40, 4)), rng.normal(size=(40, 3)), "cka-linear", options={"permutations": 100})[0]
print(json.dumps({"ok": row.ok, "warnings": row.details.get("warnings", [])}))
"""


@probe("state left behind")
def st_builtin_metric_not_blamed_for_a_lazy_import(tmp: Path):
    """A fresh process: cka-linear's first permutation test imports SciPy, whose import adds warnings filters."""
    done = subprocess.run([sys.executable, "-c", FIRST_CALL], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tree()), "OMP_NUM_THREADS": "1"}, cwd=tmp)
    if done.returncode != 0:
        return "bad", f"exit {done.returncode}: {short(done.stderr.strip().splitlines()[-1])}"
    row = json.loads(done.stdout.strip().splitlines()[-1])
    blamed = [w for w in row["warnings"] if "changed the process" in w]
    if blamed:
        return "weak", f"built-in row says: {short(blamed[0], 90)}"
    return "good", "no process-state warning on a built-in metric"


PLUGIN_DIR: list = [""]  # where the chdir plugin goes (set by the probe)


@probe("state left behind")
def st_cli_out_after_a_plugin_chdir(tmp: Path):
    here, elsewhere = tmp / "here", tmp / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    np.save(here / "x.npy", np.random.default_rng(0).normal(size=(20, 3)))
    name = changer(lambda: os.chdir(PLUGIN_DIR[0]), "fc3-chdir")
    PLUGIN_DIR[:] = [str(elsewhere)]
    os.chdir(here)
    code, text, escaped = quiet_cli(["score", "x.npy", "x.npy", "--metrics", f"{name},cka-linear", "--out", "r.json"])
    if escaped is not None:
        return "bad", f"traceback: {exc_text(escaped)}"
    if (elsewhere / "r.json").exists() and not (here / "r.json").exists():
        return "bad", f"exit {code}: --out written in the plugin's folder, not the user's"
    if (here / "r.json").exists():
        return "good", f"exit {code}: r.json in the user's folder"
    return "weak", f"exit {code}: no r.json anywhere ({short(text)})"


# ------------------------------------------------------------------------------- outputs that are not regular files

@contextlib.contextmanager
def fifo(path: Path):
    """A named pipe at ``path`` with a reader held open (a writer that opens it does not block)."""
    os.mkfifo(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        yield path
    finally:
        os.close(fd)


def is_fifo(path: Path) -> bool:
    return stat.S_ISFIFO(os.lstat(path).st_mode)


@probe("outputs not regular files")
def o_cli_out_and_csv_naming_a_fifo(tmp: Path):
    np.save(tmp / "x.npy", np.random.default_rng(0).normal(size=(20, 3)))
    results = []
    for option in ("--out", "--csv"):
        with fifo(tmp / f"pipe{option}") as pipe:
            code, text, escaped = quiet_cli(["score", str(tmp / "x.npy"), str(tmp / "x.npy"), "--metrics",
                                             "cka-linear", option, str(pipe)])
            if not is_fifo(pipe):
                results.append(("bad", f"{option}: the named pipe was replaced by a regular file (exit {code})"))
            elif escaped is not None:
                results.append(("weak", f"{option}: traceback {exc_text(escaped)}"))
            elif code == 2:
                results.append(("good", f"{option}: exit 2, pipe left"))
            else:
                results.append(("weak", f"{option}: exit {code}"))
    return worst(results)


@probe("outputs not regular files")
def o_report_and_grid_writers_on_a_fifo(tmp: Path):
    report = sp.score(*xy(), "cka-linear")
    grid = sp.compare_grid({"a": cnn(width=4)}, ["block1"], random_data(train=False), "cka-linear")
    results = []
    for what, write in [("Report.to_json", report.to_json), ("Report.to_csv", report.to_csv),
                        ("Grid.to_json", grid.to_json), ("Grid.heatmap", grid.heatmap),
                        ("Report.to_json via a symlink", report.to_json)]:
        pipe = tmp / f"{what.replace(' ', '_')}.{'png' if 'heatmap' in what else 'out'}"
        with fifo(pipe):
            target = pipe
            if "symlink" in what:
                target = tmp / "link.json"
                os.symlink(pipe, target)
            try:
                write(str(target))
                raised = None
            except OSError as exc:
                raised = exc
            except Exception as exc:  # noqa: BLE001
                raised = exc
            if not is_fifo(pipe):
                results.append(("bad", f"{what}: pipe replaced"))
            elif raised is None:
                results.append(("weak", f"{what}: wrote into the pipe without a word"))
            elif isinstance(raised, OSError):
                results.append(("good", f"{what}: refused"))
            else:
                results.append(("weak", f"{what}: raw {exc_text(raised)}"))
    return worst(results)


# ----------------------------------------------------------------------------------------- the shared IRI cache

def seeds4() -> torch.Tensor:
    return torch.rand(4, 1, 16, 16, generator=torch.Generator().manual_seed(0))


def iris(model, cache) -> object:
    from similarity_plugins.iri import generate_iris

    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = generate_iris(model, "block2", seeds4(), steps=2, cache_dir=cache)
    return result, [str(w.message) for w in caught]


@probe("shared IRI cache")
def k_link_planted_as_a_cache_entry(tmp: Path):
    model, cache = cnn(), tmp / "cache"
    first, _ = iris(model, cache)
    entries = glob.glob(str(cache / "*.pt"))
    if not entries:
        return "weak", "no cache entry written (probe cannot plant a link)"
    victim = tmp / "victim.txt"
    victim.write_bytes(b"precious")
    os.remove(entries[0])
    os.symlink(victim, entries[0])
    again, messages = iris(model, cache)
    if victim.read_bytes() != b"precious":
        return "bad", "the file the planted link points to was overwritten"
    if not torch.equal(again.inputs, first.inputs):
        return "bad", "the planted entry changed the IRIs"
    if os.path.islink(entries[0]):
        return "weak", "victim intact, but the link is still in the cache"
    return "good", "link replaced, its target untouched" + (" (warned)" if messages else "")


@probe("shared IRI cache")
def k_unusable_cache_folder_refused_before_the_work(tmp: Path):
    import similarity_plugins.iri.generate as generate

    real, ran = generate._optimize, []

    def counting(*args, **kwargs):
        ran.append(1)
        return real(*args, **kwargs)

    (tmp / "file").write_text("x")
    results = []
    generate._optimize = counting
    try:
        for what, cache in [("a file as the folder", tmp / "file" / "cache"), ("a 300-character name", tmp / ("x" * 300))]:
            ran.clear()
            try:
                iris(cnn(), cache)
                results.append(("weak", f"{what}: no error"))
            except OSError as exc:
                named = str(cache)[:40] in str(exc) or "cache" in str(exc)
                when = "after the IRI work (lost)" if ran else "before the work"
                verdict = "good" if (not ran and named) else "weak"
                results.append((verdict, f"{what}: {when}: {type(exc).__name__} ...{short(exc)[-60:]}"))
            except Exception as exc:  # noqa: BLE001
                results.append(("weak", f"{what}: raw {exc_text(exc)} {'after' if ran else 'before'} the work"))
    finally:
        generate._optimize = real
    return worst(results)


@probe("shared IRI cache")
def k_damaged_iri_file_named(tmp: Path):
    from similarity_plugins.iri.store import load_iris

    path = tmp / "iris.npz"
    results = []
    for what, make in [("not a zip", lambda: path.write_bytes(b"not a zip")),
                       ("another .npz", lambda: np.savez(path, other=np.zeros(3)))]:
        make()
        try:
            load_iris(path)
            results.append(("bad", f"{what}: loaded"))
        except ValueError as exc:
            results.append(("good" if "iris.npz" in str(exc) else "weak", f"{what}: {exc_text(exc)}"))
        except Exception as exc:  # noqa: BLE001
            named = "iris.npz" in str(exc)
            results.append(("weak", f"{what}: raw {type(exc).__name__}{'' if named else ' without the file name'}"))
    return worst(results)


# ------------------------------------------------------------------------------------ exit code after a timeout

TIMEOUT_SCRIPT = """
import sys, time, torch
import similarity_plugins as sp
from similarity_plugins.cli.main import console_main

class Busy:
    @sp.hookimpl
    def similarity(self, front):
        a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
        stop = time.time() + 30
        while time.time() < stop:      # inside torch kernels most of the time, as a slow metric is
            a = (a @ a).tanh()
        return 0.5

sp.register_metric(Busy, "busy")
console_main(sys.argv[1:])
"""


@probe("exit codes")
def t_cli_exit_code_after_a_metric_timeout(tmp: Path):
    script, out = tmp / "run.py", tmp / "report.json"
    script.write_text(TIMEOUT_SCRIPT)
    done = subprocess.run([sys.executable, str(script), "compare", "--front", "small-cnn", "--end", "small-cnn",
                           "--in-channels", "1", "--layer", "block2", "--data", "digits:16", "--max-test", "32",
                           "--metrics", "busy,cka-linear", "--timeout", "1", "--out", str(out), "--no-progress"],
                          cwd=tmp, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tree()), "OMP_NUM_THREADS": "1"})
    rows = {r["metric"]: r for r in json.loads(out.read_text())["results"]} if out.exists() else {}
    if done.returncode != 1:
        code = done.returncode
        how = f"killed by signal {-code} (shell exit code {128 - code})" if code < 0 else f"exit {code}"
        return "bad", f"{how}, documented: exit 1 (a row has an error); report written: {bool(rows)}"
    if "MetricTimeout" not in str(rows.get("busy", {}).get("error")):
        return "weak", "exit 1 but the timed-out row does not say MetricTimeout"
    return "good", "exit 1, the timed-out row says MetricTimeout"


# ------------------------------------------------------------------------------ cost notes and values kept (E, H)

@probe("cost notes and values (E, H)")
def e_permutation_notes_for_small_n(tmp: Path):
    rng = np.random.default_rng(0)
    x5, y5 = rng.normal(size=(5, 4)), rng.normal(size=(5, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        many = sp.score(x5, y5, "cka-linear", options={"permutations": 1000})["cka-linear"]
        one = sp.score(x5, y5, "cka-linear", options={"permutations": 1})["cka-linear"]
    noted = any("permutations" in str(w.message) for w in caught) or many.details.get("warnings")
    std = one.details.get("null_std")
    problems = []
    if not noted:
        problems.append("K=1000 > 5! = 120 with no note")
    if not (isinstance(std, float) and math.isnan(std)):
        problems.append(f"K=1 gives null_std {std} (a spread measured from one value)")
    return ("weak", "; ".join(problems)) if problems else ("good", "K > N! noted; null_std NaN for K = 1")


@probe("cost notes and values (E, H)")
def h_masked_array_into_score(tmp: Path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((12, 4)), rng.standard_normal((12, 3))
    x[3, 1] = 1e6  # what the mask hides must not count
    mask = np.zeros_like(x, bool)
    mask[3, 1] = True
    masked = np.ma.masked_array(x, mask=mask)
    try:
        row = sp.score(masked, y, "cka-linear")["cka-linear"]
    except ValueError as exc:
        return ("good" if "mask" in str(exc) else "weak"), f"refused: {exc_text(exc)}"
    except Exception as exc:  # noqa: BLE001
        return "weak", f"raw {exc_text(exc)}"
    if row.ok:
        return "bad", f"scored {row.score:.4f} with the masked entry read as a value"
    return ("good" if "mask" in row.error else "weak"), f"error row: {short(row.error)}"


# ----------------------------------------------------------------------------------------------------- the runner

def tree() -> Path:
    """The source tree under test (the one ``similarity_plugins`` was imported from)."""
    return Path(sp.__file__).resolve().parent.parent


def snapshot() -> dict:
    return {"grad": torch.is_grad_enabled(), "dtype": torch.get_default_dtype(), "anomaly": torch.is_anomaly_enabled(),
            "device": str(torch.get_default_device()), "threads": torch.get_num_threads(), "seterr": np.geterr(),
            "matmul": torch.get_float32_matmul_precision(), "env": dict(os.environ), "cwd": os.getcwd(),
            "filters": list(warnings.filters)}


def restore(saved: dict) -> None:
    torch.set_grad_enabled(saved["grad"])
    torch.set_default_dtype(saved["dtype"])
    torch.set_anomaly_enabled(saved["anomaly"])
    torch.set_default_device(None if saved["device"] == "cpu" else saved["device"])
    torch.set_num_threads(saved["threads"])
    np.seterr(**saved["seterr"])
    torch.set_float32_matmul_precision(saved["matmul"])
    for key in set(os.environ) - set(saved["env"]):
        del os.environ[key]
    os.environ.update(saved["env"])
    os.chdir(saved["cwd"])
    warnings.filters[:] = saved["filters"]


def run_probe(fn: Callable[[Path], tuple[str, str]]) -> tuple[str, str, float]:
    saved = snapshot()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fc3-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.manual_seed(0)
            with contextlib.redirect_stderr(io.StringIO()):
                verdict, detail = fn(Path(tmp))
        except Exception as exc:  # noqa: BLE001 - an exception the probe did not expect is a finding
            where = traceback.extract_tb(exc.__traceback__)[-1]
            verdict, detail = "bad", f"unexpected {exc_text(exc)} at {Path(where.filename).name}:{where.lineno}"
        finally:
            restore(saved)
    return verdict, detail, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write the verdicts and totals as JSON")
    parser.add_argument("--only", nargs="*", metavar="NAME", help="run only the probes whose names contain NAME")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    head = subprocess.run(["git", "-C", str(tree()), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"tree: {tree()} (commit {head.stdout.strip() or 'unknown'})", flush=True)
    rows, start = [], time.perf_counter()
    for name, family, fn in PROBES:
        if args.only and not any(part in name for part in args.only):
            continue
        verdict, detail, seconds = run_probe(fn)
        rows.append({"name": name, "family": family, "verdict": verdict, "detail": detail, "seconds": round(seconds, 2)})
        print(f"{name}: {verdict} ({detail})", flush=True)
    totals = {v: sum(r["verdict"] == v for r in rows) for v in ("good", "weak", "bad")}
    elapsed = time.perf_counter() - start
    print(f"totals: {totals['good']} good, {totals['weak']} weak, {totals['bad']} bad of {len(rows)} probes "
          f"({elapsed:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"tree": str(tree()), "commit": head.stdout.strip(), "totals": totals,
                                               "seconds": round(elapsed, 1), "probes": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
