"""Every code block of README.md and docs/**/*.md runs as the page shows it, and prints what it shows.

The conventions, written as HTML comments on the lines right above a fenced block (invisible on
the site, visible in the source):

- a ```python block is a complete program, run in a fresh interpreter in an empty temporary
  directory; ``<!-- continues -->`` makes it continue the page's previous python block instead (the
  blocks of one chain run in one interpreter, in page order);
- a ```bash block runs under ``bash -e`` the same way (each one on its own);
- ``<!-- not-run: why -->`` keeps a block out of the run (installs, long trainings); the reason is
  required, so the page says why;
- ``<!-- requires: numpy matplotlib -->`` skips the block (and the rest of its chain) when one of
  those modules cannot be imported (``cmd:dot`` names a program instead);
- every block runs without network where the system can take it away (``unshare -rn``), with
  ``HOME`` in its temporary directory, so no page depends on a download or on files beside the
  checkout;
- a ```text block right after a run block (blank lines only between them) is that block's exact
  standard output: the examples print rounded values, so the check needs no tolerance.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# One chain's time limit: the slowest block trains a small model for a few steps.
TIMEOUT = 60
SENTINEL = "@@burtorch-docs-block-end@@"

FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*(continues|not-run|requires)\s*:?\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    markers: dict[str, str] = field(default_factory=dict)
    end: int = 0  # 0-based line after the closing fence
    expected: str | None = None  # the text block that follows, if any


def parse(page: Path) -> list[Block]:
    """The fenced blocks of one page with their markers, each run block with the text block after it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        if j == len(lines):
            raise AssertionError(f"{page.name}:{start + 1}: unclosed code fence")
        # the markers: the marker lines right above the fence
        markers: dict[str, str] = {}
        k = start - 1
        while k >= 0 and (mm := MARKER.match(lines[k].strip())):
            markers[mm.group(1)] = mm.group(2)
            k -= 1
        block = Block(page, start + 1, lang, "\n".join(lines[start + 1 : j]) + "\n", markers, j + 1)
        prev = blocks[-1] if blocks else None
        if lang == "text" and prev and prev.lang in ("python", "bash") and prev.expected is None:
            if all(not s.strip() for s in lines[prev.end : start]):
                prev.expected = block.code
        blocks.append(block)
        i = j + 1
    return blocks


def chains(page: Path) -> list[list[Block]]:
    """The page's run blocks grouped into programs: python blocks joined by ``continues``, bash alone."""
    out: list[list[Block]] = []
    last_python: list[Block] | None = None
    for b in parse(page):
        if b.lang not in ("python", "bash") or "not-run" in b.markers:
            if b.lang in ("python", "bash") and not b.markers["not-run"]:
                raise AssertionError(f"{page.name}:{b.line}: <!-- not-run: ... --> needs its reason")
            continue
        if b.lang == "python" and "continues" in b.markers:
            if last_python is None:
                raise AssertionError(f"{page.name}:{b.line}: <!-- continues --> with no python block before it")
            last_python.append(b)
            continue
        chain = [b]
        out.append(chain)
        last_python = chain if b.lang == "python" else last_python
    return out


def _cases() -> list:
    cases = []
    for page in PAGES:
        for chain in chains(page):
            rel = page.relative_to(ROOT)
            cases.append(pytest.param(chain, id=f"{rel}:{chain[0].line}"))
    return cases


def _missing(chain: list[Block]) -> list[str]:
    missing = []
    for b in chain:
        for name in b.markers.get("requires", "").split():
            if name.startswith("cmd:"):
                if shutil.which(name[4:]) is None:
                    missing.append(name)
            elif importlib.util.find_spec(name) is None:
                missing.append(name)
    return missing


@functools.cache
def _no_network() -> list[str]:
    """A command prefix that runs a block without network (a new network namespace with no
    interfaces), where the system allows unprivileged namespaces; else none: the pages use no
    network either way, and this makes a block that would fail rather than pass here."""
    if shutil.which("unshare") is None:
        return []
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    return ["unshare", "-rn"] if probe.returncode == 0 else []


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BURTORCH_", "PYTEST", "MPL"))}
    # the interpreter running the tests, and the `burtorch` command installed beside it
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["HOME"] = str(tmp)  # nothing a block writes lands outside its directory
    env["MPLBACKEND"] = "Agg"
    env["PYTHONHASHSEED"] = "0"
    return env


def test_pages_exist_and_blocks_parse():
    assert (ROOT / "mkdocs.yml").is_file()
    runnable = sum(len(c) for p in PAGES for c in chains(p))
    assert runnable >= 20, "the docs lost their runnable examples"


@pytest.mark.parametrize("chain", _cases())
def test_block(chain: list[Block], tmp_path: Path):
    missing = _missing(chain)
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    where = f"{chain[0].page.relative_to(ROOT)}:{chain[0].line}"
    if chain[0].lang == "bash":
        cmd = ["bash", "-e", "-c", chain[0].code]
    else:
        parts = []
        for b in chain:
            parts.append(b.code)
            parts.append(f"import sys as _s; print({SENTINEL!r}); _s.stdout.flush()\n")
        script = tmp_path / "block.py"
        script.write_text("".join(parts), encoding="utf-8")
        cmd = [sys.executable, str(script)]
    proc = subprocess.run(_no_network() + cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, f"{where} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    outputs = [proc.stdout] if chain[0].lang == "bash" else proc.stdout.split(SENTINEL + "\n")[:-1]
    assert len(outputs) == len(chain)
    for b, out in zip(chain, outputs):
        if b.expected is not None:
            got = "\n".join(s.rstrip() for s in out.rstrip().splitlines())
            want = "\n".join(s.rstrip() for s in b.expected.rstrip().splitlines())
            assert got == want, f"{b.page.relative_to(ROOT)}:{b.line} printed\n{got}\nbut the page shows\n{want}"
