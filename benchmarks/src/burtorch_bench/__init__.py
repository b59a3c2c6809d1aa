"""burtorch's benchmark laboratory: the distribution burtorch-bench, in the repository's
benchmarks/ directory. It imports burtorch; the library never imports it.

* The suite behind ``burtorch-bench`` (also ``python -m burtorch_bench``): the paper's workloads
  W1-W5 in burtorch and every installed peer. Each (framework, workload, configuration) runs in
  its own subprocess, pinned to one core where the OS allows, so that imports, threads and memory
  of different frameworks never mix; the parent collects timings, peak RSS, init time and the
  numbers each framework computed, checks agreement, and writes terminal, JSON, Markdown and PNG
  reports (``cli``, ``harness``, ``child``, ``frameworks``, ``specs``, ``agreement``, ``report``,
  ``summary``, ``compare``).
* Scripts, each ``python -m burtorch_bench.NAME``: ``op_cost`` (ns per scalar op),
  ``init_time`` (process start to first step), ``train_memory`` (peak RSS of training
  processes), ``label_memory`` (the cost of node labels), ``saveload`` (W3 variants side by side),
  ``compiled_vs_eager``, ``per_sample``, ``partial_grad``, ``step_paths``, ``threads``,
  ``capacity``, ``gemm_floor``, ``fl_scale``, ``best``.

Nothing heavy is imported here.
"""
