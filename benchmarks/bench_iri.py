"""IRI generation at deep layers: ``generate_iris`` (defaults) vs the best plain loop, paired per case.

Run: ``python -m pytest benchmarks/bench_iri.py --benchmark-only -s`` (one pair per architecture and
layer, each pair in its own benchmark ``group``; ``-k resnet18-layer4`` for one pair).

Cases: torchvision ``resnet18`` (``layer2``, ``layer3``, ``layer4``), ``vgg16_bn`` (``features.13``,
``features.33``, ``features.43``: after its 2nd, 4th and 5th max-pool) and ``resnet50`` (``layer2``: a wide
strided cut, where nothing converges), 10 classes, 3x32x32, trained ``IRI_BENCH_TRAIN_EPOCHS``
(2) epochs of Adam on scikit-learn digits (grey replicated to 3 channels, upsampled to 32x32; trained
weights are cached in ``IRI_BENCH_DONORS``, default ``~/.cache/iri_depth_donors``); and the library's
SmallCNN (width 32, 5 epochs on 1x32x32 digits) at ``block3``. Seeds: the last ``IRI_BENCH_SEEDS`` (16)
digits; budget ``IRI_BENCH_STEPS`` (1,000), tol 1e-2.

``IRI_BENCH_DATA=patches`` trains the torchvision donors on natural-image data instead, with no download: 2,000
random 32x32 crops of scikit-learn's two sample photographs, 10 classes (photograph x vertical strip; a
ResNet-18 reaches 50% training accuracy in 2 epochs, about what a few epochs of CIFAR-10 give), and takes
the seeds from its last crops. Its donors are cached under their own names (``resnet18_patches_e2.pt``).
SmallCNN stays on digits (1 channel) either way.

- ``plain``: one batch, ``torch.optim.Adam`` on the whole batch, cosine over the budget, box projection,
  true ReLU gradients, no per-sample stop, for each lr in ``PLAIN_LRS``; the best lr (fewest steps to a
  median error of 1e-2, else the lowest final median) is the reference. It runs first and leaves its
  figures in ``_PLAIN`` for the paired ``ours`` case.
- ``ours``: ``generate_iris`` with ``optimizer=IRI_BENCH_OPTIMIZER`` ("auto", the library default: L-BFGS
  with leaky ReLU gradients and folded BatchNorm at ResNet ``layer3`` / ``layer4``, Adam with heavy momentum
  and a halved step size at each restart at ``layer2``, Adam at the max-pool cuts; "lbfgs" or "adam" to force
  one) and otherwise its defaults, ``batch_size`` = seeds.

``benchmark.extra_info``: steps per sample to median 1e-2 (work: one sample's forward+backward), the wall
seconds to it, converged fraction, median / p95 error, mean RMS seed distance; ``ours`` also has
``work_ratio`` and ``wall_ratio`` (plain's figure / ours; when plain never reaches 1e-2, its whole budget
counts and ``plain_reached`` is False).
"""

from __future__ import annotations

import math
import os
import time
from functools import lru_cache
from typing import Any

import pytest
import torch
from torch import nn

from similarity_plugins.iri import generate_iris
from similarity_plugins.iri.settings import Settings
from similarity_plugins.iri.state import initial_inputs
from similarity_plugins.networks.model_state import frozen
from similarity_plugins.networks.split import SplitNetwork
from tests.helpers.iri import fit_adam

SEEDS = int(os.environ.get("IRI_BENCH_SEEDS", "16"))
STEPS = int(os.environ.get("IRI_BENCH_STEPS", "1000"))
TRAIN_EPOCHS = int(os.environ.get("IRI_BENCH_TRAIN_EPOCHS", "2"))
DATA = os.environ.get("IRI_BENCH_DATA", "digits")   # donors' data and seeds: "digits" or "patches"
DONORS = os.environ.get("IRI_BENCH_DONORS", os.path.join(os.path.expanduser("~"), ".cache", "iri_depth_donors"))
PLAIN_LRS = (0.05, 0.1, 0.2)
OURS = os.environ.get("IRI_BENCH_OPTIMIZER", "auto")   # the optimiser ``ours`` runs (the rest: defaults)
CASES = [("resnet18", "layer2"), ("resnet18", "layer3"), ("resnet18", "layer4"), ("vgg16_bn", "features.13"),
         ("vgg16_bn", "features.33"), ("vgg16_bn", "features.43"), ("resnet50", "layer2"), ("small_cnn", "block3")]
_PLAIN: dict[str, dict[str, Any]] = {}


@lru_cache(maxsize=1)
def _digits_rgb32() -> tuple[torch.Tensor, torch.Tensor]:
    from similarity_plugins.datasets import digits
    from similarity_plugins.networks.data import load_all

    x, y = load_all(digits(None, size=32))
    return x.repeat(1, 3, 1, 1).contiguous(), y


@lru_cache(maxsize=1)
def _patches_rgb32(per_class: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    """Natural-image data with no download: random 32x32 RGB crops (x in [0, 1]) of scikit-learn's two sample
    photographs (``china.jpg``, ``flower.jpg``), each cut into 5 vertical strips; the class (0-9) is the
    photograph and strip a crop lies in. ``per_class`` crops per class, randomly flipped left-right, class-
    interleaved so that the last crops (the seeds) cover every class; fixed generator."""
    from sklearn.datasets import load_sample_images

    g = torch.Generator().manual_seed(0)
    images = [torch.tensor(image).permute(2, 0, 1).float() / 255.0 for image in load_sample_images().images]
    xs, ys = [], []
    for _ in range(per_class):
        for k, img in enumerate(images):
            height, width = img.shape[1:]
            strip = width // 5
            for s in range(5):
                top = int(torch.randint(0, height - 32, (1,), generator=g))
                left = s * strip + int(torch.randint(0, strip - 32, (1,), generator=g))
                crop = img[:, top:top + 32, left:left + 32]
                xs.append(crop.flip(2) if bool(torch.rand(1, generator=g) < 0.5) else crop)
                ys.append(k * 5 + s)
    return torch.stack(xs).contiguous(), torch.tensor(ys)


def donor_data() -> tuple[torch.Tensor, torch.Tensor]:
    """(x (N, 3, 32, 32) in [0, 1], y (N,)) of ``IRI_BENCH_DATA``: the donors train on them, the last
    ``IRI_BENCH_SEEDS`` are the seeds."""
    if DATA == "digits":
        return _digits_rgb32()
    if DATA == "patches":
        return _patches_rgb32()
    raise ValueError(f"IRI_BENCH_DATA={DATA!r}: use 'digits' or 'patches'")


# VGG-16-BN's 25,088 x 4,096 classifier collapses under Adam at lr 1e-3 (chance accuracy after 2 epochs:
# its activations no longer depend on the input), so it (and every VGG) trains at 1e-4.
TRAIN_LR = {"resnet18": 1e-3, "vgg16_bn": 1e-4}


def train_lr(arch: str) -> float:
    """Adam's lr for training the donor ``arch``: ``TRAIN_LR``, else 1e-4 for VGGs and 1e-3 otherwise."""
    return TRAIN_LR.get(arch, 1e-4 if arch.startswith("vgg") else 1e-3)


@lru_cache(maxsize=4)
def torchvision_digits(arch: str, epochs: int = TRAIN_EPOCHS, folder: str = DONORS) -> nn.Module:
    """torchvision ``arch`` (10 classes) trained ``epochs`` epochs of Adam (lr :func:`train_lr`, batch 64) on
    3x32x32 :func:`donor_data` (digits unless ``IRI_BENCH_DATA`` says otherwise; the name is historical); the
    weights are cached in ``folder``."""
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(num_classes=10)
    lr = train_lr(arch)
    path = os.path.join(folder, f"{arch}_{DATA}_e{epochs}" + ("" if lr == 1e-3 else f"_lr{lr:g}") + ".pt")
    if os.path.exists(path):
        model.load_state_dict(torch.load(path))
        return model.eval()
    x, y = donor_data()
    fit_adam(model, x, y, epochs, lr=lr)
    os.makedirs(folder, exist_ok=True)
    torch.save(model.state_dict(), path)
    return model.eval()


def resnet18_digits() -> nn.Module:
    """ResNet-18 trained ``TRAIN_EPOCHS`` epochs on 3-channel 32x32 :func:`donor_data` (kept for older scripts)."""
    return torchvision_digits("resnet18")


@lru_cache(maxsize=1)
def small_cnn_digits() -> nn.Module:
    """The library's SmallCNN (4 conv blocks with BN and max-pool) trained for 5 epochs on digits at 32x32."""
    from similarity_plugins.apps.training import train_classifier
    from similarity_plugins.apps.zoo import SmallCNN
    from similarity_plugins.datasets import digits

    torch.manual_seed(0)
    model = SmallCNN(width=32)
    train_classifier(model, digits("train"), epochs=5, progress="never")
    return model.eval()


def case_inputs(arch: str, n: int = SEEDS) -> tuple[nn.Module, torch.Tensor]:
    """(model, seeds (n, C, 32, 32) in [0, 1]) for an architecture name."""
    if arch == "small_cnn":
        from similarity_plugins.datasets import digits
        from similarity_plugins.networks.data import load_all

        return small_cnn_digits(), load_all(digits("train"))[0][:n].contiguous()
    return torchvision_digits(arch), donor_data()[0][-n:].clone()


def plain_loop(front, seeds: torch.Tensor, steps: int, lr: float, stop_at_tol: bool = False) -> dict[str, Any]:
    """The plain loop (see the module docstring): work per sample and seconds to median 1e-2, final figures.

    ``stop_at_tol``: stop once the median is <= 1e-2 (the trajectory up to there is the same; the final
    figures are then those at that step), to save time in studies."""
    start = time.perf_counter()
    settings = Settings(init="noise", seed=0)   # the starts generate_iris uses
    with torch.no_grad():
        target = front(seeds).flatten(1)
    tnorm = target.norm(dim=1)
    x = initial_inputs(seeds, range(len(seeds)), settings, None).requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    reach, reach_s = math.inf, math.inf
    for step in range(steps + 1):
        err = (front(x).flatten(1) - target).norm(dim=1) / tnorm
        if math.isinf(reach) and float(err.detach().median()) <= 1e-2:
            reach, reach_s = step + 1, time.perf_counter() - start
            if stop_at_tol:
                break
        if step == steps:
            break
        opt.zero_grad()
        err.sum().backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            x.clamp_(0.0, 1.0)
    e = err.detach().double()
    dist = (x.detach() - seeds).flatten(1).pow(2).mean(1).sqrt()
    return {"lr": lr, "steps_to_1e-2": reach, "seconds_to_1e-2": reach_s, "median": float(e.median()),
            "p95": float(e.quantile(0.95)), "converged": float((e <= 1e-2).double().mean()),
            "seed_distance": float(dist.mean()), "total_steps": step + 1, "total_s": time.perf_counter() - start}


def warm_up(front, seeds: torch.Tensor, passes: int = 3) -> None:
    """``passes`` untimed forward+backward passes of ``front`` on ``seeds`` (N, C, H, W): the first passes in
    a process pay one-time costs (thread pool, kernel selection, allocator) that once inflated the first plain
    loop's time 2x, and with it the wall ratio of a process's first case."""
    x = seeds.detach().clone().requires_grad_(True)
    for _ in range(passes):
        torch.autograd.grad(front(x).sum(), x)   # gradients w.r.t. the input only: nothing accumulates


def best_plain(front, seeds: torch.Tensor, steps: int, lrs=PLAIN_LRS, stop_at_tol: bool = False) -> dict[str, Any]:
    """The plain loop at every lr of ``lrs`` (after :func:`warm_up`); the best (fewest steps to 1e-2, then
    lowest median) with all."""
    warm_up(front, seeds)
    runs = [plain_loop(front, seeds, steps, lr, stop_at_tol) for lr in lrs]
    best = dict(min(runs, key=lambda r: (r["steps_to_1e-2"], r["median"])))
    best["all"] = [{k: v for k, v in r.items()} for r in runs]
    return best


def ours(model: nn.Module, layer: str, seeds: torch.Tensor, steps: int, **options: Any) -> dict[str, Any]:
    """``generate_iris`` (defaults unless ``options``); figures as in :func:`plain_loop`."""
    curve: list[tuple[int, float, float]] = []
    iris = generate_iris(model, layer, seeds, steps=steps, tol=1e-2, batch_size=len(seeds), progress="never",
                         callback=lambda i: curve.append((i["sample_steps"], i["median_error"], i["elapsed_s"])),
                         **options)
    work, secs = next(((w, t) for w, m, t in curve if m <= 1e-2), (math.inf, math.inf))
    s = iris.summary
    return {"steps_to_1e-2": work / len(seeds), "seconds_to_1e-2": secs, "median": s["median_error"],
            "p95": s["p95_error"], "converged": s["converged_fraction"], "seed_distance": s["mean_seed_distance"],
            "total_steps": iris.stats["sample_steps"] / len(seeds), "total_s": iris.stats["wall_s"],
            "optimizer": iris.settings["optimizer"]}


def ratios(plain: dict[str, Any], mine: dict[str, Any]) -> dict[str, Any]:
    """Work and wall ratios plain / ours to median 1e-2 (plain's whole budget when it never gets there)."""
    reached = math.isfinite(plain["steps_to_1e-2"])
    work = plain["steps_to_1e-2"] if reached else plain["total_steps"]
    secs = plain["seconds_to_1e-2"] if reached else plain["total_s"]
    return {"plain_reached": reached, "work_ratio": work / mine["steps_to_1e-2"],
            "wall_ratio": secs / mine["seconds_to_1e-2"]}


@pytest.mark.parametrize("arch,layer,which", [(a, layer, w) for a, layer in CASES for w in ("plain", "ours")],
                         ids=[f"{a}-{layer}-{w}" for a, layer in CASES for w in ("plain", "ours")])
def test_iri_depth(benchmark, arch, layer, which):
    benchmark.group = f"iri-{arch}-{layer}"
    model, seeds = case_inputs(arch)
    key = f"{arch}/{layer}"
    out: dict[str, Any] = {}
    if which == "plain":
        split = SplitNetwork(model, layer)

        def run() -> None:
            with frozen(model):
                out.update(best_plain(split.front, seeds, STEPS))
    else:
        def run() -> None:
            out.update(ours(model, layer, seeds, STEPS, optimizer=OURS))

    benchmark.pedantic(run, rounds=1, iterations=1)
    info = {"case": key, "seeds": len(seeds), "budget": STEPS, **{k: v for k, v in out.items() if k != "all"}}
    if which == "plain":
        info["per_lr"] = out["all"]
        _PLAIN[key] = out
    elif key in _PLAIN:
        info.update(ratios(_PLAIN[key], out))
        info["plain_seed_distance"] = _PLAIN[key]["seed_distance"]
    benchmark.extra_info.update(info)
    print(f"\n{which} {key}: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in info.items() if k != "per_lr"))
    if which == "ours" and STEPS >= 1000:
        if key not in _PLAIN or info["plain_reached"]:   # where the plain loop converges, so must we
            assert out["median"] <= 1e-2 + 1e-12
        else:   # where nobody converges (VGG-16-BN features.33, ResNet-50 layer2): no worse than the plain loop
            assert out["median"] <= _PLAIN[key]["median"]
