import os
from pathlib import Path

import pytest

# The canonical data sets live beside a checkout (../shared/data), not in the repository: tests
# that need them ask for this directory and skip cleanly where it is absent (a lone clone).
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
ALLOWED = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def pytest_collection_modifyitems(config, items):
    """A case whose `threads` parameter is more than this process may use skips (a one-core
    machine): the runners would refuse it."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        threads = params.get("threads")
        if isinstance(threads, int) and threads > ALLOWED:
            item.add_marker(pytest.mark.skip(reason=f"threads={threads}: this process may use {ALLOWED} core(s)"))


@pytest.fixture(autouse=True)
def _own_thread_count():
    """Each test starts from the process's default thread count and leaves it so: a runner that
    sets it must not decide what later tests run with."""
    import burtorch as bt

    default = bt.get_num_threads()
    yield
    bt.set_num_threads(default)


@pytest.fixture
def shared_data():
    """The directory holding names.txt and tinyshakespeare.txt; skips the test without it."""
    if not (SHARED_DATA / "names.txt").is_file() or not (SHARED_DATA / "tinyshakespeare.txt").is_file():
        pytest.skip(f"the shared data sets are not at {SHARED_DATA}")
    return SHARED_DATA
