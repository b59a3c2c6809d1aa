"""The benchmark suite's tests share the library's test settings: the skip of thread counts this
process may not use, each test's own thread count, and the shared data sets' fixture. They are
loaded from the library's tests/conftest.py, so the two suites cannot drift apart."""
import importlib.util
import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parents[2] / "tests"
sys.path.insert(0, str(_TESTS))  # the library's conftest imports its helper modules (cores) by name
_spec = importlib.util.spec_from_file_location("burtorch_library_conftest", _TESTS / "conftest.py")
assert _spec is not None and _spec.loader is not None
_library = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_library)

pytest_collection_modifyitems = _library.pytest_collection_modifyitems
_own_thread_count = _library._own_thread_count
shared_data = _library.shared_data
_arenas_start_reclaimed = _library._arenas_start_reclaimed
