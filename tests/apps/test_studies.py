"""The paper's three studies as commands: bad input refused before training, explanations read from the
numbers, atomic writes, and each study's --quick variant end to end (slow)."""

from __future__ import annotations

import csv
import json

import pytest

from similarity_plugins.apps.studies import STUDIES, STUDY_NAMES, check_study, run_study
from similarity_plugins.apps.studies.common import DonorPool, DonorSpec, prepare_out_dir
from similarity_plugins.apps.studies.robustness import explain_robustness
from similarity_plugins.apps.studies.unseen_cue import explain_excess, summarise
from similarity_plugins.cli import main
from similarity_plugins.host.results import Report, SimilarityResult
from similarity_plugins.utils.io import write_text


def _no_training(monkeypatch):
    monkeypatch.setattr(DonorPool, "get", lambda *a, **k: pytest.fail("training started"))


def test_unknown_study_exits_2_naming_the_studies(capsys, monkeypatch):
    _no_training(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        main(["study", "robustnes"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "robustnes" in err and all(name in err for name in STUDIES)
    with pytest.raises(ValueError, match="valid studies: shortcut, robustness, unseen-cue"):
        check_study("nope")


def test_study_names_are_one_list():
    """The Literal type, the run table and the command's choices name the same studies."""
    from similarity_plugins.cli import build_parser

    assert tuple(STUDIES) == STUDY_NAMES == ("shortcut", "robustness", "unseen-cue")
    study = build_parser()._subparsers._group_actions[0].choices["study"]
    name = next(a for a in study._actions if a.dest == "name")
    assert name.metavar == "{" + ",".join(STUDY_NAMES) + "}"


@pytest.mark.parametrize("name", ["shortcut", "robustness", "unseen-cue"])
def test_unwritable_out_refused_before_training(tmp_path, capsys, monkeypatch, name):
    _no_training(monkeypatch)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["study", name, "--quick", "--out", str(blocker / "sub"), "--no-progress"]) == 2
    assert "cannot write to the output folder" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--out"):
        run_study(name, blocker / "sub")
    if name == "shortcut":
        assert main(["demo", "--quick", "--out", str(blocker / "sub"), "--no-progress"]) == 2


def test_atomic_write_leaves_nothing_when_interrupted(tmp_path):
    path = tmp_path / "report.json"
    with pytest.raises(TypeError):
        write_text(str(path), 12345)  # the write fails half-way
    assert list(tmp_path.iterdir()) == []
    write_text(str(path), "{}\n")
    assert path.read_text() == "{}\n" and [p.name for p in tmp_path.iterdir()] == ["report.json"]
    assert prepare_out_dir(tmp_path / "new" / "dir").endswith("dir")


def _result(metric, layer, score, ci):
    return SimilarityResult(metric, score, {"test_ci95": list(ci)}, layer=layer)


def test_robustness_explanation_reads_the_numbers():
    pairs = {"robust -> robust": (0.9, 0.7), "robust -> non-robust": (0.5, 0.3), "non-robust -> robust": (0.4, 0.2),
             "non-robust -> non-robust": (0.2, 0.75)}
    reports = {t: Report([_result("stitch-slm", "block3", 0.95 - 0.01 * i, (0.9, 1.0)),
                          _result("iri-slm", "block3", iri[0], (iri[0] - 0.05, iri[0] + 0.05)),
                          _result("stitch-slm", "block4", 0.9, (0.85, 0.95)),
                          _result("iri-slm", "block4", iri[1], (iri[1] - 0.1, iri[1] + 0.1))])
               for i, (t, iri) in enumerate(pairs.items())}
    quality = {"robust": {"block3": {"converged": True}}, "non-robust": {"block3": {"converged": False}}}
    lines = explain_robustness(reports, ["block3", "block4"], quality, 0.02)
    assert "0.92 to 0.95" in lines[0] and "robust -> robust 0.90 [0.85, 0.95]" in lines[0]
    assert "intervals apart" in lines[0] and "non-robust front did not reach tol" in lines[0]
    assert "does NOT score higher" in lines[1]


def test_unseen_cue_summary_and_explanation_read_the_numbers():
    rows = []
    for i, (std, iri) in enumerate([(0.10, 0.01), (0.08, 0.02), (0.12, -0.01)]):
        for metric, excess in (("stitch-slm", std), ("iri-slm", iri)):
            rows.append({"donor_seeds": [2 * i, 2 * i + 1], "metric": metric, "layer": "block3", "excess": excess,
                         "iri_median_error": 0.019 if metric == "iri-slm" else None})
    summary = summarise(rows, ["block3"])
    assert summary["block3"]["difference"]["mean"] == pytest.approx(0.28 / 3)
    low, high = summary["block3"]["difference"]["ci95"]
    assert 0 < low < 0.09 < high  # differences 0.09, 0.06, 0.13
    lines = explain_excess(summary, 0.02)
    line = lines[0]
    assert "stitch-slm 0.100 (spread 0.040), iri-slm 0.013" in lines[1] and "excess is smaller" in lines[1]
    assert "+0.093" in line and "direction holds" in line and "same sign for every pair" in line
    rows[1]["excess"] = 0.3  # iri-slm of the first pair now exceeds stitch-slm
    assert "sign varies" in explain_excess(summarise(rows, ["block3"]), 0.02)[0]


def _check_outputs(out, figure):
    payload = json.loads((out / "report.json").read_text())
    rows = list(csv.DictReader((out / "report.csv").open()))
    assert payload["explanation"] and rows
    assert (out / figure).stat().st_size > 10_000
    assert not list(out.glob(".tmp*")) and not list(out.glob("*.tmp*"))
    return payload, rows


def test_study_shortcut_runs_the_demo(tmp_path, monkeypatch):
    """``study shortcut`` and ``demo`` run the same function with the same arguments, so the slow end-to-end run
    of ``demo --quick`` (tests/apps/test_experiments.py) covers both; the study's own folder and option plumbing
    is checked here."""
    from similarity_plugins.apps.studies import shortcut

    calls = []
    monkeypatch.setattr(shortcut, "run_demo", lambda *args, **kwargs: calls.append((args, kwargs)) or {})
    for command in (["study", "shortcut"], ["demo"]):
        assert main([*command, "--quick", "--seed", "3", "--out", str(tmp_path / command[-1]), "--no-progress"]) == 0
    (study_args, study_kw), (demo_args, demo_kw) = calls
    study = {"out_dir": study_args[0], **study_kw}
    assert study.pop("donors") is None
    assert study == {**demo_kw, "out_dir": str(tmp_path / "shortcut")}
    assert demo_kw == {"out_dir": str(tmp_path / "demo"), "quick": True, "seed": 3, "progress": "never"} and not demo_args


# Test-sized studies: ``--quick`` runs these configurations here (the same code at a smaller size: half the donor
# epochs, shorter IRI runs, two layers for robustness), and both studies share one DonorPool, so that the robust
# donors of robustness (seeds 0 and 1) are trained once and are also unseen-cue's first pair. Weaker donors (width 8)
# break the unseen-cue finding asserted below (iri-slm mean |excess| 0.10 at block3); these give 0.03 and 0.00.
TEST_DONOR = DonorSpec(width=16, epochs=3, pgd_eps=0.1, pgd_steps=1)
TEST_SIZE = dict(stitch_epochs=3, stitch_batch=64, iri_seeds=64, iri_steps=300)


@pytest.fixture(scope="module")
def study_donors() -> DonorPool:
    return DonorPool()


def _test_sized(monkeypatch, donors: DonorPool) -> None:
    from similarity_plugins.apps.studies import common, robustness, unseen_cue

    monkeypatch.setattr(common, "DonorPool", lambda: donors)
    monkeypatch.setattr(robustness.RobustnessConfig, "quick", classmethod(lambda cls: cls(
        layers=["block2", "block3"], robust=TEST_DONOR, plain=DonorSpec(width=16, epochs=3, pgd_eps=0.0, pgd_steps=0),
        **TEST_SIZE)))
    monkeypatch.setattr(unseen_cue.UnseenCueConfig, "quick", classmethod(lambda cls: cls(
        donor_pairs=3, donor=TEST_DONOR, **TEST_SIZE)))


def _run_test_sized(monkeypatch, donors, out, study: str, figure: str):
    """``study STUDY --quick`` at the test size into ``out``; its checked outputs (payload, rows)."""
    _test_sized(monkeypatch, donors)
    assert main(["study", study, "--quick", "--out", str(out), "--no-progress"]) == 0
    return _check_outputs(out, figure)


@pytest.mark.slow
def test_robustness_study_quick(tmp_path, capsys, monkeypatch, study_donors):
    out = tmp_path / "robustness"
    payload, rows = _run_test_sized(monkeypatch, study_donors, out, "robustness", "similarity.png")
    assert set(payload["pairs"]) == {"robust -> robust", "robust -> non-robust", "non-robust -> robust",
                                     "non-robust -> non-robust"}
    assert payload["meta"]["config"]["iri_seeds"] == TEST_SIZE["iri_seeds"]  # --quick ran the configuration above
    assert (out / "iris.png").stat().st_size > 10_000
    text = capsys.readouterr().out
    assert "standard stitching rates all four pairs" in text


@pytest.mark.slow
def test_unseen_cue_study_quick(tmp_path, capsys, monkeypatch, study_donors):
    payload, rows = _run_test_sized(monkeypatch, study_donors, tmp_path / "unseen", "unseen-cue", "excess.png")
    for layer, entry in payload["summary"].items():
        low, high = entry["difference"]["ci95"]
        assert low <= entry["difference"]["mean"] <= high
        assert len(entry["difference"]["values"]) == 3
        # What holds across donor pairs (docs/studies.md, "Unseen cue"): not the sign of either family's
        # excess, which changes with the donor pair, but that the invariance-aware excess stays small. Whether it
        # also varies less across donor pairs than standard stitching's depends on the run, so it is not asserted.
        assert entry["iri-slm"]["mean_abs"] < 0.1
