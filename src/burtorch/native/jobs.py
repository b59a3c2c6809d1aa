"""A program's native state (see burtorch.native): when .map starts its compile, the compile in
flight, the library loaded and checked bit for bit against the interpreter, the switch; and the
public calls that drive them."""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from .. import _core
from .codegen import generate
from .toolchain import FLAGS, _build_id, _identity, cache_dir, compiler, include_dir, isa_flags

# Lanes a program maps (over all its calls) before .map starts compiling it: a program mapped over
# a batch this large, or over many smaller ones, is mapped for throughput. The compile runs in
# another process (0.5-1 s of CPU for W1 or W2), so no call waits for it; on a busy core it
# competes with the caller for that long, so programs mapped only a few times over small batches
# are left to the interpreter.
NATIVE_AFTER = 50_000
# Samples replayed both ways after loading a library (full blocks and a partial one).
CHECK_SAMPLES = 300

_enabled = os.environ.get("BURTORCH_NATIVE_PROGRAMS", "1").strip().lower() not in ("0", "false", "off", "no")
# Test hook: True makes the check after loading see a mismatch (the fallback's path).
_inject_mismatch = False


def set_native_programs(on: bool) -> None:
    """Lets .map compile lane programs to native code (True, the default unless
    BURTORCH_NATIVE_PROGRAMS=0) or not. Off, programs already loaded go back to the interpreter
    at their next .map (the same results either way)."""
    global _enabled
    _enabled = bool(on)


def native_programs_enabled() -> bool:
    """Whether .map compiles lane programs to native code."""
    return _enabled


class _Job:
    """One program's native state: status, the compile in flight, the loaded library."""

    def __init__(self, status="not started"):
        self.status = status
        self.proc: subprocess.Popen | None = None
        self.so: Path | None = None
        self.tmp: Path | None = None
        self.lib: ctypes.CDLL | None = None
        self.address = 0
        self.rows_address = 0
        self.check_x = None
        self.mapped = 0


def _state(prog) -> _Job | None:
    return _core._lanes_native(prog)[1]


def _fail(prog, job: _Job, why: str) -> str:
    job.status = "interpreter: " + why
    job.proc = None
    _core._set_lanes_native(prog, 0, 0, job)
    return job.status


def _source(prog) -> tuple[str, list[str], Path] | str:
    """(the generated source, the compile command without its files, the cached library's path),
    or why not."""
    s = _core._lanes_structure(prog)
    if not s["eligible"]:
        return "the program does not replay in lanes (vector records or ids)"
    cxx = compiler()
    if cxx is None:
        tried = "CXX=" + os.environ["CXX"] if os.environ.get("CXX") else "c++, g++, clang++"
        return f"no C++ compiler ({tried} not found)"
    inc = include_dir()
    if inc is None:
        return "burtorch's headers (include/lanes/native.hpp) are not installed"
    try:
        src = generate(s)
        flags = [*FLAGS, *isa_flags()]
        key = hashlib.sha256("\0".join([src, *flags, _identity(cxx), _build_id()]).encode()).hexdigest()
    except (RuntimeError, ValueError, OSError) as exc:
        return str(exc)
    return src, [cxx, *flags, f"-I{inc}"], cache_dir() / f"lanes-{key[:40]}.so"


def cached_path(prog) -> Path | None:
    """Where prog's library is (or would be) cached; None where it cannot be compiled."""
    got = _source(prog)
    return None if isinstance(got, str) else got[2]


def _plan(prog, job: _Job) -> tuple[list[str], Path] | str:
    """(the compile command, the cached file's path; no command on a cache hit), or why not."""
    got = _source(prog)
    if isinstance(got, str):
        return got
    src, cmd, so = got
    if so.is_file():
        return [], so
    d = so.parent
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=so.stem + ".", suffix=".tmp.so", dir=d)
        os.close(fd)
        job.tmp = Path(tmp)
        cpp = Path(tmp[: -len(".so")] + ".cpp")
        cpp.write_text(src)
    except OSError as exc:
        _cleanup(job)
        return f"the cache {d} is not writable ({exc.strerror or exc})"
    return [*cmd, str(cpp), "-o", tmp], so


def _start(prog, job: _Job) -> None:
    plan = _plan(prog, job)
    if isinstance(plan, str):
        _fail(prog, job, plan)
        return
    cmd, so = plan
    job.so = so
    if not cmd:
        _load(prog, job)
        return
    try:
        # the compiler's messages go to a file (a pipe nobody reads until it ends could fill up and
        # stall it)
        with open(_log(job.tmp), "wb") as log:
            job.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL)
    except OSError as exc:
        _cleanup(job)
        _fail(prog, job, f"the compiler did not start ({exc})")
        return
    job.status = "compiling"
    _compiling.add(job)


# Compiles in flight: at exit they are stopped and their temporary files removed (left running,
# each would leave its half-made files in the cache).
_compiling: set[_Job] = set()


@atexit.register
def _stop_compiles() -> None:
    for job in list(_compiling):
        if job.proc is not None:
            job.proc.kill()
            job.proc.wait()
        _cleanup(job)
    _compiling.clear()


def _log(tmp) -> Path:
    return Path(str(tmp)[: -len(".so")] + ".log")


def _cleanup(job: _Job) -> None:
    if job.tmp is not None:
        for p in (job.tmp, Path(str(job.tmp)[: -len(".so")] + ".cpp"), _log(job.tmp)):
            try:
                p.unlink()
            except OSError:
                pass
        job.tmp = None


def _finish(prog, job: _Job) -> None:
    """The compile ended: its file into the cache, then loaded."""
    proc, job.proc = job.proc, None
    _compiling.discard(job)
    assert proc is not None and job.tmp is not None and job.so is not None
    try:
        err = _log(job.tmp).read_text(errors="replace")
    except OSError:
        err = ""
    if proc.returncode != 0:
        _cleanup(job)
        first = next((ln for ln in err.splitlines() if "error" in ln), err.strip()[:200])
        _fail(prog, job, f"the compiler failed ({first})")
        return
    try:
        os.replace(job.tmp, job.so)
    except OSError as exc:
        _cleanup(job)
        _fail(prog, job, f"the cache is not writable ({exc})")
        return
    _cleanup(job)
    _load(prog, job)


def _load(prog, job: _Job) -> None:
    assert job.so is not None
    try:
        lib = ctypes.CDLL(str(job.so))
        abi = lib.burtorch_lanes_abi
        abi.restype = ctypes.c_int
        size = 8 if prog.dtype == _core.float64 else 4
        if abi() != _core._lanes_native_abi() * 100 + size:
            _fail(prog, job, f"{job.so.name} was built for another burtorch or dtype")
            return
        address = ctypes.cast(lib.burtorch_lanes_block, ctypes.c_void_p).value or 0
        job.rows_address = ctypes.cast(lib.burtorch_lanes_rows, ctypes.c_void_p).value or 0
    except (OSError, AttributeError) as exc:
        _fail(prog, job, f"{job.so.name} does not load ({exc}): a truncated or foreign file; delete it to rebuild")
        return
    job.lib = lib
    job.address = address
    try:
        why = _check(prog, job)
    except Exception as exc:  # e.g. a program a rewind made stale: it replays nothing any more
        why = f"the check could not replay the program ({type(exc).__name__}: {exc})"
    if why:
        job.lib = None
        job.address = 0
        _fail(prog, job, why)
        return
    job.status = "native"
    _core._set_lanes_native(prog, address, job.rows_address, job)


def _check(prog, job: _Job) -> str | None:
    """Replays check samples with the library and with the record loops: None if every value,
    grad and failed guard agrees bit for bit, else why not."""
    import numpy as np

    X = job.check_x
    if X is None or len(X) < 2:
        rng = np.random.default_rng(47)
        X = rng.uniform(-2.0, 2.0, size=(CHECK_SAMPLES, prog.num_inputs))
    X = np.ascontiguousarray(X[:CHECK_SAMPLES], dtype=np.float64)
    gdt = np.float64 if prog.dtype == _core.float64 else np.float32
    results = []
    lanes_were = _core.lanes_enabled()
    _core.set_lanes_enabled(True)
    try:
        for address in (0, job.address):
            _core._set_lanes_native(prog, address, job.rows_address, job)
            values = np.full(len(X), -7.0)
            rows = np.full((len(X), prog.num_wrt), -7.0, dtype=gdt)
            failed = prog._replay(X, None, "rows", 1.0, values, rows)
            values_only = np.full(len(X), -7.0)
            prog._replay(X, None, "values", 1.0, values_only, None)
            results.append((values.tobytes(), rows.tobytes(), list(failed), values_only.tobytes()))
    finally:
        _core._set_lanes_native(prog, 0, 0, job)
        _core.set_lanes_enabled(lanes_were)
    if _inject_mismatch or results[0] != results[1]:
        return f"its results differ from the interpreter's on {len(X)} check samples"
    return None


def poll(prog) -> str:
    """Advances the program's compile if it ended; returns its status."""
    job = _state(prog)
    if job is not None and job.proc is not None and job.proc.poll() is not None:
        _finish(prog, job)
    status = "not started" if job is None else job.status
    if not _enabled and status in ("native", "not started"):
        return "off (set_native_programs(False))"
    return status


def on_map(prog, X, n: int) -> None:
    """Called by .map before each replay: counts the lanes, starts the compile once they pay,
    switches to the library once it is ready (or back to the interpreter when turned off)."""
    address, job = _core._lanes_native(prog)
    if not _enabled:
        if address:  # the library stays loaded (status "native") for when it is turned on again
            _core._set_lanes_native(prog, 0, 0, job)
        return
    if job is None:
        job = _Job()
        _core._set_lanes_native(prog, 0, 0, job)
    if job.status == "native":
        if not address:  # turned off and on again
            _core._set_lanes_native(prog, job.address, job.rows_address, job)
        return
    if job.proc is not None:
        if job.proc.poll() is not None:
            _finish(prog, job)
        return
    if job.status != "not started" or not _core.lanes_enabled():  # lanes off: one sample at a time
        return
    job.mapped += n
    if job.mapped >= NATIVE_AFTER and n >= 2:
        import numpy as np

        check = X[:CHECK_SAMPLES]
        # This runs before the replay has checked X: a NaN there makes .map raise, and as the
        # library's check samples it would fail the check and keep the interpreter for good.
        # A later .map with finite samples starts the compile instead.
        if not np.isfinite(check).all():
            return
        job.check_x = check.copy()
        _start(prog, job)


def compile_program(prog, X=None, timeout: float = 120.0) -> str:
    """Compiles (or loads from the cache) prog's block function now and switches its lane replay
    to it once checked; returns the status ("native", or "interpreter: why")."""
    job = _state(prog)
    if job is None:
        job = _Job()
        _core._set_lanes_native(prog, 0, 0, job)
    if job.status == "native":
        return job.status
    if job.proc is None:
        if X is not None:
            job.check_x = X[:CHECK_SAMPLES]
        job.status = "not started"
        _start(prog, job)
    return wait_program(prog, timeout)


def wait_program(prog, timeout: float = 120.0) -> str:
    """Waits for a compile in flight (if any) and loads its library; returns the status."""
    job = _state(prog)
    if job is None:
        return "not started"
    if job.proc is not None:
        try:
            job.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return job.status
        _finish(prog, job)
    return job.status


def _programs(obj) -> list:
    if isinstance(obj, _core.Program):
        return [obj]
    if hasattr(obj, "programs"):  # value_and_grad / grad's Compiled
        return list(obj.programs())
    raise TypeError(f"expected a Program or what value_and_grad/grad return, got {type(obj).__name__}")


def native_status(obj) -> str | list[str]:
    """Whether .map replays obj natively: for a Program its status, for what value_and_grad or
    grad return the statuses of its programs (oldest first). A status is "native", "compiling",
    "not started", "off (...)" or "interpreter: <why>" (the interpreter runs, same results)."""
    if isinstance(obj, _core.Program):
        return poll(obj)
    return [poll(p) for p in _programs(obj)]


def compile_native(obj, X=None, timeout: float = 120.0) -> str | list[str]:
    """Compiles obj's lane programs now (a Program, or every program value_and_grad/grad traced),
    waiting for the compiler; X: samples to check the library's bits on (default: random ones).
    Returns native_status(obj). A malformed X is a TypeError or ValueError before anything is
    compiled or changed."""
    progs = [obj] if isinstance(obj, _core.Program) else _programs(obj)
    if X is not None:
        X = _check_samples(X, progs)
    if isinstance(obj, _core.Program):
        return compile_program(obj, X, timeout)
    return [compile_program(p, X, timeout) for p in progs]


def _check_samples(X, progs):
    """X as the check's float64 (n, inputs) array, or the error a .map of it would raise."""
    import numpy as np

    try:
        A = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"compile_native: X must be an (n, inputs) array of numbers ({exc})") from None
    for p in progs:
        if A.ndim != 2 or A.shape[1] != p.num_inputs or len(A) < 1:
            raise ValueError(f"compile_native: X must have shape (n >= 1, {p.num_inputs}), got {A.shape}")
    if not np.isfinite(A).all():
        raise ValueError("compile_native: X holds NaN or inf (the check replays its rows)")
    return A


def _wait(obj, timeout: float = 120.0) -> str | list[str]:
    """Test hook: waits for the background compiles of obj's programs."""
    if isinstance(obj, _core.Program):
        return wait_program(obj, timeout)
    return [wait_program(p, timeout) for p in _programs(obj)]
