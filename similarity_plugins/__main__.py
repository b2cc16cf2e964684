"""``python -m similarity_plugins`` runs the command-line interface."""

from .cli import main

raise SystemExit(main())
