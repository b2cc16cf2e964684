"""``generate_iris(model, layer, inputs, ...)``: IRIs for a model cut at a named layer, cached on disk."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import os
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from ..networks.model_state import frozen, model_device, model_dtype
from ..networks.split import SplitNetwork
from ..utils.progress import Progress, check_progress
from ..utils.text import did_you_mean
from . import sharded, store
from .backends import BackendName, check_compile
from .front import private_front
from .optimize import optimize_iris
from .precision import (
    Precision,
    check_precision,
    choose_precision,
    laid_out,
    memory_format,
)
from .presets import PRESETS, Structure, choose_preset
from .relu import FrontTrace, front_tensors, relu_modules, straight_through_relu, surrogate_slopes, trace_front
from .result import IRISet
from .settings import AUTO, LBFGS_ONLY, TUNING, IriInit, OptimizerChoice, RunOptions, Settings, make_settings
from .state import check_seeds

RUN_OPTIONS = ("callback", "profile")


def _as_tensor(inputs: Any) -> torch.Tensor:
    if isinstance(inputs, torch.Tensor):
        return inputs
    from ..networks.data import load_all

    try:
        x, _ = load_all(inputs)
    except Exception as exc:  # noqa: BLE001
        raise TypeError(f"inputs must be a tensor (N, ...) or a dataset/loader of (x, y) pairs; "
                        f"got {type(inputs).__name__} ({exc})") from exc
    return x


def generate_iris(model: nn.Module, layer: str, inputs: torch.Tensor | Dataset, *, steps: int = 1000,
                  tol: float = 0.01, optimizer: OptimizerChoice = "auto",
                  init: IriInit = "noise", cycle_steps: int | None = None,
                  tuning: dict[str, Any] | None = None, batch_size: int = 128,
                  backend: BackendName = "auto", seed: int = 0, progress: Progress = "auto",
                  cache_dir: str | os.PathLike | None = None, checkpoint_every: int | None = None,
                  compile: bool = False, precision: Precision = "auto",
                  **run_options: Any) -> IRISet:
    """IRIs of ``model`` at ``layer`` for the seed ``inputs``: ``x'`` with ``f_{<=layer}(x') ~= f_{<=layer}(x)``.

    Args:
        model: any ``nn.Module``; it is run in eval mode with gradients off for its parameters and is left
            exactly as it was (flags, parameters, buffers). Only the layers up to the cut run.
        layer: a ``named_modules()`` name.
        inputs: seeds (N, ...) float in [0, 1] (or a dataset of (x, y) pairs), on any device; the IRIs come
            back with the same shape, dtype and device.
        steps: per-sample budget of forward+backward evaluations.
        tol: target relative error ``||f(x') - f(x)|| / ||f(x)||``; a sample stops once below it.
        optimizer: ``"auto"`` (default: the preset chosen from the front's structure; [IRIs](../iris.md) has
            the table), ``"adam"`` (the Adam preset for that structure) or ``"lbfgs"``.
        init: ``"noise"`` or ``"shuffle"``: where each sample's search starts.
        cycle_steps: Adam's first restart cycle (None: the preset's; 0: one cosine over the budget).
        tuning: tuning values (``lr``, ``beta1``, ``relu_leak``, ``fold_bn``, ``fake_relu``, ``history``, ...),
            each replacing only its own value of the preset, never switching the optimiser;
            ``{"preset": NAME}`` runs that preset instead of the structural choice.
        batch_size: working-batch slots (engineering: no effect on the IRIs beyond float rounding).
        backend: ``"auto"``, ``"numpy"``, ``"torch"`` or ``"cupy"``: where the update step runs.
        seed: each sample's randomness derives from (seed, index).
        progress: a bar: ``"auto"`` (default; on a terminal), ``"always"`` or ``"never"``.
        cache_dir: load/save the finished set there, keyed by a hash of the front's weights, the layer, the
            seeds and the settings.
        checkpoint_every: with ``cache_dir``, save the full optimiser state every that many batch steps and
            resume from it after an interruption.
        compile: run the forward+backward evaluations through ``torch.compile`` (opt-in; not in the cache key).
        precision: ``"auto"`` (default), ``"float32"`` or ``"bfloat16"``. bfloat16 runs each sample's
            evaluations under bfloat16 autocast while its error is far from ``tol`` and finishes in float32, so
            convergence and the reported errors are float32 values of the front; ``"auto"`` does so where the
            device has bfloat16 matrix units (a CUDA GPU, an AMX CPU) and the front does enough work per sample
            to gain, else float32, which gives the IRIs of a float32-only run bit for bit. What ran is
            ``settings["precision"]`` (part of the cache key), with ``settings["precision_rule"]`` (why) and
            ``settings["memory_format"]`` (the layout the front ran in).
        **run_options: ``callback`` and ``profile`` of [`optimize_iris`][optimize_iris].

    Returns:
        An [`IRISet`][IRISet]: ``inputs`` (the IRIs, shaped as the seeds), ``rel_error`` (N,), ``steps`` (N,),
            ``seed_distance`` (N,), ``summary`` and ``settings`` (the preset that ran, ``settings["preset"]``,
            and every value).

    Raises:
        ValueError: an unknown layer (``LayerNotFound``), bad options or seeds outside [0, 1] (naming the fix).
        TypeError: a model that is not an ``nn.Module`` or inputs that are not seeds.
        FloatingPointError: NaN/inf gradients (naming the samples).
        RuntimeError: ``compile=True`` and torch.compile fails (naming the fix).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _check_option_names(run_options)
    progress = check_progress(progress)
    check_precision(precision)
    run_options["compile"] = check_compile(compile)
    common = dict(steps=steps, tol=tol, optimizer=optimizer, init=init, seed=seed, cycle_steps=cycle_steps,
                  tuning=tuning)
    _settings(None, common, 0.0)   # every check before any work
    if checkpoint_every is not None and cache_dir is None:
        raise ValueError("checkpoint_every needs cache_dir (the folder where checkpoints are written)")
    seeds = _as_tensor(inputs)
    check_seeds(seeds)
    if cache_dir is not None:  # the set (inputs and seeds' size, float32, twice for the temporary file) and checkpoints
        store.check_cache_dir(cache_dir, 4.0 * seeds.numel() * (2 + (4 if checkpoint_every else 0)))
    model, seeds = _working_dtype(model, seeds)
    split = SplitNetwork(model, layer)
    device = model_device(model)
    modular = None
    with frozen(model):
        trace = trace_front(model, split.front, seeds[:1].to(device))
        if trace.functional_relu_calls:   # F.relu & co. as modules, so that the rules and the surrogates see them
            modular = relu_modules(split.front_graph)
            trace = trace_front(modular, modular, seeds[:1].to(device)) if modular is not None else trace
        front = split.front_graph if split.front_graph is not None else split.front   # runs inside frozen(model)
        used, rule, grad16 = choose_precision(precision, front, seeds, device)
        settings = _settings(trace, common, _history_bytes(seeds, batch_size), used)
        slopes = surrogate_slopes(trace, settings.fake_relu, settings.relu_leak)
        targets = [call for call, slope in slopes.items() if slope == 1.0]
        key_settings = dict(settings.as_dict(), fake_relu_at=[list(t) for t in targets])
        ran = {"", *trace.modules}   # the key covers the modules' classes and settings, and the traced front's code
        modules = [(n, m) for n, m in model.named_modules() if n in ran]
        modules += [("<front>", split.front_graph)] if split.front_graph is not None else []
        key = store.fingerprint(front_tensors(model, trace), layer, seeds, key_settings, modules) if cache_dir else None
        if cache_dir is not None:
            hit = store.load_file(store.result_path(cache_dir, key))
            if sharded.agreed_hit(hit if hit is not None and hit.get("key") == key else None):
                return IRISet.from_state(hit, seeds.device)
        options = RunOptions(batch_size=batch_size, backend=backend, progress=progress, device=device,
                             checkpoint_every=checkpoint_every,
                             checkpoint_path=store.checkpoint_path(cache_dir, key) if checkpoint_every else None,
                             grad16=grad16, **run_options)
        iris = _optimize(model, split, modular, settings, slopes, seeds, options)
    iris.settings["layer"] = layer
    iris.settings["precision_rule"] = rule
    if used == "bfloat16":
        iris.settings["precision_finish"] = "bfloat16 gradient, float32 error" if grad16 else "float32"
    iris.settings["fake_relu_at"] = [f"{name}#{call}" for name, call in targets]
    iris.key = key
    if cache_dir is not None:
        sharded.save_once(store.atomic_save, iris.to_state(), store.result_path(cache_dir, key))
    return iris


def _check_option_names(run_options: dict) -> None:
    """Raise TypeError for a keyword of ``generate_iris`` it does not know, suggesting the closest of its own
    keywords and of the tuning keys (``compiled=`` -> ``compile``; ``lr=`` -> ``tuning={"lr": ...}``)."""
    unknown = sorted(set(run_options) - set(RUN_OPTIONS))
    if not unknown:
        return
    own = [name for name in inspect.signature(generate_iris).parameters if name != "run_options"]
    tuning = [k for k in unknown if k in TUNING]
    if tuning:
        raise TypeError(f"generate_iris(): {', '.join(tuning)} is a tuning value; pass tuning={{{tuning[0]!r}: ...}}")
    raise TypeError(f"generate_iris() got unknown option(s) {', '.join(unknown)}"
                    f"{did_you_mean(unknown[0], [*own, *RUN_OPTIONS, *TUNING])}; its options are "
                    f"{', '.join(own[3:])} and {', '.join(RUN_OPTIONS)}")


def _history_bytes(seeds: torch.Tensor, batch_size: int) -> float:
    """Bytes L-BFGS's curvature pairs (the lbfgs preset's history) would take for these seeds and working batch."""
    slots = min(int(batch_size), int(seeds.shape[0]))
    return 2.0 * PRESETS["lbfgs"]["history"] * seeds[0].numel() * slots * seeds.element_size()


def structure(trace: FrontTrace, history_bytes: float = 0.0) -> Structure:
    """What ``presets.choose_preset`` reads from a traced front pass (``history_bytes``: L-BFGS's memory)."""
    return Structure(relu_calls=len(trace.relu_calls), relus_after_last_maxpool=trace.relus_after_last_maxpool,
                     other_activation_calls=trace.other_activation_calls, input_values=trace.input_values,
                     output_values=trace.cut_values, stride=trace.stride, ends_at_maxpool=trace.ends_at_maxpool,
                     batchnorm=trace.batchnorm_calls > 0, history_bytes=history_bytes)


def _working_dtype(model: nn.Module, seeds: torch.Tensor) -> tuple[nn.Module, torch.Tensor]:
    """The model and seeds the optimiser runs on: a float32 or float64 model as it is, with the seeds in its dtype;
    a float16 or bfloat16 model as a float32 copy (the optimiser, its precision rules and surrogate ReLUs need at
    least float32; the caller's model is never changed)."""
    dtype = model_dtype(model)
    if dtype in (torch.float16, torch.bfloat16):
        model, dtype = copy.deepcopy(model).float(), torch.float32
    if dtype is not None and seeds.is_floating_point() and seeds.dtype != dtype:
        seeds = seeds.to(dtype)
    return model, seeds


def _settings(trace: FrontTrace | None, common: dict, history_bytes: float, precision: str = "float32") -> Settings:
    """Validated settings: the preset for the front's structure (``trace``; without one, the base preset of the
    optimiser, so that bad options fail before any work), then the caller's values."""
    optimizer = common["optimizer"]
    if trace is None:
        preset = "lbfgs" if optimizer == "lbfgs" else "adam"
        if optimizer == AUTO and common["tuning"] and isinstance(common["tuning"], dict):
            preset = common["tuning"].get("preset") or _optimizer_of_keys(common["tuning"])
        ends_at_relu = False
    else:
        preset = choose_preset(structure(trace, history_bytes), optimizer)
        ends_at_relu = trace.ends_at_relu
    return make_settings(preset=preset, ends_at_relu=ends_at_relu, precision=precision, **common)


def _optimizer_of_keys(tuning: dict) -> str:
    """The base preset whose optimiser takes the caller's tuning keys (for the checks before tracing)."""
    return "lbfgs" if any(k in LBFGS_ONLY for k in tuning) else "adam"


def _optimize(model: nn.Module, split: SplitNetwork, modular: torch.fx.GraphModule | None, settings: Settings,
              slopes: dict, seeds: torch.Tensor, options: RunOptions) -> IRISet:
    """Run the optimiser on the front (``modular``, the traced front with functional ReLUs as modules, when
    not None; with ``settings.fold_bn`` the private copy of ``front.private_front``: BatchNorm folded, dead
    convolution taps cut, a spreading pool folded into the next linear layer) with the surrogate ReLU
    ``slopes``; ``options``: how the run executes (``options.device`` is the model's device)."""
    # the caller holds frozen(model), so the traced front can run directly (split.front would re-enter it)
    graph = modular if modular is not None else split.front_graph
    folded, changes = private_front(graph if settings.fold_bn else None, seeds[:1].to(options.device))
    # copies keep the model's module names (and add the ReLU modules of ``modular``)
    front = folded if folded is not None else modular if modular is not None else model
    call = folded if folded is not None else graph if graph is not None else split.front
    low, fmt = _lowp_copy(folded if folded is not None else graph, settings.precision, options.device)
    with contextlib.ExitStack() as stack:
        reset = stack.enter_context(straight_through_relu(front, slopes))
        reset_low = stack.enter_context(straight_through_relu(low, slopes)) if low is not None else None

        def front_fn(x: torch.Tensor) -> torch.Tensor:
            reset()
            return call(x)

        def low_fn(x: torch.Tensor) -> torch.Tensor:
            reset_low()
            return low(x)

        lowp_fn = laid_out(low_fn, fmt) if low is not None else None
        iris = sharded.optimize(optimize_iris, front_fn, seeds, settings, dataclasses.replace(options, lowp_fn=lowp_fn),
                                model=model)
    iris.settings["memory_format"] = "channels_last" if low is not None else "contiguous"
    iris.stats.update(changes)
    return iris


def _lowp_copy(graph: torch.fx.GraphModule | None, precision: str, device: torch.device
               ) -> tuple[nn.Module | None, torch.memory_format]:
    """A private copy of the front (``graph``: the traced front or its folded copy) in the layout its
    bfloat16 evaluations run fastest in (``precision.memory_format``), or (None, default layout) when the run
    is float32, that layout is the default one or the front is not traced."""
    fmt = memory_format(device, precision, graph)
    if precision != "bfloat16" or graph is None or fmt == torch.contiguous_format:
        return None, torch.contiguous_format
    low = copy.deepcopy(graph).eval()
    for p in low.parameters():
        p.requires_grad_(False)
    return low.to(memory_format=fmt), fmt
