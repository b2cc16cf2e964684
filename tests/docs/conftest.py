"""Fixtures of the docs tests."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.docs_blocks import docs_env
from tests.helpers.repo import ROOT


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> tuple:
    """The site built once a session as .ci/run builds it (``mkdocs build --strict``, API reference included):
    ``(its folder, the finished build process)``. Tests only read it; a failed build is each user's failure."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    out = tmp_path_factory.mktemp("site")
    env = dict(docs_env(), NO_MKDOCS_2_WARNING="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    return out, done
