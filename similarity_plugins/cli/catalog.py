"""Commands that describe what is installed: ``list`` (the registered metrics), ``info`` (one metric's
contract: description, package, what the score means, needs, options with defaults and docs) and
``layers`` (a model's cuts)."""

from __future__ import annotations

import argparse
import json
import math

from .arguments import add_model_args, progress_of
from .loading import load_model


def cmd_list(args: argparse.Namespace) -> int:
    from ..host.registry import list_metrics, metric_info

    rows = [metric_info(n) for n in list_metrics()]
    if args.json:
        print(_strict_json([{"name": r.name, "package": r.package, "description": r.description, "error": r.error,
                             **_meaning_json(r)} for r in rows]))
        return 0
    from ..utils.io import text_table

    header = ["metric", "package", "kind", "range", "symmetry", "invariances", "description"]
    cells = [(r.name, r.package, r.kind or "?", _range_text(r.range), _symmetry_text(r.symmetric),
              _invariances_text(r.invariances), f"BROKEN: {r.error}" if r.error else r.description) for r in rows]
    print(text_table(header, cells, left=len(header)))
    return 0


def _invariances_text(invariances: "tuple[str, ...] | None") -> str:
    """``translation,orthogonal``; ``-`` for none, ``?`` when not declared."""
    if invariances is None:
        return "?"
    return ",".join(invariances) or "-"


def _range_text(bounds: "tuple[float, float] | None") -> str:
    """``[0, 1]``, ``[0, inf)``, or ``-`` when no range is declared."""
    if bounds is None:
        return "-"
    lo, hi = bounds
    left = "(" if lo == float("-inf") else "["
    right = ")" if hi == float("inf") else "]"
    return f"{left}{_shown(lo).removesuffix('.0')}, {_shown(hi).removesuffix('.0')}{right}"


def _symmetry_text(symmetric: "bool | None") -> str:
    return "?" if symmetric is None else "symmetric" if symmetric else "asymmetric"


def _meaning_json(info) -> dict:
    """``kind``, ``range`` (a list; infinite bounds as "inf"/"-inf"), ``symmetric``, ``invariances``, ``activations_only``."""
    bounds = None if info.range is None else [b if abs(b) != float("inf") else str(b) for b in info.range]
    return {"kind": info.kind, "range": bounds, "symmetric": info.symmetric,
            "invariances": None if info.invariances is None else list(info.invariances),
            "activations_only": info.activations_only}


def _meaning_lines(info) -> list[str]:
    """What the score means, as ``info`` prints it."""
    if info.kind is None and info.range is None and info.symmetric is None and info.invariances is None:
        return ["  score: meaning not declared (kind, range, symmetry and invariances unknown)"]
    kind = {"similarity": "similarity (higher: more alike)", "distance": "distance (lower: more alike)"}
    bounds = "no range declared" if info.range is None else f"range {_range_text(info.range)}"
    lines = [f"  score: {kind.get(info.kind, 'kind not declared')}, {bounds}, "
             f"{_symmetry_text(info.symmetric).replace('?', 'symmetry not declared')}"]
    if info.invariances is None:
        lines.append("  invariant to: not declared")
    else:
        lines.append(f"  invariant to: {', '.join(info.invariances) or 'none declared'}")
    return lines


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


def _strict_json(payload: object) -> str:
    """``payload`` as indented, standard JSON: infinite and NaN numbers as the strings "inf", "-inf", "nan"
    (``json.dumps`` would write ``Infinity``, which JSON parsers refuse); other odd values as their text."""
    def strict(value: object) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        if isinstance(value, dict):
            return {str(k): strict(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [strict(v) for v in value]
        return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)
    return json.dumps(strict(payload), indent=2, allow_nan=False)


def cmd_info(args: argparse.Namespace) -> int:
    from ..host.registry import metric_info

    info = metric_info(args.metric)
    if args.json:
        print(_strict_json({"name": info.name, "package": info.package, "description": info.description,
                            "error": info.error, **_meaning_json(info),
                            "needs": None if info.needs is None else list(info.needs),
                            "options": None if info.options is None else {
                                k: {"default": v, "doc": info.option_docs.get(k, ""), "values": _values(info, k)}
                                for k, v in info.options.items()}}))
        return 0
    print(f"{info.name}  ({info.package})")
    print(f"  {'BROKEN: ' + info.error if info.error else info.description}")
    if not info.error:
        print("\n".join(_meaning_lines(info)))
    if info.activations_only:
        print("  activations only: yes (also runs on arrays: `similarity-plugins score`, similarity_plugins.score)")
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
        if _values(info, name):
            print(f"    {''.ljust(kw)}  {''.ljust(dw)}  values: {_values(info, name)}")
    return 0


def _values(info, option: str) -> str | None:
    """What a value of ``option`` must be, in its rule's words (None: the option takes any value)."""
    rule = info.option_types.get(option)
    return None if rule is None else rule.words


def cmd_layers(args: argparse.Namespace) -> int:
    from ..networks.layer_lists import layers

    model = load_model(args.model, args.num_classes, args.in_channels, progress=progress_of(args))
    for name in layers(model):
        print(name)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's command(s) to the ``similarity-plugins`` parser."""
    p = sub.add_parser("list", help="list the registered metrics: package, kind (similarity/distance), range, "
                                    "symmetry, invariances, description")
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
