"""``python -m burtorch``: the same as the ``burtorch`` command."""
import sys

from .app.cli import main

sys.exit(main())
