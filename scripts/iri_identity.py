"""Bit-identity harness for the IRI optimiser: hashes of the IRIs that ``generate_iris`` returns on the default
path (``optimizer="auto"``) for the demo's CNN and deep ResNet / VGG cuts, one case per structure ``auto``
recognises.

Run it on two checkouts on the same machine and compare:

    cd OLD && OMP_NUM_THREADS=1 PYTHONPATH=. python /path/to/scripts/iri_identity.py --out old.json
    cd NEW && OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/iri_identity.py --out new.json --compare old.json

Exact bits depend on the CPU and the torch build, so each file records both (``machine``); ``--compare``
refuses files from another machine. On a checkout whose ``generate_iris`` takes ``tuning=``, every case is
run a second time with ``tuning={"preset": <the preset auto chose>}`` and must give the same hash.
Models are built with seeded random weights (BatchNorm statistics at their defaults): the question is
whether the arithmetic changed, not whether the IRIs are good. ``--quick`` runs the small cases only.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import platform
import sys
from typing import Any, Callable

import torch
from torch import nn

from similarity_plugins.iri import generate_iris


def machine() -> dict[str, str]:
    """What the exact bits depend on: torch build, CPU model and flags, thread count."""
    flags = model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags") and not flags:
                    flags = hashlib.sha256(line.split(":", 1)[1].strip().encode()).hexdigest()[:16]
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"torch": torch.__version__, "cpu": model or platform.processor(), "cpu_flags": flags,
            "threads": str(torch.get_num_threads()), "python": platform.python_version()}


def _digits(n: int) -> torch.Tensor:
    from similarity_plugins.datasets import digits_data

    x = digits_data(size=32, seed=0).train
    from similarity_plugins.networks.data import load_all

    return load_all(x)[0][:n].float()


def _images(n: int, size: int = 32) -> torch.Tensor:
    """Smooth random RGB images in [0, 1] (upsampled 8x8 noise), seeded."""
    g = torch.Generator().manual_seed(1)
    low = torch.rand(n, 3, 8, 8, generator=g)
    return nn.functional.interpolate(low, size=(size, size), mode="bilinear", align_corners=False).clamp(0, 1)


def _small_cnn() -> nn.Module:
    from similarity_plugins.apps.zoo import SmallCNN

    torch.manual_seed(0)
    return SmallCNN(in_channels=1, num_classes=10, width=16).eval()


def _tv(name: str, cifar_stem: bool = False) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None, num_classes=10)
        return model.eval()
    return build


class _SmoothNet(nn.Module):
    """A small conv net with GELU or SiLU activations (no ReLU anywhere)."""

    def __init__(self, act: type[nn.Module]) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), act(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), act(), nn.MaxPool2d(2),
                                      nn.Conv2d(32, 32, 3, padding=1), act())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


# name: (model builder, layer, seeds builder, steps, tol, batch_size, extra options for the old / new API)
CASES: dict[str, tuple] = {
    "demo-block1": (_small_cnn, "block1", lambda: _digits(6), 400, 2e-2, 4, {}),
    "demo-block2": (_small_cnn, "block2", lambda: _digits(6), 400, 2e-2, 4, {}),
    "demo-block3": (_small_cnn, "block3", lambda: _digits(6), 400, 2e-2, 4, {}),
    "demo-block4": (_small_cnn, "block4", lambda: _digits(6), 400, 2e-2, 4, {}),
    "demo-block1-config": (_small_cnn, "block1", lambda: _digits(6), 400, 2e-2, 4, {"demo": True}),
    "demo-block3-config": (_small_cnn, "block3", lambda: _digits(6), 400, 2e-2, 4, {"demo": True}),
    "resnet18-layer1": (_tv("resnet18"), "layer1", lambda: _images(4), 60, 1e-2, 3, {}),
    "resnet18-layer2": (_tv("resnet18"), "layer2", lambda: _images(4), 60, 1e-2, 3, {}),
    "resnet18-layer3": (_tv("resnet18"), "layer3", lambda: _images(4), 60, 1e-2, 3, {}),
    "resnet18-layer4": (_tv("resnet18"), "layer4", lambda: _images(4), 60, 1e-2, 3, {}),
    "resnet50-layer2": (_tv("resnet50"), "layer2", lambda: _images(2), 30, 1e-2, 2, {}),
    "resnet50-layer3": (_tv("resnet50"), "layer3", lambda: _images(2), 30, 1e-2, 2, {}),
    "vgg16_bn-features.6": (_tv("vgg16_bn"), "features.6", lambda: _images(4), 200, 1e-2, 3, {}),
    "vgg16_bn-features.23": (_tv("vgg16_bn"), "features.23", lambda: _images(4), 60, 1e-2, 3, {}),
    "vgg16_bn-features.33": (_tv("vgg16_bn"), "features.33", lambda: _images(4), 60, 1e-2, 3, {}),
    "vgg16_bn-features.43": (_tv("vgg16_bn"), "features.43", lambda: _images(4), 60, 1e-2, 3, {}),
    "vgg16-features.16": (_tv("vgg16"), "features.16", lambda: _images(4), 60, 1e-2, 3, {}),
    "vgg16-features.30": (_tv("vgg16"), "features.30", lambda: _images(4), 60, 1e-2, 3, {}),
    "vgg11-features.10": (_tv("vgg11"), "features.10", lambda: _images(4), 60, 1e-2, 3, {}),
    "gelu-features.9": (lambda: _SmoothNet(nn.GELU).eval(), "features.9", lambda: _images(4), 60, 1e-2, 3, {}),
    "resnet18-224-layer3": (_tv("resnet18"), "layer3", lambda: _images(120, 224), 3, 1e-2, 128, {}),
}
NEW_PRESETS = ("smooth",)   # presets that did not exist before: their IRIs are new, not compared
QUICK = [name for name in CASES if name.startswith(("demo", "resnet18-layer", "vgg16_bn-features.43"))]
SETTING_KEYS = ("optimizer", "lr", "cycle_steps", "cycle_mult", "cycle_decay", "beta1", "beta2", "eps", "relu_leak",
                "fold_bn", "fake_relu", "history", "armijo", "max_backtracks", "preset")


def _digest(iris: Any) -> str:
    h = hashlib.sha256()
    for t in (iris.inputs, iris.rel_error, iris.steps):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:20]


def _new_api() -> bool:
    return "tuning" in inspect.signature(generate_iris).parameters


def _float32() -> dict[str, Any]:
    """``precision="float32"`` on a checkout whose ``generate_iris`` takes it (float32 was the only precision
    before), so that the cases compare float32 arithmetic on both sides."""
    return {"precision": "float32"} if "precision" in inspect.signature(generate_iris).parameters else {}


def run_case(name: str) -> dict[str, Any]:
    """Generate the case's IRIs on the default path in float32; return its hash, settings and (new API) the
    preset check."""
    build, layer, seeds_fn, steps, tol, batch, extra = CASES[name]
    model, seeds = build(), seeds_fn()
    options: dict[str, Any] = _float32()
    if extra.get("demo"):   # the demo's own options: first cycles of 100 steps on plain Adam
        options.update({"cycle_steps": 100, "tuning": {"preset": "adam"}} if _new_api() else {"cycle_steps": 100})
    iris = generate_iris(model, layer, seeds, steps=steps, tol=tol, batch_size=batch, progress="never", **options)
    row = {"hash": _digest(iris), "median_error": float(iris.summary["median_error"]),
           "settings": {k: iris.settings[k] for k in SETTING_KEYS if k in iris.settings}}
    preset = iris.settings.get("preset")
    if preset is not None and not extra.get("demo"):
        again = generate_iris(model, layer, seeds, steps=steps, tol=tol, batch_size=batch, progress="never",
                              tuning={"preset": preset}, **_float32())
        row["by_name_hash"] = _digest(again)
    return row


def compare(new: dict, old: dict) -> int:
    """Print one line per case; return the number of mismatches (cases missing on either side don't count)."""
    if new["machine"] != old["machine"]:
        print(f"different machines, no comparison: {new['machine']} vs {old['machine']}")
        return 0
    bad = 0
    for name, row in new["cases"].items():
        before = old["cases"].get(name) if row["settings"].get("preset") not in NEW_PRESETS else None
        same = before is not None and before["hash"] == row["hash"]
        by_name = row.get("by_name_hash")
        named_ok = by_name is None or by_name == row["hash"]
        bad += (before is not None and not same) + (not named_ok)
        print(f"{name:24s} preset={row['settings'].get('preset', '-'):22s} old==new: "
              f"{'-' if before is None else same}  by-name==auto: {'-' if by_name is None else named_ok}")
    return bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--compare", default=None, help="a file written by this script on the other checkout")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--cases", nargs="*", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    names = args.cases or (QUICK if args.quick else list(CASES))
    result = {"machine": machine(), "cases": {}}
    for name in names:
        result["cases"][name] = run_case(name)
        print(name, result["cases"][name], flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    if args.compare:
        with open(args.compare) as f:
            return 1 if compare(result, json.load(f)) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
