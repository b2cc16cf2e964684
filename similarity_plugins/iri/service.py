"""The invariance-aware stitching service: IRIs of the training split as a stitch training set, and the
scored result (fit on IRIs, evaluate on the real test split, IRI quality in the details).

``plugins/invariance.py`` adapts this to the ``similarity`` hook; the options are `iri_options`: `IRI_DEFAULTS`
with the lines of `IRI_DOCS` and the types of `IRI_RULES`.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..host.contract import Option
from ..host.hookspecs import PluginContext
from ..host.results import LayerPair, SimilarityResult
from ..stitch.service import TrainingSet, stitch_result, training_set
from ..stitch.settings import stitch_options
from ..utils.text import did_you_mean
from ..utils.value_rules import BOOLEAN, POSITIVE_INT, SAMPLE_LIMIT, OneOf, OrNone, PathRule, check_rules
from .backends import BACKENDS
from .generate import generate_iris
from .precision import PRECISION_RULE
from .presets import RUN_DEFAULTS
from .settings import CYCLE_STEPS, RUN_RULES, TUNING, TUNING_RULE, check_tuning

_SERVICE_ONLY = {"max_seeds": None, "tuning": None, "cache_dir": None}  # options of the metrics, not of a run
_ORDER = ("steps", "tol", "optimizer", "init", "cycle_steps", "max_seeds", "tuning", "batch_size", "backend",
          "cache_dir", "compile", "precision")
#: The ``iri_*`` options of the ``iri-*`` metrics and their defaults (the run's from `presets.RUN_DEFAULTS`).
IRI_DEFAULTS: dict[str, Any] = {f"iri_{k}": {**RUN_DEFAULTS, **_SERVICE_ONLY}[k] for k in _ORDER}
#: What each ``iri_*`` option must be (its type): the run's rules of `settings`, and the service's own.
IRI_RULES = {
    "iri_steps": RUN_RULES["steps"], "iri_tol": RUN_RULES["tol"], "iri_optimizer": RUN_RULES["optimizer"],
    "iri_init": RUN_RULES["init"], "iri_cycle_steps": OrNone(CYCLE_STEPS, "the preset's"),
    "iri_max_seeds": SAMPLE_LIMIT, "iri_tuning": OrNone(TUNING_RULE, "the preset's values"),
    "iri_batch_size": POSITIVE_INT, "iri_backend": OneOf(BACKENDS), "iri_cache_dir": OrNone(PathRule(folder=True),
                                                                                         "no cache"),
    "iri_compile": BOOLEAN, "iri_precision": PRECISION_RULE,
}


IRI_DOCS: dict[str, str] = {
    "iri_steps": "per-sample step budget of the IRI optimiser",
    "iri_tol": "target relative error ||f(x')-f(x)|| / ||f(x)||",
    "iri_optimizer": "auto (the preset for the front's structure, see docs/iris.md), adam or lbfgs",
    "iri_init": "noise (0.5 + N(0, 1/20^2)) or shuffle (another training image)",
    "iri_cycle_steps": "Adam's first restart cycle in steps (None: the preset's; 0: one cosine over the budget)",
    "iri_max_seeds": "use a seeded random subset of this many training samples as seeds (None: all)",
    "iri_tuning": 'dict of tuning values, e.g. {"preset": "resnet"} or {"lr": 0.1}; each replaces only its own '
                  "value (keys: " + ", ".join(TUNING) + ")",
    "iri_batch_size": "working-batch slots of the continuous batching",
    "iri_backend": "numpy, torch, cupy or auto (CuPy on CUDA when installed)",
    "iri_cache_dir": "folder where finished IRI sets are saved and found again",
    "iri_compile": "torch.compile the front's forward+backward (opt-in; a warm-up of seconds to a minute per run)",
    "iri_precision": "auto (bfloat16 steps far from tol where the hardware has bfloat16 matrix units, CUDA or AMX, "
                     "and the front is large enough, then a float32 finish), float32 or bfloat16",
}


def iri_options() -> tuple[Option, ...]:
    """The options of the ``iri-*`` metrics: every stitch option, then every key of `IRI_DEFAULTS` (its doc and type:
    `IRI_DOCS`, `IRI_RULES`)."""
    return stitch_options() + tuple(Option(k, v, IRI_DOCS[k], IRI_RULES[k]) for k, v in IRI_DEFAULTS.items())


def iri_settings(options: dict) -> dict:
    """The IRI options of ``options`` with their defaults filled in (unknown ``iri_*`` keys raise)."""
    unknown = sorted(k for k in options if k.startswith("iri_") and k not in IRI_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown IRI option(s) {', '.join(unknown)}{did_you_mean(unknown[0], IRI_DEFAULTS)}; "
                         f"valid: {', '.join(IRI_DEFAULTS)}")
    return check_rules({k: options.get(k, v) for k, v in IRI_DEFAULTS.items()}, IRI_RULES)


def training_seeds(context: PluginContext, max_seeds: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The training split as seeds (x, y), or a seeded random subset of ``max_seeds`` of them."""

    train = training_set(context)
    x, y = train.x, train.y
    if max_seeds is not None and int(max_seeds) < len(x):
        g = torch.Generator().manual_seed(context.seed)
        idx = torch.randperm(len(x), generator=g)[: int(max_seeds)].sort().values
        x, y = x[idx], y[idx]
    return x, y


def iri_training_set(context: PluginContext, front: torch.nn.Module, layer: str, options: dict):
    """IRIs of the training split for ``front`` at ``layer``, as a stitch ``TrainingSet`` (memoised).

    Returns ``(training_set, iri_set)``: the IRIs ``(N, ...)`` with the seeds' labels, keyed so that
    the stitch caches are shared by the four IRI metrics, and the [`IRISet`][similarity_plugins.iri.result.IRISet].
    """

    settings = iri_settings(options)
    tuning = check_tuning(settings["iri_tuning"])
    key = ("iris", id(front), layer, context.seed,
           tuple(sorted({**settings, "iri_tuning": tuple(sorted(tuning.items()))}.items())))

    def build():
        seeds, labels = training_seeds(context, settings["iri_max_seeds"])
        iris = generate_iris(
            front, layer, seeds.to(context.device),
            steps=int(settings["iri_steps"]), tol=float(settings["iri_tol"]), optimizer=settings["iri_optimizer"],
            init=settings["iri_init"], cycle_steps=settings["iri_cycle_steps"], tuning=tuning or None,
            batch_size=int(settings["iri_batch_size"]), backend=settings["iri_backend"], seed=context.seed,
            progress=context.progress, cache_dir=settings["iri_cache_dir"], compile=settings["iri_compile"],
            precision=settings["iri_precision"],
        )
        train = TrainingSet(iris.inputs.detach().cpu(), labels, key=key, name="IRIs")
        return train, iris

    return context.remember(key, build, train_only=True)


def iri_result(context: PluginContext, front, end, layer: LayerPair, objective: str, options: dict) -> SimilarityResult:
    """Invariance-aware stitching: fit on IRIs, evaluate on ``Data.test``; details add the IRI quality."""

    train, iris = iri_training_set(context, front, layer.front, options)
    stitch_options = {k: v for k, v in options.items() if not k.startswith("iri_")}
    result = stitch_result(context, front, end, layer, objective, stitch_options, train_source=train)
    summary = dict(iris.summary)
    tol = float(iri_settings(options)["iri_tol"])
    result.details.update(
        iri_preset=iris.settings.get("preset"),
        iri_precision=iris.settings.get("precision", "float32"),
        iri_memory_format=iris.settings.get("memory_format", "contiguous"),
        iri_median_error=summary["median_error"],
        iri_p95_error=summary["p95_error"],
        iri_converged_fraction=summary["converged_fraction"],
        iri_mean_seed_distance=summary["mean_seed_distance"],
        iri=summary,
    )
    if not summary["median_error"] <= tol:
        message = unconverged_message(layer.front, summary, tol, iris.settings.get("preset"))
        result.details.setdefault("warnings", []).append(message)
        result.details["unconverged"] = True
        _warn_once(context, layer.front, message)
    return result


def unconverged_message(layer: str, summary: dict, tol: float, preset: str | None) -> str:
    """What an ``iri-*`` row whose IRIs missed ``tol`` says: the layer, median / p95 error, converged fraction,
    the preset, and what the user can do."""
    return (f"IRIs at {layer} did not converge: median relative error {summary['median_error']:.3g} > tol {tol:g} "
            f"(95th percentile {summary['p95_error']:.3g}, {summary['converged_fraction']:.0%} converged, preset "
            f"{preset}); the score is not meaningful. Raise iri_steps, try another preset "
            f"(iri_tuning={{\"preset\": ...}}, docs/iris.md), or cut at a shallower layer")


def _warn_once(context: PluginContext, layer: str, message: str) -> None:
    """One Python warning per (context, layer): the four iri-* metrics share one IRI set per cut."""
    seen = context.remember(("iri-unconverged-warnings",), set)
    if layer not in seen:
        seen.add(layer)
        warnings.warn(message, UserWarning, stacklevel=2)
