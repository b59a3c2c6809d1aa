"""MkDocs hook: lets the API reference read the compiled core's docstrings from its type stubs.

`burtorch._core` is an extension module. The build generates its stubs (`_core/__init__.pyi`,
with the docstrings) next to the compiled file, which in an editable install is a build
directory, not `src/`. Griffe reads packages from source, so this hook stages `src/burtorch` and
the installed stubs side by side in a temporary directory and points mkdocstrings there. Nothing
is imported from burtorch but the location of its extension; no network is used.
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
    spec = importlib.util.find_spec("burtorch._core")
    if spec is None or spec.origin is None:
        raise PluginError("burtorch is not installed: pip install . before building the docs")
    stubs = Path(spec.origin).parent / "_core"
    if not (stubs / "__init__.pyi").is_file():
        raise PluginError(f"no type stubs beside {spec.origin} (built with BURTORCH_STUBS=OFF?)")
    stage = Path(tempfile.mkdtemp(prefix="burtorch-docs-"))
    atexit.register(shutil.rmtree, stage, True)
    shutil.copytree(ROOT / "src" / "burtorch", stage / "burtorch", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(stubs, stage / "burtorch" / "_core", ignore=shutil.ignore_patterns("*.py", "*.typed"))
    handlers = config.plugins["mkdocstrings"].config.setdefault("handlers", {})
    handlers.setdefault("python", {})["paths"] = [str(stage)]
    return config
