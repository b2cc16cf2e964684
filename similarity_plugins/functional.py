"""Array-level similarity measures: NumPy arrays or torch tensors in, a float out.

CKA (`similarity_plugins.cka`: ``cka``, ``StreamingLinearCKA``, Gram helpers) and the representational
measures of `similarity_plugins.measures`, named like their metrics with underscores: ``procrustes``,
``cca``, ``svcca``, ``pwcca``, ``rsa``, ``linear_regression``, ``mutual_knn``.

Convention: every function takes ``(X, Y, ...)`` of shape (n, dx), (n, dy) with the same input checks and
returns the score as a Python float. The representational measures also take ``details=True`` and then
return a [`Measured`][Measured] (``.score``, the same float, and ``.details``, a dict of plain values such as
``correlations`` or ``angular_distance``; ``float(result)`` is the score): the dict a metric's row shows.
"""

from .cka import *  # noqa: F401,F403
from .cka import __all__ as _cka_all
from .measures import *  # noqa: F401,F403
from .measures import __all__ as _measures_all

__all__ = [*_cka_all, *_measures_all]
