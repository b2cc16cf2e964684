"""The IRIs of every preset ``auto`` picks are those of the code before the presets, bit for bit.

``scripts/iri_identity.py`` runs one case per structure (the demo's CNN, ResNet-18 / -50 and VGG cuts, a GELU
net); ``tests/data/iri_identity_before_presets.json`` holds the hashes it wrote on the old code. Exact bits
depend on the CPU and the torch build, so the comparison with those hashes runs only on the machine that
wrote them and skips elsewhere; that asking for auto's preset by name gives auto's IRIs is compared within
one run, on any machine.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.repo import ROOT, load_repo_module

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BEFORE = str(ROOT / "tests" / "data" / "iri_identity_before_presets.json")


@pytest.fixture(scope="module")
def harness():
    return load_repo_module("scripts/iri_identity.py", "iri_identity_for_test")


@pytest.mark.parametrize("case", ["demo-block1",  # the fast suite's case; the deeper ones take seconds
                                  pytest.param("demo-block3", marks=pytest.mark.slow),
                                  pytest.param("vgg11-features.10", marks=pytest.mark.slow)])  # a VGG11 front
def test_asking_for_autos_preset_by_name_gives_the_same_iris(harness, case):
    row = harness.run_case(case)
    assert row["settings"]["preset"] in ("pool-expanding", "adam", "pool-wide-nobn")
    assert row["by_name_hash"] == row["hash"]


@pytest.mark.slow  # every structure's case (about a minute on one thread)
def test_every_preset_gives_the_iris_of_the_code_before_presets(harness):
    with open(BEFORE) as f:
        before = json.load(f)
    if before["machine"] != harness.machine():
        pytest.skip(f"the pinned hashes come from another machine or torch build: {before['machine']}")
    names = [name for name in harness.CASES if name != "resnet18-224-layer3"]   # the 224x224 case takes minutes
    for name in names:
        row = harness.run_case(name)
        if row["settings"]["preset"] in harness.NEW_PRESETS:   # no IRIs of the old code to match
            assert row["by_name_hash"] == row["hash"], name
            continue
        assert row["hash"] == before["cases"][name]["hash"], (name, row["settings"].get("preset"))
        assert row.get("by_name_hash", row["hash"]) == row["hash"], name
