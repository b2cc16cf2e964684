"""``generate_iris(model, layer, inputs, ...)``: IRIs for a model cut at a named layer, cached on disk."""

from __future__ import annotations

import inspect
import os
from typing import Any

import torch
from torch import nn

from ..core.networks import SplitNetwork, frozen, model_device
from ..utils.text import did_you_mean
from . import cache, sharded
from .auto import auto_adam_defaults, auto_optimizer
from .compiled import check_compile
from .fold import private_front
from .modular import relu_modules
from .optimizer import _check_seeds, make_settings, optimize_iris
from .relu import FrontTrace, front_tensors, straight_through_relu, surrogate_slopes, trace_front
from .result import IRISet
from .settings import ADVANCED, AUTO, Settings

RUN_OPTIONS = ("callback", "profile")


def _as_tensor(inputs: Any) -> torch.Tensor:
    if isinstance(inputs, torch.Tensor):
        return inputs
    from ..core.data import load_all

    try:
        x, _ = load_all(inputs)
    except Exception as exc:  # noqa: BLE001
        raise TypeError(f"inputs must be a tensor (N, ...) or a dataset/loader of (x, y) pairs; "
                        f"got {type(inputs).__name__} ({exc})") from exc
    return x


def generate_iris(model: nn.Module, layer: str, inputs: Any, *, steps: int = 1000, tol: float = 1e-2,
                  optimizer: str = AUTO, lr: float | None = None, init: str = "noise", batch_size: int = 128,
                  backend: str = "auto", seed: int = 0, progress: bool = True,
                  cache_dir: str | os.PathLike | None = None, checkpoint_every: int | None = None,
                  fake_relu: bool | str = AUTO, compile: bool = False, **advanced: Any) -> IRISet:
    """IRIs of ``model`` at ``layer`` for the seed ``inputs``: ``x'`` with ``f_{<=layer}(x') ~= f_{<=layer}(x)``.

    ``model``: any ``nn.Module``; it is run in eval mode with gradients off for its parameters and is left
    exactly as it was (flags, parameters, buffers). Only the layers up to the cut run. ``layer``: a
    ``named_modules()`` name. ``inputs``: seeds (N, ...) float in [0, 1] (or a dataset of (x, y) pairs),
    on any device; the IRIs come back with the same shape, dtype and device.

    Options (see :func:`similarity_plugins.iri.optimize_iris` for the optimiser): ``steps`` per-sample
    budget; ``tol`` target relative error; ``optimizer`` "auto" (default: "lbfgs" when at least 6 ReLU calls
    follow the front's last max-pool and the cut has at most half the input's values, as at ResNet
    ``layer3`` / ``layer4``, else "adam", with heavy momentum at the other deep ResNet cuts and a schedule for
    deep max-pool fronts such as VGG's (``auto.auto_adam_defaults``); an option only one of them takes,
    such as ``cycle_steps`` or ``history``, picks that one (at a deep ResNet cut an Adam option keeps our
    momentum, leak and folding, and a schedule option of yours drops our schedule options); at wide cuts
    that nearly pin the image down behind a max-pool (VGG's 3rd and 4th pools behind 6-7 ReLU calls, VGG-19's
    3rd: more values than the input behind 8 or more) and at
    wide strided ResNet cuts (at least twice the input's values at 1/8 of its rows: ResNet-50 ``layer2``) Adam
    runs one cosine over the budget with leaky gradients (heavy momentum's Adam does too at ResNet cuts with
    more than half the input's values at 1/16 of its rows or less: bottleneck ResNets' ``layer3`` and
    ``layer4`` at 32x32), and at shallow pooled cuts with at least twice the
    input's values (VGG's 1st and 2nd pools) cycles of 150 with BatchNorm folded; in fronts without
    BatchNorm, such as torchvision's ``vgg16``, the wide and mid pooled cuts run at lr 0.1 and the last pools
    at 0.05; the choice is in ``iris.settings``),
    "adam" (lr 0.2, per-sample cosine cycles of 300, 600, ... steps), "lbfgs" (per-sample L-BFGS with a
    per-sample line search and leaky ReLU gradients, ``relu_leak`` 0.1; see docs/iri_depth.md) or
    "normgrad" (lr 1.0, halved over 4 stages); ``init``
    "noise" or "shuffle"; ``batch_size`` working-batch slots; ``backend`` "auto" / "numpy" / "torch" /
    "cupy"; ``seed`` (each sample's randomness derives from (seed, index));
    ``progress`` tqdm bar; ``fake_relu``: True/"last" passes the gradient straight through the last ReLU
    before the cut, "all" through every ReLU of the front, False/"none" keeps true gradients, "auto"
    (default) is "last" where the representation is the last ReLU call's output (up to max-pools after it),
    "none" where a conv, BatchNorm, linear layer or averaging pool follows it (``bn2``, ``conv1``, ``fc``: the
    straight-through gradient points the wrong way) and at the wide cuts above, where ``optimizer="auto"``
    keeps true gradients at the last ReLU (with ``relu_leak`` > 0 the leak covers it too);
    ``relu_leak`` (advanced; default 0.1 for L-BFGS and for the Adam that "auto" runs at deep ResNet cuts,
    at deep max-pool cuts such as VGG's and at wide cuts, 0 otherwise) gives the front's other ReLU calls
    the gradient slope ``relu_leak`` below zero. Both change only the search direction (for L-BFGS also
    the slope its line search expects), never the loss or the reported error.
    ``cache_dir``: load/save the finished set there, keyed by a hash of the front's weights, the layer, the
    seeds and the settings; ``checkpoint_every``: with ``cache_dir``, save the full optimiser state every
    that many batch steps and resume from it after an interruption. ``compile``: run the forward+backward
    evaluations through ``torch.compile`` (opt-in; a warm-up of seconds to a minute per run; IRIs equal to
    the eager ones up to float rounding; like ``backend``, not part of the cache key; see ``compiled.py``).
    ``advanced``: optimiser options (``schedule``, ``lr_floor``, ``beta1``, ``restart_patience``, ...) plus
    ``callback`` and ``profile``.

    Returns an :class:`IRISet` (``inputs``, ``rel_error``, ``steps``, ``seed_distance``, ``summary``).
    Raises ValueError (LayerNotFound) for an unknown layer, ValueError for bad settings or seeds outside
    [0, 1], FloatingPointError naming the samples for NaN/inf gradients, RuntimeError naming the fix when
    ``compile=True`` and torch.compile fails.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    run_options = {k: advanced.pop(k) for k in RUN_OPTIONS if k in advanced}
    run_options["compile"] = check_compile(compile)
    _check_option_names(advanced)
    common = dict(steps=steps, tol=tol, lr=lr, init=init, seed=seed, fake_relu=fake_relu)
    _settings(optimizer, None, common, advanced, 0.0)   # every check before any work
    if checkpoint_every is not None and cache_dir is None:
        raise ValueError("checkpoint_every needs cache_dir (the folder where checkpoints are written)")
    seeds = _as_tensor(inputs)
    _check_seeds(seeds)
    split = SplitNetwork(model, layer)
    device = model_device(model)
    modular = None
    with frozen(model):
        trace = trace_front(model, split.front, seeds[:1].to(device))
        if trace.functional_relu_calls:   # F.relu & co. as modules, so that the rules and the surrogates see them
            modular = relu_modules(split.front_graph)
            trace = trace_front(modular, modular, seeds[:1].to(device)) if modular is not None else trace
        settings = _settings(optimizer, trace, common, advanced, _history_bytes(seeds, batch_size))
        slopes = surrogate_slopes(trace, settings.fake_relu, settings.relu_leak)
        targets = [call for call, slope in slopes.items() if slope == 1.0]
        key_settings = dict(settings.as_dict(), fake_relu_at=[list(t) for t in targets])
        ran = {"", *trace.modules}   # the key covers the modules' classes and settings, and the traced front's code
        modules = [(n, m) for n, m in model.named_modules() if n in ran]
        modules += [("<front>", split.front_graph)] if split.front_graph is not None else []
        key = cache.fingerprint(front_tensors(model, trace), layer, seeds, key_settings, modules) if cache_dir else None
        if cache_dir is not None:
            hit = cache.load_file(cache.result_path(cache_dir, key))
            if sharded.agreed_hit(hit if hit is not None and hit.get("key") == key else None):
                return IRISet.from_state(hit, seeds.device)
        iris = _optimize(model, split, modular, settings, slopes, seeds, batch_size=batch_size, backend=backend,
                         progress=progress, device=device, checkpoint_every=checkpoint_every,
                         checkpoint_path=cache.checkpoint_path(cache_dir, key) if checkpoint_every else None,
                         **run_options)
    iris.settings["layer"] = layer
    iris.settings["fake_relu_at"] = [f"{name}#{call}" for name, call in targets]
    iris.key = key
    if cache_dir is not None:
        sharded.save_once(cache.atomic_save, iris.to_state(), cache.result_path(cache_dir, key))
    return iris


def _check_option_names(advanced: dict) -> None:
    """Raise TypeError for a keyword of ``generate_iris`` it does not know, suggesting the closest of its own
    keywords and the advanced options (``compiled=`` -> ``compile``, ``histroy=`` -> ``history``)."""
    unknown = sorted(set(advanced) - set(ADVANCED))
    if unknown:
        own = [name for name in inspect.signature(generate_iris).parameters if name != "advanced"]
        raise TypeError(f"generate_iris() got unknown option(s) {', '.join(unknown)}"
                        f"{did_you_mean(unknown[0], [*own, *RUN_OPTIONS, *ADVANCED])}; its options are "
                        f"{', '.join(own[3:])}, plus the advanced {', '.join(ADVANCED)} and {', '.join(RUN_OPTIONS)}")


def _history_bytes(seeds: torch.Tensor, batch_size: int) -> float:
    """Bytes L-BFGS's curvature pairs (default history) would take for these seeds and working batch."""
    slots = min(int(batch_size), int(seeds.shape[0]))
    return 2.0 * Settings.history * seeds[0].numel() * slots * seeds.element_size()


def _settings(optimizer: str, trace: FrontTrace | None, common: dict, advanced: dict,
              history_bytes: float) -> Settings:
    """Validated settings; ``optimizer="auto"`` resolved from ``trace`` and the memory L-BFGS would need
    (without a trace, it is checked as the optimiser its options point to, so bad options fail before any
    work)."""
    if common["fake_relu"] == AUTO and trace is not None and not trace.ends_at_relu:
        common = dict(common, fake_relu="none")   # a conv, BatchNorm or linear layer after the last ReLU
    if optimizer == AUTO:
        relus_tail = trace.relus_after_last_maxpool if trace is not None else 0
        sizes = (trace.input_values, trace.cut_values) if trace is not None else (0, 0)
        optimizer = auto_optimizer(relus_tail, advanced, history_bytes, *sizes)
        if optimizer == "adam" and trace is not None:
            extra = auto_adam_defaults(len(trace.relu_calls), advanced, common["lr"], *sizes, relus_tail,
                                       trace.stride, trace.ends_at_maxpool, trace.batchnorm_calls > 0)
            fake_relu = extra.pop("fake_relu", common["fake_relu"])
            common = dict(common, lr=extra.pop("lr", common["lr"]),
                          fake_relu=fake_relu if common["fake_relu"] == AUTO else common["fake_relu"])
            advanced = {**extra, **advanced}
    return make_settings(optimizer=optimizer, **common, **advanced)


def _optimize(model: nn.Module, split: SplitNetwork, modular: torch.fx.GraphModule | None, settings: Settings,
              slopes: dict, seeds: torch.Tensor, **run: Any) -> IRISet:
    """Run the optimiser on the front (``modular``, the traced front with functional ReLUs as modules, when
    not None; with ``settings.fold_bn`` the private copy of ``fold.private_front``: BatchNorm folded, dead
    convolution taps cut, a spreading pool folded into the next linear layer) with the surrogate ReLU
    ``slopes``; ``run``: the options of :func:`optimize_iris` that ``generate_iris`` passes through."""
    # the caller holds frozen(model), so the traced front can run directly (split.front would re-enter it)
    graph = modular if modular is not None else split.front_graph
    folded, changes = private_front(graph if settings.fold_bn else None, seeds[:1].to(run["device"]))
    # copies keep the model's module names (and add the ReLU modules of ``modular``)
    front = folded if folded is not None else modular if modular is not None else model
    call = folded if folded is not None else graph if graph is not None else split.front
    with straight_through_relu(front, slopes) as reset:
        def front_fn(x: torch.Tensor) -> torch.Tensor:
            reset()
            return call(x)

        iris = sharded.optimize(optimize_iris, front_fn, seeds, model=model, settings=settings, **run)
    iris.stats.update(changes)
    return iris
