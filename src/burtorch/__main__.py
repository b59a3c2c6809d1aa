"""``python -m burtorch``: the same as the ``burtorch`` command."""
import sys

from .cli.main import main

sys.exit(main())
