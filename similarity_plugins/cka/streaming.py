"""``StreamingLinearCKA``: exact linear CKA (biased or debiased) from batches with O(d^2) state."""

from __future__ import annotations

import numpy as np

from ..utils.arrays import (
    ArrayLike,
    as_samples,
    available_bytes,
    check_same_n,
    constant_message,
    format_bytes,
    raise_nonfinite,
    to_numpy,
)
from .functional import cka
from .grams import gram_cols
from .hsic import debiased_term, finish_cka, fro2
from .inputs import DEGENERATE_RTOL, check_min_samples, on_both


# --------------------------------------------------------------------------- streaming
class StreamingLinearCKA:
    """Exact linear CKA (biased or debiased) from batches, with O((d1 + d2)^2) state.

    Stateful like a torchmetrics metric: ``update(X_batch, Y_batch)`` any number of times (batches may
    differ in size; NumPy arrays or torch tensors on any device; higher rank is flattened after axis 0),
    then ``compute()``; ``reset()`` starts over; ``n`` is the number of samples seen. The result equals
    ``cka(X_all, Y_all, "linear", debiased)`` to float64 rounding.

    State, in float64, about a fixed shift ``c`` (the mean of the first data accumulated, which keeps
    the moments well conditioned): with ``z_i = [x_i - c_x, y_i - c_y]``, ``a_i = |x_i - c_x|^2`` and
    ``b_i = |y_i - c_y|^2`` it holds ``n``, ``G = sum z_i z_i^T`` (so ``X'^T X'``, ``Y'^T Y'``,
    ``X'^T Y'``), ``W = sum z_i [a_i, b_i, 1]`` (so ``X'^T a``, ``X'^T b``, ``Y'^T a``, ``Y'^T b`` and the
    column sums) and ``sum a``, ``sum b``, ``sum a^2``, ``sum b^2``, ``sum a b``. Centring with the
    running mean ``m`` is then algebra: ``Xc^T Yc = X'^T Y' - n m_x m_y^T``, and the centred row norms
    ``r_i = a_i - 2 x'_i.m_x + |m_x|^2`` give ``sum r``, ``sum r_x r_y`` and ``sum r_x^2``, which is all
    the debiased estimator (Kornblith's feature-space form) needs.

    Rule for the state: the moments take ``8 ((d1 + d2)^2 + 4 (d1 + d2) + 5)`` bytes whatever n is, while
    keeping the samples takes ``8 n (d1 + d2)`` bytes. Batches are therefore buffered (copied) while the
    buffer is smaller than the moments would be (n small, d large); as soon as it is not, and the moments
    fit in ``max_state_bytes``, the buffer is folded into the moments and dropped. ``compute()`` on a
    buffer calls [`cka`][cka], which uses Gram space when n is small. If neither the moments nor the
    buffer fit in ``max_state_bytes``, ``update`` raises ValueError. A float64 scratch buffer for one
    batch is reused between updates (not counted in ``state_nbytes``).

    Args:
        debiased: use the unbiased HSIC estimator (needs n >= 4 at ``compute``).
        max_state_bytes: memory budget for the state; default: half the memory available at the first
            ``update``.
    """

    def __init__(self, debiased: bool = False, *, max_state_bytes: int | None = None) -> None:
        self.debiased = bool(debiased)
        self.max_state_bytes = max_state_bytes
        self.reset()

    # ----------------------------------------------------------------- state management
    def reset(self) -> None:
        """Forget every sample seen."""
        self.n = 0
        self._d: tuple[int, int] | None = None
        self._budget: int | None = None
        self._buffer: list[tuple[np.ndarray, np.ndarray]] | None = []
        self._m: dict[str, np.ndarray] | None = None
        self._scratch: np.ndarray | None = None
        # Exact constant-representation tracking: the first row, and whether all rows equal it.
        self._first: list[np.ndarray | None] = [None, None]
        self._const = [True, True]

    @property
    def mode(self) -> str:
        """``"buffer"`` while samples are kept, ``"moments"`` once they are folded into moments."""
        return "buffer" if self._m is None else "moments"

    @property
    def state_nbytes(self) -> int:
        """Bytes held by the state now (accumulators, or buffered samples)."""
        if self._m is not None:
            return int(sum(v.nbytes for v in self._m.values()))
        return int(sum(x.nbytes + y.nbytes for x, y in (self._buffer or [])))

    def _moment_bytes(self) -> int:
        d1, d2 = self._d or (0, 0)
        dd = d1 + d2
        return 8 * (dd * dd + 4 * dd + 5)  # g, w, c, scalars (exactly what _fold_buffer allocates)

    def _buffer_bytes_f64(self) -> int:
        d1, d2 = self._d or (0, 0)
        return 8 * self.n * (d1 + d2)

    # ----------------------------------------------------------------- update
    def update(self, X_batch: ArrayLike, Y_batch: ArrayLike) -> None:
        """Add a batch: ``X_batch`` (b, d1) and ``Y_batch`` (b, d2) for the same b inputs."""
        xb = as_samples(to_numpy(X_batch, "X_batch"), "X_batch")
        yb = as_samples(to_numpy(Y_batch, "Y_batch"), "Y_batch")
        b = check_same_n(xb, yb, "X_batch", "Y_batch")
        dims = (xb.shape[1], yb.shape[1])
        if self._d is None:
            self._d = dims
            self._budget = (
                int(self.max_state_bytes)
                if self.max_state_bytes is not None
                else available_bytes() // 2
            )
        elif dims != self._d:
            raise ValueError(
                f"batches have (d1, d2) = {dims} features but earlier batches had {self._d}; every "
                "batch must come from the same two layers"
            )
        if self._m is not None:
            self._accumulate(xb, yb)
            self._track_constant(xb, yb)
            self.n += b
            return
        self._check_finite_batch(xb, "X_batch")
        self._check_finite_batch(yb, "Y_batch")
        self._track_constant(xb, yb)
        assert self._buffer is not None and self._budget is not None
        self._buffer.append((np.array(xb, copy=True), np.array(yb, copy=True)))
        self.n += b
        moment_bytes = self._moment_bytes()
        if self._buffer_bytes_f64() >= moment_bytes and moment_bytes <= self._budget:
            self._fold_buffer()
        elif self.state_nbytes > self._budget:
            d1, d2 = self._d
            raise ValueError(
                f"StreamingLinearCKA state does not fit in max_state_bytes={format_bytes(self._budget)}: the "
                f"moments need {format_bytes(moment_bytes)} (d1={d1}, d2={d2}) and the buffered samples "
                f"already take {format_bytes(self.state_nbytes)}; reduce the feature dimension (e.g. pool "
                "spatial maps), use fewer samples, or raise max_state_bytes"
            )

    @staticmethod
    def _check_finite_batch(arr: np.ndarray, name: str) -> None:
        if not np.isfinite(arr.sum(axis=0, dtype=np.float64)).all():
            raise_nonfinite(arr, name)

    def _track_constant(self, xb: np.ndarray, yb: np.ndarray) -> None:
        for i, arr in enumerate((xb, yb)):
            if self._first[i] is None:
                self._first[i] = np.array(arr[0], dtype=np.float64)
            if self._const[i]:
                self._const[i] = bool((arr == self._first[i]).all())

    def _fold_buffer(self) -> None:
        assert self._buffer is not None and self._d is not None
        d1, d2 = self._d
        dd = d1 + d2
        n = self.n
        cx = sum(x.sum(axis=0, dtype=np.float64) for x, _ in self._buffer) / n
        cy = sum(y.sum(axis=0, dtype=np.float64) for _, y in self._buffer) / n
        self._m = {
            "c": np.concatenate([cx, cy]),  # the shift
            "g": np.zeros((dd, dd)),  # sum z z^T
            "w": np.zeros((dd, 3)),  # sum z [a, b, 1]
            "scalars": np.zeros(5),  # sum a, sum b, sum a^2, sum b^2, sum a b
        }
        buffer, self._buffer = self._buffer, None
        for x, y in buffer:
            self._accumulate(x, y)

    @staticmethod
    def _fill_shifted(dst: np.ndarray, arr: np.ndarray, shift: np.ndarray, out_norms: np.ndarray) -> None:
        """``dst = arr - shift`` in float64 and its squared row norms into ``out_norms``."""
        np.copyto(dst, arr)
        with np.errstate(over="ignore", invalid="ignore"):
            dst -= shift
            np.einsum("ij,ij->i", dst, dst, out=out_norms)

    def _accumulate(self, xb: np.ndarray, yb: np.ndarray) -> None:
        """Fold one batch into the moments (the batch is already validated for shape)."""
        m = self._m
        assert m is not None and self._d is not None
        d1 = self._d[0]
        b = xb.shape[0]
        dd = m["c"].shape[0]
        if self._scratch is None or self._scratch.shape[0] < b:
            self._scratch = np.empty((b, dd))
        z = self._scratch[:b]
        abo = np.empty((b, 3))  # columns a, b, 1
        abo[:, 2] = 1.0
        on_both(
            self._fill_shifted,
            (z[:, :d1], xb, m["c"][:d1], abo[:, 0]),
            (z[:, d1:], yb, m["c"][d1:], abo[:, 1]),
            xb.size + yb.size,
        )
        with np.errstate(over="ignore", invalid="ignore"):  # NaN/Inf are reported just below
            w = z.T @ abo  # X'^T [a b 1] and Y'^T [a b 1]
        if not np.isfinite(w[:d1, 2]).all():
            raise_nonfinite(xb, "X_batch")
        if not np.isfinite(w[d1:, 2]).all():
            raise_nonfinite(yb, "Y_batch")
        m["g"] += gram_cols(z)
        m["w"] += w
        a, bb = abo[:, 0], abo[:, 1]
        m["scalars"] += (a.sum(), bb.sum(), a @ a, bb @ bb, a @ bb)

    # ----------------------------------------------------------------- compute
    def compute(self, debiased: bool | None = None) -> float:
        """Linear CKA of all samples seen so far, as a Python float; ``debiased`` (default: the accumulator's own
        setting) picks the estimator, both from the same state."""
        debiased = self.debiased if debiased is None else bool(debiased)
        if self.n == 0:
            raise ValueError("StreamingLinearCKA has seen no samples; call update(X_batch, Y_batch) first")
        check_min_samples(self.n, debiased)
        for i, name in enumerate(("X", "Y")):
            if self._const[i]:
                raise ValueError(constant_message(name, self.n, "CKA"))
        if self._m is None:
            assert self._buffer is not None
            xs = np.concatenate([x for x, _ in self._buffer])
            ys = np.concatenate([y for _, y in self._buffer])
            # transient work memory is checked by cka() against the memory available now
            return cka(xs, ys, "linear", debiased)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            out = finish_cka(self._terms(debiased), debiased)
        if out is None:
            raise ValueError(
                "StreamingLinearCKA: the accumulated moments under- or overflowed float64; rescale "
                "the inputs (CKA is invariant to isotropic scaling)"
            )
        return out

    def _terms(self, debiased: bool) -> tuple[float, ...]:
        """HSIC terms (same layout as `_z_terms`) from the moments."""
        m = self._m
        assert m is not None and self._d is not None
        d1 = self._d[0]
        n = self.n
        w = m["w"]
        s = w[:, 2]
        c = m["g"] - np.outer(s, s / n)  # centred [X Y]^T [X Y]
        cxx, cyy, cxy = c[:d1, :d1], c[d1:, d1:], c[:d1, d1:]
        hxy, hxx, hyy = fro2(cxy), fro2(cxx), fro2(cyy)
        if not debiased:
            return hxy, hxx, hyy, 0.0, 0.0
        sxx, syy, sxy = m["g"][:d1, :d1], m["g"][d1:, d1:], m["g"][:d1, d1:]
        mx, my = s[:d1] / n, s[d1:] / n
        xa, xb, ya, yb = w[:d1, 0], w[:d1, 1], w[d1:, 0], w[d1:, 1]
        sa, sb, saa, sbb, sab = (float(v) for v in m["scalars"])
        mxx = float(mx @ mx)
        myy = float(my @ my)
        # sum of centred row norms: sum r = sum a - n |m|^2
        rx = sa - n * mxx
        ry = sb - n * myy
        # sum_i r_x,i r_y,i with r = a - 2 x'.m + |m|^2 expanded (using m.s = n |m|^2)
        rxy = (
            sab
            - 2.0 * float(my @ ya)
            - 2.0 * float(mx @ xb)
            + 4.0 * float(mx @ sxy @ my)
            + myy * sa
            + mxx * sb
            - 3.0 * n * mxx * myy
        )
        rxx = saa - 4.0 * float(mx @ xa) + 4.0 * float(mx @ sxx @ mx) + 2.0 * mxx * sa - 3.0 * n * mxx**2
        ryy = sbb - 4.0 * float(my @ yb) + 4.0 * float(my @ syy @ my) + 2.0 * myy * sb - 3.0 * n * myy**2
        hxy, _ = debiased_term(hxy, rxy, rx, ry, n)
        hxx, tx = debiased_term(hxx, rxx, rx, rx, n)
        hyy, ty = debiased_term(hyy, ryy, ry, ry, n)
        return hxy, hxx, hyy, DEGENERATE_RTOL * tx, DEGENERATE_RTOL * ty

    # ----------------------------------------------------------------- merging (sharded data)
    def merge(self, other: StreamingLinearCKA) -> StreamingLinearCKA:
        """Add every sample ``other`` has seen, exactly, as if its batches had been ``update``-d here.

        Buffered batches are replayed; moments about another shift are moved to this one's shift (exact
        algebra on G, W and the scalars), and the constant-representation tracking is combined. Merging
        the shards of a data set in order gives ``cka`` of the whole set to float64 rounding. Returns self.
        """
        if not isinstance(other, StreamingLinearCKA):
            raise TypeError(f"can only merge another StreamingLinearCKA, got {type(other).__name__}")
        if other.debiased != self.debiased:
            raise ValueError("cannot merge a debiased and a biased StreamingLinearCKA; use the same debiased flag")
        if other.n == 0:
            return self
        if self._d is not None and other._d != self._d:
            raise ValueError(f"cannot merge states with (d1, d2) = {other._d} into {self._d}: different layers")
        if other._m is None:
            for x, y in other._buffer or []:
                self.update(x, y)
            return self
        if self.n == 0:
            self.load_state_dict(other.state_dict())
            return self
        if self._m is None:
            self._fold_buffer()
        for i in range(2):
            same_first = other._first[i] is not None and np.array_equal(other._first[i], self._first[i])
            self._const[i] = self._const[i] and other._const[i] and same_first
        self._add_shifted_moments(other._m, other.n)
        self.n += other.n
        return self

    def _add_shifted_moments(self, om: dict[str, np.ndarray], n: int) -> None:
        """Add moments ``om`` of ``n`` samples about shift ``om["c"]`` to ours (about ``self._m["c"]``)."""
        m = self._m
        assert m is not None and self._d is not None
        d1 = self._d[0]
        g, w, sc = om["g"], om["w"], om["scalars"]
        delta = om["c"] - m["c"]  # z' = z + delta
        dx, dy = delta[:d1], delta[d1:]
        s = w[:, 2]
        kx, ky = float(dx @ dx), float(dy @ dy)
        ux, uy = float(s[:d1] @ dx), float(s[d1:] @ dy)  # sum z_x.dx, sum z_y.dy
        sa, sb, saa, sbb, sab = (float(v) for v in sc)
        g_dx, g_dy = g[:, :d1] @ dx, g[:, d1:] @ dy  # sum z (z_x.dx), sum z (z_y.dy)
        m["g"] += g + np.outer(delta, s) + np.outer(s, delta) + n * np.outer(delta, delta)
        m["w"][:, 0] += w[:, 0] + 2 * g_dx + kx * s + delta * (sa + 2 * ux + n * kx)
        m["w"][:, 1] += w[:, 1] + 2 * g_dy + ky * s + delta * (sb + 2 * uy + n * ky)
        m["w"][:, 2] += s + n * delta
        a_ux, b_uy = float(w[:d1, 0] @ dx), float(w[d1:, 1] @ dy)  # sum a (z_x.dx), sum b (z_y.dy)
        a_uy, b_ux = float(w[d1:, 0] @ dy), float(w[:d1, 1] @ dx)
        uxx, uyy, uxy = float(dx @ g_dx[:d1]), float(dy @ g_dy[d1:]), float(dx @ g_dy[:d1])
        m["scalars"] += (
            sa + 2 * ux + n * kx,
            sb + 2 * uy + n * ky,
            saa + 4 * a_ux + 4 * uxx + 2 * kx * sa + 4 * kx * ux + n * kx * kx,
            sbb + 4 * b_uy + 4 * uyy + 2 * ky * sb + 4 * ky * uy + n * ky * ky,
            sab + 2 * a_uy + ky * sa + 2 * b_ux + 4 * uxy + 2 * ky * ux + kx * sb + 2 * kx * uy + n * kx * ky,
        )

    def state_dict(self) -> dict:
        """The state as plain values and NumPy arrays (picklable; for gathering across processes)."""
        return {
            "debiased": self.debiased, "n": self.n, "d": self._d, "budget": self._budget,
            "buffer": None if self._buffer is None else list(self._buffer),
            "moments": None if self._m is None else {k: v.copy() for k, v in self._m.items()},
            "first": list(self._first), "const": list(self._const),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a state saved by [`state_dict`][state_dict] (replaces this object's samples)."""
        self.debiased = bool(state["debiased"])
        self.n, self._d, self._budget = int(state["n"]), state["d"], state["budget"]
        self._buffer = None if state["buffer"] is None else list(state["buffer"])
        self._m = None if state["moments"] is None else {k: np.array(v) for k, v in state["moments"].items()}
        self._first, self._const = list(state["first"]), list(state["const"])
        self._scratch = None

    @classmethod
    def merged(cls, states: list[dict], debiased: bool = False) -> StreamingLinearCKA:
        """One accumulator holding the samples of every state in ``states`` (merged in list order)."""
        total = cls(debiased)
        for state in states:
            part = cls(debiased)
            part.load_state_dict(state)
            total.merge(part)
        return total

    def __repr__(self) -> str:
        return (
            f"StreamingLinearCKA(debiased={self.debiased}, n={self.n}, mode={self.mode!r}, "
            f"state_nbytes={self.state_nbytes})"
        )
