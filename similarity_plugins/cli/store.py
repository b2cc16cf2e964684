"""The ``extract`` and ``store`` commands: fill an activation store from models, and list what a store holds."""

from __future__ import annotations

import argparse
import os

from .arguments import add_data_args, add_model_args, add_run_args, arg_group, positive_int, progress_of
from .grid import model_specs, parse_layers
from .loading import load_data, load_model


def cmd_extract(args: argparse.Namespace) -> int:
    from ..store.extract import extract

    specs = model_specs(args.model)
    layers = parse_layers(args.layers, [n for n, _ in specs])
    data = load_data(args.data, args.max_train, args.max_test)
    models = {name: load_model(spec, args.num_classes, args.in_channels, data, progress=progress_of(args))
              for name, spec in specs}
    store = extract(models, layers, data, args.store, split=args.split, batch_size=args.batch_size,
                    device=args.device, progress=progress_of(args))
    print(store_table(store))
    for name, counts in store.extracted.items():
        print(f"extract: model {name}: forwarded {counts['forwarded']} samples, found {counts['found']} in the store")
    return 0


def _folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def store_table(store) -> str:
    """One line per entry (model, layer, N, D, dtype, size on disk, split, what produced it), then one line per
    model saying where it came from (its class; for a Hugging Face model its source, tokenizer and vocabulary)."""
    from ..store.paths import key_folder
    from ..utils.arrays import format_bytes
    from ..utils.io import text_table

    rows, origins = [], {}
    for model, layers in store.contents().items():
        for layer in layers:
            entry = store.entry(model, layer)
            size = _folder_bytes(key_folder(store.path, model, layer, entry["key"]))
            made = entry.get("produced_by") or {}
            by = made.get("by", "?") + (f" ({made['model_class']})" if made.get("model_class") else "")
            rows.append([model, layer, entry["shape"][0], entry["shape"][1], entry["dtype"], format_bytes(size),
                         entry.get("split") or "-", by])
            origins.setdefault(model, origin_text(made))
    if not rows:
        return f"{store.path}: no complete entry"
    table = text_table(["model", "layer", "N", "D", "dtype", "on disk", "split", "produced by"], rows, left=2)
    lines = [f"{model}: {text}" for model, text in origins.items() if text]
    return table + ("\n\n" + "\n".join(lines) if lines else "")


def origin_text(made: dict) -> str:
    """Where a model's entries came from, as one line: its class, source (folder, or hub id, revision and commit),
    tokenizer and vocabulary size, the package version and when it was written."""
    parts = [made.get("hf_class") or made.get("model_class") or ""]
    source = made.get("source") or {}
    if isinstance(source, dict):
        where = source.get("hub_id") or source.get("path")
        if where:
            revision = "@" + source["revision"] if source.get("revision") else ""
            commit = f" (commit {source['commit']})" if source.get("commit") else ""
            parts.append(f"from {where}{revision}{commit}")
    tokenizer = made.get("tokenizer")
    if isinstance(tokenizer, dict):
        parts.append(f"tokenizer {tokenizer.get('name')} ({tokenizer.get('vocabulary')} tokens)")
    if made.get("written"):
        parts.append(f"written {made['written'][:19]} by similarity-plugins {made.get('package', '?')}")
    return ", ".join(p for p in parts if p)


def cmd_store(args: argparse.Namespace) -> int:
    from ..store.store import Store

    print(store_table(Store(args.dir)))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``extract`` and ``store`` commands to the ``similarity-plugins`` parser."""
    p = sub.add_parser("extract", help="write models' activations at their layers into an activation store (once)")
    models = arg_group(p, "models")
    models.add_argument("--model", required=True, action="append", metavar="NAME=SPEC", help="a model; repeat for a zoo")
    models.add_argument("--layers", required=True, action="append", metavar="L1,L2,...|NAME=L1,L2,...",
                        help="layers of every model, or NAME=L1,L2 for one model (repeat per model)")
    add_model_args(p)
    add_data_args(p)
    data = arg_group(p, "data")
    data.add_argument("--split", default="test", choices=["test", "train"], help="the data split to extract")
    add_run_args(p, device="the first model's device", seed=None)
    arg_group(p, "run").add_argument("--batch-size", type=positive_int, default=None,
                                     help="samples per forward pass and chunk")
    arg_group(p, "outputs").add_argument("--store", required=True, metavar="DIR",
                                         help="the store folder (made when missing)")
    p.set_defaults(func=cmd_extract)
    s = sub.add_parser("store", help="list what an activation store holds")
    s.add_argument("dir", metavar="DIR", help="the store folder")
    s.set_defaults(func=cmd_store)
