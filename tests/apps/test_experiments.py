"""The excess-agreement experiment (unseen predictive cue) and the demo."""

from __future__ import annotations

import csv
import json
import re

import pytest

from similarity_plugins.apps.experiments import excess_agreement, format_excess
from similarity_plugins.cli import main
from tests.helpers.models import assert_unchanged, snapshot

FAST = {"epochs": 4, "batch_size": 64, "max_train": 384, "iri_max_seeds": 64, "iri_steps": 150, "iri_batch_size": 64}


@pytest.fixture(scope="module")
def donors(digits32, small_cnn_donors):
    return digits32, small_cnn_donors


@pytest.mark.slow  # three stitch trainings
def test_excess_agreement_matches_two_independent_comparisons(donors):
    """Each agreement equals what ``compare`` measures on its own for the same stitch training set (the cue
    on the training split) and test split (with the cue, without it); the excess is their difference."""
    from similarity_plugins import Data, compare
    from similarity_plugins.datasets import UnseenCue

    data, (a, b) = donors
    before = snapshot(a), snapshot(b)
    stitch_only = {k: v for k, v in FAST.items() if not k.startswith("iri_")}  # compare refuses options nobody takes
    rows = excess_agreement(a, b, "block1", data, ["stitch-hlm"], strength=0.8, seed=5, options=stitch_only)
    assert [(r.metric, r.layer) for r in rows] == [("stitch-hlm", "block1")]
    (row,) = rows
    cue_train = UnseenCue(data.train, strength=0.8, seed=5)
    cued = compare(a, b, "block1", Data(cue_train, UnseenCue(data.test, strength=0.8, seed=6)), "stitch-hlm",
                   seed=5, options=stitch_only)["stitch-hlm"]
    clean = compare(a, b, "block1", Data(cue_train, data.test), "stitch-hlm", seed=5, options=stitch_only)["stitch-hlm"]
    assert row.agreement_with_cue == pytest.approx(cued.details["agreement"], abs=1e-12)
    assert row.agreement_without_cue == pytest.approx(clean.details["agreement"], abs=1e-12)
    assert row.relative_accuracy_with_cue == pytest.approx(cued.score, abs=1e-12)
    assert row.excess == pytest.approx(cued.details["agreement"] - clean.details["agreement"], abs=1e-12)
    # a stitch at block1 of two trained digit models agrees with B far above chance (0.1) on clean data
    assert 0.5 < row.agreement_without_cue <= 1.0 and 0.0 <= row.agreement_with_cue <= 1.0
    assert row.to_dict()["excess"] == pytest.approx(row.excess)
    table = format_excess(rows).splitlines()
    assert table[0].split() == ["metric", "layer", "agree", "(cue)", "agree", "(no", "cue)", "excess"]
    assert table[2].split()[:2] == ["stitch-hlm", "block1"] and f"{row.excess:+.4f}" in table[2]
    # The sign and size of the excess on these tiny 3-epoch donors vary with the donors' seeds, so no
    # direction is asserted here; the unseen-cue study measures it.
    assert_unchanged(a, before[0])
    assert_unchanged(b, before[1])


@pytest.mark.slow  # IRIs of 64 seeds, then two stitch evaluations
def test_excess_agreement_runs_iri_metrics(donors):
    data, (a, b) = donors
    (row,) = excess_agreement(a, b, "block1", data, ["iri-hlm"], strength=0.8, options=FAST)
    assert row.metric == "iri-hlm" and 0.0 <= row.agreement_with_cue <= 1.0
    assert 0.3 < row.agreement_without_cue <= 1.0


def test_excess_agreement_bad_input(donors):
    data, (a, b) = donors
    from similarity_plugins import Data

    with pytest.raises(ValueError, match="train"):
        excess_agreement(a, b, "block1", Data(test=data.test))
    with pytest.raises(ValueError, match="stitching metric"):
        excess_agreement(a, b, "block1", data, ["cka-linear"], options=FAST)


def test_excess_agreement_cli(tmp_path, capsys):
    out = tmp_path / "excess.json"
    code = main(["compare", "--front", "small-cnn", "--end", "small-cnn", "--layer", "block1", "--data", "digits",
                 "--metrics", "stitch-dm", "--excess-agreement", "--max-train", "128", "--max-test", "64",
                 "--epochs", "1", "--option", "batch_size=32", "--out", str(out), "--no-progress"])
    assert code == 0
    assert "excess agreement" in capsys.readouterr().out
    rows = json.loads(out.read_text())["results"]
    assert rows[0]["metric"] == "stitch-dm" and "excess" in rows[0]


@pytest.mark.slow  # the whole demo --quick: over a minute on 2 cores
def test_demo_quick_writes_its_files(tmp_path, capsys):
    """``demo --quick`` end to end; ``study shortcut --quick`` runs the same code with the same arguments
    (tests/apps/test_studies.py::test_study_shortcut_runs_the_demo), so this run covers both commands."""
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--out", str(out)]) == 0  # default progress, output not a terminal: no bars
    captured = capsys.readouterr()
    printed = captured.out
    assert not re.search(r"\d+%\|", captured.err + printed), "a progress bar was drawn into a pipe"
    assert len(printed.splitlines()) < 120
    assert "what this shows" in printed and "test accuracy" in printed and "95% intervals" in printed
    png = (out / "similarity.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert (out / "iris.png").stat().st_size > 10_000
    assert not list(out.glob(".tmp*")) and not list(out.glob("*.tmp*"))
    iri = [r for r in csv.DictReader((out / "report.csv").open()) if r["metric"] == "iri-slm"]
    assert iri and all(float(r["test_ci95_low"]) <= float(r["score"]) <= float(r["test_ci95_high"]) for r in iri)
    report = json.loads((out / "report.json").read_text())
    assert set(report["pairs"]) == {"clean -> clean", "clean -> shortcut"}
    accuracy = report["donor_accuracy"]
    # the shortcut model reads the mark: it collapses when the mark is randomised, the clean ones do not
    assert accuracy["shortcut S"]["mark randomised"] < 0.3 < accuracy["clean A"]["mark randomised"]
    rows = (out / "report.csv").read_text().splitlines()
    assert rows[0].startswith("pair,metric,layer,score")
    reported = report["pairs"]["clean -> clean"]["results"]
    for row in reported:  # every reported invariance-aware score comes with converged IRIs
        if row["metric"].startswith("iri-"):
            assert row["details"]["iri_median_error"] <= report["meta"]["config"]["iri_tol"]
    assert len(rows) == 1 + 2 * len(reported)
    page = (out / "report.html").read_text()  # the page, with the IRI gallery inside: the `report` command's page
    assert 'data-image="iris.png"' in page and "data:image/png;base64," in page
    assert main(["report", str(out / "report.json"), "--out", str(tmp_path / "again.html")]) == 0
    assert (tmp_path / "again.html").read_text() == page


def _reports(scores: dict) -> dict:
    """{pair: {(metric, layer): score}} -> {pair: Report}, with IRI distances for the first layer."""
    from similarity_plugins.host.results import Report, SimilarityResult

    return {pair: Report([SimilarityResult(m, s, details={"iri_mean_seed_distance": 0.03}, layer=layer)
                          for (m, layer), s in rows.items()]) for pair, rows in scores.items()}


def test_demo_explanation_reads_the_numbers():
    from similarity_plugins.apps.studies.shortcut import explain

    def table(std, iri, cka=None):
        rows = {}
        for layer, s, i in zip(("b1", "b2", "b3"), std, iri):
            rows[("stitch-slm", layer)], rows[("iri-slm", layer)] = s, i
            if cka is not None:
                rows[("cka-linear", layer)] = cka
        return rows

    fooled = _reports({"clean -> clean": table((1.0, 0.99, 0.9), (1.0, 0.98, 0.8), cka=0.9),
                       "clean -> shortcut": table((1.0, 0.97, 0.85), (1.0, 0.5, 0.1), cka=0.5)})
    lines = explain(fooled, ["b1", "b2", "b3"])
    assert "agree" in lines[0] and "b1" in lines[0]
    assert "close to the clean one at b2 (0.97 vs 0.99), b3 (0.85 vs 0.90)" in lines[1]
    assert "separates the pairs more at b2, b3" in lines[2] and "b3 0.70 vs 0.05" in lines[2]
    assert lines[3].startswith("CKA (0.90 vs 0.50 at b3)")

    # no separation by IRIs and no CKA run: the text says so and leaves CKA out
    flat = _reports({"clean -> clean": table((1.0, 0.9, 0.9), (1.0, 0.9, 0.9)),
                     "clean -> shortcut": table((1.0, 0.3, 0.3), (1.0, 0.3, 0.3))})
    lines = explain(flat, ["b1", "b2", "b3"])
    assert not any("close to the clean one" in line for line in lines)
    assert any("does not separate the pairs more" in line for line in lines)
    assert not any(line.startswith("CKA") for line in lines)
    assert "raise the IRI budget" in explain(flat, [])[0]


def test_demo_explanation_reads_procrustes_svcca_and_rsa_from_the_numbers():
    from similarity_plugins.apps.studies.shortcut import METRICS, explain

    assert {"cka-linear", "procrustes", "svcca", "rsa", "stitch-slm", "iri-slm"} <= set(METRICS)

    def table(iri, procrustes, svcca, rsa):
        rows = {("stitch-slm", "b1"): 1.0, ("iri-slm", "b1"): 1.0, ("stitch-slm", "b2"): 0.9, ("iri-slm", "b2"): iri}
        rows.update({("procrustes", "b2"): procrustes, ("svcca", "b2"): svcca, ("rsa", "b2"): rsa})
        return rows

    reports = _reports({"clean -> clean": table(0.8, 0.70, 0.60, 0.50),
                        "clean -> shortcut": table(0.2, 0.69, 0.40, 0.30)})
    line = explain(reports, ["b1", "b2"])[-1]
    assert "procrustes 0.70 vs 0.69, svcca 0.60 vs 0.40, rsa 0.50 vs 0.30" in line
    assert "svcca, rsa rate the shortcut pair lower by more than 0.05, procrustes does not" in line
    assert "iri-slm's gap there: 0.60" in line
    same = _reports({"clean -> clean": table(0.8, 0.7, 0.6, 0.5), "clean -> shortcut": table(0.2, 0.7, 0.6, 0.5)})
    assert "none rates the shortcut pair lower" in explain(same, ["b1", "b2"])[-1]


def test_excess_agreement_selects_metrics_by_declared_family(fresh_manager):
    """The family attribute decides, not the name: a ``stitch-`` name without the family is refused, a metric of
    the family ``stitching`` under any name runs."""
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    from similarity_plugins import Data, MetricPlugin, hookimpl, register_metric

    class Agreeing(MetricPlugin):
        needs = ("train", "test")

        @hookimpl
        def similarity(self):
            return {"score": 1.0, "details": {"agreement": 0.75}}

    class Stitching(Agreeing):
        family = "stitching"

    register_metric(Agreeing, "stitch-lookalike")
    register_metric(Stitching, "my-stitch")
    g = torch.Generator().manual_seed(0)
    split = TensorDataset(torch.rand(8, 1, 8, 8, generator=g), torch.arange(8) % 2)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 2))
    with pytest.raises(ValueError, match="stitching metric .* got 'stitch-lookalike'"):
        excess_agreement(model, model, "1", Data(train=split, test=split), ["stitch-lookalike"])
    (row,) = excess_agreement(model, model, "1", Data(train=split, test=split), ["my-*"])
    assert (row.metric, row.excess) == ("my-stitch", 0.0)
