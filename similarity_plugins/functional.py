"""Array-level similarity measures (CKA): NumPy arrays or torch tensors in, a float out.

The public name of :mod:`similarity_plugins.cka` (kept for users of ``similarity_plugins.functional``).
"""

from .cka import *  # noqa: F401,F403
from .cka import __all__  # noqa: F401
