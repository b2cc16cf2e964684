"""Invariance-aware stitching plugins (iri-*): IRIs of the training split, stitch trained on them."""

from __future__ import annotations

import pytest

import similarity_plugins as sp
from tests.helpers.models import assert_unchanged, snapshot

IRI = ["iri-hlm", "iri-slm", "iri-dm", "iri-fula"]
FAST = {"iri_max_seeds": 64, "iri_steps": 300, "iri_batch_size": 64, "epochs": 6, "batch_size": 32}


@pytest.fixture(scope="module")
def data(digits32):
    return digits32


@pytest.fixture(scope="module")
def trained(small_cnn_donors):
    return small_cnn_donors[0]


@pytest.mark.slow  # IRIs of 64 seeds and four stitch trainings
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


def test_unconverged_iris_are_flagged_in_details_table_and_one_warning(trained, data):
    options = {**FAST, "iri_steps": 2, "iri_max_seeds": 16, "epochs": 1, "batch_size": 16}
    with pytest.warns(UserWarning, match="IRIs at block3 did not converge: median relative error") as caught:
        report = sp.compare(trained, trained, "block3", data, ["iri-dm", "iri-slm"], options=options)
    assert len([w for w in caught if "did not converge" in str(w.message)]) == 1   # one IRI set, one warning
    for result in report:
        d = result.details
        assert d["iri_median_error"] > 0.01 and d["unconverged"] is True and d["iri_preset"] == "adam"
        assert 0.0 <= d["iri_converged_fraction"] < 0.5 and d["iri_p95_error"] >= d["iri_median_error"]
        assert any("did not converge" in w and "iri_steps" in w and "preset" in w for w in d["warnings"])
    assert "did not converge" in str(report) and "*" in str(report).splitlines()[2]


def test_bad_iri_input_gets_a_clear_error_row(trained, data):
    no_train = sp.compare(trained, trained, "block2", sp.Data(test=data.test), ["iri-slm"], options=FAST)
    assert "training split" in no_train["iri-slm"].error
    with pytest.raises(sp.UnknownOption, match="'iri_stepz'.*did you mean 'iri_steps'"):  # refused before any work
        sp.compare(trained, trained, "block2", data, ["iri-slm"], options={**FAST, "iri_stepz": 3})
    bad_steps = sp.compare(trained, trained, "block2", data, ["iri-slm"], options={**FAST, "iri_steps": 0})
    assert "steps" in bad_steps["iri-slm"].error


@pytest.mark.slow  # three IRI runs (about 20 s on a shared 2-core machine)
def test_method_and_tuning_options_pass_through(trained, data):
    options = {**FAST, "iri_max_seeds": 16, "iri_steps": 40, "iri_cycle_steps": 10, "epochs": 1, "batch_size": 16,
               "iri_tuning": {"cycle_decay": 0.5, "lr": 0.1}}
    row = sp.compare(trained, trained, "block2", data, ["iri-slm"], options=options)["iri-slm"]
    assert row.error is None
    used = row.details["iri"]["settings"]
    assert (used["cycle_steps"], used["cycle_decay"], used["lr"], used["preset"]) == (10, 0.5, 0.1, "adam")
    assert row.details["iri_preset"] == "adam"
    default = sp.compare(trained, trained, "block2", data, ["iri-slm"],
                         options={**options, "iri_cycle_steps": None, "iri_tuning": None})["iri-slm"]
    assert default.details["iri"]["settings"]["cycle_steps"] == 300  # None: the preset's
    bad = sp.compare(trained, trained, "block2", data, ["iri-slm"], options={**options, "iri_tuning": {"beta_1": 0.9}})
    assert "did you mean 'beta1'" in bad["iri-slm"].error
