"""The timing-only patches in benchmarks/patches still apply to the core they were written against,
so the figures docs/guides/programs.md quotes from them can be taken again."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PATCHES = sorted((REPO / "benchmarks" / "patches").glob("*.patch"))


def test_there_are_patches_to_check():
    assert PATCHES, "benchmarks/patches holds no patch"


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.name)
def test_patch_applies_to_this_tree(patch):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of the project")
    done = subprocess.run(["git", "apply", "--check", str(patch)], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
