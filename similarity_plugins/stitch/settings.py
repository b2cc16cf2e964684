"""Stitch training settings: the paper's defaults, every one overridable by a plain option name.

=================  ===================  ==========================================================
option             default              meaning
=================  ===================  ==========================================================
``epochs``         30                   passes over the training set
``lr``             1e-3                 Adam learning rate
``weight_decay``   1e-4                 Adam weight decay (L2 added to the gradient, as in torch Adam)
``batch_size``     128                  samples per optimiser step
``milestones``     (1/3, 2/3)           where the lr is multiplied by ``gamma``: values in (0, 1) are
                                        fractions of all training steps, values >= 1 epoch numbers
``gamma``          0.1                  lr factor at each milestone
``init``           "least-squares"      stitch initialisation: "least-squares", "identity", "random"
``ls_samples``     2048                 training samples (seeded random subset) for least squares
``stitch_bn``      False                BatchNorm before the stitch's affine map
``max_train``      None (all)           use a seeded random subset of this many training samples
``dm_loss``        "sum"                DM loss: "sum" = mean over samples of the per-sample sum of
                                        squared differences (the paper's squared L2); "normalised" =
                                        mean of per-sample ``||d||^2 / ||target||^2``
``fula_weights``   None (all 1)         FuLA per-term weights, one per term: the stitch output, then
                                        each tap of the end model after the cut
``temperature``    1.0                  SLM softmax temperature (applied to both logits)
``cache_limit_mb`` 1024                 cached activations larger than this (per array, MiB) go to a
                                        memory-mapped file in a temporary directory
``eval_batch_size`` 256                 batch size of the no-grad passes (caching, evaluation)
=================  ===================  ==========================================================

The seed comes from ``compare(seed=...)`` (or the ``seed`` argument), not from the options.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Mapping

from ..host.contract import Option
from ..host.values import NON_NEGATIVE, POSITIVE, POSITIVE_INT, check_rule, check_rules

__all__ = ["StitchSettings", "OBJECTIVES", "INITS", "OPTION_DOCS", "check_objective", "stitch_options"]

OBJECTIVES = ("hlm", "slm", "dm", "fula")
INITS = ("least-squares", "identity", "random")
_INIT_ALIASES = {"least-squares": "least-squares", "least_squares": "least-squares", "lstsq": "least-squares",
                 "ls": "least-squares", "identity": "identity", "eye": "identity", "random": "random"}
_DM_LOSSES = {"sum": "sum", "normalised": "normalised", "normalized": "normalised"}


OPTION_DOCS: dict[str, str] = {
    "epochs": "passes over the training set",
    "lr": "Adam learning rate",
    "weight_decay": "Adam weight decay (L2 added to the gradient)",
    "batch_size": "samples per optimiser step",
    "milestones": "where the lr is multiplied by gamma: fractions of all steps in (0, 1), or epoch numbers >= 1",
    "gamma": "lr factor at each milestone",
    "init": "stitch initialisation: least-squares, identity or random",
    "ls_samples": "training samples (seeded random subset) for the least-squares init",
    "stitch_bn": "BatchNorm before the stitch's affine map",
    "max_train": "use a seeded random subset of this many training samples (None: all)",
    "dm_loss": "DM loss: sum (per-sample squared L2) or normalised (divided by ||target||^2)",
    "fula_weights": "FuLA per-term weights: the stitch output, then each tap after the cut (None: all 1)",
    "temperature": "SLM softmax temperature (applied to both logits)",
    "cache_limit_mb": "cached activation arrays above this size (MiB) go to a memory-mapped file",
    "eval_batch_size": "batch size of the no-grad passes (caching, evaluation)",
}


def check_objective(objective: str) -> str:
    """Normalise an objective name ("HLM", "stitch-slm", "fula" ...) to one of `OBJECTIVES`."""
    name = str(objective).lower().removeprefix("stitch-").removeprefix("iri-")
    if name not in OBJECTIVES:
        raise ValueError(f"unknown stitching objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    return name


# what each numeric setting must be (one table, checked by host.values.check_rules)
_RULES = {"epochs": POSITIVE_INT, "batch_size": POSITIVE_INT, "ls_samples": POSITIVE_INT, "eval_batch_size": POSITIVE_INT,
          "max_train": POSITIVE_INT, "lr": POSITIVE, "weight_decay": NON_NEGATIVE, "gamma": POSITIVE,
          "temperature": POSITIVE, "cache_limit_mb": NON_NEGATIVE}


@dataclass(frozen=True)
class StitchSettings:
    """How a stitch is initialised and trained (see the module docstring for each field). Hashable."""

    epochs: int = 30
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 128
    milestones: tuple[float, ...] = (1 / 3, 2 / 3)
    gamma: float = 0.1
    init: str = "least-squares"
    ls_samples: int = 2048
    stitch_bn: bool = False
    max_train: int | None = None
    dm_loss: str = "sum"
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
        """A copy with values normalised (types, aliases, milestones as fractions); raises on bad ones."""
        v = check_rules({f.name: getattr(self, f.name) for f in fields(self)
                         if f.name in _RULES and not (f.name == "max_train" and self.max_train is None)}, _RULES)
        init = _INIT_ALIASES.get(str(self.init).lower())
        if init is None:
            raise ValueError(f"option init={self.init!r} is not known; choose one of {', '.join(INITS)}")
        dm_loss = _DM_LOSSES.get(str(self.dm_loss).lower())
        if dm_loss is None:
            raise ValueError(f"option dm_loss={self.dm_loss!r} is not known; choose 'sum' or 'normalised'")
        milestones = self.milestones
        if isinstance(milestones, (int, float)):
            milestones = (milestones,)
        fractions = []
        for m in milestones or ():
            m = check_rule("milestones", m, POSITIVE)
            fractions.append(m if m < 1 else m / v["epochs"])
        weights = self.fula_weights
        if weights is not None:
            if isinstance(weights, (int, float)):
                raise ValueError("option fula_weights must be a list of numbers, one per FuLA term")
            weights = tuple(check_rule("fula_weights", w, NON_NEGATIVE) for w in weights)
        return replace(self, **v, init=init, dm_loss=dm_loss, milestones=tuple(sorted(fractions)), fula_weights=weights,
                       stitch_bn=bool(self.stitch_bn), seed=int(self.seed))

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
        d["fula_weights"] = None if self.fula_weights is None else list(self.fula_weights)
        return d


def stitch_options() -> tuple[Option, ...]:
    """The options of the stitching metrics, one per [`StitchSettings`][StitchSettings] field (but ``seed``), with the
    field's default and its line of `OPTION_DOCS`."""
    return tuple(Option(f.name, getattr(StitchSettings, f.name), OPTION_DOCS[f.name])
                 for f in fields(StitchSettings) if f.name != "seed")
