"""Array-level CKA: NumPy arrays or torch tensors in, a Python float out.

Definitions follow Kornblith et al. 2019 ("Similarity of Neural Network Representations Revisited")
and their reference colab code: ``gram_linear``, ``gram_rbf`` (bandwidth = ``threshold`` times the
median of all squared pairwise distances), ``center_gram`` (with the unbiased U-statistic form of
Song et al. 2012) and CKA = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)). Everything is computed in
float64 on the CPU; torch tensors on any device are moved to the CPU first.

Linear CKA never builds n x n Gram matrices when the feature dimensions are small: it works in
feature space with ``X^T Y``, ``X^T X`` and ``Y^T Y`` (column-centred, float64; one symmetric rank-k
update of ``[X | Y]``), and switches to Gram space only when that is cheaper (few samples, many
features). [`StreamingLinearCKA`][StreamingLinearCKA] gives the same numbers from batches, holding O(d^2) state.

Modules: ``inputs`` (conversion and validation), ``grams`` (Gram matrices and their centring), ``hsic``
(HSIC terms in feature or Gram space), ``functional`` ([`cka`][cka]), ``streaming``
([`StreamingLinearCKA`][StreamingLinearCKA]), ``permutation`` ([`cka_permutation_test`][cka_permutation_test]).
``similarity_plugins.functional``
re-exports this package (and `similarity_plugins.measures`).
"""

from .functional import cka
from .grams import center_gram, cka_from_grams, gram_linear, gram_rbf
from .permutation import cka_permutation_test
from .streaming import StreamingLinearCKA

__all__ = [
    "StreamingLinearCKA",
    "center_gram",
    "cka",
    "cka_permutation_test",
    "cka_from_grams",
    "gram_linear",
    "gram_rbf",
]
