"""Optional dependencies: `require` imports one, or says which extra of the package installs it.

A missing extra is `MissingExtra`, an ``ImportError`` whose message is the command to run; the command line
prints it as one line and exits 2, as for any other input it cannot use.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """An optional dependency that is not installed; the message names the extra that installs it."""


def install_command(extra: str) -> str:
    """The command that installs the package with ``extra``: ``pip install "similarity-plugins[hf]"``."""
    return f'pip install "similarity-plugins[{extra}]"'


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module``, or raise `MissingExtra` naming ``what`` needs it and the extra that installs it.

    Args:
        module: the module to import, e.g. ``"transformers"``.
        extra: the extra of similarity-plugins that installs it, e.g. ``"hf"``.
        what: what needs it, in words (``"hf()"``, ``"the model spec 'hf:gpt2'"``).

    Returns:
        The imported module.

    Raises:
        MissingExtra: ``module`` cannot be imported (the message holds `install_command` of ``extra``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(f"{what} needs the {module} package, which is not installed; install it with "
                           f"{install_command(extra)}") from exc
