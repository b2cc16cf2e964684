"""Train a stitch between a frozen front (A up to cut i) and a frozen end (B from cut j on).

[`fit_stitch`][fit_stitch] is the entry point. It takes the training inputs as a tensor, so callers can
train on any inputs (the ordinary training split, or IRIs); every target is computed from B on
those same inputs. Only the stitch learns: both donors run through `SplitNetwork`, which
keeps them in eval mode with their parameters out of the graph and restores every flag.

Work that does not change between epochs is done once ([`TrainingCache`][cache.TrainingCache]): A's
activations at the cut, and B's targets (SLM: B's logits; DM: B's activations at the cut; FuLA:
those and B's activations at every tap). Per batch, HLM and SLM run B's end on the stitched
activations, FuLA the end with taps, and DM runs no part of either network.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch import nn

from ..networks.model_state import model_device
from ..networks.parallel import World
from ..networks.split import SplitNetwork
from ..utils.memory import kept_heap
from ..utils.progress import Progress, progress_bar
from .cache import TrainingCache, subset_indices
from .init import initialise
from .layer import StitchLayer, StitchPlan, plan_stitch
from .objectives import NEEDS, stitched_loss
from .settings import StitchSettings, check_objective


class StitchDivergedError(ValueError):
    """The stitch's training loss became NaN or infinite (the message names the epoch and batch)."""


@dataclass
class FittedStitch:
    """A trained stitch and how it was trained.

    Attributes:
        stitch: the [`StitchLayer`][StitchLayer] (eval mode, on the training device).
        objective: ``"hlm"``, ``"slm"``, ``"dm"`` or ``"fula"``.
        settings: the validated settings it was trained with.
        plan: the shapes and resizing of the cut pair (`StitchPlan`).
        losses: mean training loss per epoch (objective units: nats for HLM/SLM, squared activation units for
            DM "sum", unitless for DM "normalised" and FuLA).
        init: the initialisation's details (least squares adds its relative residual).
        train_size: samples trained on.
        steps: optimiser steps.
        seconds: wall time of fitting (caching included).
        cache: the [`TrainingCache`][TrainingCache] used (or ``None`` once dropped).
    """

    stitch: StitchLayer
    objective: str
    settings: StitchSettings
    plan: StitchPlan
    losses: list[float]
    init: dict
    train_size: int
    steps: int
    seconds: float
    cache: TrainingCache | None = field(default=None, repr=False)

    @property
    def final_loss(self) -> float:
        """Mean training loss of the last epoch (``nan`` when no epoch ran)."""
        return self.losses[-1] if self.losses else float("nan")

    @torch.no_grad()
    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        """Apply the trained stitch (eval mode) to A's activations (N, *front_shape) -> (N, *end_shape)."""
        self.stitch.eval()
        device = next(self.stitch.parameters()).device
        return self.stitch(a.to(device))


def check_labels(labels: torch.Tensor, num_classes: int, what: str) -> None:
    """Raise ``ValueError`` unless every label in ``labels`` (N,) lies in ``0 .. num_classes-1``."""
    if labels.numel() == 0:
        return
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= num_classes:
        raise ValueError(
            f"{what} labels range from {lo} to {hi}, but the end model has {num_classes} classes "
            f"(logits of size {num_classes}); labels must lie in 0..{num_classes - 1}: use the data the "
            "end model was trained for, or relabel it"
        )


def fit_stitch(front: SplitNetwork, end: SplitNetwork, train_x: torch.Tensor | None, train_y: torch.Tensor | None,
               objective: str, settings: StitchSettings | None = None, *, device: torch.device | None = None,
               progress: Progress = "never", cache: TrainingCache | None = None, world: World | None = None) -> FittedStitch:
    """Train a stitch from ``front`` (A cut at i) to ``end`` (B cut at j) with ``objective``.

    A training set smaller than one batch is one batch. The donors are unchanged afterwards, also on error. The
    stitch is float32 for donors of any floating dtype (its output is cast to the end's), and it trains with
    autograd also when called inside ``torch.no_grad()`` or ``torch.inference_mode()``.

    Args:
        front: network A cut at i (the stitch's input side).
        end: network B cut at j (the stitch's output side).
        train_x: training inputs (N, ...) (e.g. images (N, C, H, W) in [0, 1], or IRIs); B's targets are
            computed on these same inputs. May be ``None`` when ``cache`` is given (its inputs are used).
        train_y: (N,) int64 labels, needed by HLM only (``None`` otherwise, or when ``cache`` is given).
        objective: ``"hlm"``, ``"slm"``, ``"dm"`` or ``"fula"``.
        settings: [`StitchSettings`][StitchSettings]; None: the paper's defaults. ``settings.seed`` seeds
            initialisation and shuffling; ``max_train`` subsets.
        device: where the stitch trains; None: the end model's device.
        progress: show progress bars (caching the targets, the epochs).
        cache: a [`TrainingCache`][TrainingCache] over the same inputs, to share across objectives.
        world: with several ranks, training is data-parallel: each global batch (the same shuffled indices on
            every rank) is split by the ranks' cache rows (``cache.rows``), each rank backpropagates its part of
            the batch mean, and the summed gradients (one all-reduce per step) equal the single-process mean
            gradient up to float reduction order; every rank ends with the same stitch. (With ``stitch_bn`` each
            rank normalises by its own part's batch statistics.)

    Returns:
        The trained stitch, its losses and timings.

    Raises:
        ValueError: an empty training set, labels outside B's classes, or shapes that cannot be stitched.
        StitchDivergedError: a NaN/Inf loss (a ``ValueError``).
    """
    start_time = time.perf_counter()
    objective = check_objective(objective)
    settings = (settings or StitchSettings()).validated()
    device = torch.device(device) if device is not None else model_device(end.model)
    # training needs autograd whatever the caller's mode (inside no_grad() or inference_mode()); the stitch and its
    # inputs are float32 and the end takes them in its own dtype
    with kept_heap(), torch.inference_mode(False), torch.enable_grad():  # caching and every step reuse blocks
        if cache is None:
            cache = _training_cache(front, end, train_x, train_y, settings, device, progress)
        _check_training_set(cache, objective, settings)
        plan = plan_stitch(cache.front_shape, cache.end_shape)
        stitch = StitchLayer(plan, bn=settings.stitch_bn).float()  # float32 whatever the donors' or default dtype
        cache.ensure(("front", *NEEDS[objective]))
        init = initialise(stitch, settings.init, cache, torch.Generator().manual_seed(settings.seed),
                          settings.ls_samples, settings.eval_batch_size, world=world)
        stitch.to(device)
        losses, steps = _train_epochs(objective, stitch, end, cache, settings, device, progress, world)
    return FittedStitch(stitch, objective, settings, plan, losses, init, len(cache), steps,
                        time.perf_counter() - start_time, cache)


def _training_cache(front: SplitNetwork, end: SplitNetwork, train_x: torch.Tensor | None,
                    train_y: torch.Tensor | None, settings: StitchSettings, device: torch.device,
                    progress: Progress) -> TrainingCache:
    """A [`TrainingCache`][TrainingCache] over ``train_x`` (subset to ``settings.max_train``) and its labels."""
    if train_x is None:
        raise ValueError("fit_stitch needs training inputs train_x (N, ...) or a TrainingCache")
    idx = subset_indices(len(train_x), settings.max_train, settings.seed)
    if idx is not None:
        train_x = train_x[idx]
        train_y = None if train_y is None else torch.as_tensor(train_y)[idx]
    return TrainingCache(front, end, train_x, train_y, device=device, batch_size=settings.eval_batch_size,
                         limit_bytes=settings.cache_limit_bytes, progress=progress)


def _check_training_set(cache: TrainingCache, objective: str, settings: StitchSettings) -> None:
    """Enough samples to train on, and (for HLM) labels within B's classes. A training set smaller than one batch
    is trained on as one batch of all its samples (every epoch one step)."""
    n = len(cache)
    if n < (2 if settings.stitch_bn else 1):
        raise ValueError(
            f"the training set has {n} sample(s): too few to train a stitch"
            + (" with stitch_bn (BatchNorm needs 2 per batch)" if settings.stitch_bn else "")
            + "; pass more training data"
        )
    if objective == "hlm":
        if cache.y is None:
            raise ValueError("objective 'hlm' needs labels for the training inputs; pass train_y")
        check_labels(cache.y, cache.num_classes, "training")


def _train_epochs(objective: str, stitch: StitchLayer, end: SplitNetwork, cache: TrainingCache,
                  settings: StitchSettings, device: torch.device, progress: Progress,
                  world: World | None) -> tuple[list[float], int]:
    """Adam over ``settings.epochs`` shuffled epochs; returns (mean loss per epoch, optimiser steps taken).

    Leaves the stitch in eval mode. Raises [`StitchDivergedError`][StitchDivergedError] on a NaN/Inf loss.
    """

    n, needs = len(cache), NEEDS[objective]
    shuffle_gen = torch.Generator().manual_seed(settings.seed + 1)
    optimizer = torch.optim.Adam(stitch.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    total_steps = settings.epochs * math.ceil(n / settings.batch_size)
    losses: list[float] = []
    step = 0
    bar = progress_bar(range(settings.epochs), progress=progress, desc=f"stitch {objective}", leave=False)
    stitch.train()
    for epoch in bar:
        order = torch.randperm(n, generator=shuffle_gen)
        total, count = 0.0, 0
        for b, begin in enumerate(range(0, n, settings.batch_size)):
            idx = order[begin:begin + settings.batch_size].sort().values
            if len(idx) < 2 and stitch.bn is not None:
                continue  # BatchNorm cannot normalise a single vector
            for group in optimizer.param_groups:
                group["lr"] = settings.lr_at(step, total_steps)
            if world is not None and world.distributed:
                loss = _step_sharded(objective, stitch, end, cache, idx, needs, settings, optimizer, device, world)
            else:
                loss = _step(objective, stitch, end, cache, idx, needs, settings, optimizer, device)
            if not math.isfinite(loss):
                raise StitchDivergedError(
                    f"stitch training diverged: the {objective.upper()} loss is {loss} at epoch {epoch + 1} of "
                    f"{settings.epochs} (batch {b + 1}); lower the learning rate (lr={settings.lr:g}) or use "
                    "init='least-squares'. The donor models are unchanged."
                )
            total += loss * len(idx)
            count += len(idx)
            step += 1
        losses.append(total / max(count, 1))
        bar.set_postfix(loss=f"{losses[-1]:.4g}")
    stitch.eval()
    return losses, step


def _step(objective: str, stitch: nn.Module, end: SplitNetwork, cache: TrainingCache, idx: torch.Tensor,
          needs: tuple[str, ...], settings: StitchSettings, optimizer: torch.optim.Optimizer,
          device: torch.device) -> float:
    """One optimiser step on samples ``idx``; returns the batch loss (float)."""
    a = cache.front(idx).to(device, non_blocking=True)
    targets = cache.targets(idx, needs, device)
    h = stitch(a)
    loss = stitched_loss(objective, h, end, targets, temperature=settings.temperature,
                         dm_reduction=settings.dm_loss, fula_weights=settings.fula_weights)
    value = float(loss.detach())
    if not math.isfinite(value):
        return value
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return value


def _step_sharded(objective: str, stitch: nn.Module, end: SplitNetwork, cache: TrainingCache, idx: torch.Tensor,
                  needs: tuple[str, ...], settings: StitchSettings, optimizer: torch.optim.Optimizer,
                  device: torch.device, world: World) -> float:
    """One data-parallel step on the global batch ``idx``: this rank's part is ``idx`` within ``cache.rows``.

    Each rank backpropagates ``mean_loss(part) * len(part) / len(idx)``; one all-reduce sums the gradients
    and the loss, so every rank takes the single-process step. Returns the global batch loss (float).
    """
    rows = cache.rows
    part = idx[(idx >= rows.start) & (idx < rows.stop)]
    params = [p for p in stitch.parameters() if p.requires_grad]
    like = torch.zeros(sum(p.numel() for p in params) + 1, dtype=torch.float64)

    def local() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=False)
        out = torch.zeros_like(like)
        if len(part) == 0 or (len(part) < 2 and getattr(stitch, "bn", None) is not None):
            return out  # no share of this batch (or one vector, which BatchNorm cannot normalise)
        h = stitch(cache.front(part).to(device, non_blocking=True))
        loss = stitched_loss(objective, h, end, cache.targets(part, needs, device), temperature=settings.temperature,
                             dm_reduction=settings.dm_loss, fula_weights=settings.fula_weights)
        weight = len(part) / len(idx)
        (loss * weight).backward()
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        out[:-1] = torch.cat([g.reshape(-1) for g in grads]).to("cpu", torch.float64)
        out[-1] = float(loss.detach()) * weight
        return out

    total = world.reduce_sum(local, like, "stitch training step")
    value = float(total[-1])
    if not math.isfinite(value):
        return value
    offset = 0
    for p in params:
        p.grad = total[offset:offset + p.numel()].reshape(p.shape).to(p.device, p.dtype)
        offset += p.numel()
    optimizer.step()
    return value
