"""The page's provenance section: what made the numbers (package, date, machine, models, data, options, seeds),
read from a result's ``meta`` (`similarity_plugins.runner.provenance` writes ``meta["provenance"]``)."""

from __future__ import annotations

import json
from typing import Any, Mapping

from .page import Number, Section, Table, Text


def _machine(machine: Mapping[str, Any]) -> str:
    cpu = f"{machine.get('cpu', 'unknown CPU')} ({machine.get('cpu_count', '?')} logical cores)"
    gpu = f", GPU {machine['gpu']} ({machine.get('gpu_memory_gib', '?')} GiB, CUDA {machine.get('cuda', '?')})" \
        if machine.get("gpu") else ""
    return f"{machine.get('platform', 'unknown platform')}; {cpu}{gpu}; Python {machine.get('python', '?')}"


def _seeds(meta: Mapping[str, Any]) -> str:
    seed, repeats = meta.get("seed"), meta.get("repeats") or 1
    if seed is None:
        return "not recorded"
    if isinstance(seed, int) and isinstance(repeats, int) and repeats > 1:
        return f"{seed} .. {seed + repeats - 1} ({repeats} seeds per seeded metric)"
    return str(seed)


def _models_table(name: str, models: Mapping[str, Any]) -> Table:
    rows = []
    for model, ident in models.items():
        ident = ident or {}
        source = ident.get("source") or {}
        rows.append([model, ident.get("class"), ident.get("dtype"), Number(ident.get("parameters")),
                     source.get("hub_id"), source.get("revision"), source.get("commit"), source.get("path"),
                     ident.get("fingerprint") or ("pinned by the hub commit" if source.get("commit") else None)])
    return Table(name, ["model", "class", "dtype", "parameters", "hub id", "revision", "commit", "path",
                        "fingerprint (XXH3-128 of weights and module settings)"], rows,
                 "A model loaded from the Hugging Face hub at a resolved commit is identified by it; any other by the "
                 "XXH3-128 digest of its parameters, buffers and module settings.")


def _data_table(name: str, data: Mapping[str, Any]) -> Table:
    rows = []
    for split, ident in data.items():
        ident = ident or {}
        size = ident.get("size") if "size" in ident else "x".join(str(d) for d in ident.get("shape") or [])
        rows.append([split, size if isinstance(size, str) else Number(size) if isinstance(size, int) else str(size),
                     ident.get("dtype"), json.dumps(ident["fingerprint"]) if isinstance(ident.get("fingerprint"), list)
                     else ident.get("fingerprint")])
    return Table(name, ["data", "samples (or shape)", "dtype", "fingerprint (XXH3-128 of every input and label)"], rows,
                 "The splits the metrics read, each as it was given (options such as max_samples then take a part).")


def provenance_parts(meta: Mapping[str, Any], name: str = "provenance") -> list:
    """The parts of a provenance section for a result's ``meta``; ``name`` prefixes the tables' names."""
    record = meta.get("provenance")
    settings = [["seeds", _seeds(meta)], ["device", meta.get("device")], ["torch", meta.get("torch")],
                ["processes (torchrun world size)", meta.get("world_size")]]
    if not isinstance(record, Mapping):
        return [Text(["This result does not record its provenance (it was written by an earlier version of "
                      "similarity-plugins); what its settings record:"], note=True),
                Table(f"{name} settings", ["what", "value"], [[k, None if v is None else str(v)] for k, v in settings])]
    rows = [["made with", f"similarity-plugins {record.get('package', '?')}"], ["date (UTC)", record.get("date")],
            ["machine", _machine(record.get("machine") or {})], *[[k, None if v is None else str(v)] for k, v in settings],
            ["options", json.dumps(record.get("options") or {}, sort_keys=True)]]
    if meta.get("store"):
        rows.append(["activation store", str(meta["store"])])
    parts: list = [Table(f"{name} settings", ["what", "value"], rows)]
    if record.get("models"):
        parts.append(_models_table(f"{name} models", record["models"]))
    if record.get("data"):
        parts.append(_data_table(f"{name} data", record["data"]))
    return parts


def provenance_section(meta: Mapping[str, Any]) -> Section:
    """The provenance section of one result."""
    return Section("Provenance", provenance_parts(meta), anchor="provenance")
