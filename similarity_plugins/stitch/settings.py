"""Stitch training settings: the paper's defaults, every one overridable by a plain option name.

Each field of [`StitchSettings`][StitchSettings] but ``seed`` is an option of the ``stitch-*`` and ``iri-*``
metrics with the same name. The dataclass is the one place a default is written; what each option means is
its line of `OPTION_DOCS`; the choices of ``init``, ``dm_loss`` and the objectives are the `Literal` types
`Init`, `DmLoss` and `Objective` (their values: `INITS`, `DM_LOSSES`, `OBJECTIVES`). `stitch_options` makes
the metrics' declared options from these, and the options page is generated from them.

The lr schedule: the lr is multiplied by ``gamma`` at each milestone, given as fractions of all training steps
(``milestones``, each in (0, 1)) or as epoch numbers (``milestone_epochs``, each in [1, ``epochs``]).

The seed comes from ``compare(seed=...)`` (or the ``seed`` argument), not from the options.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal, Mapping, get_args

from ..host.contract import Option
from ..utils.value_rules import (
    BOOLEAN,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    SAMPLE_LIMIT,
    Each,
    Interval,
    OneOf,
    OrNone,
    ValueRule,
    check_rules,
)

Objective = Literal["hlm", "slm", "dm", "fula"]
Init = Literal["least-squares", "identity", "random"]
DmLoss = Literal["sum", "normalised"]
OBJECTIVES: tuple[str, ...] = get_args(Objective)
INITS: tuple[str, ...] = get_args(Init)
DM_LOSSES: tuple[str, ...] = get_args(DmLoss)


def _words(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + " or " + choices[-1]


OPTION_DOCS: dict[str, str] = {
    "epochs": "passes over the training set",
    "lr": "Adam learning rate",
    "weight_decay": "Adam weight decay (L2 added to the gradient)",
    "batch_size": "samples per optimiser step",
    "milestones": "where the lr is multiplied by gamma, as fractions of all training steps, each in (0, 1)",
    "milestone_epochs": "where the lr is multiplied by gamma, as epoch numbers in [1, epochs]; in place of "
                        "milestones (None: use milestones)",
    "gamma": "lr factor at each milestone",
    "init": f"stitch initialisation: {_words(INITS)}",
    "ls_samples": "training samples (seeded random subset) for the least-squares init",
    "stitch_bn": "BatchNorm before the stitch's affine map",
    "max_train": "use a seeded random subset of this many training samples (None: all)",
    "dm_loss": "DM loss: sum (per-sample squared L2) or normalised (divided by ||target||^2)",
    "fula_weights": "FuLA per-term weights: the stitch output, then each tap after the cut (None: all 1)",
    "temperature": "SLM softmax temperature (applied to both logits)",
    "cache_limit_mb": "cached activation arrays above this size (MiB) go to a memory-mapped file",
    "eval_batch_size": "batch size of the no-grad passes (caching, evaluation)",
}

_OBJECTIVE_RULE = OneOf(OBJECTIVES)


def check_objective(objective: str) -> Objective:
    """Normalise an objective name ("HLM", "stitch-slm", "fula" ...) to one of `OBJECTIVES`.

    Args:
        objective: the objective, any case, with or without a ``stitch-`` or ``iri-`` prefix.

    Returns:
        The objective's name in `OBJECTIVES`.

    Raises:
        ValueError: not a stitching objective (the message lists them).
    """
    name = str(objective).lower().removeprefix("stitch-").removeprefix("iri-")
    if name not in OBJECTIVES:
        raise ValueError(f"unknown stitching objective {objective!r}; choose {_OBJECTIVE_RULE.words}")
    return name


#: What each setting must be: the type of the option of the same name (one table; `StitchSettings.validated` and the
#: metrics' option checks read it). A choice takes other spellings too (any case), read as its canonical word.
RULES: dict[str, ValueRule] = {
    "epochs": POSITIVE_INT, "lr": POSITIVE, "weight_decay": NON_NEGATIVE, "batch_size": POSITIVE_INT,
    "milestones": OrNone(Each(POSITIVE, single=True), "no milestone"),
    "milestone_epochs": OrNone(Each(Interval(int, 1, what="epoch number"), single=True), "use milestones"),
    "gamma": POSITIVE,
    "init": OneOf(INITS, aliases={"least_squares": "least-squares", "lstsq": "least-squares", "ls": "least-squares",
                                  "eye": "identity"}),
    "ls_samples": POSITIVE_INT, "stitch_bn": BOOLEAN, "max_train": SAMPLE_LIMIT,
    "dm_loss": OneOf(DM_LOSSES, aliases={"normalized": "normalised"}),
    "fula_weights": OrNone(Each(NON_NEGATIVE), "all 1"), "temperature": POSITIVE, "cache_limit_mb": NON_NEGATIVE,
    "eval_batch_size": POSITIVE_INT}


@dataclass(frozen=True)
class StitchSettings:
    """How a stitch is initialised and trained: each field's default is the option's default, `OPTION_DOCS`
    says what it means. Hashable."""

    epochs: int = 30
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 128
    milestones: tuple[float, ...] = (1 / 3, 2 / 3)
    milestone_epochs: tuple[int, ...] | None = None
    gamma: float = 0.1
    init: Init = "least-squares"
    ls_samples: int = 2048
    stitch_bn: bool = False
    max_train: int | None = None
    dm_loss: DmLoss = "sum"
    fula_weights: tuple[float, ...] | None = None
    temperature: float = 1.0
    cache_limit_mb: float = 1024.0
    eval_batch_size: int = 256
    seed: int = 0

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None = None, *, seed: int = 0) -> StitchSettings:
        """Settings from an options dict; keys that are not settings are ignored (they belong to other
        metrics). Raises ``ValueError`` naming the option and the accepted values for a bad value."""
        options = dict(options or {})
        known = {f.name for f in fields(cls)} - {"seed"}
        values = {k: v for k, v in options.items() if k in known}
        return cls(**values, seed=int(seed)).validated()

    def validated(self) -> StitchSettings:
        """A copy with values normalised (types, aliases, the milestones as sorted fractions of training, with
        ``milestone_epochs`` folded into them); raises ``ValueError`` naming the option for a bad value (`RULES`)."""
        v = check_rules({f.name: getattr(self, f.name) for f in fields(self) if f.name in RULES}, RULES)
        v.update(milestones=self._fractions(v), milestone_epochs=None)
        return replace(self, **v, seed=int(self.seed))

    def _fractions(self, v: dict[str, Any]) -> tuple[float, ...]:
        """The milestones of the checked values ``v`` as sorted fractions of all training steps, from
        ``milestone_epochs`` when given."""
        epochs = v["epochs"]
        if v["milestone_epochs"] is not None:
            if self.milestones != StitchSettings.milestones:
                raise ValueError("give the lr milestones once: milestones (fractions of training) or "
                                 "milestone_epochs (epoch numbers), not both")
            rule = Interval(int, 1, epochs, what="epoch number", note=f"(at most epochs={epochs})")
            return tuple(sorted(rule.check("milestone_epochs", e) / epochs for e in v["milestone_epochs"]))
        given = v["milestones"] or ()
        if any(m >= 1 for m in given):
            warnings.warn(f"milestones={list(given)}: a milestone >= 1 is read as an epoch number, which is deprecated;"
                          " give epochs as milestone_epochs=[...], or milestones as fractions of training in (0, 1)",
                          DeprecationWarning, stacklevel=4)
        return tuple(sorted(m / epochs if m >= 1 else m for m in given))

    @property
    def cache_limit_bytes(self) -> float:
        """``cache_limit_mb`` in bytes."""
        return self.cache_limit_mb * 2**20

    def lr_at(self, step: int, total_steps: int) -> float:
        """The learning rate at optimiser step ``step`` (0-based) of ``total_steps``."""
        drops = sum(step >= round(m * total_steps) for m in self.milestones)
        return self.lr * self.gamma**drops

    def as_dict(self) -> dict:
        """Plain, JSON-ready dict of every setting."""
        d = asdict(self)
        d["milestones"] = [round(m, 6) for m in self.milestones]
        if d["milestone_epochs"] is None:   # validated settings hold every milestone as a fraction
            del d["milestone_epochs"]
        d["fula_weights"] = None if self.fula_weights is None else list(self.fula_weights)
        return d


def stitch_options() -> tuple[Option, ...]:
    """The options of the stitching metrics, one per [`StitchSettings`][StitchSettings] field (but ``seed``), with the
    field's default, its line of `OPTION_DOCS` and its rule of `RULES` (the option's type)."""
    return tuple(Option(f.name, getattr(StitchSettings, f.name), OPTION_DOCS[f.name], RULES[f.name])
                 for f in fields(StitchSettings) if f.name != "seed")
