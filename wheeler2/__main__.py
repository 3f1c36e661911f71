"""``python -m wheeler2`` is the ``wheeler2`` command."""

from wheeler2.cli import main

raise SystemExit(main())
