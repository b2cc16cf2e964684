"""Commands that describe what is installed: ``list`` (the registered metrics), ``info`` (one metric's
contract: description, package, needs, options with defaults and docs) and ``layers`` (a model's cuts)."""

from __future__ import annotations

import argparse
import json

from .common import add_model_args, load_model


def cmd_list(args: argparse.Namespace) -> int:
    from ..core.manager import get_plugin_manager

    pm = get_plugin_manager()
    rows = [pm.info[n] for n in sorted(pm.info)]
    if args.json:
        print(json.dumps([{"name": r.name, "package": r.package, "description": r.description, "error": r.error}
                          for r in rows], indent=2))
        return 0
    width = max(len(r.name) for r in rows)
    pwidth = max(len(r.package) for r in rows)
    for r in rows:
        text = f"BROKEN: {r.error}" if r.error else r.description
        print(f"{r.name.ljust(width)}  {r.package.ljust(pwidth)}  {text}")
    return 0


def _shown(value: object) -> str:
    """A default as the user would type it after ``--option KEY=``."""
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, float):
        text = f"{value:.6g}"
        return text + ".0" if text.lstrip("-").isdigit() else text
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return "none" if value is None else json.dumps(value) if isinstance(value, bool) else str(value)


def cmd_info(args: argparse.Namespace) -> int:
    from ..core.registry import metric_info

    info = metric_info(args.metric)
    if args.json:
        print(json.dumps({"name": info.name, "package": info.package, "description": info.description,
                          "error": info.error, "needs": None if info.needs is None else list(info.needs),
                          "options": None if info.options is None else {
                              k: {"default": v, "doc": info.option_docs.get(k, "")} for k, v in info.options.items()}},
                         indent=2, default=str))
        return 0
    print(f"{info.name}  ({info.package})")
    print(f"  {'BROKEN: ' + info.error if info.error else info.description}")
    if info.needs is not None:
        print(f"  needs: Data {' and '.join(info.needs)} split{'s' if len(info.needs) > 1 else ''}")
    if info.options is None:
        print("  options: not declared; this metric receives every --option given (see docs/options.md)")
        return 0
    if not info.options:
        print("  options: none")
        return 0
    print(f"  options (--option KEY=VALUE, or --option {info.name}.KEY=VALUE for this metric only):")
    defaults = {k: _shown(v) for k, v in info.options.items()}
    kw, dw = max(map(len, defaults)), max(map(len, defaults.values()))
    for name, default in defaults.items():
        print(f"    {name.ljust(kw)}  {default.ljust(dw)}  {info.option_docs.get(name, '')}".rstrip())
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

    p = sub.add_parser("info", help="one metric's description, package, needed splits and options with defaults")
    p.add_argument("metric", help="a metric name, e.g. stitch-slm")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("layers", help="list a model's stitchable layers in forward order")
    p.add_argument("model", help="MODEL spec, e.g. torchvision:resnet18")
    add_model_args(p)
    p.set_defaults(func=cmd_layers)
