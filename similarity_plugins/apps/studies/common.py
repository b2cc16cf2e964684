"""What the studies share: the output folder check, donor training with a pool that keeps trained donors
for reuse within a process, the all-or-none writer of a study's files and the way intervals are printed."""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass
from typing import Any, Hashable, Mapping

import torch

from ...host.results import Report, SimilarityResult, jsonable
from ...utils.io import csv_text, json_text, write_all
from ...utils.progress import Progress


def say(text: str = "") -> None:
    """Print a line at once (studies report progress as they go)."""
    print(text, flush=True)


def prepare_out_dir(out_dir: str | os.PathLike) -> str:
    """Create ``out_dir`` if needed and check that files can be written there, before any training.

    Raises ``ValueError`` naming the folder and the reason when it cannot be written, when it is empty (an
    unset shell variable) or ``-`` (these commands write files, never to stdout).
    """
    path = os.fspath(out_dir)
    if not path.strip():
        raise ValueError(f"--out is empty ({path!r}: an unset shell variable?); give a folder name, or drop --out")
    if path.strip() == "-":
        raise ValueError("--out '-': this command writes a folder of files, not to stdout; give a folder name")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise ValueError(f"cannot write to the output folder {path!r} ({exc.strerror or exc}); "
                         "pass --out with a folder you can write to") from exc
    return path


def json_ready_text(payload: Any) -> str:
    """``payload`` made JSON-ready (tensors, dataclasses, NaN) as indented JSON text with a final newline."""
    return json_text(jsonable(payload))


def write_study(out_dir: str | os.PathLike, files: Mapping[str, str | bytes]) -> list[str]:
    """Write a study's ``{file name: contents}`` (text or bytes) into ``out_dir`` all or none
    (`write_all`: every file is staged next to its target, then all are
    renamed together; new files get the umask's permissions). Returns the paths written, in the given order."""
    return write_all({os.path.join(os.fspath(out_dir), name): contents for name, contents in files.items()})


CSV_COLUMNS = ["pair", "metric", "layer", "score", "test_ci95_low", "test_ci95_high", "seed_ci95_low", "seed_ci95_high",
               "repeats", "agreement", "iri_median_error", "iri_mean_seed_distance", "seconds", "error"]


def _bounds(result: SimilarityResult, key: str) -> tuple[Any, Any]:
    value = result.details.get(key)
    return (value[0], value[1]) if isinstance(value, (list, tuple)) and len(value) == 2 else ("", "")


def study_csv(reports: Mapping[str, Report]) -> str:
    """One CSV row per (pair, metric, layer) with the score, its intervals and the main details."""
    rows = ([pair, r.metric, r.layer, "" if r.score is None else f"{r.score:.6f}",
             *_bounds(r, "test_ci95"), *_bounds(r, "seed_ci95"), r.details.get("repeats", 1),
             r.details.get("agreement"), r.details.get("iri_median_error"),
             r.details.get("iri_mean_seed_distance"), f"{r.seconds:.2f}", r.error or ""]
            for pair, report in reports.items() for r in report.results)
    return csv_text(CSV_COLUMNS, rows)


def ci_text(result: SimilarityResult | None) -> str:
    """``"0.57 [0.52, 0.62]"``: the score and its interval (over seeds when repeated, else over test samples)."""
    if result is None or result.score is None:
        return "n/a"
    bounds = result.details.get("seed_ci95") or result.details.get("test_ci95")
    return f"{result.score:.2f}" + (f" [{bounds[0]:.2f}, {bounds[1]:.2f}]" if bounds else "")


def intervals_overlap(a: SimilarityResult | None, b: SimilarityResult | None) -> bool | None:
    """Whether the intervals of two results overlap (``None`` when either is missing)."""
    if a is None or b is None or a.score is None or b.score is None:
        return None
    ia = a.details.get("seed_ci95") or a.details.get("test_ci95")
    ib = b.details.get("seed_ci95") or b.details.get("test_ci95")
    if not ia or not ib:
        return None
    return not (ia[1] < ib[0] or ib[1] < ia[0])


@dataclass(frozen=True)
class DonorSpec:
    """How a donor is trained: SmallCNN ``width``, ``epochs`` of Adam at ``lr``, PGD radius ``pgd_eps`` in
    [0, 1] pixel units with ``pgd_steps`` steps (``pgd_eps == 0``: standard training)."""

    width: int = 16
    epochs: int = 6
    pgd_eps: float = 0.1
    pgd_steps: int = 3
    lr: float = 3e-3

    @property
    def robust(self) -> bool:
        """True for adversarially trained donors."""
        return self.pgd_eps > 0


def study_options(cfg: Any) -> dict[str, Any]:
    """The ``compare`` options of a study's configuration: stitch epochs and batch, IRI seeds, steps, tolerance
    and first cycle (``stitch_epochs``, ``stitch_batch``, ``iri_seeds``, ``iri_steps``, ``iri_tol``,
    ``iri_cycle_steps``), plus ``iri_init`` when the configuration has one. The studies' small CNNs run the
    plain "adam" preset with that first cycle, measured on them (DemoConfig), at every block."""
    options = {"epochs": cfg.stitch_epochs, "batch_size": cfg.stitch_batch, "iri_max_seeds": cfg.iri_seeds,
               "iri_steps": cfg.iri_steps, "iri_tol": cfg.iri_tol, "iri_cycle_steps": cfg.iri_cycle_steps,
               "iri_tuning": {"preset": "adam"}}
    if hasattr(cfg, "iri_init"):
        options["iri_init"] = cfg.iri_init
    return options


def begin_study(out_dir: str | os.PathLike, donors: DonorPool | None) -> tuple[float, "DonorPool"]:
    """What every study does first: start its clock (``time.perf_counter()`` seconds), check ``out_dir`` for
    writing before any training (`prepare_out_dir`), and take ``donors`` or a new `DonorPool`."""
    import time

    start = time.perf_counter()
    prepare_out_dir(out_dir)
    return start, donors if donors is not None else DonorPool()


class DonorPool:
    """Trained donors kept by (data key, spec, seed), so studies in one process train each donor once.

    Explicit (no module-level cache): pass the same pool to several ``run_study`` calls to share donors.
    """

    def __init__(self) -> None:
        self.models: dict[Hashable, torch.nn.Module] = {}
        self.seconds = 0.0

    def get(self, data_key: Hashable, dataset: Any, spec: DonorSpec, seed: int, progress: Progress = "never") -> torch.nn.Module:
        """The donor trained on ``dataset`` (identified by ``data_key``) with ``spec`` and ``seed``; trained once."""
        import time

        from ..training import train_classifier
        from ..zoo import SmallCNN

        key = (data_key, asdict(spec).__repr__(), int(seed))
        if key not in self.models:
            began = time.perf_counter()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = SmallCNN(in_channels=1, num_classes=10, width=spec.width)
            adversarial = {"eps": spec.pgd_eps, "steps": spec.pgd_steps} if spec.robust else None
            train_classifier(model, dataset, epochs=spec.epochs, lr=spec.lr, seed=seed, adversarial=adversarial,
                             progress=progress)
            self.models[key] = model.eval()
            self.seconds += time.perf_counter() - began
        return self.models[key]
