"""Linear CKA speed: ours vs ckatorch ``cka_base``, a NumPy Gram-matrix CKA and one float64 GEMM.

Run from the repository root: ``python -m pytest benchmarks/bench_cka.py --benchmark-only`` (autosaved to
``.benchmarks/``; ``-m "not slow"`` skips the streaming run). Each variant is its own benchmark in the group;
the ratios to ``ours`` (of medians) are stored in ``extra_info`` of both benchmarks of each pair and
printed at the end of the module. See docs/benchmarking.md for comparing against a saved run.

Group ``cka-linear-8000x512``: X, Y of shape (8000, 512), float32.
  * ours         ``similarity_plugins.functional.cka(X, Y)`` (feature space, float64: one float32 ->
                 float64 copy of ``[X | Y]`` and one symmetric rank-k update)
  * ckatorch     ``ckatorch.cka_base(tx, ty)`` on torch tensors (Gram space, float64), one round
  * numpy-gram   Kornblith et al.'s Gram-matrix reference in NumPy float64, one round
  * gemm         one float64 ``X.T @ Y`` (inputs already float64): the yardstick for the floor
Group ``cka-streaming-1Mx256``: 1,000,000 x 256 float32 pairs in batches of 10,000, generated on the
fly (never held at once), through ``StreamingLinearCKA``; ``generate-only`` times the data alone.
Both streaming runs are marked ``slow`` (together over 30 s on a busy 2-core machine).
"""

from __future__ import annotations

import numpy as np
import pytest
import ratios
import torch

from similarity_plugins.functional import StreamingLinearCKA, cka

N, D = 8000, 512
STREAM_N, STREAM_D, STREAM_BATCH = 1_000_000, 256, 10_000
GROUP = "cka-linear-8000x512"
STREAM_GROUP = "cka-streaming-1Mx256"

_VALUES: dict[str, float] = {}

# extra_info key -> (numerator, denominator): ratios of median times, shared by both benchmarks of the pair
RATIOS = {
    "ours_over_gemm": ("ours", "gemm"),
    "ckatorch_over_ours": ("ckatorch", "ours"),
    "numpy_gram_over_ours": ("numpy-gram", "ours"),
    "generate_share_of_stream": ("generate", "stream"),
}


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D), dtype=np.float32)
    w = rng.standard_normal((D, D), dtype=np.float32) / np.float32(np.sqrt(D))
    y = np.tanh(x @ w) + np.float32(0.5) * rng.standard_normal((N, D), dtype=np.float32)
    return x, y.astype(np.float32)


@pytest.fixture(scope="module", autouse=True)
def _report_ratios(request):
    yield
    lines = [f"{key:26s} = {ratios.RUNS[a].extra_info[key]:.2f}x" for key, (a, _) in RATIOS.items()
             if a in ratios.RUNS and key in ratios.RUNS[a].extra_info]
    if "stream" in _VALUES:
        lines.append(f"streaming 1Mx256: state {_VALUES['state_bytes'] / 1024**2:.2f} MiB (peak "
                     f"{_VALUES['peak_state_bytes'] / 1024**2:.2f} MiB), CKA {_VALUES['stream']:.6f}")
    ratios.print_lines(request, "bench_cka", lines)


def _record(name: str, benchmark) -> None:
    ratios.record_pairs(name, benchmark, RATIOS)


# --------------------------------------------------------------------------- Kornblith reference
def _gram_linear(x: np.ndarray) -> np.ndarray:
    return x.dot(x.T)


def _center_gram(gram: np.ndarray) -> np.ndarray:
    gram = gram.copy()
    means = np.mean(gram, 0, dtype=np.float64)
    means -= np.mean(means) / 2
    gram -= means[:, None]
    gram -= means[None, :]
    return gram


def numpy_gram_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Kornblith et al.'s ``cka(gram_linear(x), gram_linear(y))`` in NumPy float64."""
    gx = _center_gram(_gram_linear(x.astype(np.float64)))
    gy = _center_gram(_gram_linear(y.astype(np.float64)))
    return float(gx.ravel().dot(gy.ravel()) / (np.linalg.norm(gx) * np.linalg.norm(gy)))


# --------------------------------------------------------------------------- group: 8000 x 512
@pytest.mark.benchmark(group=GROUP)
def test_ours(benchmark, data):
    x, y = data
    value = benchmark.pedantic(cka, args=(x, y), rounds=5, iterations=1, warmup_rounds=1)
    _record("ours", benchmark)
    _VALUES["ours"] = value
    assert 0.0 < value < 1.0


@pytest.mark.benchmark(group=GROUP)
def test_gemm_float64(benchmark, data):
    x64, y64 = data[0].astype(np.float64), data[1].astype(np.float64)
    benchmark.pedantic(np.matmul, args=(x64.T, y64), rounds=5, iterations=1, warmup_rounds=1)
    _record("gemm", benchmark)


@pytest.mark.benchmark(group=GROUP)
def test_numpy_gram(benchmark, data):
    value = benchmark.pedantic(numpy_gram_cka, args=data, rounds=2, iterations=1, warmup_rounds=0)
    _record("numpy-gram", benchmark)
    if "ours" in _VALUES:
        assert value == pytest.approx(_VALUES["ours"], rel=1e-9)


@pytest.mark.benchmark(group=GROUP)
def test_ckatorch(benchmark, data):
    ckatorch = pytest.importorskip("ckatorch")
    tx, ty = torch.from_numpy(data[0]), torch.from_numpy(data[1])
    value = benchmark.pedantic(ckatorch.cka_base, args=(tx, ty), rounds=1, iterations=1, warmup_rounds=0)
    _record("ckatorch", benchmark)
    if "ours" in _VALUES:
        assert float(value) == pytest.approx(_VALUES["ours"], rel=1e-9)


# --------------------------------------------------------------------------- group: streaming
def _batches(seed: int = 1):
    """Yield (x, y) float32 batches of the 1M x 256 stream, made on the fly (uniform noise: cheap)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((STREAM_D, STREAM_D), dtype=np.float32) / np.float32(np.sqrt(STREAM_D))
    for _ in range(STREAM_N // STREAM_BATCH):
        x = rng.random((STREAM_BATCH, STREAM_D), dtype=np.float32)
        y = x @ w
        y += rng.random((STREAM_BATCH, STREAM_D), dtype=np.float32)
        yield x, y


def _stream() -> tuple[float, int, int]:
    metric = StreamingLinearCKA()
    peak = 0
    for x, y in _batches():
        metric.update(x, y)
        peak = max(peak, metric.state_nbytes)
    assert metric.n == STREAM_N
    return metric.compute(), metric.state_nbytes, peak


def _generate_only() -> int:
    total = 0
    for x, _ in _batches():
        total += x.shape[0]
    return total


@pytest.mark.slow
@pytest.mark.benchmark(group=STREAM_GROUP)
def test_streaming_generate_only(benchmark):
    assert benchmark.pedantic(_generate_only, rounds=1, iterations=1, warmup_rounds=0) == STREAM_N
    _record("generate", benchmark)


@pytest.mark.slow
@pytest.mark.benchmark(group=STREAM_GROUP)
def test_streaming_linear_cka(benchmark):
    value, state_bytes, peak = benchmark.pedantic(_stream, rounds=1, iterations=1, warmup_rounds=0)
    _record("stream", benchmark)
    _VALUES.update(stream=value, state_bytes=state_bytes, peak_state_bytes=peak)
    benchmark.extra_info.update(state_bytes=state_bytes, peak_state_bytes=peak, cka=value)
    d = STREAM_D
    assert state_bytes == 8 * ((2 * d) ** 2 + 4 * 2 * d + 5)  # O(d^2), independent of n
    assert 0.0 < value < 1.0
