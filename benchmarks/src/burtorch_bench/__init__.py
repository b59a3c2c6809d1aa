"""burtorch's benchmarks, beside the library (which never imports them), as torch.utils.benchmark
sits beside torch.

* The suite behind ``burtorch-bench`` (also ``python -m burtorch_bench``): the paper's workloads
  W1-W5 in burtorch and every installed peer. Each (framework, workload, configuration) runs in
  its own subprocess, pinned to one core where the OS allows, so that imports, threads and memory
  of different frameworks never mix; the parent collects timings, peak RSS, init time and the
  numbers each framework computed, checks agreement, and writes terminal, JSON, Markdown and PNG
  reports (``cli``, ``harness``, ``child``, ``frameworks``, ``specs``, ``agreement``, ``report``,
  ``summary``, ``compare``).
* Scripts, each ``python -m burtorch_bench.NAME``: ``op_cost`` (ns per scalar op),
  ``init_time`` (process start to first step), ``train_memory`` (peak RSS of training
  processes), ``label_memory`` (the cost of node labels), ``saveload`` (W3 variants side by side).

Nothing heavy is imported here.
"""
