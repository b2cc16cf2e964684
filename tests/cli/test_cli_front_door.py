"""The command line's front door: --version, --help without raw markup, the list table, counts in words, why
grid cells failed, and the best pair of a one-model grid."""

from __future__ import annotations

import argparse
import re

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.cli.main import build_parser, main


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"similarity-plugins {sp.__version__}\n"


def _helps() -> dict[str, str]:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"": parser.format_help(), **{name: p.format_help() for name, p in subparsers.choices.items()}}


def test_help_texts_hold_no_markup():
    for command, text in _helps().items():
        assert "`" not in text and "**" not in text, (command, [ln for ln in text.splitlines() if "`" in ln])
    assert "hf:ID[@REVISION]" in _helps()[""] and "text:[TRAIN_FILE,]TEST_FILE" in _helps()[""]


def test_list_prints_a_header_and_the_invariances(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["metric", "package", "kind", "range", "symmetry", "invariances", "description"]
    assert set(lines[1]) <= {"-", " "}
    rows = {line.split()[0]: re.split(r"\s{2,}", line) for line in lines[2:]}   # columns: two spaces or more apart
    assert rows["cka-linear"][3:6] == ["[0, 1]", "symmetric", "translation,isotropic-scaling,orthogonal,permutation"]
    assert rows["stitch-slm"][5] == "-"


def test_one_result_is_one_result(tmp_path, capsys):
    import numpy as np

    g = np.random.default_rng(0)
    np.save(tmp_path / "a.npy", g.normal(size=(20, 4)))
    np.save(tmp_path / "b.npy", g.normal(size=(20, 3)))
    assert main(["score", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--metrics", "cka-linear"]) == 0
    assert "\n1 result in " in capsys.readouterr().out


@pytest.fixture
def one_model_store(tmp_path):
    """A store of one model's three layers: the third is constant (a ReLU of negative values), so CKA fails there."""
    model = nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 4), nn.Sequential(nn.Linear(4, 3), nn.ReLU()))
    with torch.no_grad():
        model[2][0].weight.zero_()
        model[2][0].bias.fill_(-1.0)
    x = torch.randn(24, 6, generator=torch.Generator().manual_seed(0))
    sp.extract({"a": model}, ["0", "1", "2"], sp.Data(test=TensorDataset(x, torch.zeros(24).long())), tmp_path / "s")
    return tmp_path / "s"


def test_a_one_model_store_grid_says_why_cells_failed_and_pairs_two_layers(one_model_store, capsys):
    assert main(["grid", "--store", str(one_model_store), "--metrics", "cka-linear", "--no-progress"]) == 1
    out = capsys.readouterr().out
    best = [line for line in out.splitlines() if line.startswith("best cka-linear")]
    assert len(best) == 1 and best[0].startswith("best cka-linear: a:0 x a:1 = ")   # not a layer against itself
    matrix = out.split("\n\n")[0].splitlines()
    assert all(v.startswith("(") for v in matrix[-1].split()[1:]) and matrix[-2].split()[-1].startswith("(")
    notes = out[out.index("failed cells"):].splitlines()   # each distinct reason once: the constant side, X or Y
    reasons = [line for line in notes[1:] if line.startswith("  (")]
    assert reasons[0].startswith("  (1) ") and all("of cka-linear: ValueError: " in r and "constant" in r for r in reasons)
    assert sum(int(r.split()[1]) for r in reasons) == 5 and "9 cells (5 failed)" in out
