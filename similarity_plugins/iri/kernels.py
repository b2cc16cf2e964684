"""The elementwise IRI updates, written once against an array namespace ``xp`` (see ``backends.py``).

Every function works in place on (B, D) arrays (one row per sample in the working batch) and on (B, 1)
per-sample columns, using only arithmetic operators, in-place operators, ``xp.sqrt``, ``xp.maximum`` and
``xp.minimum``, so the same code runs under NumPy, PyTorch and CuPy, and ``cupy.fuse`` compiles each into a
single elementwise kernel. Best-iterate tracking copies with ``1*x + 0*best``, which is exact, so the copy
is bit-identical on every backend.
"""

from __future__ import annotations

from typing import Any, Callable

from .backends import Backend


def adam_step(xp: Any, x: Any, g: Any, m: Any, v: Any, best: Any, improved: Any, lr: Any, bc1: Any, bc2: Any,
              beta1: float, beta2: float, eps: float) -> None:
    """One per-sample Adam step in place: best-iterate copy, the step, projection onto the pixel box [0, 1].

    ``x, g, m, v, best``: (B, D). ``improved``: (B, 1) of 0.0/1.0. ``lr``: (B, 1) step sizes (pixel units).
    ``bc1, bc2``: (B, 1) bias corrections ``1 - beta**t`` for each sample's own step count ``t >= 1``.
    """
    best[...] = improved * x + (1.0 - improved) * best
    m *= beta1
    m += (1.0 - beta1) * g
    v *= beta2
    v += (1.0 - beta2) * (g * g)
    x -= lr * (m / bc1) / (xp.sqrt(v / bc2) + eps)
    x[...] = xp.minimum(xp.maximum(x, 0.0), 1.0)


_CACHE: dict[tuple, tuple[Any, Callable]] = {}


def update_kernel(backend: Backend, hyper: tuple = ()) -> Callable:
    """The (possibly fused) in-place Adam update on ``backend``: ``kernel(x, g, m, v, best, improved, lr, bc1,
    bc2)`` as in `adam_step`; ``hyper`` is ``(beta1, beta2, eps)``. Kernels are cached per namespace
    and settings, so CuPy compiles each fused kernel once per process."""
    xp = backend.xp
    key = (id(xp), tuple(hyper))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is xp:
        return hit[1]
    beta1, beta2, eps = (float(h) for h in hyper)

    def adam(x, g, m, v, best, improved, lr, bc1, bc2):
        adam_step(xp, x, g, m, v, best, improved, lr, bc1, bc2, beta1, beta2, eps)

    kernel = backend.fuse(adam)
    _CACHE[key] = (xp, kernel)
    return kernel


def trial_step(xp: Any, zt: Any, z: Any, d: Any, a: Any) -> None:
    """The L-BFGS trial point in place: ``zt = z + a * d``. ``zt, z, d``: (B, D); ``a``: (B, 1)."""
    zt[...] = z + a * d


def best_copy(xp: Any, x: Any, best: Any, improved: Any) -> None:
    """Rows whose error just improved (``improved`` (B, 1) = 1.0) copy ``x`` into ``best``; (B, D) each."""
    best[...] = improved * x + (1.0 - improved) * best


def trial_kernel(backend: Backend) -> Callable:
    """The (possibly fused) `trial_step` on ``backend``: ``kernel(zt, z, d, a)``."""
    xp = backend.xp
    return backend.fuse(lambda zt, z, d, a: trial_step(xp, zt, z, d, a))


def best_copy_kernel(backend: Backend) -> Callable:
    """The (possibly fused) `best_copy` on ``backend``: ``kernel(x, best, improved)``."""
    xp = backend.xp
    return backend.fuse(lambda x, best, improved: best_copy(xp, x, best, improved))
