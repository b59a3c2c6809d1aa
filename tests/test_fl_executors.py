"""Executors: the same seed gives the same iterates and bit counts bitwise in one process, in a
local process pool, on a local Ray instance and on a two-node Ray cluster; bad addresses and a
missing Ray fail before any round."""
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from burtorch import fl
from burtorch.fl.logistic import synthetic


def trajectory(executor, workers=None, address=None, rounds=6):
    problem = synthetic(6, 120, 8, split="dirichlet", seed=7)
    with fl.Federation(problem, fl.MARINA(None, fl.RandK(8, 2), p=0.4), executor=executor, workers=workers,
                       address=address, seed=99) as fed:
        xs = []
        for _ in range(rounds):
            fed.round()
            xs.append(fed.x.copy())
        where = fed.executor.placements() if executor == "ray" else None
        return np.array(xs), [(r["bits"], r.get("grad_norm")) for r in fed.records], where


def ef21_pp_trajectory(executor, workers=None):
    problem = synthetic(5, 100, 6, seed=3)
    with fl.Federation(problem, fl.EF21(0.2, fl.TopK(6, 2)), participation=0.6, executor=executor,
                       workers=workers, seed=5) as fed:
        fed.run(5)
        return fed.x.copy(), [r["bits"] for r in fed.records]


def wide_trajectory(executor, rounds=4):
    """A point of 5,000 float64 (40 KB), over PointBuffer.MIN_BYTES: the executors share it with
    their workers through memory, and every round evaluates (the clients' full gradients come
    back through memory too); MARINA with a minibatch also sends the previous point."""
    problem = synthetic(4, 24, 5000, seed=2)
    with fl.Federation(problem, fl.MARINA(0.05, fl.RandK(5000, 40), p=0.5, batch=3), executor=executor,
                       seed=4) as fed:
        xs = []
        for _ in range(rounds):
            fed.round()
            xs.append(fed.x.copy())
        sharing = getattr(fed.executor, "sharing", None)
        # the point, and on these evaluation rounds the clients' gradients, through shared memory
        shared = sharing is not None and sharing.point is not None and sharing.metrics is not None
        busy = fed.executor.busy_seconds()  # each worker's time in its clients' rounds
        workers = len(getattr(fed.executor, "blocks", [None]))
        assert len(busy) == workers and all(b > 0 for b in busy)
        return np.array(xs), [(r["bits"], r.get("grad_norm")) for r in fed.records], shared


def test_processes_match_serial_bitwise():
    # The serial references first, alone in this process: run beside the pools' drivers, their
    # numpy products could share the BLAS pool with them. Then the pools start side by side (most
    # of this test is worker start-up: each worker is a new interpreter importing numpy and
    # burtorch).
    xs, rec, _ = trajectory("serial")
    a = ef21_pp_trajectory("serial")
    w = wide_trajectory("serial")
    with ThreadPoolExecutor(3) as pool:
        pooled = pool.submit(trajectory, "processes", workers=2)
        pooled_pp = pool.submit(ef21_pp_trajectory, "processes", workers=3)
        pooled_wide = pool.submit(wide_trajectory, fl.executors.ProcessExecutor(2))
        xp, recp, _ = pooled.result()
        b = pooled_pp.result()
        wp = pooled_wide.result()
    assert np.array_equal(xs, xp) and rec == recp
    assert np.array_equal(a[0], b[0]) and a[1] == b[1]
    assert wp[2], "the wide point did not go through the shared buffer"
    assert np.array_equal(w[0], wp[0]) and w[1] == wp[1]


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")
def test_processes_workers_are_batch_scheduled():
    # A woken worker must not preempt the driver before it has woken the other workers (the
    # executor asks for SCHED_BATCH in each worker; this fails if that request is lost).
    problem = synthetic(4, 40, 5, seed=1)
    with fl.Federation(problem, fl.EF21(0.2, fl.TopK(5, 2)), executor="processes", workers=2, seed=0) as fed:
        fed.round()
        policies = [os.sched_getscheduler(p.pid) for p in fed.executor.procs]
    assert policies == [os.SCHED_BATCH, os.SCHED_BATCH]
    assert os.sched_getscheduler(0) != os.SCHED_BATCH  # the driver itself keeps its policy


def test_point_buffer_round_trip_and_cleanup():
    from burtorch.fl.shared_memory import PointBuffer, PointReader
    from burtorch.optim.rounds import Round

    x, prev = np.linspace(-1, 1, 5000), np.arange(5000.0)
    assert PointBuffer.accepts(x) and not PointBuffer.accepts(x[:10]) and not PointBuffer.accepts(x.tolist())
    buf, reader = PointBuffer(x), PointReader()
    try:
        for ctx in (Round(3, x, prev, True, 7, 2), Round(4, 2 * x, None, None, 7, 2)):
            assert buf.fits(ctx)
            got = reader.round(buf.share(ctx))
            assert got.t == ctx.t and got.coin == ctx.coin and np.array_equal(got.x, ctx.x)
            assert (got.x_prev is None) == (ctx.x_prev is None)
            if ctx.x_prev is not None:
                assert np.array_equal(got.x_prev, ctx.x_prev)
            got.x[0] = 99.0  # a private copy: the next round's read is not affected
        assert not buf.fits(Round(5, x[:-1], None, None, 7, 2))
    finally:
        reader.close()
        buf.close()
    import os

    assert not os.path.exists(buf.path)


def test_packed_replies_unpickle_as_the_replies():
    import pickle

    from burtorch.fl.client import PackedReplies, Reply
    from burtorch.optim.compressors import Message

    rng = np.random.default_rng(0)
    sparse = Message(50, rng.standard_normal(3), 99, np.array([1, 7, 40]))
    dense = Message(4, rng.standard_normal(4), 128)
    wide = Message(5000, rng.standard_normal(5000), 5000 * 32)  # over the packed size: its own array
    odd = Message(6, rng.standard_normal(2).astype(np.float32), 64, np.array([0, 5], dtype=np.int32))
    replies = [Reply(0, sparse, 10, 0.5), Reply(2, None, 0, None, (1.5, None)), Reply(3, dense, 4, None, (2.0, None)),
               Reply(5, wide, 8, 0.25, (0.1, np.arange(3.0))), Reply(6, odd, 1, 0.0),
               Reply(9, Message(50, np.empty(0), 0, np.empty(0, dtype=np.int64)), 2, 1.0)]
    got = pickle.loads(pickle.dumps(PackedReplies(replies), protocol=pickle.HIGHEST_PROTOCOL))
    assert [type(r) for r in got] == [Reply] * len(replies)
    for a, b in zip(got, replies):
        assert (a.client, a.samples, a.loss) == (b.client, b.samples, b.loss)
        assert (a.metric is None) == (b.metric is None)
        if b.metric is not None:
            assert a.metric[0] == b.metric[0] and (a.metric[1] is None) == (b.metric[1] is None)
            assert b.metric[1] is None or np.array_equal(a.metric[1], b.metric[1])
        if b.message is None:
            assert a.message is None
            continue
        m, w = a.message, b.message
        assert (m.d, m.bits) == (w.d, w.bits)
        assert m.values.dtype == w.values.dtype and m.values.tobytes() == w.values.tobytes()
        assert (m.indices is None) == (w.indices is None)
        assert m.indices is None or (m.indices.dtype == w.indices.dtype and m.indices.tolist() == w.indices.tolist())
    assert pickle.loads(pickle.dumps(PackedReplies([]))) == []


def test_ray_local_and_two_node_cluster_match_serial_bitwise():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from burtorch.fl.ray_executor import RayExecutor, session

    xs, rec, _ = trajectory("serial")
    xr, recr, _ = trajectory("ray", workers=2)
    assert np.array_equal(xs, xr) and rec == recr
    assert not ray.is_initialized()  # the executor stopped the instance it started
    w = wide_trajectory("serial")
    with session(2):  # every round an actor call, with the point x and the previous point
        wr = wide_trajectory(RayExecutor(2))
    assert np.array_equal(w[0], wr[0]) and w[1] == wr[1]

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        xc, recc, where = trajectory("ray", workers=2, address=cluster.address)
        assert np.array_equal(xs, xc) and rec == recc
        assert len({node for _, node in where}) == 2  # one actor on each node
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_ray_points_by_value_in_pieces_or_in_place_from_the_object_store(monkeypatch):
    ray = pytest.importorskip("ray")
    from burtorch.fl import ray_executor
    from burtorch.fl.ray_executor import RayExecutor

    def _spy_on_points(group):
        """Run inside an actor (by __ray_call__): records, for each round, how the point and the
        previous point reached the clients (writeable, owns its data, address, mapped file);
        defined here, so that Ray sends it by value (the actor cannot import this module)."""
        seen = group.seen = []
        original = group.run

        def where(v):
            if v is None:
                return None
            address = v.ctypes.data
            with open("/proc/self/maps") as f:
                for line in f:
                    fields = line.split()
                    lo, hi = (int(h, 16) for h in fields[0].split("-"))
                    if lo <= address < hi:
                        return v.flags.writeable, v.flags.owndata, address, " ".join(fields[5:])
            return v.flags.writeable, v.flags.owndata, address, None

        def run(ctx, participants, evaluate):
            seen.append((where(ctx.x), where(ctx.x_prev)))
            return original(ctx, participants, evaluate)

        group.run = run

    d = 20000  # 160 KB of float64: two pieces inside each call, or one object in the store
    assert ray_executor._PIECE_BYTES < d * 8 <= ray_executor._INLINE_BYTES

    def run(executor):
        problem = synthetic(4, 24, d, seed=2)
        with fl.Federation(problem, fl.MARINA(0.05, fl.RandK(d, 40), p=0.5, batch=3), executor=executor,
                           seed=4) as fed:
            if isinstance(executor, RayExecutor):
                ray.get([a.__ray_call__.remote(_spy_on_points) for a in executor.actors])
            fed.run(3)
            seen = (ray.get([a.__ray_call__.remote(lambda g: g.seen) for a in executor.actors])
                    if isinstance(executor, RayExecutor) else None)
            return fed.x.copy(), [r["bits"] for r in fed.records], seen

    x, bits, _ = run("serial")
    xr, bitsr, seen = run(RayExecutor(2))
    assert np.array_equal(x, xr) and bits == bitsr
    assert len(seen) == 2
    for rounds in seen:
        assert len(rounds) == 3 and rounds[0][1] is None
        for point, prev in rounds:
            # carried inside the calls' messages: the actor's own writable array, joined from the
            # pieces, not a view of the object store
            assert point[0] and "plasma" not in (point[3] or "")
            assert prev is None or (prev[0] and "plasma" not in (prev[3] or ""))
    # a point past what Ray inlines into a call: put in the store once per round
    monkeypatch.setattr(ray_executor, "_INLINE_BYTES", d * 8 - 1)
    xr, bitsr, seen = run(RayExecutor(2))
    assert np.array_equal(x, xr) and bits == bitsr
    assert len(seen) == 2
    for rounds in seen:
        assert len(rounds) == 3 and rounds[0][1] is None  # round 0 has no previous point
        for t, (point, prev) in enumerate(rounds):
            # a read-only view into the object store's shared memory: no copy, no unpickling
            writeable, owndata, _, mapped = point
            assert not writeable and not owndata and mapped is not None and "plasma" in mapped
            if t:
                # the previous point is the object put for the round before, not a second put
                assert prev[:2] == (False, False) and prev[2] == rounds[t - 1][0][2]
    assert not ray.is_initialized()


def test_ray_points_ways_by_size(monkeypatch):
    from burtorch.fl import ray_executor  # the choice itself needs no Ray
    from burtorch.fl.ray_executor import RayExecutor
    from burtorch.optim.rounds import Round

    monkeypatch.setattr(ray_executor, "_PIECE_BYTES", 80)
    monkeypatch.setattr(ray_executor, "_INLINE_BYTES", 800)
    ways = RayExecutor.ways
    x10, x50, x90 = np.zeros(10), np.zeros(50), np.zeros(90)  # 80, 400 and 720 bytes
    assert ways(Round(0, x10, None, None, 1, 2)) == ("head", "head")
    assert ways(Round(1, x50, x50, None, 1, 2)) == ("pieces", "pieces")  # 800 bytes together
    assert ways(Round(1, x90, x90, None, 1, 2)) == ("pieces", "store")   # the budget is for both
    assert ways(Round(1, np.zeros(101), x10, None, 1, 2)) == ("store", "head")
    assert RayExecutor._pieces(np.arange(25.0))[-1] == np.arange(20.0, 25.0).tobytes()  # 80 + 80 + 40 bytes


def test_unreachable_ray_address_fails_before_any_round():
    pytest.importorskip("ray")
    problem = synthetic(3, 30, 4, seed=1)
    with pytest.raises(ConnectionError, match="cannot reach"):
        fl.Federation(problem, fl.GD(0.1), executor="ray", address="127.0.0.1:1")
    with pytest.raises(ValueError, match="HOST:PORT"):
        fl.Federation(problem, fl.GD(0.1), executor="ray", address="nowhere")


def test_missing_ray_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    problem = synthetic(3, 30, 4, seed=1)
    with pytest.raises(ImportError, match=r"pip install"):
        fl.Federation(problem, fl.GD(0.1), executor="ray")


def test_unpicklable_problem_is_refused_for_other_processes():
    from burtorch.fl.problem import SampleProblem

    problem = SampleProblem(lambda: None, [[1], [2]])
    with pytest.raises(TypeError, match="pickle"):
        fl.executors.make_executor("processes", 2).start(problem, fl.GD(0.1))


def test_blocks_cover_every_client_once():
    assert fl.executors.blocks(7, 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert fl.executors.blocks(2, 5) == [[0], [1]]


# The method matrix's new options (tests/test_fl_matrix.py checks their rules against numpy).

def _matrix_configs():
    d = 8
    topk = fl.make_compressor("topk", d, 2)
    return [
        ("importance-gd", fl.make_method("gd", 0.3), 0.5, "importance"),
        ("ef21-bc", fl.make_method("ef21-bc", 0.3, topk, downlink=fl.make_compressor("topk", d, 3)), 1.0, "uniform"),
        ("fedavg-adam-cosine", fl.make_method("fedavg", 0.05, batch=5, local_steps=3, local_optimizer="adam",
                                              schedule="cosine", period=6), 0.5, "uniform"),
        ("ef21-pp-importance-fp64", fl.make_method("ef21-pp", 0.3, fl.make_compressor("topk", d, 2, float_bits=64),
                                                   wire="fp64"), 0.6, "importance"),
    ]


def _matrix_runs(executor, workers=None):
    problem = synthetic(6, 120, 8, split="label", seed=7)
    out = {}
    for label, method, participation, sampling in _matrix_configs():
        with fl.Federation(problem, method, participation, executor, workers, seed=13, sampling=sampling) as fed:
            fed.run(6)
            out[label] = (fed.x.copy(), [(r["bits"], r["bits_down"], r["participants"], r["loss"])
                                         for r in fed.records])
    return out


def test_new_configs_agree_bitwise_serial_processes_and_ray():
    serial = _matrix_runs("serial")
    pooled = _matrix_runs("processes", 2)
    for label, (x, recs) in serial.items():
        assert np.array_equal(x, pooled[label][0]) and recs == pooled[label][1], label
    pytest.importorskip("ray")
    from burtorch.fl.ray_executor import session

    with session(2):  # one Ray instance for the four runs
        on_ray = _matrix_runs("ray", 2)
    for label, (x, recs) in serial.items():
        assert np.array_equal(x, on_ray[label][0]) and recs == on_ray[label][1], label


def test_answers_drain_every_worker_before_raising_the_first_failure():
    from multiprocessing import Pipe

    from burtorch.fl.executor_base import answers

    pairs = [Pipe() for _ in range(3)]
    ours = [p[0] for p in pairs]
    for i in (2, 0, 1):  # answers arriving out of order come back in the connections' order
        pairs[i][1].send(("ok", [i]))
    assert answers(ours, "running round 0") == [[0], [1], [2]]
    # a failure: the others' answers are read all the same, so the next request's answers line up
    pairs[0][1].send(("ok", "a"))
    pairs[1][1].send(("error", "Traceback: ZeroDivisionError"))
    pairs[2][1].send(("ok", "c"))
    with pytest.raises(RuntimeError, match=r"failed while running round 7:\nTraceback: ZeroDivisionError"):
        answers(ours, "running round 7")
    assert not any(c.poll() for c in ours)
    for i, (_, theirs) in enumerate(pairs):
        theirs.send(("ok", i))
    assert answers(ours, "running round 8") == [0, 1, 2]
    pairs[1][1].close()  # a worker that exited
    with pytest.raises(RuntimeError, match="the worker exited"):
        answers(ours[1:2], "running round 9")


def test_point_buffer_without_room_falls_back_to_rounds_by_value(monkeypatch):
    import errno
    import glob
    import os
    import tempfile

    from burtorch.fl import shared_memory

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    before = set(glob.glob(os.path.join(shared_memory.SHARED_DIR or tempfile.gettempdir(), "burtorch-fl-point-*")))
    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    assert shared_memory.PointBuffer.create(np.zeros(5000)) is None  # the executors then send x by value
    after = set(glob.glob(os.path.join(shared_memory.SHARED_DIR or tempfile.gettempdir(), "burtorch-fl-point-*")))
    assert after <= before  # the reserved file was removed
