"""Donor training and evaluation: train a classifier (optionally adversarially), measure accuracy, save weights.

``train_classifier`` is the one function in the library that changes the model it is given (that is its job).
``evaluate_accuracy`` leaves the model exactly as it found it.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..datasets.tensors import tensors_of
from ..networks.activations import model_outputs
from ..networks.model_state import frozen, model_device, preserved
from ..utils.io import atomic_write
from ..utils.progress import Progress, check_progress


def _batches(dataset: Dataset | DataLoader, batch_size: int, shuffle: bool,
             generator: torch.Generator | None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(x, y) batches: sliced straight from in-memory tensors when the dataset has them, else via a DataLoader."""
    if isinstance(dataset, DataLoader):
        for x, y, *_ in dataset:
            yield torch.as_tensor(x), torch.as_tensor(y).long()
        return
    tensors = tensors_of(dataset)
    if tensors is not None:
        x_all, y_all = tensors
        n = len(y_all)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            yield x_all[idx], y_all[idx]
        return
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator)
    for x, y, *_ in loader:
        yield torch.as_tensor(x), torch.as_tensor(y).long()


def pgd_attack(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, eps: float, steps: int = 7,
               alpha: float | None = None, random_start: bool = True,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """L-inf PGD adversarial examples within ``eps`` of ``x`` (B, C, H, W) in [0, 1], maximising cross-entropy.

    Runs the model in eval mode (BatchNorm statistics untouched) and restores its flags; parameters'
    gradients are not accumulated. ``alpha`` (step size) defaults to 2.5 * eps / steps. Returns (B, C, H, W).
    """
    alpha = 2.5 * eps / max(steps, 1) if alpha is None else alpha
    x = x.detach()
    if random_start:
        noise = torch.rand(x.shape, generator=generator, dtype=x.dtype).to(x.device) * 2 - 1
        adv = (x + eps * noise).clamp(0, 1)
    else:
        adv = x.clone()
    with frozen(model):
        for _ in range(steps):
            adv.requires_grad_(True)
            loss = F.cross_entropy(model(adv), y)
            (grad,) = torch.autograd.grad(loss, adv)
            adv = adv.detach() + alpha * grad.sign()
            adv = torch.min(torch.max(adv, x - eps), x + eps).clamp(0, 1)
    return adv.detach()


def train_classifier(model: nn.Module, train_dataset: Dataset | DataLoader, *, epochs: int = 10, lr: float = 1e-3,
                     batch_size: int = 128, weight_decay: float = 0.0, seed: int = 0,
                     device: str | torch.device | None = None, adversarial: dict[str, Any] | None = None,
                     optimizer: str = "adam", schedule: str | None = "cosine",
                     eval_dataset: Dataset | DataLoader | None = None, precise_bn: bool = True,
                     progress: Progress = "auto") -> dict[str, Any]:
    """Train ``model`` in place with cross-entropy; its ``training`` flags are restored at the end.

    Args:
        model: the network to train.
        train_dataset: samples ``(x, y)``, x in [0, 1].
        epochs: passes over ``train_dataset``.
        lr: the learning rate (the start of the schedule).
        batch_size: samples per step.
        weight_decay: the optimiser's weight decay.
        seed: fixes shuffling, initial noise and dropout (the caller's global RNG state is restored
            afterwards), so training is deterministic on the CPU.
        device: where to train (default: where the model's parameters are); the model stays there.
        adversarial: ``dict(eps=8/255, steps=7, alpha=None)`` trains on L-inf PGD examples in [0, 1] (Madry).
        optimizer: ``"adam"`` (Adam) or ``"sgd"`` (SGD, momentum 0.9, Nesterov).
        schedule: ``"cosine"`` (per-step cosine decay to 0) or None (constant ``lr``).
        eval_dataset: if given, its accuracy is recorded after every epoch.
        precise_bn: after the last epoch, recompute BatchNorm running statistics as exact averages over one
            pass of the training data (no gradients), so eval-mode accuracy matches the final weights even after
            a few hundred steps (running averages lag behind). Skipped for adversarial training (the statistics
            there come from adversarial batches).
        progress: ``"auto"`` and ``"always"`` print one line per epoch on stderr (lines, not a bar, so they
            suit logs too), ``"never"`` prints nothing.

    Returns:
        ``{"history": [{"epoch", "loss", "train_accuracy", "seconds"[, "eval_accuracy"]}, ...], "seconds":
            total, "final_loss", "final_train_accuracy"}``; loss is the mean cross-entropy (nats) over the epoch's
            training batches.
    """
    adv = _check_training_options(epochs, batch_size, optimizer, schedule, adversarial)
    progress = check_progress(progress)
    dev = torch.device(device) if device is not None else model_device(model)
    model.to(dev)
    opt, sched = _optimizer_and_schedule(model, train_dataset, optimizer, schedule, lr, weight_decay, epochs, batch_size)
    history: list[dict[str, float]] = []
    start = time.perf_counter()
    fork_devices = [dev.index or 0] if dev.type == "cuda" else []
    with preserved(model), torch.random.fork_rng(devices=fork_devices):
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        for epoch in range(1, epochs + 1):
            t0 = time.perf_counter()
            record = {"epoch": epoch, **_train_epoch(model, train_dataset, opt, sched, batch_size, gen, dev, adv)}
            if precise_bn and adv is None and epoch == epochs:
                recompute_bn_stats(model, train_dataset, batch_size=batch_size, device=dev)
            record["seconds"] = time.perf_counter() - t0
            if eval_dataset is not None:
                record["eval_accuracy"] = evaluate_accuracy(model, eval_dataset, device=dev)
            history.append(record)
            if progress != "never":
                extra = f" eval_acc {record['eval_accuracy']:.4f}" if "eval_accuracy" in record else ""
                print(f"epoch {epoch}/{epochs} loss {record['loss']:.4f} train_acc {record['train_accuracy']:.4f}"
                      f"{extra} ({record['seconds']:.1f}s)", file=sys.stderr, flush=True)
    return {"history": history, "seconds": time.perf_counter() - start,
            "final_loss": history[-1]["loss"], "final_train_accuracy": history[-1]["train_accuracy"]}


def _check_training_options(epochs: int, batch_size: int, optimizer: str, schedule: str | None,
                            adversarial: dict[str, Any] | None) -> dict[str, Any] | None:
    """Validate [`train_classifier`][train_classifier]'s options; returns the PGD settings (None without adversarial training)."""
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be >= 1, got epochs={epochs}, batch_size={batch_size}")
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"unknown optimizer {optimizer!r}; use 'adam' or 'sgd'")
    if schedule not in (None, "cosine"):
        raise ValueError(f"unknown schedule {schedule!r}; use 'cosine' or None")
    if not adversarial:
        return None
    unknown = set(adversarial) - {"eps", "steps", "alpha", "random_start"}
    if unknown or "eps" not in adversarial:
        raise ValueError(f"adversarial takes eps (required), steps, alpha, random_start; got {sorted(adversarial)}")
    return dict(adversarial)


def _optimizer_and_schedule(model: nn.Module, train_dataset: Dataset | DataLoader, optimizer: str,
                            schedule: str | None, lr: float, weight_decay: float, epochs: int, batch_size: int):
    """The optimizer over the trainable parameters, and the per-step cosine schedule (or None)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=weight_decay)
    if schedule != "cosine":
        return opt, None
    if isinstance(train_dataset, DataLoader):
        steps_per_epoch = len(train_dataset)
    else:
        steps_per_epoch = math.ceil(len(train_dataset) / batch_size)  # type: ignore[arg-type]
    total = max(1, epochs * steps_per_epoch)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))


def _train_epoch(model: nn.Module, train_dataset: Dataset | DataLoader, opt: torch.optim.Optimizer, sched: Any,
                 batch_size: int, gen: torch.Generator, dev: torch.device, adv: dict[str, Any] | None) -> dict:
    """One shuffled pass in train mode; returns ``{"loss": mean cross-entropy (nats), "train_accuracy"}``."""
    model.train()
    loss_sum, correct, seen = 0.0, 0, 0
    for x, y in _batches(train_dataset, batch_size, shuffle=True, generator=gen):
        x, y = x.to(dev, non_blocking=True).float(), y.to(dev, non_blocking=True)
        if adv is not None:
            x = pgd_attack(model, x, y, generator=gen, **adv)
        out = model(x)
        loss = F.cross_entropy(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        loss_sum += float(loss.detach()) * len(y)
        correct += int((out.argmax(1) == y).sum())
        seen += len(y)
    return {"loss": loss_sum / max(seen, 1), "train_accuracy": correct / max(seen, 1)}


@torch.no_grad()
def recompute_bn_stats(model: nn.Module, dataset: Dataset | DataLoader, batch_size: int = 128,
                       device: str | torch.device | None = None) -> None:
    """Set every BatchNorm layer's running mean/var to the exact average over one pass of ``dataset``.

    Changes the model's BatchNorm buffers (that is the point); parameters and ``training`` flags are kept.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not bns:
        return
    dev = torch.device(device) if device is not None else model_device(model)
    momenta = {m: m.momentum for m in bns}
    with preserved(model):
        try:
            model.eval()
            for m in bns:
                m.reset_running_stats()
                m.momentum = None  # cumulative moving average: the exact mean over batches
                m.train()
            for x, _ in _batches(dataset, batch_size, shuffle=False, generator=None):
                model(x.to(dev).float())
        finally:
            for m, mom in momenta.items():
                m.momentum = mom


@torch.no_grad()
def predict(model: nn.Module, dataset: Dataset | DataLoader, batch_size: int = 512,
            device: str | torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted classes and true labels over ``dataset``: two (N,) int64 CPU tensors, in dataset order.

    Runs in eval mode on ``device`` (default: the model's) and leaves the model's flags as they were.
    """
    dev = torch.device(device) if device is not None else model_device(model)
    if model_device(model) != dev:
        raise ValueError(f"the model is on {model_device(model)} but device={dev}; move the model first")
    logits, labels = model_outputs(model, dataset, batch_size=batch_size, device=dev)
    return logits.argmax(1), labels


def evaluate_accuracy(model: nn.Module, dataset: Dataset | DataLoader, batch_size: int = 512,
                      device: str | torch.device | None = None) -> float:
    """Top-1 accuracy (fraction in [0, 1]) of ``model`` on ``dataset``; the model's flags are left untouched."""
    pred, y = predict(model, dataset, batch_size=batch_size, device=device)
    return float((pred == y).float().mean())


def save_weights(model: nn.Module, path: str | os.PathLike) -> str:
    """Save ``model.state_dict()`` (tensors moved to the CPU) to ``path`` atomically; returns the path.

    Written to a temporary file in the same folder, then renamed, so a crash never leaves a half-written
    file. Parent folders are created. Load with ``build_model("SPEC@PATH")`` or ``torch.load(..., weights_only=True)``.
    """
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    with atomic_write(path) as f:
        torch.save(state, f)
    return os.fspath(path)
