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
from typing import Literal, get_args

from ...utils.progress import Progress, check_progress
from .common import DonorPool, prepare_out_dir

__all__ = ["STUDIES", "STUDY_NAMES", "StudyName", "DonorPool", "check_study", "run_study"]

#: the studies' names, the one list every check and help text reads (`STUDY_NAMES`)
StudyName = Literal["shortcut", "robustness", "unseen-cue"]
STUDY_NAMES: tuple[str, ...] = get_args(StudyName)

#: study name (one of `STUDY_NAMES`, in its order) -> (module, function), run as
#: ``function(out_dir, quick=, seed=, progress=, donors=)``
STUDIES = {
    "shortcut": ("similarity_plugins.apps.studies.shortcut", "run_demo"),
    "robustness": ("similarity_plugins.apps.studies.robustness", "run_robustness"),
    "unseen-cue": ("similarity_plugins.apps.studies.unseen_cue", "run_unseen_cue"),
}


def check_study(name: str) -> StudyName:
    """``name`` when it is a study (the one check, used by `run_study` and the ``study`` command).

    Args:
        name: a study name.

    Returns:
        ``name``.

    Raises:
        ValueError: ``name`` is not one of `STUDY_NAMES` (the message lists them).
    """
    if name not in STUDY_NAMES:
        raise ValueError(f"unknown study {name!r}; valid studies: {', '.join(STUDY_NAMES)}")
    return name


def run_study(name: StudyName, out_dir: str | os.PathLike, *, quick: bool = False, seed: int = 0, progress: Progress = "auto",
              donors: DonorPool | None = None) -> dict:
    """Run study ``name`` writing to ``out_dir``; returns its result dict (``"reports"``, ``"files"``, ``"seconds"``,
    ...). Name and folder are checked before any training; pass one `DonorPool` to several calls to train shared
    donors once.

    The studies (the page *The studies*): ``"shortcut"``, clean against shortcut-reading donors (the demo);
    ``"robustness"``, robust (PGD-trained) against non-robust donors; ``"unseen-cue"``, the excess agreement that a
    label-coded cue neither donor saw adds. Each trains its donors on built-in digits, sweeps layers with CKA,
    standard and invariance-aware stitching, writes ``report.json``, ``report.csv`` and a figure, and prints a
    reading of the measured numbers with their 95% intervals."""
    check_study(name)
    progress = check_progress(progress)
    out = prepare_out_dir(out_dir)
    module, function = STUDIES[name]
    return getattr(importlib.import_module(module), function)(out, quick=quick, seed=seed, progress=progress,
                                                              donors=donors)
