import os
import random
import tempfile
from pathlib import Path

import pytest

# The canonical data sets live beside a checkout (../shared/data), not in the repository: tests
# that need them ask for this directory and skip cleanly where it is absent (a lone clone).
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def pytest_collection_modifyitems(config, items):
    """A case whose `threads` parameter is more than this process may use skips (a one-core
    machine): the oracle would refuse it."""
    from cores import ALLOWED

    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        threads = params.get("threads")
        if isinstance(threads, int) and threads > ALLOWED:
            item.add_marker(pytest.mark.skip(reason=f"threads={threads}: this process may use {ALLOWED} core(s)"))


@pytest.fixture(autouse=True)
def _own_thread_count():
    """Each test starts from the process's default thread count and leaves it so: a test that
    sets it (or a runner it drives) must not decide what later tests run with."""
    import burtorch as bt

    default = bt.get_num_threads()
    yield
    bt.set_num_threads(default)


@pytest.fixture(autouse=True)
def _arenas_start_reclaimed():
    """Each test starts with no unheld nodes at the top of this thread's default arenas. Nodes
    that earlier tests in the same process built and dropped are reclaimed when the top's last
    handle goes (a checkpoint leaving a scope, say), so without this, the sizes a test measures
    would depend on which tests ran before it in its process. Making and dropping one Value
    reclaims the top down to the highest node still held."""
    import burtorch as bt

    for dtype in (bt.float64, bt.float32):
        bt.Value(0.0, dtype=dtype)  # dropped at once: its slot was the top
    yield


@pytest.fixture
def rng():
    return random.Random(1234)


@pytest.fixture
def shared_data():
    """The directory holding names.txt and tinyshakespeare.txt; skips the test without it."""
    if not (SHARED_DATA / "names.txt").is_file() or not (SHARED_DATA / "tinyshakespeare.txt").is_file():
        pytest.skip(f"the shared data sets are not at {SHARED_DATA}")
    return SHARED_DATA


# Lane programs that .map compiles to native code (burtorch.native) go to a cache of this test
# session, not the user's ~/.cache/burtorch.
_OWN_CACHE = None
if "BURTORCH_CACHE_DIR" not in os.environ:
    _OWN_CACHE = os.environ["BURTORCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="burtorch-test-cache-")


def pytest_unconfigure(config):
    if _OWN_CACHE:
        import shutil

        shutil.rmtree(_OWN_CACHE, ignore_errors=True)
