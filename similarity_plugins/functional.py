"""Array-level similarity measures (CKA): NumPy arrays or torch tensors in, a float out.

A thin re-export of :mod:`similarity_plugins.core.functional`.
"""

from .core.functional import *  # noqa: F401,F403
from .core.functional import __all__  # noqa: F401
