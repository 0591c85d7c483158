"""``python -m chatids``: see :mod:`chatids._cli`."""

from ._cli import main

raise SystemExit(main())
