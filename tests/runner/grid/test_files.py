"""Files a grid reads back: resume files keyed on the data's content and the cells asked for, append-safe after
a torn line, validated with the file named; Grid.from_json validated the same way; +inf scores round-trip."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.utils.readback import BadFile
from tests.helpers.models import tiny_cnn

pytestmark = pytest.mark.usefixtures("one_torch_thread")
LAYERS = ["block1", "block2"]


def _data(seed: int = 0) -> sp.Data:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(48, 1, 16, 16, generator=g)
    y = torch.randint(0, 10, (48,), generator=g)
    return sp.Data(train=TensorDataset(x, y), test=TensorDataset(x[:32], y[:32]))


def _models() -> dict:
    return {"a": tiny_cnn(seed=0, width=4), "b": tiny_cnn(seed=1, width=4)}


def test_resume_on_other_data_of_the_same_size_is_refused(counted, tmp_path):
    path, models = tmp_path / "cells.jsonl", _models()
    sp.compare_grid(models, LAYERS, _data(0), "counted", resume=path)
    with pytest.raises(ValueError, match="other data"):
        sp.compare_grid(models, LAYERS, _data(1), "counted", resume=path)


def test_a_file_written_for_all_pairs_serves_across_only_its_cells(counted, tmp_path, fresh_manager):
    path, models, data = tmp_path / "cells.jsonl", _models(), _data()

    class WithP:
        needs = ("test",)
        activations_only = True

        @sp.hookimpl
        def similarity(self, front, end, layer, context):
            return {"score": 1.0, "details": {"p_value": 0.01}}

    sp.register_metric(WithP(), "with-p")
    sp.compare_grid(models, LAYERS, data, "counted,with-p", resume=path)
    n = len(counted)
    across = sp.compare_grid(models, LAYERS, data, "counted,with-p", pairs="across", resume=path)
    assert len(counted) == n  # every cell read back
    fresh = sp.compare_grid(models, LAYERS, data, "counted,with-p", pairs="across")
    assert set(across.cells) == set(fresh.cells)
    assert np.array_equal(across.p_values("with-p", "holm"), fresh.p_values("with-p", "holm"), equal_nan=True)
    only_counted = sp.compare_grid(models, LAYERS, data, "counted", resume=path)
    assert {k[0] for k in only_counted.cells} == {"counted"}


def test_a_torn_last_line_does_not_swallow_the_next_finished_cell(counted, tmp_path):
    path, models, data = tmp_path / "cells.jsonl", _models(), _data()
    one = [(("a", "block1"), ("b", "block2"))]
    sp.compare_grid(models, LAYERS, data, "counted", pairs=one, resume=path)
    with open(path, "a") as fh:
        fh.write('{"cell": {"metric": "coun')  # an interruption in the middle of a line
    two = one + [(("b", "block1"), ("a", "block2"))]
    sp.compare_grid(models, LAYERS, data, "counted", pairs=two, resume=path)
    assert len(counted) == 2
    sp.compare_grid(models, LAYERS, data, "counted", pairs=two, resume=path)
    assert len(counted) == 2  # both cells read back: the second was written on a line of its own
    assert all(json.loads(line) for line in path.read_text().splitlines())


@pytest.mark.parametrize("edit, message", [
    (lambda lines: lines[:1] + ["{not json"] + lines[1:], "line 2: not valid JSON"),
    (lambda lines: lines[:1] + [lines[1].replace('"front": ["a"', '"front": ["b"')] + lines[2:], "digest"),
    (lambda lines: ['{"format": "something else"}'] + lines[1:], "not a grid's finished-cells file"),
    (lambda lines: [lines[0], '{"cell": 3}'], "line 2: not a finished cell"),
])
def test_a_damaged_resume_file_is_refused_naming_it(counted, tmp_path, edit, message):
    path, models, data = tmp_path / "cells.jsonl", _models(), _data()
    sp.compare_grid(models, LAYERS, data, "counted", resume=path)
    path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")
    with pytest.raises(BadFile, match=message) as info:
        sp.compare_grid(models, LAYERS, data, "counted", resume=path)
    assert str(path) in str(info.value)


def test_infinite_scores_round_trip_through_grid_json_and_resume(fresh_manager, tmp_path):
    class Infinite:
        needs = ("test",)
        activations_only = True

        @sp.hookimpl
        def similarity(self, front, end, layer, context):
            return math.inf if layer.front == layer.end else -math.inf

    sp.register_metric(Infinite(), "infinite")
    grid = sp.compare_grid({"a": tiny_cnn(width=4)}, LAYERS, _data(), "infinite", resume=tmp_path / "r.jsonl")
    back = sp.Grid.from_json(grid.to_json(tmp_path / "g.json") and tmp_path / "g.json")
    assert back.matrix("infinite").tolist() == [[math.inf, -math.inf], [-math.inf, math.inf]]
    assert all(c.ok for c in back.cells.values())
    again = sp.compare_grid({"a": tiny_cnn(width=4)}, LAYERS, _data(), "infinite", resume=tmp_path / "r.jsonl")
    assert again.matrix("infinite").tolist() == back.matrix("infinite").tolist()


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["cells"][0].update(front=99), "node indices"),
    (lambda d: d["cells"][0].update(front=True), "node indices"),
    (lambda d: d.pop("nodes"), "'nodes'"),
    (lambda d: d["cells"][0]["result"].update(score="high"), "a score must be a number"),
    (lambda d: d["cells"][0].update(metric="other"), "no metric of the grid"),
    (lambda d: d["cells"].append(dict(d["cells"][0])), "appears twice"),
    (lambda d: d.update(block_nulls=[{"metric": "cka-linear", "front": "a", "end": "a", "null": ["x"]}]),
     "must be numbers"),
    (lambda d: d.update(block_nulls=[{"metric": "other", "front": "a", "end": "a", "null": [0.5]}]),
     "a metric of the grid"),
    (lambda d: d["info"]["cka-linear"].update(range=5), "'range'"),
])
def test_grid_from_json_refuses_a_tampered_file_naming_it(tmp_path, edit, message):
    grid = sp.compare_grid({"a": tiny_cnn(width=4)}, LAYERS, _data(), "cka-linear")
    payload = grid.to_dict()
    edit(payload)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(BadFile, match=message) as info:
        sp.Grid.from_json(path)
    assert str(path) in str(info.value)


def test_grid_from_json_on_a_cut_file_names_it_and_the_cli_exits_2(tmp_path, capsys):
    from similarity_plugins.cli.main import main

    path = tmp_path / "g.json"
    path.write_text('{"format": "similarity-plugins grid", "nodes": [')
    with pytest.raises(BadFile, match="g.json.*not valid JSON"):
        sp.Grid.from_json(path)
    code = main(["grid", "--model", "a=small-cnn?width=4", "--in-channels", "1", "--layers", "block3",
                 "--data", "digits", "--max-test", "32", "--metrics", "cka-linear", "--no-progress",
                 "--resume", str(path)])
    assert code == 2 and str(path) in capsys.readouterr().err


def test_a_header_edited_to_match_other_data_leaves_every_line_unmatched(counted, tmp_path):
    path, models = tmp_path / "cells.jsonl", _models()
    sp.compare_grid(models, LAYERS, _data(0), "counted", resume=path)
    other = tmp_path / "other.jsonl"
    sp.compare_grid(models, LAYERS[:1], _data(1), "counted", pairs=[(("a", "block1"), ("a", "block1"))], resume=other)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([other.read_text().splitlines()[0]] + lines[1:]) + "\n")
    with pytest.raises(BadFile, match="line 2.*digest"):
        sp.compare_grid(models, LAYERS, _data(1), "counted", resume=path)
