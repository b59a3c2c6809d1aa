"""``python -m burtorch.bench ...`` runs the benchmark CLI on its own."""
import sys

from .cli import main

sys.exit(main())
