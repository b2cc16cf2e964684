"""Where the time of ``sp.extract`` goes beside the forward passes it runs.

Two torchvision ResNet-18s (random weights, seeds 0 and 1) at the layers of ``benchmarks/bench_store.py``, N
inputs ``rand(N, 3, 32, 32)``, two threads; medians of ``--rounds`` interleaved rounds (wall time, and this
process's CPU time, which other load on a shared machine moves less) of:

- ``in-memory``: ``extract_layers`` of each model (the forward passes alone, arrays kept);
- ``extract``: ``sp.extract`` into a fresh folder (fingerprints, input digests, forwards, chunks, fsync, manifests);
- ``store-work``: ``sp.extract`` with the forward passes replayed from their outputs (computed once): everything
  the store does beside the forwards, whose ratio to ``in-memory`` does not drown in the noise of forwards that
  take seconds on a loaded machine; and the same without chunk writes and manifests (``no-writes``), without the
  per-sample input digests (``no-digests``), with ``os.fsync`` a no-op (``no-fsync``);
- ``fingerprints``: ``module_digest`` of both models (the XXH3-128 of their weights and settings), alone;
- ``data-only``: one pass over the split per model, as both ``in-memory`` and ``store-work`` read it: the store's
  own cost beside the forwards is ``store-work - data-only``.

Run from the repository root: ``PYTHONPATH=. python lab/store_extraction_cost.py --n 384 3072``.
Results: ``docs/lab/store_extraction.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Callable

import numpy as np
import torch
import torchvision
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.networks.activations import extract_layers, forward_layers
from similarity_plugins.networks.data import iterate_batches
from similarity_plugins.networks.parallel import module_digest
from similarity_plugins.store import fill as store_fill

LAYERS = {"a": ["layer2.0", "layer3.0", "layer4.0"], "b": ["layer3.1", "layer4.1"]}


def variants(n: int) -> dict:
    """The timed functions on ``n`` inputs, by name."""
    models = {}
    for seed, name in enumerate(LAYERS):
        torch.manual_seed(seed)
        models[name] = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    g = torch.Generator().manual_seed(1)
    data = sp.Data(test=TensorDataset(torch.rand(n, 3, 32, 32, generator=g), torch.zeros(n, dtype=torch.long)))

    def extract() -> None:
        with tempfile.TemporaryDirectory() as folder:
            sp.extract(models, LAYERS, data, folder)

    outputs = {id(models[m]): list(forward_layers(models[m], LAYERS[m], iterate_batches(data.test, 256)))
               for m in LAYERS}

    def replayed(model, layers, batches, device=None):
        """The forward loop with the passes replaced by their outputs, computed once: the store's own work alone."""
        for k, (_, y) in enumerate(batches):
            yield outputs[id(model)][k][0], y

    def store_work(*stubs: tuple) -> Callable[[], None]:
        """``extract`` with the forwards replayed and each ``(owner, attribute, replacement)`` of ``stubs`` in place."""
        stubs = ((store_fill, "forward_layers", replayed), *stubs)

        def run() -> None:
            saved = [(owner, name, getattr(owner, name)) for owner, name, _ in stubs]
            for owner, name, stub in stubs:
                setattr(owner, name, stub)
            try:
                extract()
            finally:
                for owner, name, value in saved:
                    setattr(owner, name, value)
        return run

    return {
        "in-memory": lambda: [extract_layers(models[m], LAYERS[m], data.test) for m in LAYERS],
        "extract": extract,
        "store-work": store_work(),
        "no-writes": store_work((store_fill, "write_chunk", lambda *a, **k: {}),
                                (store_fill, "_finish", lambda *a, **k: None)),
        "no-digests": store_work((store_fill, "sample_digests", lambda x, y: np.zeros((len(y), 2), np.uint64))),
        "no-fsync": store_work((os, "fsync", lambda fd: None)),
        "fingerprints": lambda: [module_digest([m]) for m in models.values()],
        "data-only": lambda: [list(iterate_batches(data.test, 256)) for _ in LAYERS],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[384, 3072])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(2)
    for n in args.n:
        runs = variants(n)
        for fn in runs.values():
            fn()  # warm-up
        times: dict[str, list[float]] = {name: [] for name in runs}
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, fn in runs.items():
                start, start_cpu = time.perf_counter(), time.process_time()
                fn()
                times[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
        for label, table in (("wall", times), ("cpu", cpu)):  # cpu: this process's threads, robust to other load
            medians = {name: statistics.median(v) for name, v in table.items()}
            print(f"N={n} {label}", {k: round(v, 3) for k, v in medians.items()},
                  f"extract/in-memory {medians['extract'] / medians['in-memory']:.2f}",
                  "(in-memory + store-work - data-only)/in-memory "
                  f"{1 + (medians['store-work'] - medians['data-only']) / medians['in-memory']:.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
