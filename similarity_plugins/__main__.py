"""``python -m similarity_plugins`` runs the command-line interface."""

from .cli.main import main

raise SystemExit(main())
