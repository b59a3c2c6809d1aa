"""The parent side: plans the runs, spawns one child per (framework, workload, config), times init.

Init time is measured here: wall clock from spawning a fresh interpreter to the moment the child
reports the end of its first step. Peak RSS comes from the child's own getrusage(RUSAGE_SELF).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from . import frameworks as fw
from .child import PREFIX
from .specs import FLOOR, PAPER_ITERS, W4_BATCH, W4_EMBED, W5_BATCH, WORKLOAD_ORDER, WORKLOADS, config_threads

# One thread per library, whatever the library: the process is pinned to one core.
THREAD_ENV = {
    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONHASHSEED": "0",
}

# Variants whose first step compiles for a long time run on a subset of the W4/W5 grid unless
# the preset says "all" (the paper preset) or the user names the configs.
COMPILING = ("torch-compile", "mlx-compile")

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # name: per-workload settings; budget_s lets slow peers measure fewer iterations per run
    "quick": {
        "tiny": {"n": 5_000, "reps": 3, "warmup": 200, "budget_s": 0.5},
        "small": {"n": 2_000, "reps": 3, "warmup": 100, "budget_s": 0.5},
        "saveload": {"n": 500, "reps": 3, "warmup": 20, "budget_s": 0.5},
        "mlp": {"reps": 10, "warmup": 3, "e": (4, 64, 1024), "b": W4_BATCH,
                "compile_subset": ((64, 64),)},
        "gpt": {"reps": 10, "warmup": 3, "b": (1, 8, 64), "compile_subset": (8,)},
    },
    "full": {
        "tiny": {"n": PAPER_ITERS["tiny"], "reps": 5, "warmup": 1_000, "budget_s": 2.0},
        "small": {"n": PAPER_ITERS["small"], "reps": 5, "warmup": 200, "budget_s": 2.0},
        "saveload": {"n": PAPER_ITERS["saveload"], "reps": 5, "warmup": 100, "budget_s": 2.0},
        "mlp": {"reps": 20, "warmup": 5, "e": W4_EMBED, "b": W4_BATCH,
                "compile_subset": ((64, 1), (64, 64), (1024, 64))},
        "gpt": {"reps": 20, "warmup": 5, "b": W5_BATCH, "compile_subset": (1, 64)},
    },
    "paper": {
        "tiny": {"n": PAPER_ITERS["tiny"], "reps": 5, "warmup": 1_000, "budget_s": None},
        "small": {"n": PAPER_ITERS["small"], "reps": 5, "warmup": 200, "budget_s": None},
        "saveload": {"n": PAPER_ITERS["saveload"], "reps": 5, "warmup": 100, "budget_s": None},
        "mlp": {"reps": 20, "warmup": 5, "e": W4_EMBED, "b": W4_BATCH, "compile_subset": None},
        "gpt": {"reps": 20, "warmup": 5, "b": W5_BATCH, "compile_subset": None},
    },
}


@dataclass
class Job:
    entry: fw.Entry
    workload: str
    config: dict
    python: str = sys.executable
    label: str = ""            # row name; entry name unless comparing interpreters
    env: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.label or self.entry.name


def thread_counts(entry: fw.Entry, workload: str, overrides: dict) -> list:
    """The thread counts ``entry`` runs at: burtorch's W4/W5 rows and the GEMM floor at each of
    ``--threads`` (the floor's BLAS then gets that many threads: what a maintained BLAS makes of
    the same cores on the same products); every other row (the peers, W1-W3) at one thread."""
    counts = overrides.get("threads") or [1]
    if not ((entry.name.startswith("burtorch") or entry.name == FLOOR) and WORKLOADS[workload].per_step):
        return [1]
    return list(counts)


def blas_threads_env(entry: fw.Entry, threads: int) -> dict:
    """The environment a run adds to THREAD_ENV: the GEMM floor's BLAS gets the row's thread count
    (BLAS libraries read it when loaded); every other library keeps one thread."""
    if entry.name != FLOOR or threads <= 1:
        return {}
    return {v: str(threads) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


def configs_for(workload: str, entry: fw.Entry, preset: str, overrides: dict) -> list:
    """The configurations ``entry`` runs for ``workload`` under ``preset`` and CLI overrides."""
    p = dict(PRESETS[preset][workload])
    for key in ("reps", "warmup"):
        if overrides.get(key) is not None:
            p[key] = overrides[key]
    base = {"reps": int(p["reps"]), "warmup": int(p["warmup"])}
    if overrides.get("data"):
        base["data"] = overrides["data"]
    if not WORKLOADS[workload].per_step:
        n = overrides.get("iters") or p["n"]
        budget = None if overrides.get("iters") else p.get("budget_s")
        if overrides.get("budget") is not None:
            budget = overrides["budget"] or None
        return [{**base, "n": int(n), "budget_s": budget}]
    base["n"] = 1
    named = overrides.get("embed") is not None or overrides.get("batch") is not None
    subset = None if (named or entry.name not in COMPILING) else p.get("compile_subset")
    batches = overrides.get("batch") or p["b"]
    threads = thread_counts(entry, workload, overrides)
    if workload == "mlp":
        embeds = overrides.get("embed") or p["e"]
        grid = [(e, b) for e in embeds for b in batches]
        if subset is not None:
            grid = [eb for eb in grid if eb in subset]
        return [{**base, "e": int(e), "b": int(b), "threads": int(t)} for e, b in grid for t in threads]
    sizes = list(batches) if subset is None else [b for b in batches if b in subset]
    return [{**base, "b": int(b), "threads": int(t)} for b in sizes for t in threads]


def plan(workloads, entries, preset="full", overrides=None, against=()) -> tuple[list, list]:
    """(jobs, missing): jobs in workload order; missing = entries whose packages are absent."""
    overrides = overrides or {}
    jobs, missing = [], []
    for entry in entries:
        req = fw.missing_requirement(entry)
        if req is not None:
            missing.append({"entry": entry.name, "package": req, "install": entry.install})
    absent = {m["entry"] for m in missing}
    for workload in (w for w in WORKLOAD_ORDER if w in workloads):
        for entry in entries:
            if entry.name in absent or workload not in entry.workloads:
                continue
            for config in configs_for(workload, entry, preset, overrides):
                t = config_threads(config)
                jobs.append(Job(entry, workload, config, label=f"{entry.name} ({t} threads)" if t > 1 else "",
                                env=blas_threads_env(entry, t)))
                if entry.name in ("burtorch", "burtorch-compiled"):
                    for label, python in against:
                        jobs.append(Job(entry, workload, config, python=python,
                                        label=f"{entry.name}@{label}" + (f" ({t} threads)" if t > 1 else "")))
    return jobs, missing


def cores_for(cpu, threads: int):
    """The cores a run of ``threads`` threads is pinned to: ``cpu`` alone for one thread, else
    ``cpu`` and the allowed cores below it (None: not pinned)."""
    if cpu is None or threads <= 1 or not hasattr(os, "sched_getaffinity"):
        return cpu
    allowed = sorted(os.sched_getaffinity(0), reverse=True)
    below = [c for c in allowed if c < cpu]
    return [cpu] + below[: threads - 1]


def run_job(job: Job, cpu=None, timeout: float = 900.0) -> dict:
    """Spawns the child, times init from the spawn to its 'first' event, returns its result."""
    spec = {"entry": job.entry.name, "workload": job.workload, "config": job.config,
            "cpu": cores_for(cpu, config_threads(job.config))}
    env = {**os.environ, **THREAD_ENV, **job.env}
    cmd = [job.python, "-m", "burtorch_bench.child", json.dumps(spec)]
    with tempfile.TemporaryFile(mode="w+") as err:
        t_spawn = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        killed = threading.Event()

        def kill():
            killed.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        init_s, result = None, None
        try:
            assert proc.stdout is not None  # stdout=PIPE
            for line in proc.stdout:
                if not line.startswith(PREFIX):
                    continue
                msg = json.loads(line[len(PREFIX):])
                if msg.get("event") == "first":
                    init_s = time.perf_counter() - t_spawn
                else:
                    result = msg
            proc.wait()
        finally:
            timer.cancel()
        process_s = time.perf_counter() - t_spawn
        err.seek(0)
        stderr = err.read()
    if result is None:
        status = "timeout" if killed.is_set() else "error"
        tail = stderr.strip().splitlines()[-3:]
        result = {"entry": job.entry.name, "workload": job.workload, "config": job.config,
                  "status": status,
                  "message": (f"killed after {timeout:.0f} s" if killed.is_set()
                              else f"child exited {proc.returncode}: " + " | ".join(tail))}
    result.update({"name": job.name, "python": job.python, "init_s": init_s,
                   "process_s": process_s, "returncode": proc.returncode})
    return result


def default_cpu():
    """The last core this process may run on (leaves core 0 to the OS and the shell)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(os.sched_getaffinity(0))


def run_all(jobs, cpu=None, timeout=900.0, progress=None, processes: int = 1) -> list:
    """One result per job. With ``processes`` > 1 every job runs that many times, each in a fresh
    process, in rounds over all the jobs (so that the machine's drift weighs on every row alike),
    and its runs are merged into one row (merge_processes)."""
    if processes < 1:
        raise ValueError("processes must be at least 1")
    per_job: list[list[dict]] = [[] for _ in jobs]
    for p in range(processes):
        for i, job in enumerate(jobs):
            if progress:
                round_ = f" (process {p + 1}/{processes})" if processes > 1 else ""
                progress(f"[{i + 1}/{len(jobs)}] {job.workload} {job.name} {describe_config(job.config)}{round_}")
            per_job[i].append(run_job(job, cpu=cpu, timeout=timeout))
    return [merge_processes(runs) for runs in per_job]


def merge_processes(runs: list) -> dict:
    """One row from the runs of one job in separate processes. A process's timings depend on where
    its memory landed (on a shared virtual machine the same step runs measurably faster in one
    process than in the next), so a row's samples are pooled over its processes and their median is the row's;
    each process's own median is kept beside them. Peak RSS is the largest, init the median. The
    first run that did not succeed stands for the whole row."""
    if len(runs) == 1:
        return runs[0]
    failed = next((r for r in runs if r.get("status") != "ok"), None)
    if failed is not None:
        return {**failed, "processes": len(runs)}
    row = dict(runs[0])
    row["times"] = {ph: [t for r in runs for t in r["times"][ph]] for ph in runs[0]["times"]}
    row["process_medians"] = {ph: [statistics.median(r["times"][ph]) for r in runs] for ph in runs[0]["times"]}
    row["peak_rss"] = max(r["peak_rss"] for r in runs)
    inits = [r["init_s"] for r in runs if r.get("init_s") is not None]
    row["init_s"] = statistics.median(inits) if inits else None
    row["processes"] = len(runs)
    return row


def describe_config(config: dict) -> str:
    parts = [f"{k}={config[k]}" for k in ("e", "b") if k in config]
    if config_threads(config) != 1:
        parts.append(f"threads={config_threads(config)}")
    return " ".join(parts)
