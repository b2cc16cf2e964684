"""The IRI optimiser's settings: defaults per optimiser, validation with errors that name the fix.

Every field of :class:`Settings` shapes the result, so the whole object is part of the cache key and is
saved with every IRI set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..utils.text import did_you_mean
from .schedule import SCHEDULES

OPTIMIZERS = ("lbfgs", "adam", "normgrad")
AUTO = "auto"   # generate_iris's default: L-BFGS or Adam, chosen from the front's structure (auto_optimizer)
INITS = ("noise", "shuffle")
# optimize_iris (a bare front function, no model to look at) defaults to Adam: lr 0.2 with per-sample cosine
# cycles of 300, 600, ... steps (warm restarts from the best iterate); normgrad: normalised-gradient steps of
# L2 length lr, halved over 4 stages; lbfgs: per-sample L-BFGS (lbfgs.py) with leaky ReLU gradients.
DEFAULT_OPTIMIZER = "adam"
DEFAULT_LR = {"lbfgs": 1.0, "adam": 0.2, "normgrad": 1.0}
DEFAULT_RELU_LEAK = {"lbfgs": 0.1, "adam": 0.0, "normgrad": 0.0}
# Conv+BatchNorm folding of the front (fold.py): on for L-BFGS; off for the first-order optimisers, whose IRIs
# thereby stay bit-identical to earlier releases (pass fold_bn=True to speed them up too)
DEFAULT_FOLD_BN = {"lbfgs": True, "adam": False, "normgrad": False}
FIRST_ORDER_ONLY = ("schedule", "lr_floor", "stages", "beta1", "beta2", "eps", "restart_patience",
                    "restart_threshold", "restart_decay", "cycle_steps", "cycle_mult", "cycle_decay", "lr_adapt")
# the first-order options that shape the step-size schedule: a caller who sets one keeps Adam's defaults at
# deep max-pool cuts and drops AUTO_DEEP_ADAM's restart decay at deep ResNet cuts (auto_adam_defaults); the
# moments' options (beta1, beta2, eps) only replace their own value
SCHEDULE_OPTIONS = tuple(name for name in FIRST_ORDER_ONLY if name not in ("beta1", "beta2", "eps", "lr_adapt"))
LBFGS_ONLY = ("history", "armijo", "max_backtracks", "stall_patience", "phase_steps", "phase_lr", "warmup_steps")
DEFAULT_SCHEDULE = {"lbfgs": "constant", "adam": "cosine", "normgrad": "step"}
DEFAULT_CYCLE_STEPS = {"lbfgs": 0, "adam": 300, "normgrad": 0}


@dataclass(frozen=True)
class Settings:
    """Every setting that shapes the result (used for the cache key and saved with the set)."""

    steps: int = 1000
    tol: float = 1e-2
    optimizer: str = DEFAULT_OPTIMIZER
    lr: float = 0.2
    init: str = "noise"
    seed: int = 0
    schedule: str = "cosine"
    lr_floor: float = 0.0
    stages: int = 4
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    restart_patience: int = 0
    restart_threshold: float = 0.01
    restart_decay: float = 0.5
    cycle_steps: int = 0
    cycle_mult: float = 2.0
    cycle_decay: float = 1.0
    lr_adapt: float = 0.0
    history: int = 30   # curvature pairs per sample; 50 took 2-6% more time at every ResNet cut (docs/iri_depth.md)
    armijo: float = 1e-4
    max_backtracks: int = 8
    stall_patience: int = 0
    phase_steps: int = 100
    phase_lr: float = 0.2
    warmup_steps: int = 0
    fake_relu: str = "none"
    relu_leak: float = 0.0
    fold_bn: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (JSON-able; saved with every IRI set)."""
        return dict(self.__dict__)


ADVANCED = ("schedule", "lr_floor", "stages", "beta1", "beta2", "eps", "restart_patience", "restart_threshold",
            "restart_decay", "cycle_steps", "cycle_mult", "cycle_decay", "lr_adapt", "history", "armijo",
            "max_backtracks", "stall_patience", "phase_steps", "phase_lr", "warmup_steps", "relu_leak", "fold_bn")


def _check_basic(steps: Any, tol: Any, optimizer: Any, init: Any) -> None:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps <= 0:
        raise ValueError(f"steps must be a positive integer (the per-sample step budget), got {steps!r}")
    if not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol <= 0:
        raise ValueError(f"tol must be a positive number (relative representation error, e.g. 1e-2), got {tol!r}")
    if optimizer == AUTO:
        raise ValueError("optimizer='auto' chooses from the model's structure, so it works in generate_iris (and the "
                         f"iri metrics), not on a bare front function; choose one of {', '.join(OPTIMIZERS)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)} (or 'auto' in "
                         "generate_iris)")
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; choose 'noise' (0.5 + randn/20) or 'shuffle' (another seed)")


def make_settings(*, steps: int, tol: float, optimizer: str = DEFAULT_OPTIMIZER, lr: float | None, init: str,
                  seed: int, fake_relu: bool | str = False, **advanced: Any) -> Settings:
    """Validate the public options and fill per-optimiser defaults; raises ValueError naming the fix.

    ``steps``: per-sample budget of forward+backward evaluations; ``tol``: target relative error;
    ``lr``: None for the optimiser's default (``DEFAULT_LR``); ``advanced``: names from ``ADVANCED``.
    """
    _check_basic(steps, tol, optimizer, init)
    unknown = sorted(set(advanced) - set(ADVANCED))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}{did_you_mean(unknown[0], ADVANCED)}; advanced "
                        f"options are: {', '.join(ADVANCED)}")
    lr = DEFAULT_LR[optimizer] if lr is None else lr
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    advanced.setdefault("schedule", DEFAULT_SCHEDULE[optimizer])
    advanced.setdefault("cycle_steps", DEFAULT_CYCLE_STEPS[optimizer])
    advanced.setdefault("relu_leak", DEFAULT_RELU_LEAK[optimizer])
    advanced.setdefault("fold_bn", DEFAULT_FOLD_BN[optimizer])
    if advanced["schedule"] not in SCHEDULES:
        raise ValueError(f"unknown schedule {advanced['schedule']!r}; choose one of {', '.join(SCHEDULES)}")
    modes = {True: "last", False: "none", None: "none", "last": "last", "all": "all", "none": "none",
             AUTO: "last"}
    if not isinstance(fake_relu, (bool, str, type(None))) or fake_relu not in modes:
        raise ValueError(f"fake_relu must be True/'last' (straight-through gradient at the last ReLU before the "
                         f"cut), 'all' (every ReLU), False/'none' or 'auto' (generate_iris's default: 'last', "
                         f"except where optimizer='auto' chooses otherwise); got {fake_relu!r}")
    _check_advanced(advanced)
    return Settings(steps=int(steps), tol=float(tol), optimizer=optimizer, lr=float(lr), init=init,
                    seed=int(seed), fake_relu=modes[fake_relu], **advanced)


# name -> (kind, test, what the value must be); checked before a run starts, so a typo fails at once
_ADVANCED_RULES: dict[str, tuple[type, Callable[[float], bool], str]] = {
    "lr_floor": (float, lambda v: 0.0 <= v <= 1.0, "a multiplier in [0, 1]"),
    "stages": (int, lambda v: v >= 1, "an integer >= 1"),
    "beta1": (float, lambda v: 0.0 <= v < 1.0, "in [0, 1)"),
    "beta2": (float, lambda v: 0.0 <= v < 1.0, "in [0, 1)"),
    "eps": (float, lambda v: v > 0.0, "> 0"),
    "restart_patience": (int, lambda v: v >= 0, "an integer >= 0 (0 turns restarts off)"),
    "restart_threshold": (float, lambda v: 0.0 <= v < 1.0, "a relative improvement in [0, 1)"),
    "restart_decay": (float, lambda v: v > 0.0, "a step-size factor > 0"),
    "cycle_steps": (int, lambda v: v >= 0, "an integer >= 0 (0: one cycle over the budget)"),
    "cycle_mult": (float, lambda v: v >= 1.0, "a growth factor >= 1"),
    "cycle_decay": (float, lambda v: v > 0.0, "a step-size factor > 0"),
    "lr_adapt": (float, lambda v: 0.0 <= v < 1.0, "in [0, 1) (per-sample step-size adaptation rate; 0 = off)"),
    "history": (int, lambda v: 1 <= v <= 100, "an integer in [1, 100] (L-BFGS keeps the curvature pairs of a "
                                                  "sample's last history evaluations)"),
    "armijo": (float, lambda v: 0.0 < v < 0.5, "in (0, 0.5) (sufficient-decrease constant of the line search)"),
    "max_backtracks": (int, lambda v: v >= 1, "an integer >= 1 (rejected trials before the history is reset)"),
    "stall_patience": (int, lambda v: v >= 0, "an integer >= 0 (L-BFGS evaluations without 1% progress before "
                                              "an Adam phase; 0 = never)"),
    "phase_steps": (int, lambda v: v >= 1, "an integer >= 1 (length of an Adam phase)"),
    "phase_lr": (float, lambda v: v > 0.0, "> 0 (Adam's step size in an Adam phase)"),
    "warmup_steps": (int, lambda v: v >= 0, "an integer >= 0 (Adam steps before L-BFGS starts)"),
    "relu_leak": (float, lambda v: 0.0 <= v < 1.0, "in [0, 1) (gradient slope of the front's ReLUs below zero; "
                                                   "0 = true gradients)"),
}


_BOOL_OPTIONS = {
    "fold_bn": "fold BatchNorm into the convolutions of a private copy of the front (and cut their taps that only read padding)",
}


def _check_advanced(advanced: dict[str, Any]) -> None:
    """Raise ValueError naming the option, its value and the valid range for a bad advanced option."""
    for name, what in _BOOL_OPTIONS.items():
        if name in advanced and not isinstance(advanced[name], (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False ({what}), got {advanced[name]!r}")
        if name in advanced:
            advanced[name] = bool(advanced[name])
    for name, (kind, ok, want) in _ADVANCED_RULES.items():
        if name not in advanced:
            continue
        value = advanced[name]
        valid_type = (isinstance(value, (int, np.integer)) if kind is int
                      else isinstance(value, (int, float, np.number)))
        if isinstance(value, bool) or not valid_type or not math.isfinite(float(value)) or not ok(value):
            raise ValueError(f"{name} must be {want}, got {value!r}")
        advanced[name] = kind(value)
