"""`burtorch demo`: the paper's Figure 1 and Figure 2 graphs, their gradients and their timings."""
import statistics
import time

import burtorch as bt

from ..paper_graphs import w1_graph, w2_graph


def time_loop(graph, iterations: int) -> float:
    """Seconds for `iterations` times: build the graph from Python, backward, rewind."""
    leaf = bt.Value
    cp = bt.checkpoint()
    rewind = bt.rewind
    t0 = time.perf_counter()
    for _ in range(iterations):
        _, _, g = graph(leaf)
        g.backward()
        rewind(cp)
    return time.perf_counter() - t0


def show_graph(title: str, graph) -> None:
    with bt.scope():
        a, b, g = graph(bt.Value)
        g.backward()
        print(f"{title}: g = {g.data:.4f}   dg/da = {a.grad:.4f}   dg/db = {b.grad:.4f}"
              f"   ({bt.current_arena().num_nodes} nodes in the arena)")


def main(repeats: int = 5) -> None:
    print("burtorch", bt.__version__, "-", bt.build_info)
    show_graph("Figure 1 (W1)", w1_graph)
    show_graph("Figure 2 (W2)", w2_graph)
    for name, graph, iterations in [("W1", w1_graph, 100_000), ("W2", w2_graph, 20_000)]:
        runs = [time_loop(graph, iterations) for _ in range(repeats)]
        print(f"{name}: {iterations:,} iterations (build + backward + rewind, eager Python): "
              f"median {statistics.median(runs):.4f} s  (min {min(runs):.4f}, max {max(runs):.4f}, "
              f"{repeats} runs; {1e9 * statistics.median(runs) / iterations:.0f} ns per iteration)")
