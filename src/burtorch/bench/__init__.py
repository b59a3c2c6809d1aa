"""The paper's workloads (W1-W5) run in burtorch and in every installed peer.

Each (framework, workload, configuration) runs in its own subprocess, pinned to one core where the
OS allows, so that imports, threads and memory of different frameworks never mix. The parent
collects timings, peak RSS, init time and the numbers each framework computed, checks agreement,
and writes terminal, JSON, Markdown and PNG reports.

Entry points: ``python -m burtorch.bench ...`` and ``burtorch.bench.cli.register(subparsers)``.
Nothing heavy is imported here.
"""
