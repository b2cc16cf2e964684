"""The paper's three studies as functions (and as ``similarity-plugins study NAME``).

- ``shortcut``: clean vs shortcut-reading donors (the demo, `similarity_plugins.apps.studies.shortcut`);
- ``robustness``: robust (PGD) vs non-robust donors (`robustness`);
- ``unseen-cue``: excess agreement from a label-coded cue neither donor saw (`unseen_cue`).

Each trains its donors on built-in digits, sweeps layers with CKA, standard and invariance-aware stitching,
writes ``report.json``, ``report.csv`` and a figure to ``out_dir``, and prints a reading of the measured
numbers with their 95% intervals. Modules are imported when a study runs (the demo imports ``.common``).
"""

from __future__ import annotations

import importlib
import os

from .common import DonorPool, prepare_out_dir

__all__ = ["STUDIES", "DonorPool", "check_study", "run_study"]

#: study name -> (module, function) run as ``function(out_dir, quick=, seed=, progress=, donors=)``
STUDIES = {
    "shortcut": ("similarity_plugins.apps.studies.shortcut", "run_demo"),
    "robustness": ("similarity_plugins.apps.studies.robustness", "run_robustness"),
    "unseen-cue": ("similarity_plugins.apps.studies.unseen_cue", "run_unseen_cue"),
}


def check_study(name: str) -> str:
    """``name`` when it is a study; ``ValueError`` naming the valid studies otherwise."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; valid studies: {', '.join(STUDIES)}")
    return name


def run_study(name: str, out_dir: str | os.PathLike, *, quick: bool = False, seed: int = 0, progress: bool = True,
              donors: DonorPool | None = None) -> dict:
    """Run study ``name`` (see the module docstring) writing to ``out_dir``; returns its result dict
    (``"reports"``, ``"files"``, ``"seconds"``, ...). Name and folder are checked before any training;
    pass one `DonorPool` to several calls to train shared donors once."""
    check_study(name)
    out = prepare_out_dir(out_dir)
    module, function = STUDIES[name]
    return getattr(importlib.import_module(module), function)(out, quick=quick, seed=seed, progress=progress,
                                                              donors=donors)
