"""The command-line interface: ``similarity-plugins list | layers | compare | train | iris | demo``.

MODEL specs: ``torchvision:NAME``, ``timm:NAME`` (keyword arguments after ``?``, e.g.
``timm:vit_tiny_patch16_224?img_size=32&patch_size=4``), ``python:module:callable`` or ``small-cnn``,
each optionally followed by ``@weights.pt`` (loaded with ``torch.load(weights_only=True)``).
DATA specs: ``digits`` (built in), ``cifar10:ROOT``, ``folder:ROOT`` (ImageFolder with train/ and test/).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from typing import Any, Sequence


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_options(items: Sequence[str]) -> dict:
    """``["epochs=5", "stitch-dm.lr=0.01"]`` -> ``{"epochs": 5, "stitch-dm": {"lr": 0.01}}``.

    Values are read as JSON when they parse (numbers, true/false, lists), else kept as strings.
    """
    options: dict = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"error: --option expects KEY=VALUE (or METRIC.KEY=VALUE), got {item!r}")
        key, value = item.split("=", 1)
        metric, dot, name = key.rpartition(".")
        if dot and metric:
            options.setdefault(metric, {})[name] = _parse_value(value)
        else:
            options[key] = _parse_value(value)
    return options


def parse_layer(text: str) -> "str | tuple[str, str]":
    """``layer1`` -> ``"layer1"``; ``layer1:layer2`` or ``layer1->layer2`` -> ``("layer1", "layer2")``."""
    for sep in ("->", ":"):
        if sep in text:
            a, b = text.split(sep, 1)
            return (a.strip(), b.strip())
    return text


def _subset(dataset: Any, limit: int | None) -> Any:
    if dataset is None or not limit or limit >= len(dataset):
        return dataset
    from torch.utils.data import Subset

    return Subset(dataset, range(int(limit)))


def _load_data(spec: str, max_train: int | None = None, max_test: int | None = None):
    from .core.data import Data
    from .datasets import parse_data_spec

    data = parse_data_spec(spec)
    return Data(train=_subset(data.train, max_train), test=_subset(data.test, max_test))


def _load_model(spec: str, num_classes: int | None, in_channels: int | None = None, data: Any = None,
                seed: int | None = None):
    """Build MODEL (initial weights from ``seed`` if given); for ``small-cnn`` the input channels and classes
    default to the data's."""
    from .models import build_model

    if data is not None:
        sample_split = data.train if data.train is not None else data.test
        if num_classes is None:
            num_classes = _num_classes(sample_split)
        if in_channels is None and spec.split("@", 1)[0].split("?", 1)[0] == "small-cnn" and sample_split is not None:
            in_channels = int(sample_split[0][0].shape[0])
    return build_model(spec, num_classes=num_classes, in_channels=in_channels, seed=seed)


def _apply_variant(name: str, dataset: Any, seed: int, **kw: Any) -> Any:
    """Wrap ``dataset`` in the variant ``name``, passing ``seed`` when the variant takes one."""
    from .datasets import make_variant
    from .datasets.variants import VARIANTS

    cls = VARIANTS.get(name.strip().lower().replace("_", "-"))
    if cls is not None and "seed" in inspect.signature(cls).parameters:
        kw["seed"] = seed
    return make_variant(name, dataset, **kw)


def _num_classes(dataset: Any) -> int | None:
    from torch.utils.data import Subset

    from .datasets.tensors import num_classes_of

    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return num_classes_of(dataset) if dataset is not None else None


# ------------------------------------------------------------------------------------------ commands


def cmd_list(args: argparse.Namespace) -> int:
    from .core.manager import get_plugin_manager

    pm = get_plugin_manager()
    rows = [pm.info[n] for n in sorted(pm.info)]
    if args.json:
        print(json.dumps([{"name": r.name, "package": r.package, "description": r.description, "error": r.error} for r in rows], indent=2))
        return 0
    width = max(len(r.name) for r in rows)
    pwidth = max(len(r.package) for r in rows)
    for r in rows:
        text = f"BROKEN: {r.error}" if r.error else r.description
        print(f"{r.name.ljust(width)}  {r.package.ljust(pwidth)}  {text}")
    return 0


def cmd_layers(args: argparse.Namespace) -> int:
    from .core.networks import layers

    model = _load_model(args.model, args.num_classes, args.in_channels)
    for name in layers(model):
        print(name)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from . import compare

    options = parse_options(args.option or [])
    if args.epochs is not None:
        options["epochs"] = args.epochs
    data = _load_data(args.data, args.max_train, args.max_test)
    if args.variant:
        from .core.data import Data

        variant_options = parse_options(args.variant_option or [])
        data = Data(train=None if data.train is None else _apply_variant(args.variant, data.train, args.seed + 3, **variant_options),
                    test=None if data.test is None else _apply_variant(args.variant, data.test, args.seed + 4, **variant_options))
    front = _load_model(args.front, args.num_classes, args.in_channels, data)
    end = _load_model(args.end, args.num_classes, args.in_channels, data)
    layer_list = [parse_layer(text) for text in args.layer]
    start = time.perf_counter()
    if args.excess_agreement:
        return _excess(args, front, end, layer_list, data, options)
    report = compare(front, end, layer_list if len(layer_list) > 1 else layer_list[0], data, args.metrics,
                     seed=args.seed, device=args.device, options=options, progress=not args.no_progress)
    print(report)
    print(f"\n{len(report)} results in {time.perf_counter() - start:.1f} s")
    if args.out:
        report.to_json(args.out)
        print(f"wrote {args.out}")
    if args.csv:
        report.to_csv(args.csv)
        print(f"wrote {args.csv}")
    return 0 if all(r.error is None for r in report) else 1


def _excess(args: argparse.Namespace, front: Any, end: Any, layer_list: list, data: Any, options: dict) -> int:
    import csv

    from .core.registry import select_metrics
    from .experiments import excess_agreement, format_excess

    metrics = select_metrics(args.metrics or "stitch-slm,iri-slm")
    start = time.perf_counter()
    rows = excess_agreement(front, end, layer_list, data, metrics, strength=args.cue_strength, seed=args.seed,
                            options=options, progress=not args.no_progress)
    print(format_excess(rows))
    print(f"\nexcess agreement = agreement with the end model on test data carrying the unseen cue minus "
          f"the same without it ({time.perf_counter() - start:.1f} s)")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"experiment": "excess-agreement", "cue_strength": args.cue_strength,
                       "results": [r.to_dict() for r in rows]}, fh, indent=2)
        print(f"wrote {args.out}")
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0].to_dict()))
            writer.writeheader()
            writer.writerows(r.to_dict() for r in rows)
        print(f"wrote {args.csv}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .training import evaluate_accuracy, save_weights, train_classifier

    data = _load_data(args.data, args.max_train)
    model = _load_model(args.model, args.num_classes, args.in_channels, data, seed=args.seed)
    variant_options = parse_options(args.variant_option or [])
    train_set, tests = data.train, {"clean": data.test}
    if args.variant:
        train_set = _apply_variant(args.variant, data.train, args.seed, **variant_options)
        test_options = {k: v for k, v in variant_options.items() if k not in ("swap_fraction", "fraction")}
        tests[args.variant] = _apply_variant(args.variant, data.test, args.seed + 1, **test_options)
        if args.variant == "pixel-shortcut":
            tests["shortcut-removed"] = _apply_variant("shortcut-removed", tests[args.variant], 0)
            tests["shortcut-randomised"] = _apply_variant("shortcut-randomised", tests[args.variant], args.seed + 2)
    small = args.model.startswith("small-cnn")
    epochs = args.epochs or (8 if small else 30)
    lr = args.lr or (3e-3 if small else 1e-3)
    adversarial = {"eps": args.eps} if args.adversarial else None
    result = train_classifier(model, train_set, epochs=epochs, lr=lr, batch_size=args.batch_size, seed=args.seed,
                              device=args.device, adversarial=adversarial, weight_decay=5e-4,
                              progress=not args.no_progress)
    print(f"trained {args.model} for {epochs} epochs in {result['seconds']:.1f} s "
          f"(final loss {result['final_loss']:.4f}, train accuracy {result['final_train_accuracy']:.4f})")
    for name, dataset in tests.items():
        print(f"test accuracy on {name:>20}: {evaluate_accuracy(model, dataset, device=args.device):.4f}")
    save_weights(model, args.out)
    print(f"wrote {args.out}")
    return 0


def cmd_iris(args: argparse.Namespace) -> int:
    from .iri import generate_iris
    from .iri.files import save_iris

    data = _load_data(args.data)
    split = data.split(args.split)
    model = _load_model(args.model, args.num_classes, args.in_channels, data)
    if args.device:
        model = model.to(args.device)
    from .core.data import load_all

    seeds, labels = load_all(_subset(split, args.max_seeds))
    iris = generate_iris(model, args.layer, seeds.to(args.device or "cpu"), steps=args.steps, tol=args.tol,
                         optimizer=args.optimizer, lr=args.lr, init=args.init, batch_size=args.batch_size,
                         backend=args.backend, seed=args.seed, progress=not args.no_progress,
                         cache_dir=args.cache_dir, checkpoint_every=args.checkpoint_every)
    summary = dict(iris.summary)
    print(f"{len(iris)} IRIs of {args.model} at {args.layer}: median relative error {summary['median_error']:.4g}, "
          f"95th percentile {summary['p95_error']:.4g}, converged {summary['converged_fraction']:.1%} "
          f"(tol {args.tol:g}), mean RMS distance from seed {summary['mean_seed_distance']:.4g}")
    save_iris(iris, args.out, labels=labels, seeds=seeds)
    print(f"wrote {args.out}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(out_dir=args.out, quick=args.quick, seed=args.seed, progress=not args.no_progress)
    return 0


# ------------------------------------------------------------------------------------------ parser


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``similarity-plugins`` command."""
    parser = argparse.ArgumentParser(
        prog="similarity-plugins",
        description="Do two trained networks compute the same function? CKA, model stitching and "
        "invariance-aware stitching side by side.",
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the registered metrics and the package each comes from")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    def model_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--num-classes", type=int, default=None, help="classes of the model's head")
        p.add_argument("--in-channels", type=int, default=None, help="input channels (e.g. 1 for digits)")

    p = sub.add_parser("layers", help="list a model's stitchable layers in forward order")
    p.add_argument("model", help="MODEL spec, e.g. torchvision:resnet18")
    model_args(p)
    p.set_defaults(func=cmd_layers)

    p = sub.add_parser("compare", help="compare two models at one or more layers")
    p.add_argument("--front", required=True, help="MODEL spec of network A (the front)")
    p.add_argument("--end", required=True, help="MODEL spec of network B (the end)")
    p.add_argument("--layer", required=True, action="append",
                   help="layer name, or FRONT:END pair; repeat for a sweep")
    p.add_argument("--metrics", default=None, help="comma-separated names or wildcards (default: all)")
    p.add_argument("--data", required=True, help="DATA spec: digits, cifar10:ROOT, folder:ROOT")
    p.add_argument("--out", default=None, help="write the report as JSON")
    p.add_argument("--csv", default=None, help="write the report as CSV")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: the front's device)")
    p.add_argument("--epochs", type=int, default=None, help="stitch training epochs (default 30)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="a metric option (METRIC.KEY=VALUE for one metric); repeatable")
    p.add_argument("--max-train", type=int, default=None, help="use the first N training samples")
    p.add_argument("--max-test", type=int, default=None, help="use the first N test samples")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument("--excess-agreement", action="store_true",
                   help="run the unseen-cue experiment instead: train the stitch on data with a label-coded cue "
                        "neither donor saw, report agreement with the end model with and without the cue "
                        "(metrics default to stitch-slm,iri-slm)")
    p.add_argument("--cue-strength", type=float, default=0.5, help="intensity of the unseen cue (0, 1]")
    p.add_argument("--variant", default=None,
                   help="compare on a variant of both splits (e.g. pixel-shortcut: every image carries its label's mark)")
    p.add_argument("--variant-option", action="append", metavar="KEY=VALUE", help="variant keyword argument")
    model_args(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("train", help="train a donor model (small CNN on digits; ResNet/VGG/ViT on CIFAR-10)")
    p.add_argument("--model", required=True, help="MODEL spec, e.g. small-cnn or torchvision:resnet18")
    p.add_argument("--data", required=True, help="DATA spec")
    p.add_argument("--variant", default=None, help="train on a variant: pixel-shortcut, unseen-cue, ...")
    p.add_argument("--variant-option", action="append", metavar="KEY=VALUE", help="variant keyword argument")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--adversarial", action="store_true", help="PGD (L-inf) adversarial training")
    p.add_argument("--eps", type=float, default=0.1, help="PGD radius in pixel units ([0,1] inputs)")
    p.add_argument("--device", default=None)
    p.add_argument("--out", required=True, help="where to save the weights (.pt state dict)")
    p.add_argument("--max-train", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    model_args(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("iris", help="generate identically represented inputs (IRIs) for a model at a layer")
    p.add_argument("--model", required=True, help="MODEL spec")
    p.add_argument("--layer", required=True)
    p.add_argument("--data", required=True, help="DATA spec (its train split seeds the IRIs)")
    p.add_argument("--split", default="train", choices=["train", "test"])
    p.add_argument("--max-seeds", type=int, default=None, help="use the first N samples as seeds")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--tol", type=float, default=1e-2)
    p.add_argument("--optimizer", default="adam", choices=["adam", "normgrad", "lbfgs"])
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--init", default="noise", choices=["noise", "shuffle"])
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--backend", default="auto", choices=["auto", "numpy", "torch", "cupy"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="with --cache-dir: save the optimiser state every N batch steps; a rerun resumes from it")
    p.add_argument("--out", required=True, help="output file: .npz or .safetensors")
    p.add_argument("--no-progress", action="store_true")
    model_args(p)
    p.set_defaults(func=cmd_iris)

    p = sub.add_parser("demo", help="the paper's central claim on built-in digits, in minutes")
    p.add_argument("--out", default="similarity-demo", help="output folder (report.json, report.csv, similarity.png)")
    p.add_argument("--quick", action="store_true", help="a smaller run (under 90 s on 2 cores)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``similarity-plugins`` console script. Returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError, KeyError, RuntimeError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
