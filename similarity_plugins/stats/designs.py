"""Which permutations a test scores: K seeded ones, restricted ones, or the caller's own.

A permutation test pairs X's row ``i`` with row ``p(i)`` of Y for each permutation ``p``. `plan_permutations`
reads the options that choose the permutations and returns a [`PermutationPlan`][PermutationPlan]:

- ``permutations=K``: K permutations of all n rows drawn from the seed (`draws`), the free design: every
  reordering is as likely, which assumes exchangeable rows.
- ``permutations=K, groups=labels, permute="within"``: each permutation moves rows only inside their group
  (tokens of one sentence, crops of one image), so whatever the groups share stays paired and only the pairing
  inside a group is tested.
- ``permutations=K, groups=labels, permute="groups"``: whole groups move together onto other groups (of equal
  size; the t-th row of a group, in index order, goes to the t-th row of its image), so the pairing inside
  each group is kept and only which group meets which is tested.
- ``permutations=array``: a (K, n) integer array whose row k pairs X with ``Y[array[k]]`` (as the
  ``calibrated-similarity`` package's ``perm_fn`` does), each row a permutation of ``range(n)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Literal, get_args

import numpy as np
import torch

from ..utils.value_rules import OneOf
from .calibration import check_alpha
from .permutation import check_permutations, draws, seeded_generator

Permute = Literal["within", "groups"]
PERMUTE_MODES: tuple[str, ...] = get_args(Permute)
#: What the option ``permute`` must be.
PERMUTE_RULE = OneOf(PERMUTE_MODES)


def is_permutation_array(value: Any) -> bool:
    """True when ``value`` is given as an array of permutations (an array, a tensor or a nested list), not a count."""
    return isinstance(value, (np.ndarray, torch.Tensor, list, tuple))


@dataclass(frozen=True)
class PermutationPlan:
    """The permutations of one test, drawn batch by batch (`batches`).

    Attributes:
        n: rows permuted.
        k: permutations.
        seed: the seed of drawn permutations.
        fixed: the caller's (k, n) int64 permutations, or None.
        groups: (n,) int64 group index of each row (0..G-1, in order of first appearance), or None.
        permute: ``"within"`` or ``"groups"`` (with ``groups``).
    """

    n: int
    k: int
    seed: int
    fixed: torch.Tensor | None = None
    groups: torch.Tensor | None = None
    permute: str = "within"

    def batches(self, batch: int) -> Iterator[torch.Tensor]:
        """The ``k`` permutations, ``batch`` at a time: int64 CPU tensors (b, n), the same for any ``batch``."""
        batch = max(1, int(batch))
        if self.fixed is not None:
            for start in range(0, self.k, batch):
                yield self.fixed[start:start + batch]
        elif self.groups is None:
            yield from draws(self.n, self.k, self.seed, batch)
        else:
            gen = seeded_generator(self.seed)
            one = self._within if self.permute == "within" else self._whole_groups
            for start in range(0, self.k, batch):
                yield torch.stack([one(gen) for _ in range(min(batch, self.k - start))])

    def _within(self, gen: torch.Generator) -> torch.Tensor:
        """One uniform permutation of the rows inside each group: rows sorted by (group, a random key)."""
        keys = self.groups.double() + torch.rand(self.n, generator=gen, dtype=torch.float64)
        out = torch.empty(self.n, dtype=torch.int64)
        out[torch.argsort(self.groups, stable=True)] = torch.argsort(keys)
        return out

    def _whole_groups(self, gen: torch.Generator) -> torch.Tensor:
        """One uniform permutation of whole groups: group g's t-th row goes to group sigma(g)'s t-th row."""
        members = torch.argsort(self.groups, stable=True).reshape(int(self.groups.max()) + 1, -1)  # (G, size)
        sigma = torch.randperm(members.shape[0], generator=gen)
        out = torch.empty(self.n, dtype=torch.int64)
        out[members.reshape(-1)] = members[sigma].reshape(-1)
        return out

    def distinct(self) -> int | None:
        """How many distinct permutations the design has (None: more than 10^18, never a limit)."""
        if self.fixed is not None:
            return None
        if self.groups is None:
            return math.factorial(self.n) if self.n <= 20 else None
        sizes = torch.bincount(self.groups).tolist()
        total = math.factorial(len(sizes)) if self.permute == "groups" else math.prod(math.factorial(s) for s in sizes)
        return total if total <= 10**18 else None

    def details(self) -> dict[str, Any]:
        """What a row reports of the design: ``permutations`` (K), and ``permute`` and ``groups`` (their number)
        for a restricted design, ``permutations_given`` for the caller's own."""
        out: dict[str, Any] = {"permutations": self.k}
        if self.groups is not None:
            out.update({"permute": self.permute, "groups": int(self.groups.max()) + 1})
        if self.fixed is not None:
            out["permutations_given"] = True
        return out


def _fixed(value: Any, n: int) -> torch.Tensor:
    """The caller's permutations as a (K, n) int64 tensor; ``ValueError`` naming the option otherwise."""
    arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if arr.dtype.kind not in "iu" or arr.ndim != 2 or arr.shape[0] < 1:
        raise ValueError(f"option permutations: an array of permutations must be 2-D integers (K, N), one permutation "
                         f"of range(N) per row; got dtype {arr.dtype} and shape {arr.shape}")
    if arr.shape[1] != n:
        raise ValueError(f"option permutations: the array has rows of {arr.shape[1]} indices but the test permutes "
                         f"{n} rows (N must be the number of samples compared, after max_samples)")
    perms = torch.from_numpy(arr.astype(np.int64))
    bad = (torch.sort(perms, dim=1).values != torch.arange(n)).any(dim=1).nonzero().flatten()
    if len(bad):
        raise ValueError(f"option permutations: row {int(bad[0])} of the array (and {len(bad) - 1} more) is not a "
                         f"permutation of range({n}): each row must hold every index 0..{n - 1} once")
    return perms


def _group_index(groups: Any, n: int, permute: str) -> torch.Tensor:
    """``groups`` (one label per row) as group indices 0..G-1 in order of first appearance, checked for ``permute``."""
    labels = groups.detach().cpu().numpy() if isinstance(groups, torch.Tensor) else np.asarray(groups)
    if labels.ndim != 1 or len(labels) != n:
        raise ValueError(f"option groups: expected one label per permuted row ({n}), got an array of shape "
                         f"{labels.shape}")
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))  # group numbers in order of first appearance
    index = torch.from_numpy(order[inverse].astype(np.int64))
    sizes = torch.bincount(index)
    if permute == "groups":
        if len(sizes) < 2 or int(sizes.min()) != int(sizes.max()):
            raise ValueError(f"option permute='groups' moves whole groups onto each other, so it needs at least 2 "
                             f"groups of one size; got {len(sizes)} group(s) of sizes {sorted(set(sizes.tolist()))}")
    elif int(sizes.max()) < 2:
        raise ValueError("option permute='within' permutes rows inside their group, but every group has one row: "
                         "no permutation changes anything; use larger groups or permute='groups'")
    return index


def plan_permutations(permutations: Any, n: int, seed: int, groups: Any = None,
                      permute: Permute = "within") -> PermutationPlan:
    """The permutations a test of ``n`` rows scores, from its options.

    Args:
        permutations: K >= 1 (a whole number), or a (K, n) integer array of permutations of ``range(n)``.
        n: the number of rows permuted.
        seed: the seed of drawn permutations.
        groups: None, or one label per row (any values NumPy can compare): restricts drawn permutations.
        permute: ``"within"`` (rows move inside their group) or ``"groups"`` (whole groups move; equal sizes).

    Returns:
        [`PermutationPlan`][PermutationPlan].

    Raises:
        ValueError: naming the option: a count below 1 or not whole, an array that is not (K, n) permutations,
            an array together with ``groups``, labels not one per row, or groups that allow no permutation.
    """
    PERMUTE_RULE.check("permute", permute)
    if is_permutation_array(permutations):
        if groups is not None:
            raise ValueError("option groups restricts drawn permutations; with an array of permutations given, "
                             "leave groups out (the array says which rows move)")
        fixed = _fixed(permutations, n)
        return PermutationPlan(n, int(fixed.shape[0]), int(seed), fixed=fixed)
    k = check_permutations(permutations)
    if k < 1:
        raise ValueError("option permutations: the test needs at least 1 permutation (got 0)")
    index = None if groups is None else _group_index(groups, n, permute)
    return PermutationPlan(n, k, int(seed), groups=index, permute=permute)


@dataclass(frozen=True)
class PermutationOptions:
    """A metric's permutation options, checked (`read_permutation_options`): ``permutations`` (a count, 0 for no
    test, or the caller's array), ``alpha``, ``groups`` (None or one label per row) and ``permute``."""

    permutations: Any
    alpha: float
    groups: Any
    permute: str

    @property
    def asked(self) -> bool:
        """True when a test runs (a count above 0, or an array)."""
        return is_permutation_array(self.permutations) or self.permutations > 0

    def for_rows(self, n: int, full: int | None = None) -> dict[str, Any]:
        """The test's keyword arguments for ``n`` permuted rows: ``permutations``, ``groups`` (the first ``n`` labels
        when they label all ``full`` rows of the split and a sample limit kept the first ``n``) and ``permute``."""
        groups = self.groups
        if groups is not None and full is not None and n < full and len(groups) == full:
            groups = groups[:n]
        return {"permutations": self.permutations, "groups": groups, "permute": self.permute}


def read_permutation_options(permutations: Any, alpha: Any, groups: Any, permute: Any) -> PermutationOptions:
    """The options ``permutations``, ``alpha``, ``groups`` and ``permute`` checked before any work.

    Args:
        permutations: a whole number >= 0 (0: no test) or an array of permutations (checked against the rows
            when the test runs, `plan_permutations`).
        alpha: the level of ``tau``, in (0, 1).
        groups: None, or a 1-D sequence of labels.
        permute: ``"within"`` or ``"groups"``.

    Returns:
        [`PermutationOptions`][PermutationOptions].

    Raises:
        ValueError: naming the option whose value is bad.
    """
    if not is_permutation_array(permutations):
        permutations = check_permutations(permutations)
    PERMUTE_RULE.check("permute", permute)
    if groups is not None:
        labels = groups.detach().cpu().numpy() if isinstance(groups, torch.Tensor) else np.asarray(groups)
        if labels.ndim != 1 or len(labels) < 2:
            raise ValueError(f"option groups: expected one label per sample (a 1-D sequence), got shape {labels.shape}")
        groups = labels
    return PermutationOptions(permutations, check_alpha(alpha), groups, str(permute))
