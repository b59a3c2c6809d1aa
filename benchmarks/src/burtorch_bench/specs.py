"""What each workload is: its configurations, unit, timed region and expected numbers.

The workloads W1-W5 are the paper's (Burlachenko & Richtarik, 2025, section 5); every framework
module implements exactly these.
The plain-float references below are the golden numbers the agreement check compares against.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

# Workload keys used on the command line, in the order `bench all` runs them.
WORKLOAD_ORDER = ("tiny", "small", "saveload", "mlp", "gpt")

# The paper's iteration counts; presets may measure fewer iterations (the tables say how many).
PAPER_ITERS = {"tiny": 100_000, "small": 20_000, "saveload": 5_000}

W4_EMBED = (4, 16, 32, 64, 128, 512, 1024)
W4_BATCH = (1, 64)
W5_BATCH = (1, 2, 4, 8, 16, 32, 64)

# W4 / W5 model shapes, as in the paper.
MLP_BLOCK, MLP_EMBED_DIM, MLP_LR = 16, 64, 0.1
GPT_BLOCK, GPT_DMODEL, GPT_LAYERS, GPT_HEADS, GPT_HEAD_SIZE, GPT_FF, GPT_LR = 8, 24, 6, 6, 4, 96, 3e-4
LN_EPS = 1e-5

# The pseudo-framework whose W4 rows time a step's six matrix products through numpy's BLAS.
FLOOR = "gemm-floor"

# Rows of its layers that a replayed chunk of the compiled-chunk rows aims at: 64 W4 samples (a
# row each) or 8 W5 ones (GPT_BLOCK rows each). W5 chunks of 64 samples, 512 rows, were
# slower than chunks of 8, at one thread and at two: their frame outgrows L2.
CHUNK_ROWS = 64


def random_w4_batches(r, batch: int, block: int = MLP_BLOCK, count: int = 8) -> list[list[tuple[list[int], int]]]:
    """`count` W4 batches of `batch` (context of `block` ids, target id) samples over 27 ids, drawn
    from `r` (a random.Random): what the side-by-side benches step through."""
    return [[([r.randrange(27) for _ in range(block)], r.randrange(27)) for _ in range(batch)] for _ in range(count)]


def random_w5_batches(r, batch: int, count: int = 8) -> list[list[tuple[list[int], list[int]]]]:
    """`count` W5 batches of `batch` (GPT_BLOCK ids, GPT_BLOCK next ids) samples over 65 ids."""
    return [[([r.randrange(65) for _ in range(GPT_BLOCK)], [r.randrange(65) for _ in range(GPT_BLOCK)])
             for _ in range(batch)] for _ in range(count)]


def config_threads(config: dict | None) -> int:
    """The thread count a row's config asks for (1 when it names none)."""
    return int((config or {}).get("threads", 1))


def replay_chunk(workload: str, b: int, threads: int) -> int:
    """Samples per chunk of the compiled-chunk rows for a batch of b samples: about CHUNK_ROWS rows,
    and at most b / threads, so that every thread replays chunks of its own."""
    rows = GPT_BLOCK if workload == "gpt" else 1
    return max(1, min(CHUNK_ROWS // rows, b // threads))


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    unit: str            # unit of one timed run as reported
    phases: tuple        # timed phases measured in one child (W3 has save and load)
    timed_region: str    # stated in every table
    numbers_label: str   # what the "computed" column shows
    agreement_rule: str  # stated in every table
    per_step: bool = False  # W4/W5: one run = one training step
    notes: tuple = field(default_factory=tuple)


WORKLOADS = {
    "tiny": Workload(
        "tiny", "W1 tiny graph (paper Figure 1), FP64", "s", ("run",),
        "per iteration: fresh leaves a, b; build c..g; backward from g; discard the nodes",
        "g, dg/da, dg/db",
        "g, dg/da, dg/db within 1e-9 (relative) of burtorch and of 612.5, -35, 1050",
    ),
    "small": Workload(
        "small", "W2 small graph (paper Figure 2, micrograd's README), FP64", "s", ("run",),
        "per iteration: fresh leaves a, b; build the graph; backward from g; discard the nodes",
        "g, dg/da, dg/db",
        "g, dg/da, dg/db within 1e-9 (relative) of burtorch and of 24.7041, 138.8338, 645.5773",
    ),
    "saveload": Workload(
        "saveload", "W3 save / load of 7 FP64 node values of W2's graph", "s", ("save", "load"),
        "one run = `count` saves of the 7 values to one file (save) or `count` loads from it "
        "(load); the W2 graph is built once before timing",
        "loaded a, b, c, d, e, f, g",
        "the 7 loaded values equal W2's a, b, c, d, e, f, g (relative 1e-12)",
    ),
    "mlp": Workload(
        "mlp", "W4 character MLP (makemore), FP32", "ms/step", ("step",),
        "one step = forward on b samples, gradient of the mean loss, one SGD step (lr 0.1), "
        "zero grads; batch preparation (sampling, conversion) excluded",
        "loss of the first batch before / after one step on it",
        "same initial weights and batches for every peer: loss before within 1e-3 relative of the "
        "reference; loss before within 0.7 of ln V; loss after < loss before",
        per_step=True,
    ),
    "gpt": Workload(
        "gpt", "W5 miniature GPT, FP32", "ms/step", ("step",),
        "one step = forward on b sequences of 8, gradient of the mean loss, one SGD step "
        "(lr 3e-4), zero grads; batch preparation excluded",
        "loss of the first batch before / after one step on it",
        "same initial weights and batches for every peer: loss before within 1e-3 relative of the "
        "reference; loss before within 0.7 of ln V; loss after < loss before",
        per_step=True,
    ),
}


def w1_reference() -> dict:
    """W1 in plain Python floats with the derivatives written out by hand."""
    a, b = -41.0, 2.0
    c = a + b
    d = a * b + b ** 3
    e = c - d
    f = e ** 2
    g = f * 0.5
    # dg/de = e; de/da = 1 - b; de/db = 1 - (a + 3 b^2)
    return {"g": g, "dg/da": e * (1.0 - b), "dg/db": e * (1.0 - (a + 3.0 * b * b))}


W1_GOLDEN = {"g": 612.5, "dg/da": -35.0, "dg/db": 1050.0}
W2_GOLDEN = {"g": 24.7041, "dg/da": 138.8338, "dg/db": 645.5773}  # 4 decimals, as the paper prints them


def w2_values() -> dict:
    """The forward of W2 in plain Python floats: the 7 node values W3 saves (a..g, final nodes)."""
    a, b = -4.0, 2.0
    c = a + b
    d = a * b + b ** 3
    c = c + (c + 1)
    c = c + (1 + c + (-a))
    d = d + (d * 2 + max(b + a, 0.0))
    d = d + (3 * d + max(b - a, 0.0))
    e = c - d
    f = e ** 2
    g = f / 2
    g = g + 10 / f
    return {"a": a, "b": b, "c": c, "d": d, "e": e, "f": f, "g": g}


W3_NAMES = ("a", "b", "c", "d", "e", "f", "g")


def mlp_param_count(vocab: int, e: int) -> int:
    return vocab * MLP_EMBED_DIM + MLP_BLOCK * MLP_EMBED_DIM * e + e + vocab * e + vocab


def gpt_param_count(vocab: int, final_norm: bool = False) -> int:
    """The W5 model's parameters: the paper's has no final LayerNorm (46,289 on 65 characters);
    Karpathy's gpt.py adds one (2 x d more)."""
    d, ff = GPT_DMODEL, GPT_FF
    per_layer = 2 * d + 3 * d * d + (d * d + d) + 2 * d + (d * ff + ff) + (ff * d + d)
    return vocab * d + GPT_BLOCK * d + GPT_LAYERS * per_layer + (2 * d if final_norm else 0) + (d * vocab + vocab)


def close(x: float, y: float, rel: float, abs_: float = 0.0) -> bool:
    if not (math.isfinite(x) and math.isfinite(y)):
        return False
    return abs(x - y) <= max(rel * max(abs(x), abs(y)), abs_)
