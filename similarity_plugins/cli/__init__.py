"""The command-line interface: ``similarity-plugins list | info | layers | compare | grid | score | extract | store |
train | iris | demo | study | bench``.

One module per command group (``catalog``: list, info, layers; ``compare``, ``grid``, ``score``, ``store``:
extract and store, ``train``, ``iris``, ``demo``, ``study``, ``bench``); the argument groups every command is
built from in ``arguments``, the option grammar in ``options``, the MODEL and DATA specs built in ``loading``,
what a command writes in ``outputs``, a stopped run's exit in ``interrupts``; the parser and entry point in ``main``.
"""

from .main import build_parser, console_main, main
from .options import parse_layer, parse_options

__all__ = ["build_parser", "console_main", "main", "parse_layer", "parse_options"]
