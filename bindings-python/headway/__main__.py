"""``python -m headway``: the same CLI as the ``headway`` console script."""

from ._cli import main

raise SystemExit(main())
