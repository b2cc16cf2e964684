"""Commands that describe what is installed: ``list`` (the registered metrics) and ``layers`` (a model's cuts)."""

from __future__ import annotations

import argparse
import json

from .common import add_model_args, load_model


def cmd_list(args: argparse.Namespace) -> int:
    from ..core.manager import get_plugin_manager

    pm = get_plugin_manager()
    rows = [pm.info[n] for n in sorted(pm.info)]
    if args.json:
        listing = [{"name": r.name, "package": r.package, "description": r.description, "error": r.error} for r in rows]
        print(json.dumps(listing, indent=2))
        return 0
    width = max(len(r.name) for r in rows)
    pwidth = max(len(r.package) for r in rows)
    for r in rows:
        text = f"BROKEN: {r.error}" if r.error else r.description
        print(f"{r.name.ljust(width)}  {r.package.ljust(pwidth)}  {text}")
    return 0


def cmd_layers(args: argparse.Namespace) -> int:
    from ..core.networks import layers

    model = load_model(args.model, args.num_classes, args.in_channels)
    for name in layers(model):
        print(name)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's command(s) to the ``similarity-plugins`` parser."""
    p = sub.add_parser("list", help="list the registered metrics and the package each comes from")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("layers", help="list a model's stitchable layers in forward order")
    p.add_argument("model", help="MODEL spec, e.g. torchvision:resnet18")
    add_model_args(p)
    p.set_defaults(func=cmd_layers)
