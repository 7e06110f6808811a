"""``python -m arrowmt`` runs the ``arrowmt`` command."""

from arrowmt._cli import main

raise SystemExit(main())
