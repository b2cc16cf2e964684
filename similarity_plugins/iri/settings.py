"""The IRI optimiser's settings: a preset's values, the caller's tuning overrides, validation naming the fix.

Every field of `Settings` shapes the result, so the whole object is part of the cache key and is saved
with every IRI set (``IRISet.settings``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, get_args

import numpy as np

from ..utils.progress import Progress
from ..utils.text import did_you_mean
from ..utils.value_rules import BOOLEAN, POSITIVE, POSITIVE_INT, Interval, Keys, OneOf, ValueRule, check_rules
from .precision import check_precision
from .presets import PRESETS

Optimizer = Literal["lbfgs", "adam"]
OptimizerChoice = Literal["auto", "lbfgs", "adam"]   # generate_iris's: "auto", the preset from the front's structure
IriInit = Literal["noise", "shuffle"]
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
AUTO = "auto"   # generate_iris's default: the preset chosen from the front's structure (presets.choose_preset)
INITS: tuple[str, ...] = get_args(IriInit)
DEFAULT_OPTIMIZER = "adam"   # optimize_iris on a bare front function (no structure to look at)
FAKE_RELU = ("auto", "last", "none")
ADAM_ONLY = ("cycle_steps", "cycle_mult", "cycle_decay", "beta1", "beta2", "eps")
LBFGS_ONLY = ("history", "armijo", "max_backtracks")
# the keys of ``tuning`` (iri_tuning): a preset by name, then any of its values
TUNING = ("preset", "lr", "cycle_mult", "cycle_decay", "beta1", "beta2", "eps", "relu_leak", "fold_bn", "fake_relu",
          "history", "armijo", "max_backtracks")
TUNING_DOCS = {
    "preset": "a preset by name (docs/iris.md): its values replace the structural choice",
    "lr": "step size: Adam's in pixel units, L-BFGS's as a fraction of the quasi-Newton step",
    "cycle_mult": "Adam: each restart cycle is this many times longer than the one before",
    "cycle_decay": "Adam: each restart cycle starts at this many times the step size of the one before",
    "beta1": "Adam's first-moment decay (momentum)",
    "beta2": "Adam's second-moment decay",
    "eps": "Adam's denominator guard",
    "relu_leak": "gradient slope of the front's ReLU calls below zero (0: true gradients); the loss stays exact",
    "fold_bn": "run a private copy of the front with BatchNorm folded into the convolutions and dead taps cut (same "
               "function up to rounding; the model is not touched)",
    "fake_relu": "straight-through gradient at the last ReLU: auto (where the cut is that ReLU's output), last, none",
    "history": "L-BFGS: curvature pairs kept per sample (memory: 2 x history x pixels floats per slot)",
    "armijo": "L-BFGS: sufficient-decrease constant of the per-sample line search",
    "max_backtracks": "L-BFGS: rejected trials in a row before a sample's history is cleared",
}


@dataclass(frozen=True)
class Settings:
    """Every setting that shapes the result (used for the cache key and saved with the set)."""

    steps: int = 1000
    tol: float = 0.01
    optimizer: str = "adam"
    preset: str = "adam"
    lr: float = 0.2
    init: str = "noise"
    seed: int = 0
    cycle_steps: int = 300
    cycle_mult: float = 2.0
    cycle_decay: float = 1.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-08
    history: int = 30
    armijo: float = 0.0001
    max_backtracks: int = 8
    fake_relu: str = "none"   # a bare front function has no ReLU modules to replace
    relu_leak: float = 0.0
    fold_bn: bool = False
    precision: str = "float32"   # "float32" or "bfloat16" (precision.py); "auto" is resolved before a run

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (JSON-able; saved with every IRI set)."""
        return dict(self.__dict__)

    @classmethod
    def of(cls, optimizer: str = "adam", *, steps: int = 1000,
           tol: float = 0.01, init: str = "noise", seed: int = 0,
           cycle_steps: int | None = None, tuning: dict[str, Any] | None = None, precision: str = "auto") -> Settings:
        """The settings of a run on a bare front function.

        Args:
            optimizer: the preset to start from, ``"adam"`` or ``"lbfgs"`` (a ``tuning["preset"]`` replaces it).
            steps: per-sample budget of forward+backward evaluations.
            tol: the relative error at which a sample stops.
            init: ``"noise"`` or ``"shuffle"``.
            seed: each sample's randomness derives from (seed, index).
            cycle_steps: the schedule's first cycle in steps; None: the preset's.
            tuning: tuning values that replace the preset's own (the keys of `TUNING`).
            precision: ``"auto"`` (chosen by [`optimize_iris`][similarity_plugins.iri.optimize_iris] from the
                device and the front's work per sample), ``"float32"`` or ``"bfloat16"``.

        Returns:
            The preset's values with ``tuning``, ``cycle_steps`` and the run's own settings in their place.

        Raises:
            ValueError: a value out of range or an unknown name (naming the option and the valid values).
            TypeError: a value of the wrong type (naming the option).
        """
        check_basic(steps, tol, optimizer, init)
        return make_settings(steps=steps, tol=tol, optimizer=optimizer, init=init, seed=seed, cycle_steps=cycle_steps,
                             tuning=tuning, preset=optimizer, precision=precision)


@dataclass(frozen=True)
class RunOptions:
    """How a run of [`optimize_iris`][similarity_plugins.iri.optimize_iris] executes: none of it shapes the IRIs
    (beyond float rounding: batched convolutions, ``compile``), so none of it is in the cache key.

    Attributes:
        batch_size: slots in the working batch.
        backend: array library of the elementwise update: "auto", "numpy", "torch" or "cupy".
        device: where the front runs (None: the seeds' device).
        progress: the bar, as in `utils.progress`: ``"auto"``, ``"always"`` or ``"never"``.
        checkpoint_path: with ``checkpoint_every``, save the full optimiser state there atomically every that
            many batch steps and resume from the file if it exists (removed when the run completes).
        checkpoint_every: batch steps between checkpoints (None: no checkpoints).
        callback: ``callback(info)`` after every batch step (``info``: step, active, finished, pending,
            median_error over all samples with pending ones counted as infinite, sample_steps, elapsed_s); an
            exception it raises stops the run (the last checkpoint remains).
        profile: synchronise CUDA around timings so ``stats`` splits the time exactly.
        compile: run the forward+backward evaluations through ``torch.compile`` (``backends.py``).
        sample_range: optimise only the seeds with these global indices (one rank's share); each sample's
            randomness still derives from (seed, global index), so the shares of a partition, concatenated,
            are the IRIs of one run.
        source: instead of a fixed share, take seeds as slots free up from ``source.claim(k)``
            (``sharded.SeedQueue``); the set has the claimed rows in claim order, ``stats["rows"]`` their indices.
        lowp_fn: the front to run under bfloat16 autocast (e.g. a channels_last copy; None: the front itself).
        grad16: in a bfloat16 run, samples that leave bfloat16 go on with float32 errors and gradients through
            ``lowp_fn`` (``mixed.py``; True) or in plain float32 (False).
    """

    batch_size: int = 128
    backend: str = "auto"
    device: Any = None
    progress: Progress = "auto"
    checkpoint_path: Any = None
    checkpoint_every: int | None = None
    callback: Callable[[dict], None] | None = None
    profile: bool = False
    compile: bool = False
    sample_range: range | None = None
    source: Any = None
    lowp_fn: Callable | None = None
    grad16: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch_size", POSITIVE_INT.check("batch_size", self.batch_size))
        every = self.checkpoint_every
        if every is not None and (isinstance(every, bool) or every <= 0 or self.checkpoint_path is None):
            raise ValueError("checkpoint_every needs a positive step count and a checkpoint path "
                             "(generate_iris: cache_dir)")


# what the run's values must be (the optimiser's choice, with its "auto" rule, is checked by check_basic)
RUN_RULES: dict[str, ValueRule] = {
    "steps": Interval(int, 1, note="(the per-sample step budget)"),
    "tol": Interval(float, 0, closed="neither", note="(relative representation error, e.g. 1e-2)"),
    "init": OneOf(INITS, "(noise: 0.5 + randn/20; shuffle: another seed)"),
    "optimizer": OneOf(OPTIMIZERS + (AUTO,), "(auto: in generate_iris, the preset for the front's structure)"),
}


def check_basic(steps: Any, tol: Any, optimizer: Any, init: Any, *, auto_ok: bool = False) -> None:
    """Raise ValueError naming the fix for a bad ``steps``, ``tol``, ``optimizer`` or ``init``."""
    check_rules({"steps": steps, "tol": tol, "init": init, "optimizer": optimizer}, RUN_RULES)
    if optimizer == AUTO and not auto_ok:
        raise ValueError("optimizer='auto' chooses from the model's structure, so it works in generate_iris (and the "
                         f"iri metrics), not on a bare front function; choose one of {', '.join(OPTIMIZERS)}")


def check_tuning(tuning: Any) -> dict[str, Any]:
    """``tuning`` as a dict with known keys and a known preset; raises TypeError / ValueError naming the fix."""
    if tuning is None:
        return {}
    if not isinstance(tuning, dict):
        raise TypeError(f"tuning must be a dict of tuning values (keys: {', '.join(TUNING)}), got "
                        f"{type(tuning).__name__}; on the command line pass JSON: iri_tuning='{{\"preset\": \"adam\"}}'")
    unknown = sorted(str(k) for k in set(tuning) - set(TUNING))
    if unknown:
        raise ValueError(f"unknown tuning key(s) {', '.join(unknown)}{did_you_mean(unknown[0], TUNING)}; "
                         f"valid: {', '.join(TUNING)}")
    preset = tuning.get("preset")
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}{did_you_mean(str(preset), PRESETS)}; presets: {', '.join(PRESETS)}")
    return dict(tuning)


def make_settings(*, steps: int, tol: float, init: str, seed: int, preset: str, optimizer: str = "auto",
                  cycle_steps: int | None = None, tuning: dict[str, Any] | None = None,
                  ends_at_relu: bool = False, precision: str = "float32") -> Settings:
    """The settings of one run: ``preset``'s values (``presets.PRESETS``; a ``tuning["preset"]`` replaces it),
    then each of ``tuning``'s values and ``cycle_steps`` (None: the preset's) in place of its own.

    ``optimizer``: "auto" or the optimiser the caller asked for (an error when the preset runs another);
    ``ends_at_relu``: the representation is the last ReLU call's output, so ``fake_relu="auto"`` means "last".
    ``precision``: the precision of the run ("float32" or "bfloat16"; ``precision.resolve_precision``), or
    "auto", which ``optimize_iris`` resolves before the run.
    A tuning value that only the other optimiser takes is an error naming the fix (it never switches the
    optimiser). Raises ValueError / TypeError naming the option, its value and what it must be.
    """
    check_basic(steps, tol, optimizer, init, auto_ok=True)
    tuning = check_tuning(tuning)
    name = tuning.pop("preset", None) or preset
    values = dict(PRESETS[name])
    if optimizer != AUTO and values["optimizer"] != optimizer:
        raise ValueError(f"preset {name!r} runs optimizer {values['optimizer']!r}, not {optimizer!r}; drop one of them")
    if cycle_steps is not None:
        tuning["cycle_steps"] = cycle_steps
    other = LBFGS_ONLY if values["optimizer"] == "adam" else ADAM_ONLY
    wrong = [k for k in tuning if k in other]
    if wrong:
        raise ValueError(f"{', '.join(wrong)} apply only to optimizer {'lbfgs' if other is LBFGS_ONLY else 'adam'}, "
                         f"but preset {name!r} runs {values['optimizer']}; pass that optimizer (or a preset that "
                         f"runs it: tuning={{'preset': ...}}) or drop {wrong[0]}")
    _check_values(tuning)
    values.update(tuning)
    fake = values.pop("fake_relu")
    fake = ("last" if ends_at_relu else "none") if fake == AUTO else fake
    check_precision(precision)
    return Settings(steps=int(steps), tol=float(tol), init=init, seed=int(seed), preset=name, fake_relu=fake,
                    precision=precision, **values)


#: What Adam's first restart cycle (``cycle_steps``, in steps) must be.
CYCLE_STEPS = Interval(int, 0, note="(0: one cosine over the budget)")
# what each tuning value must be; checked before a run starts, so a typo fails at once
_RULES: dict[str, ValueRule] = {
    "lr": POSITIVE,
    "cycle_steps": CYCLE_STEPS,
    "cycle_mult": Interval(float, 1, what="growth factor"),
    "cycle_decay": Interval(float, 0, closed="neither", what="step-size factor"),
    "beta1": Interval(float, 0, 1, closed="left"),
    "beta2": Interval(float, 0, 1, closed="left"),
    "eps": POSITIVE,
    "history": Interval(int, 1, 100),
    "armijo": Interval(float, 0, 0.5, closed="neither"),
    "max_backtracks": POSITIVE_INT,
    "relu_leak": Interval(float, 0, 1, closed="left", note="(0 = true gradients)"),
    "fake_relu": OneOf(FAKE_RELU, "(straight-through gradient at the last ReLU before the cut)", aliases={None: "none"}),
}
#: What ``tuning`` (the ``iri_tuning`` option) must be: a dict of known keys, each value by its rule above.
TUNING_RULE = Keys({key: {"preset": OneOf(tuple(PRESETS)), "fold_bn": BOOLEAN, **_RULES}[key] for key in TUNING},
                   "tuning values")


def _check_values(values: dict[str, Any]) -> None:
    """Raise ValueError naming the key, its value and the valid range; coerce valid values to their kind."""
    if "fold_bn" in values:
        if not isinstance(values["fold_bn"], (bool, np.bool_)):
            raise ValueError(f"fold_bn must be True or False ({TUNING_DOCS['fold_bn']}), got {values['fold_bn']!r}")
        values["fold_bn"] = bool(values["fold_bn"])
    values.update(check_rules(values, _RULES))   # fake_relu None ("none" as the command line reads it) is "none"
