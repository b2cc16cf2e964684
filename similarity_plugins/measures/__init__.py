"""Representational similarity measures beside CKA, on arrays or tensors, exact in float64.

Each takes two (n, d) activations of the same n inputs (NumPy arrays, or torch tensors computed on their
own device; higher rank flattens after axis 0), checks them as CKA does (`similarity_plugins.utils.arrays`)
and returns a float, or a [`Measured`][Measured] (score and details) with ``details=True``.

- `procrustes`: normalised Bures similarity / orthogonal Procrustes (Williams et al. 2021).
- `cca`, [`svcca`][svcca] (Raghu et al. 2017), [`pwcca`][pwcca] (Morcos et al. 2018): the CCA family,
  through QR whitening; refuses ``n - 1 <= kept front + kept end`` directions (degenerate CCA).
- `rsa`: correlation of the two representational dissimilarity matrices (O(n^2) memory).
- [`linear_regression`][linear_regression]: variance-weighted R^2 of a ridge map front -> end on held-out rows.
- [`mutual_knn`][mutual_knn]: mutual k-nearest-neighbour alignment (Huh et al. 2024).
- [`cknna`][cknna]: CKA of the inner products over mutual nearest neighbours (Huh et al. 2024).
- [`permutation_test`][permutation_test]: the permutation null of any of them (p-value, null mean and spread).

``similarity_plugins.functional`` re-exports them; the metrics (``procrustes``, ``cca``, ``svcca``,
``pwcca``, ``rsa``, ``linear-regression``, ``mutual-knn``, ``cknna``) are in `similarity_plugins.plugins.representational`.
"""

from .cca import cca, pwcca, svcca
from .cknna import cknna
from .common import Measured
from .knn import mutual_knn
from .permutation import permutation_test
from .procrustes import procrustes
from .regression import linear_regression
from .rsa import rsa
from .streamed import MemoryBudgetWarning, nxn_bytes

__all__ = ["Measured", "cca", "cknna", "linear_regression", "mutual_knn", "permutation_test", "procrustes", "pwcca", "rsa",
           "svcca", "nxn_bytes", "MemoryBudgetWarning"]
