"""The command-line interface: ``similarity-plugins list | info | layers | compare | score | train | iris | demo``.

One module per command group (``inspect``: list, info, layers; ``compare``, ``score``, ``train``, ``iris``, ``demo``),
shared spec loading and option parsing in ``common``, the parser and entry point in ``main``.
"""

from .common import parse_layer, parse_options
from .main import build_parser, console_main, main

__all__ = ["build_parser", "console_main", "main", "parse_layer", "parse_options"]
