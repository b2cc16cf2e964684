"""The activation store: a grid from the store vs from the models, extraction vs the in-memory forward, streamed
linear CKA from disk vs in memory.

Run from the repository root: ``python -m pytest benchmarks/bench_store.py --benchmark-only``. Two threads.

Group ``store-grid``: two torchvision resnet18s (random weights, seeds 0 and 1), ``layer2.0, layer3.0, layer4.0``
of the first against ``layer3.1, layer4.1`` of the second (3 x 2 cells, ``cka-linear``), N = 384 inputs
``rand(N, 3, 32, 32)``.
  * from-models   ``compare_grid(models, layers, data, ...)``: forward passes, then the cells
  * from-store    ``compare_grid(layers=..., store=DIR)`` on a store filled once before the timing
Group ``store-extract``: the same two models at the same layers; ``store-extract-N3072`` the same on 3,072 inputs
(the store's fixed cost, the fingerprint of each model's weights, spread over more batches).
  * in-memory     ``extract_layers`` of each model (the one batched forward loop, arrays kept in memory)
  * to-store      ``sp.extract`` into a fresh folder each round (model fingerprints, per-sample input digests,
                  forward passes, chunks with checksums and one fsync each, manifests)
  * again         ``sp.extract`` into the filled store: no forward pass, only what every call costs besides the
                  forwards (fingerprints, input digests, reading the folder): the fixed cost apart
Group ``store-hash``: the digest of both models' weights (about 90 MB, what a fingerprint reads) with
  * sha256, blake3 (single thread; skipped without the ``blake3`` package), xxh3-128 (``utils.digest.fast_hash``)
Group ``store-stream``: linear CKA of two (BENCH_STORE_N = 50,000) x 512 float32 arrays.
  * in-memory     ``functional.cka(x, y)`` on the arrays in memory
  * from-disk     ``functional.streamed(x, y)`` on the same arrays as store entries (read block by block)
``extra_info`` holds the ratios of medians (targets: from-models / from-store >= 5, to-store / in-memory <= 1.15 at
N = 3,072, from-disk / in-memory <= 2; again / in-memory and the hashes against sha256 for the record) and each
process's peak resident memory so far (MiB). Five rounds each.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile

import numpy as np
import pytest
import ratios
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins import functional as F
from similarity_plugins.networks.activations import extract_layers

N = 384
LARGE_N = 3072
ROUNDS = 5
LAYERS = {"a": ["layer2.0", "layer3.0", "layer4.0"], "b": ["layer3.1", "layer4.1"]}
STREAM_N = int(os.environ.get("BENCH_STORE_N", "50000"))
_VALUES: dict[str, float] = {}
RATIOS = {
    "models_over_store": ("grid:from-models", "grid:from-store"),
    "store_over_memory": ("extract:to-store", "extract:in-memory"),
    "store_over_memory_N3072": ("extract-large:to-store", "extract-large:in-memory"),
    "fixed_over_memory": ("extract:again", "extract:in-memory"),
    "fixed_over_memory_N3072": ("extract-large:again", "extract-large:in-memory"),
    "disk_over_memory": ("stream:from-disk", "stream:in-memory"),
    "blake3_over_sha256": ("hash:blake3", "hash:sha256"),
    "xxh3_over_sha256": ("hash:xxh3", "hash:sha256"),
}


@pytest.fixture(scope="module", autouse=True)
def _print_values(two_threads):
    yield
    print("\n[bench_store] " + json.dumps(_VALUES))


@pytest.fixture(scope="module")
def setup():
    import torchvision

    models = {}
    with torch.random.fork_rng(devices=[]):
        for seed, name in enumerate(LAYERS):
            torch.manual_seed(seed)
            models[name] = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    g = torch.Generator().manual_seed(1)
    data = sp.Data(test=TensorDataset(torch.rand(N, 3, 32, 32, generator=g), torch.zeros(N, dtype=torch.long)))
    folder = tempfile.TemporaryDirectory(prefix="bench-store-")
    sp.extract(models, LAYERS, data, folder.name)
    yield models, data, folder.name
    folder.cleanup()


def _record(name: str, benchmark) -> None:
    ratios.record(name, benchmark)
    benchmark.extra_info["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    for key, (a, b) in RATIOS.items():
        value = ratios.share_ratio(key, a, b) if name in (a, b) else None
        if value is not None:
            _VALUES[key] = round(value, 3)


def _pairs():
    return [(("a", x), ("b", y)) for x in LAYERS["a"] for y in LAYERS["b"]]


def test_grid_from_models(benchmark, setup):
    models, data, _ = setup
    benchmark.group = "store-grid"
    benchmark.pedantic(lambda: sp.compare_grid(models, LAYERS, data, ["cka-linear"], pairs=_pairs()), rounds=ROUNDS)
    _record("grid:from-models", benchmark)


def test_grid_from_store(benchmark, setup):
    _, _, path = setup
    benchmark.group = "store-grid"
    benchmark.pedantic(lambda: sp.compare_grid(layers=LAYERS, metrics=["cka-linear"], pairs=_pairs(), store=path),
                       rounds=ROUNDS)
    _record("grid:from-store", benchmark)


def test_extract_in_memory(benchmark, setup):
    models, data, _ = setup
    benchmark.group = "store-extract"
    benchmark.pedantic(lambda: [extract_layers(models[m], LAYERS[m], data.test) for m in LAYERS], rounds=ROUNDS)
    _record("extract:in-memory", benchmark)


def test_extract_to_store(benchmark, setup):
    models, data, _ = setup
    benchmark.group = "store-extract"

    def run():
        with tempfile.TemporaryDirectory(prefix="bench-store-x-") as folder:
            sp.extract(models, LAYERS, data, folder)

    benchmark.pedantic(run, rounds=ROUNDS)
    _record("extract:to-store", benchmark)


def test_extract_again(benchmark, setup):
    models, data, path = setup
    benchmark.group = "store-extract"
    benchmark.pedantic(lambda: sp.extract(models, LAYERS, data, path), rounds=ROUNDS)
    _record("extract:again", benchmark)


@pytest.fixture(scope="module")
def large(setup):
    models = setup[0]
    g = torch.Generator().manual_seed(2)
    return models, TensorDataset(torch.rand(LARGE_N, 3, 32, 32, generator=g), torch.zeros(LARGE_N, dtype=torch.long))


def test_extract_in_memory_large(benchmark, large):
    models, test = large
    benchmark.group = "store-extract-N3072"
    benchmark.pedantic(lambda: [extract_layers(models[m], LAYERS[m], test) for m in LAYERS], rounds=ROUNDS)
    _record("extract-large:in-memory", benchmark)


def test_extract_to_store_large(benchmark, large):
    models, test = large
    benchmark.group = "store-extract-N3072"

    def run():
        with tempfile.TemporaryDirectory(prefix="bench-store-x-") as folder:
            sp.extract(models, LAYERS, sp.Data(test=test), folder)

    benchmark.pedantic(run, rounds=ROUNDS)
    _record("extract-large:to-store", benchmark)


def test_extract_again_large(benchmark, large, tmp_path_factory):
    models, test = large
    folder = tmp_path_factory.mktemp("bench-store-again")
    sp.extract(models, LAYERS, sp.Data(test=test), folder)
    benchmark.group = "store-extract-N3072"
    benchmark.pedantic(lambda: sp.extract(models, LAYERS, sp.Data(test=test), folder), rounds=ROUNDS)
    _record("extract-large:again", benchmark)


def _weights(models) -> list[np.ndarray]:
    """The bytes a fingerprint of both models reads: every parameter and buffer."""
    return [t.detach().contiguous().numpy().reshape(-1).view(np.uint8) for m in models.values()
            for t in [*m.parameters(), *m.buffers()] if t.numel()]


@pytest.mark.parametrize("name", ["sha256", "blake3", "xxh3"])
def test_hash_the_weights(benchmark, setup, name):
    import hashlib

    from similarity_plugins.utils.digest import fast_hash

    if name == "blake3":
        blake3 = pytest.importorskip("blake3")
    make = {"sha256": hashlib.sha256, "blake3": lambda: blake3.blake3(), "xxh3": fast_hash}[name]
    pieces = _weights(setup[0])

    def digest() -> str:
        h = make()
        for piece in pieces:
            h.update(piece)
        return h.hexdigest()

    benchmark.group = "store-hash"
    benchmark.pedantic(digest, rounds=ROUNDS)
    benchmark.extra_info["megabytes"] = round(sum(p.nbytes for p in pieces) / 1e6, 1)
    _record(f"hash:{name}", benchmark)


@pytest.fixture(scope="module")
def stream_pair():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((STREAM_N, 512), dtype=np.float32)
    y = x + rng.standard_normal((STREAM_N, 512), dtype=np.float32)
    folder = tempfile.TemporaryDirectory(prefix="bench-store-s-")
    store = sp.Store.create(folder.name)
    store.put("x", "l", (x[i:i + 8192] for i in range(0, STREAM_N, 8192)))
    store.put("y", "l", (y[i:i + 8192] for i in range(0, STREAM_N, 8192)))
    yield x, y, store
    folder.cleanup()


def test_stream_in_memory(benchmark, stream_pair):
    x, y, _ = stream_pair
    benchmark.group = "store-stream"
    benchmark.pedantic(lambda: F.cka(x, y, "linear"), rounds=ROUNDS)
    _record("stream:in-memory", benchmark)


def test_stream_from_disk(benchmark, stream_pair):
    x, y, store = stream_pair
    benchmark.group = "store-stream"
    value = F.streamed(store.load("x", "l"), store.load("y", "l"))
    assert abs(value - F.cka(x, y, "linear")) < 1e-10
    benchmark.pedantic(lambda: F.streamed(store.load("x", "l"), store.load("y", "l")), rounds=ROUNDS)
    _record("stream:from-disk", benchmark)
