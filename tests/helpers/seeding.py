"""The seed each test's global random generators start from (``tests/conftest.py::seeded_rngs``)."""

from __future__ import annotations

import zlib


def seed_of_test(nodeid: str) -> int:
    """The seed of torch's, NumPy's and ``random``'s global generators at the start of the test ``nodeid``.

    Args:
        nodeid: pytest's node id of the test, ``path::name[params]``.

    Returns:
        A 32-bit seed that depends only on the node id (the same in every run and in any order).
    """
    return zlib.crc32(nodeid.encode("utf-8"))
