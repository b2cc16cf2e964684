"""``python -m similarity_plugins`` runs the command-line interface."""

from .cli.main import console_main

console_main()
