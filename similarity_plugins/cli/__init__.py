"""The command-line interface: ``similarity-plugins list | info | layers | compare | grid | score | extract | store |
train | iris | demo | study | bench``.

One module per command group (``catalog``: list, info, layers; ``compare``, ``grid``, ``score``, ``store``:
extract and store, ``train``, ``iris``, ``demo``, ``study``, ``bench``), the argument groups every command is
built from and the option grammar in ``common``, the output path checks in ``outputs``, the parser and entry
point in ``main``.
"""

from .common import parse_layer, parse_options
from .main import build_parser, console_main, main

__all__ = ["build_parser", "console_main", "main", "parse_layer", "parse_options"]
