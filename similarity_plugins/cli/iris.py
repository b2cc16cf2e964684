"""The ``iris`` command: identically represented inputs of a model at a layer, written to a file."""

from __future__ import annotations

import argparse

from ..iri.precision import PRECISIONS
from ..iri.presets import RUN_DEFAULTS
from ..iri.settings import INITS, OPTIMIZERS, TUNING
from ..utils.text import did_you_mean, parse_assignments
from .arguments import add_data_args, add_model_args, add_output_args, add_renamed, add_run_args, positive_int, progress_of
from .loading import load_data, load_model, subset
from .outputs import input_files, resolve_outputs, write_outputs


def cmd_iris(args: argparse.Namespace) -> int:
    from ..iri import generate_iris

    resolve_outputs(args, ("--out", "--gallery"), input_files(args.model))   # before any work
    if not args.out.endswith((".npz", ".safetensors")):
        raise ValueError(f"--out {args.out!r}: unknown IRI file type; use a .npz or .safetensors name")
    tuning = tuning_options(args.tuning)
    data = load_data(args.data)
    split = data.split(args.split)
    model = load_model(args.model, args.num_classes, args.in_channels, data, progress=progress_of(args))
    if args.device:
        model = model.to(args.device)
    from ..networks.data import load_all

    seeds, labels = load_all(subset(split, args.max_seeds))
    iris = generate_iris(model, args.layer, seeds.to(args.device or "cpu"), steps=args.steps, tol=args.tol,
                         optimizer=args.optimizer, init=args.init, cycle_steps=args.cycle_steps,
                         tuning=tuning or None, batch_size=args.batch_size, backend=args.backend, seed=args.seed,
                         progress=progress_of(args), cache_dir=args.cache_dir,
                         checkpoint_every=args.checkpoint_every, compile=args.compile, precision=args.precision)
    from ..networks.parallel import current_world

    if not current_world().is_main:  # under torchrun every rank holds the set; rank 0 writes it
        return 0
    summary = dict(iris.summary)
    print(f"{len(iris)} IRIs of {args.model} at {args.layer} (preset {iris.settings['preset']}, "
          f"optimizer {iris.settings['optimizer']}) in {iris.settings['precision']} "
          f"({iris.settings.get('precision_rule', 'asked for')}): "
          f"median relative error {summary['median_error']:.4g}, "
          f"95th percentile {summary['p95_error']:.4g}, converged {summary['converged_fraction']:.1%} "
          f"(tol {args.tol:g}), mean RMS distance from seed {summary['mean_seed_distance']:.4g}")
    _write(args, iris, seeds, labels)
    return 0


def _write(args: argparse.Namespace, iris, seeds, labels) -> None:
    """Write ``--out`` (and ``--gallery``) all-or-none: the IRI file is made in a private folder and read back,
    the gallery rendered to bytes, then both are renamed into place together (`write_outputs`)."""
    import os
    import tempfile

    from ..iri.store import save_iris

    with tempfile.TemporaryDirectory(prefix="similarity-iris-") as folder:
        made = save_iris(iris, os.path.join(folder, "out" + os.path.splitext(args.out)[1]), labels=labels, seeds=seeds)
        with open(made, "rb") as fh:
            contents = {args.out: fh.read()}
    if args.gallery:
        from ..apps.gallery import iris_figure

        contents[args.gallery] = iris_figure(iris, seeds, title=f"{args.model} at {args.layer}: seeds (top) and IRIs")
    write_outputs(contents)


def tuning_options(items: list[str] | None) -> dict:
    """``--tuning KEY=VALUE`` items as the ``tuning`` dict of ``generate_iris`` (``preset=resnet``, ``lr=0.1``);
    raises ValueError for a key that is not a tuning key (with the closest valid name) or that has its own
    flag (naming the flag)."""
    options = parse_assignments(items or [], what="--tuning")
    for key in options:
        flag = "--" + key.replace("_", "-")
        if key not in TUNING and flag in _FLAGS:
            raise ValueError(f"--tuning {key}=...: {key} has its own flag; use {flag}")
        if key not in TUNING:
            raise ValueError(f"--tuning: unknown tuning key {key!r}{did_you_mean(key, TUNING)}; "
                             f"valid: {', '.join(TUNING)}")
    return options


_FLAGS = ("--steps", "--tol", "--optimizer", "--init", "--cycle-steps", "--batch-size", "--backend", "--seed",
          "--device", "--cache-dir", "--checkpoint-every", "--compile", "--precision")


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's command(s) to the ``similarity-plugins`` parser."""
    p = sub.add_parser("iris", help="generate identically represented inputs (IRIs) for a model at a layer")
    p.add_argument("--model", required=True, help="MODEL spec")
    p.add_argument("--layer", required=True)
    add_model_args(p)
    add_data_args(p, role="the --split split seeds the IRIs", limits=())
    p.add_argument("--split", default="train", choices=["train", "test"])
    p.add_argument("--max-seeds", type=positive_int, default=None, help="use the first N samples as seeds")
    p.add_argument("--steps", type=int, default=RUN_DEFAULTS["steps"])
    p.add_argument("--tol", type=float, default=RUN_DEFAULTS["tol"])
    p.add_argument("--optimizer", default=RUN_DEFAULTS["optimizer"], choices=["auto", *OPTIMIZERS],
                   help="auto (default): the preset for the front's structure (docs/iris.md); adam: the Adam preset "
                        "for it; lbfgs")
    p.add_argument("--init", default=RUN_DEFAULTS["init"], choices=INITS)
    p.add_argument("--cycle-steps", type=int, default=RUN_DEFAULTS["cycle_steps"], metavar="N",
                   help="Adam's first restart cycle (default: the preset's; 0: one cosine over the budget)")
    p.add_argument("--batch-size", type=int, default=RUN_DEFAULTS["batch_size"])
    p.add_argument("--backend", default=RUN_DEFAULTS["backend"], choices=["auto", "numpy", "torch", "cupy"])
    add_run_args(p, device="the model's device",
                 seed="seed of the IRIs' random draws (each sample's from it and its index)")
    p.add_argument("--cache-dir", default=None, help="folder where finished IRI sets (and checkpoints) are kept")
    p.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="with --cache-dir: save the optimiser state every N batch steps; a rerun resumes from it")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the front's forward+backward (a warm-up of seconds to a minute per run, "
                        "paid back only on long runs; see the IRI guide)")
    p.add_argument("--precision", default=RUN_DEFAULTS["precision"], choices=PRECISIONS,
                   help="auto (default): bfloat16 steps far from --tol where the hardware has bfloat16 matrix units "
                        "(CUDA, AMX) and the front is large enough, then a float32 finish; float32; bfloat16 "
                        "(docs/iris.md)")
    p.add_argument("--tuning", action="append", metavar="KEY=VALUE",
                   help="a tuning value of generate_iris: preset=NAME, lr=0.1, fold_bn=false, relu_leak=0.05, ... "
                        "(docs/iris.md); repeatable")
    add_renamed(p, "--option", "--tuning", "--option means a metric option in compare, grid, score and bench")
    outputs = add_output_args(p, "output file: .npz or .safetensors", csv=None, required=True)
    outputs.add_argument("--gallery", default=None, metavar="PNG",
                         help="also write a PNG of the first seeds next to their IRIs (relative error, distance from "
                              "seed)")
    p.set_defaults(func=cmd_iris)
