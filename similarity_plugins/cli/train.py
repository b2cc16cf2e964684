"""The ``train`` command: a donor model (clean, on a variant, or adversarially trained), saved as a state dict."""

from __future__ import annotations

import argparse

from .arguments import add_data_args, add_model_args, add_output_args, add_renamed, add_run_args, add_variant_args, progress_of
from .loading import apply_variant, load_data, load_model
from .options import parse_variant_options
from .outputs import input_files, resolve_outputs


def cmd_train(args: argparse.Namespace) -> int:
    from ..apps.training import evaluate_accuracy, save_weights, train_classifier
    from ..apps.zoo import split_model_spec
    from ..datasets.variants import PixelShortcut, variant_class

    resolve_outputs(args, ("--out",), input_files(args.model))   # before any training
    data = load_data(args.data, args.max_train, args.max_test)
    model = load_model(args.model, args.num_classes, args.in_channels, data, seed=args.seed,
                       progress=progress_of(args))
    variant_options = parse_variant_options(args.variant_option)
    train_set, tests = data.train, {"clean": data.test}
    if args.variant:
        train_set = apply_variant(args.variant, data.train, args.seed, **variant_options)
        test_options = {k: v for k, v in variant_options.items() if k not in ("swap_fraction", "fraction")}
        tests[args.variant] = apply_variant(args.variant, data.test, args.seed + 1, **test_options)
        if variant_class(args.variant) is PixelShortcut:
            tests["shortcut-removed"] = apply_variant("shortcut-removed", tests[args.variant], 0)
            tests["shortcut-randomised"] = apply_variant("shortcut-randomised", tests[args.variant], args.seed + 2)
    small = split_model_spec(args.model)[0] == "small-cnn"
    epochs = args.donor_epochs or (8 if small else 30)
    lr = args.lr or (3e-3 if small else 1e-3)
    adversarial = {"eps": args.eps} if args.adversarial else None
    result = train_classifier(model, train_set, epochs=epochs, lr=lr, batch_size=args.batch_size, seed=args.seed,
                              device=args.device, adversarial=adversarial, weight_decay=5e-4,
                              progress=progress_of(args))
    print(f"trained {args.model} for {epochs} epochs in {result['seconds']:.1f} s "
          f"(final loss {result['final_loss']:.4f}, train accuracy {result['final_train_accuracy']:.4f})")
    for name, dataset in tests.items():
        print(f"test accuracy on {name:>20}: {evaluate_accuracy(model, dataset, device=args.device):.4f}")
    save_weights(model, args.out)
    print(f"wrote {args.out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's command(s) to the ``similarity-plugins`` parser."""
    p = sub.add_parser("train", help="train a donor model (small CNN on digits; ResNet/VGG/ViT on CIFAR-10)")
    p.add_argument("--model", required=True, help="MODEL spec, e.g. small-cnn or torchvision:resnet18")
    add_model_args(p)
    add_data_args(p, role="the model trains on its train split and is tested on its test split")
    add_variant_args(p, "train on a variant: pixel-shortcut, unseen-cue, ...")
    add_run_args(p, device="the model's device", seed="seed of the initial weights, the data order and the variant")
    p.add_argument("--donor-epochs", type=int, default=None, metavar="N",
                   help="training epochs of the model (default: 8 for small-cnn, else 30)")
    add_renamed(p, "--epochs", "--donor-epochs", "--epochs means stitch training epochs in compare and grid")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--adversarial", action="store_true", help="PGD (L-inf) adversarial training")
    p.add_argument("--eps", type=float, default=0.1, help="PGD radius in pixel units ([0,1] inputs)")
    add_output_args(p, "where to save the weights (.pt state dict)", csv=None, required=True)
    p.set_defaults(func=cmd_train)
