"""The `burtorch` command and what it runs: training, the demo, `burtorch info`.

Application code on top of the library (nothing in ``burtorch.nn``, ``optim``, ``data``, ``io`` or
``viz`` imports it). The console script is :func:`burtorch.cli.main.main`.
"""
