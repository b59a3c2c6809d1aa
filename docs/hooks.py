"""MkDocs hook: lets the API reference read the compiled core's docstrings from its type stubs.

`burtorch._core` is an extension module. The build generates its stubs (`_core/__init__.pyi`,
with the docstrings) next to the compiled file, which in an editable install is a build
directory, not `src/`. Griffe reads packages from source, so this hook stages `src/burtorch` and
the installed stubs side by side in a temporary directory and points mkdocstrings there. Nothing
is imported from burtorch (its stubs are found by name); no network is used.
"""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import tempfile
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[1]


@event_priority(100)  # before mkdocstrings reads its handler options
def on_config(config):
    # The package's directories (an editable install has two: the build's and src/): the stubs
    # sit beside the extension's builds (one per ISA level), whose names the package chooses at
    # import, so they are looked for by the stubs' own name without importing anything.
    spec = importlib.util.find_spec("burtorch")
    if spec is None or not spec.submodule_search_locations:
        raise PluginError("burtorch is not installed: pip install . before building the docs")
    dirs = [Path(d) for d in spec.submodule_search_locations]
    found = [d / "_core" for d in dirs if (d / "_core" / "__init__.pyi").is_file()]
    if not found:
        raise PluginError(f"no type stubs in {list(spec.submodule_search_locations)} (built with BURTORCH_STUBS=OFF?)")
    stubs = found[0]
    stage = Path(tempfile.mkdtemp(prefix="burtorch-docs-"))
    atexit.register(shutil.rmtree, stage, True)
    shutil.copytree(ROOT / "src" / "burtorch", stage / "burtorch", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(stubs, stage / "burtorch" / "_core", ignore=shutil.ignore_patterns("*.py", "*.typed"))
    handlers = config.plugins["mkdocstrings"].config.setdefault("handlers", {})
    handlers.setdefault("python", {})["paths"] = [str(stage)]
    return config
