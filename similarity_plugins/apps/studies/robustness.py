"""``similarity-plugins study robustness``: robust (PGD-trained) vs non-robust donors.

The paper reports that standard stitching calls robust and non-robust models alike similar, while
invariance-aware stitching shows robust models sharing invariances and non-robust ones idiosyncratic.
Four donors are trained on digits (two robust with PGD, two plainly), and the pairs robust -> robust,
robust -> non-robust, non-robust -> robust and non-robust -> non-robust are swept over layers with CKA,
standard and invariance-aware stitching. Writes ``report.json``, ``report.csv``, ``similarity.png`` (score
against depth, a panel per pair) and ``iris.png`` (the robust and the non-robust front's IRIs of the same
seeds), all or none, and prints a reading of the measured numbers with 95% intervals.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace

import torch

from ...host.results import Report
from ...networks.context import Context
from ...networks.data import Data
from ...runner.compare import compare
from ...utils.progress import Progress, check_progress
from .common import (
    DonorPool,
    DonorSpec,
    begin_study,
    ci_text,
    intervals_overlap,
    json_ready_text,
    say,
    study_csv,
    study_options,
    write_study,
)

METRICS = ["cka-linear", "stitch-slm", "iri-slm"]
PAIRS = {"robust -> robust": ("robust 1", "robust 2"), "robust -> non-robust": ("robust 1", "plain 1"),
         "non-robust -> robust": ("plain 1", "robust 1"), "non-robust -> non-robust": ("plain 1", "plain 2")}


@dataclass
class RobustnessConfig:
    """Sizes of the robustness study; ``quick()`` is the smaller run (fewer stitch epochs and IRI seeds)."""

    layers: list[str] = field(default_factory=lambda: ["block2", "block3", "block4"])
    robust: DonorSpec = DonorSpec(width=16, epochs=6, pgd_eps=0.1, pgd_steps=3)
    plain: DonorSpec = DonorSpec(width=16, epochs=6, pgd_eps=0.0, pgd_steps=0)
    stitch_epochs: int = 20
    stitch_batch: int = 128
    iri_seeds: int = 256
    iri_steps: int = 1000
    iri_tol: float = 2e-2
    iri_cycle_steps: int = 100
    repeats: int = 1

    @classmethod
    def quick(cls) -> RobustnessConfig:
        return cls(layers=["block2", "block3", "block4"], robust=DonorSpec(width=16, epochs=6, pgd_eps=0.1, pgd_steps=1),
                   stitch_epochs=5, stitch_batch=64, iri_seeds=64)

    def options(self) -> dict:
        """The ``compare`` options of the study (stitch and IRI settings as in the demo)."""
        return study_options(self)


def train_donors(cfg: RobustnessConfig, data: Data, seed: int, donors: DonorPool, progress: Progress) -> dict:
    """Two robust and two plain SmallCNNs on ``data.train`` (seeds ``seed``, ``seed + 1``), from ``donors``."""
    key = ("digits-32", seed)
    return {"robust 1": donors.get(key, data.train, cfg.robust, seed, progress),
            "robust 2": donors.get(key, data.train, cfg.robust, seed + 1, progress),
            "plain 1": donors.get(key, data.train, cfg.plain, seed, progress),
            "plain 2": donors.get(key, data.train, cfg.plain, seed + 1, progress)}


def run_robustness(out_dir: str = "study-robustness", *, quick: bool = False, seed: int = 0, progress: Progress = "auto",
                   donors: DonorPool | None = None, config: RobustnessConfig | None = None) -> dict:
    """Run the robustness study (module docstring); returns ``{"reports", "accuracy", "files", "seconds", ...}``."""
    from ...datasets import digits_data
    from ..training import evaluate_accuracy

    progress = check_progress(progress)
    cfg = config or (RobustnessConfig.quick() if quick else RobustnessConfig())
    start, donors = begin_study(out_dir, donors)
    data = digits_data(size=32, seed=seed)
    say(f"study robustness{' (quick)' if quick else ''}: digits 32x32 ({len(data.train)} train / {len(data.test)} test), "
        f"seed {seed}; training 2 PGD-robust (eps {cfg.robust.pgd_eps:g}) and 2 plain SmallCNNs ...")
    models = train_donors(cfg, data, seed, donors, progress)
    accuracy = {name: round(evaluate_accuracy(m, data.test), 4) for name, m in models.items()}
    say(f"trained in {time.perf_counter() - start:.0f} s; test accuracy: "
        + ", ".join(f"{n} {a:.3f}" for n, a in accuracy.items()))
    context = Context(data, seed=seed, progress=progress)
    reports: dict[str, Report] = {}
    for title, (front, end) in PAIRS.items():
        began = time.perf_counter()
        reports[title] = compare(models[front], models[end], cfg.layers, data, METRICS, seed=seed,
                                 options=cfg.options(), context=context, progress=progress, repeats=cfg.repeats)
        say(f"\n{title} ({front} -> {end}, {time.perf_counter() - began:.0f} s)\n{reports[title]}")
    quality = _iri_quality(reports, cfg)
    explanation = explain_robustness(reports, cfg.layers, quality, cfg.iri_tol)
    say("\nwhat this shows:")
    for line in explanation:
        say("  " + line)
    from ..gallery import iris_of_sweep

    rows = {}
    for label, name in (("robust", "robust 1"), ("non-robust", "plain 1")):
        sets, seeds = iris_of_sweep(context, models[name], cfg.layers[-2:], cfg.options())
        rows.update({f"{label}\n{layer}": s for layer, s in sets.items()})
    files = write_files(out_dir, reports, accuracy, cfg, seed, explanation, quality, (rows, seeds))
    seconds = time.perf_counter() - start
    say(f"\nwrote {', '.join(files)} in {seconds:.0f} s")
    return {"reports": reports, "accuracy": accuracy, "files": files, "seconds": seconds, "explanation": explanation,
            "iri_quality": quality}


def _iri_quality(reports: dict[str, Report], cfg: RobustnessConfig) -> dict:
    """Median IRI error and RMS seed distance of each front at each layer: ``{front: {layer: {...}}}``."""
    out: dict[str, dict] = {}
    for title in ("robust -> robust", "non-robust -> non-robust"):
        front = title.split(" -> ")[0]
        for layer in cfg.layers:
            r = reports[title].get("iri-slm", layer)
            if r is not None and r.ok:
                out.setdefault(front, {})[layer] = {"median_error": r.details["iri_median_error"],
                                                    "seed_distance": r.details["iri_mean_seed_distance"],
                                                    "converged": r.details["iri_median_error"] <= cfg.iri_tol}
    return out


def explain_robustness(reports: dict[str, Report], layers: list[str], quality: dict, tol: float) -> list[str]:
    """Sentences read from the measured scores and intervals (never a canned conclusion)."""
    lines = []
    for layer in layers:
        std = {t: reports[t].get("stitch-slm", layer) for t in reports}
        iri = {t: reports[t].get("iri-slm", layer) for t in reports}
        if any(r is None or not r.ok for r in list(std.values()) + list(iri.values())):
            lines.append(f"{layer}: a stitching metric failed; see report.json.")
            continue
        lo, hi = min(r.score for r in std.values()), max(r.score for r in std.values())
        rr, nn_ = iri["robust -> robust"], iri["non-robust -> non-robust"]
        overlap = intervals_overlap(rr, nn_)
        if rr.score > nn_.score and not overlap:
            verdict = "robust models share their invariances, non-robust ones do not (intervals apart)"
        elif rr.score > nn_.score:
            verdict = "the robust pair scores higher, but the intervals overlap"
        else:
            verdict = "the robust pair does NOT score higher than the non-robust pair"
        unconverged = [f for f, q in quality.items() if layer in q and not q[layer]["converged"]]
        note = f" (IRIs of the {', '.join(unconverged)} front did not reach tol {tol:g}: read with care)" if unconverged else ""
        lines.append(f"{layer}: standard stitching rates all four pairs {lo:.2f} to {hi:.2f}; invariance-aware: "
                     + ", ".join(f"{t} {ci_text(r)}" for t, r in iri.items()) + f": {verdict}{note}.")
    return lines


def write_files(out_dir: str, reports: dict[str, Report], accuracy: dict, cfg: RobustnessConfig, seed: int,
                explanation: list[str], quality: dict, iris: tuple[dict, torch.Tensor]) -> list[str]:
    """Write ``report.json``, ``report.csv``, ``similarity.png`` and ``iris.png`` (from ``iris``:
    ``({row label: IRISet}, seeds (N, C, H, W))``) into ``out_dir``, all or none; returns their paths."""
    from ..gallery import iris_figure
    from ..plots import sweep_figure

    payload = {"meta": {"study": "robustness", "data": "sklearn digits 32x32", "seed": seed,
                        "config": {**asdict(replace(cfg)), "options": cfg.options()}, "torch": torch.__version__},
               "donor_accuracy": accuracy, "iri_quality": quality,
               "pairs": {t: r.to_dict() for t, r in reports.items()}, "explanation": explanation}
    return write_study(out_dir, {
        "report.json": json_ready_text(payload),
        "report.csv": study_csv(reports),
        "similarity.png": sweep_figure(reports, metrics=METRICS,
                                       title="robust vs non-robust donors: standard vs invariance-aware stitching"),
        "iris.png": iris_figure(*iris, title="the same seeds (top) and their IRIs for a robust and a non-robust front"),
    })
