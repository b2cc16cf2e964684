"""A row's error carries its exception type as a field (``error_type``), set where the error is caught; the text
users read is unchanged ("Type: message"), JSON gains the key and old files without it still load."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.cli.outputs import emit_interrupted
from similarity_plugins.networks.parallel import CollectiveError, World
from similarity_plugins.runner.call import interrupted_row
from similarity_plugins.runner.grid.files import cell_result_dict
from tests.helpers.metrics import Meddler


class _Boom:
    @sp.hookimpl
    def similarity(self):
        raise LookupError("no such thing")


class _Returns:
    activations_only = True

    @sp.hookimpl
    def similarity(self):
        return sp.SimilarityResult("", None, {}, 0.0, "OverflowError: too big", None, "OverflowError")


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2))
    data = sp.Data(test=TensorDataset(torch.rand(6, 3), torch.zeros(6, dtype=torch.long)))
    return model, data


def test_a_raised_exception_sets_the_type_and_keeps_the_text(fresh_manager, tiny):
    sp.register_metric(_Boom, "boom")
    model, data = tiny
    row = sp.compare(model, model, "0", data, "boom")["boom"]
    assert (row.error, row.error_type) == ("LookupError: no such thing", "LookupError")
    assert json.loads(sp.Report([row]).to_json())["results"][0]["error_type"] == "LookupError"


def test_refusals_timeouts_and_changed_donors_carry_their_types(fresh_manager, tiny):
    sp.register_metric(Meddler, "meddler")
    model, data = tiny
    report = sp.compare(model, model, "0", data, ["meddler", "stitch-hlm"])
    meddled, refused = report["meddler"], report["stitch-hlm"]
    assert meddled.error_type == "DonorModified" and meddled.error.startswith("DonorModified: metric 'meddler' changed")
    assert refused.error_type == "ValueError" and refused.error.startswith("ValueError: stitch-hlm needs the training")
    arrays = sp.score(np.ones((6, 2)), np.ones((6, 2)), metrics="stitch-hlm")["stitch-hlm"]
    assert arrays.error_type == "ValueError" and arrays.error.startswith("ValueError: stitch-hlm needs the models")


def test_a_returned_error_row_keeps_its_type(fresh_manager):
    sp.register_metric(_Returns, "returns")
    row = sp.score(np.ones((6, 2)), np.ones((6, 2)), metrics="returns")["returns"]
    assert (row.error, row.error_type) == ("OverflowError: too big", "OverflowError")


def test_a_load_error_row_carries_the_import_error_type(fresh_manager, tiny):
    fresh_manager.load_reference("broken", "no_such_module_for_this_test:thing", "broken-dist")
    model, data = tiny
    row = sp.compare(model, model, "0", data, "broken")["broken"]
    assert row.error_type == "ModuleNotFoundError" and "failed to load: ModuleNotFoundError" in row.error


def test_interrupted_rows_are_counted_by_their_type(capsys):
    done = sp.SimilarityResult("a", 1.0, layer="0")
    failed = sp.SimilarityResult.failed("b", "KeyboardInterrupt: a plugin's own text", "0", error_type="ValueError")
    stopped = interrupted_row("c", "0")
    assert stopped.error == "KeyboardInterrupt: interrupted before this metric finished"
    assert stopped.error_type == "KeyboardInterrupt"
    emit_interrupted(sp.Report([done, failed, stopped]), None, None, 0.0, KeyboardInterrupt())
    assert "(interrupted: 2 finished)" in capsys.readouterr().out


def test_the_type_travels_through_a_results_file_and_old_files_still_load():
    row = sp.SimilarityResult.from_exception("m", ValueError("bad"), "0")
    assert sp.SimilarityResult.from_dict(json.loads(json.dumps(cell_result_dict(row)))) == row
    old = {k: v for k, v in cell_result_dict(row).items() if k != "error_type"}
    loaded = sp.SimilarityResult.from_dict(old)
    assert loaded.error == "ValueError: bad" and loaded.error_type is None
    from similarity_plugins.runner.grid.files import BadFile

    with pytest.raises(BadFile, match="error_type must be text"):
        sp.SimilarityResult.from_dict({**old, "error_type": 3})


class _TwoRanks(World):
    """Rank 0 of two, whose partner's failure arrives through the gather."""

    size = 2

    def __init__(self, partner):
        self.partner = partner

    def _all_gather_objects(self, obj):
        return [obj, self.partner]


def test_a_collective_error_names_the_failed_ranks_types():
    world = _TwoRanks((("MetricTimeout", "took too long"), None))  # (status, value) as exchange gathers them
    with pytest.raises(CollectiveError) as caught:
        world.exchange(lambda: 1.0, "a metric")
    assert str(caught.value) == "rank 1 of 2 failed: MetricTimeout: took too long"
    assert caught.value.error_types == ("MetricTimeout",)
