"""Invariance-aware stitching plugins (iri-*): IRIs of the training split, stitch trained on them."""

from __future__ import annotations

import pytest
import torch
from models_for_tests import assert_unchanged, snapshot
from similarity_plugins.apps.zoo import SmallCNN
from similarity_plugins.apps.training import train_classifier

import similarity_plugins as sp
from similarity_plugins.datasets import digits_data

IRI = ["iri-hlm", "iri-slm", "iri-dm", "iri-fula"]
FAST = {"iri_max_seeds": 64, "iri_steps": 300, "iri_batch_size": 64, "epochs": 6, "batch_size": 32}


@pytest.fixture(scope="module")
def data():
    return digits_data(size=32)


@pytest.fixture(scope="module")
def trained(data):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # initial weights independent of the tests that ran before
        model = SmallCNN(in_channels=1, num_classes=10, width=8)
    train_classifier(model, data.train, epochs=3, lr=3e-3, seed=0, progress=False)
    return model.eval()


def test_self_stitch_on_iris_scores_high_and_reports_iri_quality(trained, data, monkeypatch):
    import similarity_plugins.iri.service as iri_module

    calls = []

    original = iri_module.generate_iris
    monkeypatch.setattr(iri_module, "generate_iris", lambda *a, **k: calls.append(a[1]) or original(*a, **k))
    before = snapshot(trained)
    report = sp.compare(trained, trained, "block2", data, IRI, options=FAST)
    assert calls == ["block2"]  # one IRI set shared by the four metrics
    assert_unchanged(trained, before)
    for r in report:
        assert r.error is None, r.error
        assert r.score >= 0.9, (r.metric, r.score)
        assert r.details["train_source"] == "IRIs" and r.details["train_size"] == 64
        for key in ("iri_median_error", "iri_p95_error", "iri_converged_fraction", "iri_mean_seed_distance"):
            assert isinstance(r.details[key], float)
        assert r.details["iri"]["n"] == 64
        assert r.details["iri_mean_seed_distance"] > 0.01  # IRIs start from noise, not from the seeds


def test_unconverged_iris_are_flagged(trained, data):
    report = sp.compare(trained, trained, "block3", data, ["iri-dm"], options={**FAST, "iri_steps": 2})
    result = report["iri-dm"]
    assert result.details["iri_median_error"] > 0.01
    assert any("did not converge" in w for w in result.details["warnings"])
    assert "did not converge" in str(report)


def test_bad_iri_input_gets_a_clear_error_row(trained, data):
    no_train = sp.compare(trained, trained, "block2", sp.Data(test=data.test), ["iri-slm"], options=FAST)
    assert "training split" in no_train["iri-slm"].error
    with pytest.raises(sp.UnknownOption, match="'iri_stepz'.*did you mean 'iri_steps'"):  # refused before any work
        sp.compare(trained, trained, "block2", data, ["iri-slm"], options={**FAST, "iri_stepz": 3})
    bad_steps = sp.compare(trained, trained, "block2", data, ["iri-slm"], options={**FAST, "iri_steps": 0})
    assert "steps" in bad_steps["iri-slm"].error


def test_advanced_optimizer_options_pass_through(trained, data):
    options = {**FAST, "iri_max_seeds": 16, "iri_steps": 40, "iri_cycle_steps": 10, "iri_cycle_decay": 0.5,
               "iri_schedule": "exp", "iri_lr_floor": 0.1, "epochs": 1, "batch_size": 16}
    row = sp.compare(trained, trained, "block2", data, ["iri-slm"], options=options)["iri-slm"]
    assert row.error is None
    used = row.details["iri"]["settings"]
    assert (used["cycle_steps"], used["cycle_decay"], used["schedule"], used["lr_floor"]) == (10, 0.5, "exp", 0.1)
    default = sp.compare(trained, trained, "block2", data, ["iri-slm"],
                         options={**options, "iri_cycle_steps": None, "iri_schedule": None,
                                  "iri_cycle_decay": None, "iri_lr_floor": None})["iri-slm"]
    assert default.details["iri"]["settings"]["cycle_steps"] == 300  # None: the optimiser's default
    bad = sp.compare(trained, trained, "block2", data, ["iri-slm"], options={**options, "iri_schedule": "zigzag"})
    assert "schedule" in bad["iri-slm"].error
